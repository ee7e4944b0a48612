"""``sbxcheck doctor`` (and ``pytest --sbx-doctor``): every precondition of a run, one line each, before anything runs.

Each line is ✓ or ✗ (a ✗ says what to do), or · for a fact that is neither (the embedded fleet is
used because no inventory was found). Read-only: nothing is created, accepted or changed (a host key
is never accepted: the line prints the ``ssh-keyscan`` command to verify by hand), and no secret value is
printed (env vars by name, keys by file). Every network call is bounded by the inventory's timeouts.
With no inventory the embedded simulated fleet is started in a temporary directory, checked the same
way, and stopped.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from sbxcheck.doctor_findings import Emit, Finding
from sbxcheck.doctor_tools import check_tools, check_versions
from sbxcheck.preflight import InventoryChoice, named_env_vars
from sbxcheck.safeio import path_state

if TYPE_CHECKING:
    from sbxcheck.clients.sandboxed import SandboxedClient
    from sbxcheck.inventory import Inventory

def choose_for_cli(option: str | None, cwd: Path) -> InventoryChoice:
    """The inventory ``sbxcheck doctor`` checks: --inventory, else $SBXCHECK_INVENTORY, else ./sbxcheck.toml."""
    from sbxcheck.preflight import choose_inventory

    if option:
        return choose_inventory(str((cwd / option).expanduser()), "--inventory", cwd, force_sim=False)
    env = os.environ.get("SBXCHECK_INVENTORY", "")
    if env:
        return choose_inventory(str((cwd / env).expanduser()), "$SBXCHECK_INVENTORY", cwd, force_sim=False)
    return choose_inventory(None, "default", cwd, force_sim=False)


def run_doctor(choice: InventoryChoice, out: TextIO | None = None) -> int:
    """Print one line per precondition; 0 when all are met, else 1."""
    stream = out or sys.stdout
    findings: list[Finding] = []

    def emit(finding: Finding) -> None:
        findings.append(finding)
        print(finding.render(), file=stream, flush=True)

    with _inventory_path(choice, emit) as path:
        simulated = choice.simulated
        if path is not None:
            inv = _check_inventory(path, choice, emit)
            simulated = simulated or (inv is not None and inv.sim is not None)  # `sbxcheck sim up`'s fleet
            if inv is not None and inv.sim is not None:
                emit(Finding(True, "simulated fleet's recipes", inv.sim.recipes))
            if inv is not None:
                _check_files(inv, emit)
                _check_known_hosts(inv, emit)
                _check_env_vars(inv, emit)
                _check_control_plane(inv, emit)
                _check_openrouter(inv, emit)
        check_tools(emit, simulated=simulated)
        check_versions(emit)
    failed = sum(not f.ok for f in findings)
    summary = "all preconditions met" if not failed else f"{failed} of {len(findings)} preconditions not met"
    print(f"sbxcheck doctor: {summary}", file=stream, flush=True)
    return 1 if failed else 0


@contextmanager
def _inventory_path(choice: InventoryChoice, emit: Emit) -> Iterator[Path | None]:
    """The inventory file to check; for the embedded fleet, one started in a temp dir for the duration."""
    if choice.path is not None:
        emit(Finding(True, "inventory", f"{choice.path} (from {choice.source})"))
        yield choice.path
        return
    emit(
        Finding(
            True,
            "inventory",
            f"none found ({choice.source}): the embedded simulated fleet will be used, not a real one "
            "(give --sbx-inventory=PATH, $SBXCHECK_INVENTORY or ./sbxcheck.toml for a real fleet)",
            note=True,
        )
    )
    from sbxcheck.errors import SbxError
    from sbxcheck.fleetsource import SIM_EXTRA, open_embedded, sim_installed

    if not sim_installed():
        emit(Finding(False, "embedded fleet", "the simulator is not installed", SIM_EXTRA))
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="sbxcheck-doctor-") as tmp:
        fleet = open_embedded(Path(tmp), [])
        try:
            fleet.materialize()
            fleet.serve()
        except SbxError as exc:
            emit(Finding(False, "embedded fleet", f"did not start: {exc.message}", "see the message above"))
            fleet.stop()
            yield None
            return
        try:
            yield fleet.inventory_path
        finally:
            fleet.stop()


def _check_inventory(
    path: Path, choice: InventoryChoice, emit: Emit
) -> Inventory | None:
    from sbxcheck.errors import SbxError
    from sbxcheck.inventory import load_inventory

    try:
        inv = load_inventory(path)
    except SbxError as exc:
        emit(
            Finding(
                False,
                "inventory validates",
                exc.message,
                f"edit {path} (docs/inventory.md lists every field; offline: python -m sbxcheck.docs_inventory)",
            )
        )
        return None
    sections = [n for n in ("ssh", "sssf", "sandboxed", "dgx") if getattr(inv, n, None) is not None]
    emit(Finding(True, "inventory validates", f"sections: {', '.join(sections) or 'none'}"))
    return inv


def _files(inv: Inventory) -> list[tuple[str, Path, bool]]:
    """(field, path, is_secret) for every file the inventory names, and the identities its hosts use."""
    from sbxcheck.transports.ssh import DEFAULT_KNOWN_HOSTS

    files: list[tuple[str, Path, bool]] = []
    if inv.ssh.config is not None:
        files.append(("ssh.config", inv.ssh.config, False))
    for index, known in enumerate(inv.ssh.known_hosts or [DEFAULT_KNOWN_HOSTS]):
        files.append((f"ssh.known_hosts[{index}]", Path(known).expanduser(), False))
    if inv.ssh.identity is not None:
        files.append(("ssh.identity", inv.ssh.identity, True))
    if inv.sandboxed is not None and inv.sandboxed.password_file is not None:
        files.append(("sandboxed.password_file", inv.sandboxed.password_file, True))
    if inv.sssf is not None and inv.sssf.provisioning_key_file is not None:
        files.append(("sssf.provisioning_key_file", inv.sssf.provisioning_key_file, True))
    seen = {p for _, p, _ in files}
    for alias, host in _resolved_hosts(inv):
        if host is None:
            continue
        for identity in host.identity_files:
            if identity not in seen:
                seen.add(identity)
                files.append((f"IdentityFile of {alias}", identity, True))
    return files


def _check_files(inv: Inventory, emit: Emit) -> None:
    for field, path, secret in _files(inv):
        label = f"file {field}"
        link = path_state(path)
        if secret and link.kind == "symlink":  # judged as a link: chmod on it would change its target
            emit(
                Finding(
                    False,
                    label,
                    f"{path}: {link.describe()} (a key file is judged as itself, not through a link)",
                    f"point {field} at the key file itself, or put the file (mode 0600) where the link is",
                )
            )
            continue
        try:
            info = path.stat()
        except OSError as exc:
            emit(Finding(False, label, f"{path}: {exc.strerror or exc}", f"create it or correct {field}"))
            continue
        if not stat.S_ISREG(info.st_mode) or not os.access(path, os.R_OK):
            emit(
                Finding(
                    False,
                    label,
                    f"{path}: not a readable regular file",
                    f"correct {field} or its permissions",
                )
            )
            continue
        mode = stat.S_IMODE(info.st_mode)
        if secret and mode & 0o077:
            emit(
                Finding(
                    False,
                    label,
                    f"{path}: mode {mode:04o}, readable by others (a key file must be 0600)",
                    f"chmod 600 {path}",
                )
            )
            continue
        emit(Finding(True, label, f"{path}" + (f" (mode {mode:04o})" if secret else "")))


def _aliases(inv: Inventory) -> list[str]:
    """Every SSH alias a run may connect to: the gate's VMs, the machines, exe.dev, agent-core and the DGX."""
    aliases: list[str] = []
    if inv.sssf is not None:
        from sbxcheck.clients.runrecords import discover_runs

        try:
            runs = discover_runs(inv.sssf.runs_path)
        except Exception:  # the gate reports unreadable run records itself; the doctor checks hosts
            runs = []
        for run in runs:
            if run.record is not None and run.record.vm_name and run.record.is_open:
                aliases.append(f"{run.record.vm_name}{inv.sssf.vm_host_suffix}")
        aliases.append(inv.sssf.exedev_alias)
    aliases += inv.ssh.machines
    if inv.dgx is not None:
        aliases += [*inv.dgx.agent_cores, inv.dgx.dgx_host]
    return list(dict.fromkeys(aliases))


def _ssh_settings(inv: Inventory) -> Any:
    from sbxcheck.transports.ssh_connect import SshSettings

    return SshSettings(
        config_file=inv.ssh.config,
        known_hosts=tuple(inv.ssh.known_hosts),
        identity_file=inv.ssh.identity,
        connect_timeout_s=inv.ssh.connect_timeout_s,
    )


def _resolved_hosts(inv: Inventory) -> list[tuple[str, Any]]:
    from sbxcheck.errors import SbxError
    from sbxcheck.transports.ssh_connect import SshConfigFile, resolve_host

    settings = _ssh_settings(inv)
    try:
        config = SshConfigFile(settings)
    except (OSError, SbxError):
        return []
    resolved: list[tuple[str, Any]] = []
    pending = _aliases(inv)
    done: set[str] = set()
    while pending:
        alias = pending.pop(0)
        if alias in done:
            continue
        done.add(alias)
        try:
            host = resolve_host(alias, settings, config)
        except (OSError, SbxError):
            resolved.append((alias, None))
            continue
        resolved.append((alias, host))
        pending += [j.split("@")[-1] for j in host.proxy_jump]  # a jump host needs a known key too
    return resolved


def _check_known_hosts(inv: Inventory, emit: Emit) -> None:
    from sbxcheck.transports.known_hosts import KnownHosts
    from sbxcheck.transports.ssh import DEFAULT_KNOWN_HOSTS

    paths = [Path(p).expanduser() for p in (inv.ssh.known_hosts or [DEFAULT_KNOWN_HOSTS])]
    try:
        known = KnownHosts.load(paths)
    except Exception as exc:  # reported by the file lines too
        emit(
            Finding(False, "known_hosts", f"cannot read {', '.join(map(str, paths))}: {exc}", "fix the file")
        )
        return
    for alias, host in _resolved_hosts(inv):
        label = f"known_hosts {alias}"
        if host is None:
            emit(
                Finding(
                    False, label, "ssh_config cannot resolve it", f"fix its Host block in {inv.ssh.config}"
                )
            )
            continue
        name = host.known_hosts_name()
        if known.lookup(name):
            emit(Finding(True, label, f"{name} has a host key entry"))
            continue
        port = f"-p {host.port} " if host.port != 22 else ""
        emit(
            Finding(
                False,
                label,
                f"{name} has no entry in {', '.join(map(str, paths))} (keys are never accepted automatically)",
                f"verify by hand: ssh-keyscan {port}{host.hostname} | ssh-keygen -lf - , compare the "
                f"fingerprint with the host's own, then append that line to {paths[0]}",
            )
        )


def _check_env_vars(inv: Inventory, emit: Emit) -> None:
    for field, name in named_env_vars(inv):
        if os.environ.get(name, "").strip():
            emit(Finding(True, f"env {name}", f"set ({field}; value not shown)"))
        else:
            emit(
                Finding(
                    False, f"env {name}", f"not set ({field} names it)", f"export {name}=… before the run"
                )
            )


def _check_control_plane(inv: Inventory, emit: Emit) -> None:
    """``/api/health`` (public), then one cheap authenticated GET with the credential [sandboxed] names."""
    section = inv.sandboxed
    if section is None:
        return
    from sbxcheck.clients.sandboxed import SandboxedClient
    from sbxcheck.clients.sandboxed_auth import cleartext_refusal
    from sbxcheck.errors import SbxError

    url = section.url.rstrip("/")
    token = _env_value(section.token_env)
    password = _env_value(section.password_env)
    if password is None and section.password_file is not None:
        password = _file_secret(section.password_file, "")
    cleartext = cleartext_refusal(url, allowed=section.allow_cleartext_password)
    if password is not None and cleartext is not None:  # said before anything is sent, reachable or not
        emit(Finding(False, "control plane login", cleartext.message, cleartext.recommendation or ""))
    client = SandboxedClient(
        section.url,
        token=token,
        password=password,
        username=section.username,
        timeout_s=section.request_timeout_s,
        allow_cleartext_password=section.allow_cleartext_password,
    )
    try:
        try:
            health = client.health()
        except SbxError as exc:
            emit(
                Finding(
                    False,
                    "control plane",
                    f"{url}/api/health: {exc.message}",
                    f"check [sandboxed] url = {section.url!r} and that the control plane runs",
                )
            )
            return
        emit(Finding(True, "control plane", f"{url}/api/health answers (status {health.status!r})"))
        if token is None and password is None:
            emit(
                Finding(
                    False,
                    "control plane auth",
                    "no credential to try (token_env / password_env unset, no readable password_file)",
                    "set the variable [sandboxed] names, or password_file",
                )
            )
            return
        try:
            workspaces = client.list_workspaces()
        except SbxError as exc:  # refused, a login page, or a password it would not send in cleartext
            emit(
                Finding(
                    False,
                    "control plane auth",
                    f"GET /api/workspaces refused: {exc.message}",
                    exc.recommendation or "renew the token (or password) that [sandboxed] names",
                )
            )
            return
        emit(
            Finding(
                True, "control plane auth", f"GET /api/workspaces accepted ({len(workspaces)} workspaces)"
            )
        )
        _check_release(client, emit)
        _check_mission_slots(client, emit)
    finally:
        client.close()


def _check_release(client: SandboxedClient, emit: Emit) -> None:
    """Which release the control plane runs and what of sbxcheck's asks it does not serve (skipped)."""
    from sbxcheck.clients.served import probe

    skips = probe(client)
    version = client.served.version or "unknown"
    if not skips:
        emit(Finding(True, "control plane release", f"version {version}: serves every route sbxcheck reads"))
        return
    emit(
        Finding(
            True,
            "control plane release",
            f"version {version}: items that need these are skipped, naming the version — "
            + "; ".join(skips)
            + " (creates, event cursors and list queries are learned in a run)",
        )
    )


def _check_mission_slots(client: SandboxedClient, emit: Emit) -> None:
    """How many missions the control plane runs at once, where it says so (a fact, never a failure)."""
    from sbxcheck.clients.sandboxed import NotFound
    from sbxcheck.errors import NotServed, SbxError

    try:
        config = client.parallel_config()
    except (NotFound, NotServed):
        return  # a release without the route: the release line above already names what is skipped
    except SbxError as exc:
        emit(Finding(True, "missions at once", f"not read: {exc.message}", note=True))
        return
    now = "" if config.running_count is None else f" ({config.running_count} running now)"
    limit = config.max_parallel_missions
    if limit == 0:
        detail = f"the control plane sets no limit{now}"
    elif limit == 1:
        detail = (
            f"one at a time{now}: a canary's missions wait for each other's slot "
            "(MAX_PARALLEL_MISSIONS on the control plane runs more side by side)"
        )
    else:
        detail = f"{limit} at a time{now}: more missions than that wait for a slot"
    emit(Finding(True, "missions at once", detail, note=True))


def _check_openrouter(inv: Inventory, emit: Emit) -> None:
    sssf = inv.sssf
    if sssf is None:
        return
    key = _env_value(sssf.provisioning_key_env)
    if key is None and sssf.provisioning_key_file is not None:
        key = _file_secret(sssf.provisioning_key_file, "OPENROUTER_PROVISIONING_KEY")
    if key is None:
        emit(
            Finding(
                False,
                "OpenRouter provisioning key",
                f"none: {sssf.provisioning_key_env or 'sssf.provisioning_key_env'} unset and no provisioning_key_file",
                f"export {sssf.provisioning_key_env or 'OPENROUTER_PROVISIONING_KEY'} "
                "or set sssf.provisioning_key_file",
            )
        )
        return
    from sbxcheck.clients.openrouter import OpenRouterAdmin
    from sbxcheck.errors import HostUnreachable, SbxError

    base = sssf.openrouter_base_url.rstrip("/")
    # the one bounded transport: a whole-request deadline, a body cap (decoded too), bounded JSON
    with OpenRouterAdmin(base, key, timeout_s=15.0, retries=0) as admin:
        label = "OpenRouter provisioning key"
        try:
            info = admin.key_info()
        except HostUnreachable as exc:
            emit(Finding(False, "OpenRouter", f"{base}: {exc.message}", "check sssf.openrouter_base_url"))
            return
        except SbxError as exc:  # refused, no answer in time, an answer refused unread: one line, never a traceback
            emit(Finding(False, label, exc.message, "replace the key, or check sssf.openrouter_base_url"))
        else:
            if info.get("is_provisioning_key") is not True:
                emit(
                    Finding(
                        False,
                        label,
                        "GET /key says it is not a provisioning key (a runtime key?)",
                        "use a provisioning key (openrouter.ai/settings/provisioning-keys)",
                    )
                )
            else:
                emit(Finding(True, label, "GET /key: is_provisioning_key = true"))
        try:
            admin.credits()
        except SbxError as exc:
            emit(Finding(False, "OpenRouter /credits", exc.message, "check the key's account"))
        else:
            emit(Finding(True, "OpenRouter /credits", "answers"))


def _env_value(name: str | None) -> str | None:
    value = os.environ.get(name or "", "").strip() if name else ""
    return value or None


def _file_secret(path: Path, dotenv_name: str) -> str | None:
    from sbxcheck.safeio import read_text_file

    try:
        text = read_text_file(path, 1024 * 1024)
    except (OSError, ValueError):
        return None
    for line in text.splitlines():
        stripped = line.strip().removeprefix("export ").strip()
        if dotenv_name and stripped.startswith(f"{dotenv_name}="):
            return stripped.split("=", 1)[1].strip().strip("'\"") or None
    if "=" in text:
        return None
    return text.strip() or None
