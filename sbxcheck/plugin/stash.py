"""config.stash keys and what every module of the pytest layer reads: the session, the run state, the suite
of an item."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sbxcheck.fleetsource import FleetSource
from sbxcheck.plugin.runstate import RunState

if TYPE_CHECKING:
    from sbxcheck.plugin.session import SbxSession
    from sbxcheck.plugin.settings import Settings
    from sbxcheck.results import CheckResult


SUITES = ("gate", "canary", "triage", "run")
SESSION_KEY = pytest.StashKey["SbxSession"]()
RESULT_KEY: pytest.StashKey[CheckResult] = pytest.StashKey()
PYTEST_SESSION_KEY = pytest.StashKey[pytest.Session]()
PARAMS_KEY = pytest.StashKey[dict[tuple[str, Any], Any]]()
SESSION_TAG_KEY = pytest.StashKey[str]()
RUN_STATE_KEY = pytest.StashKey[RunState]()
CALL_START_KEY = pytest.StashKey[float]()
# the remote work's own time of a gate item whose check ran in the fan-out (or inline), once fetched:
# a verdict built from that result on the host keeps it as its duration
REMOTE_SECONDS_KEY = pytest.StashKey[float]()


def get_session(config: pytest.Config) -> SbxSession:
    """This process's SbxSession, made on first use (a run without sbxcheck items never makes one)."""
    existing = config.stash.get(SESSION_KEY, None)
    if existing is not None:
        return existing
    from sbxcheck.plugin.session import SbxSession
    from sbxcheck.plugin.settings import settings_of

    settings = settings_of(config)
    handed: dict[str, Any] = getattr(config, "workerinput", None) or {}
    shared = handed.get("sbxcheck_inventory")
    # workers gate the fleet the controller mounted on, not fleets of their own
    source = FleetSource(Path(shared), "the xdist controller's fleet") if shared else fleet_source(settings)
    session = SbxSession(
        settings, source, session_tag=config.stash[SESSION_TAG_KEY], ledger_ids=handed.get("sbxcheck_ledger_ids")
    )
    config.stash[SESSION_KEY] = session
    return session


def run_state(config: pytest.Config) -> RunState:
    """This process's run state (made in ``pytest_configure``, beside the collector)."""
    return config.stash[RUN_STATE_KEY]


def fleet_source(settings: Settings) -> FleetSource:
    """The fleet these settings name: the inventory setting, ``<rootdir>/sbxcheck.toml``, or the embedded one."""
    inventory = settings.inventory
    return FleetSource.choose(
        inventory,
        settings.source("inventory"),
        settings.rootdir,
        force_sim=settings.sim or bool(settings.sim_faults),
    )


def simulated_fleet(session: SbxSession) -> bool:
    """The embedded fleet, or an inventory the simulator wrote (``sbxcheck sim up``: its ``[sim]`` section)."""
    if session.uses_sim:
        return True
    from sbxcheck.errors import SbxError

    try:
        return session.inventory().sim is not None
    except SbxError:
        return False


def param_object(config: pytest.Config, fixture: str, key: Any) -> Any:
    """The object an indirect parameter's stable key stands for (see :data:`OBJECT_PARAMS`)."""
    return config.stash[PARAMS_KEY][(fixture, key)]


def suite_of(item: pytest.Item) -> str | None:
    for name in SUITES:
        if item.get_closest_marker(name) is not None:
            return name
    return None


def plain_nodeid(item: pytest.Item) -> str:
    """The node id without the ``@group`` suffix xdist's loadgroup adds, so reports match a serial run."""
    group = item.get_closest_marker("xdist_group")
    name = group.kwargs.get("name") if group is not None else None
    if name and item.nodeid.endswith(f"@{name}"):
        return item.nodeid[: -len(name) - 1]
    return item.nodeid
