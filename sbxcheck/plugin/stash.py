"""config.stash keys and what every module of the pytest layer reads: the session, the suite of an item."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sbxcheck.plugin.collector import ResultCollector
    from sbxcheck.plugin.session import SbxSession
    from sbxcheck.results import CheckResult


SUITES = ("gate", "canary", "triage", "run")
SESSION_KEY = pytest.StashKey["SbxSession"]()
RESULT_KEY: pytest.StashKey[CheckResult] = pytest.StashKey()
COLLECTOR_KEY: pytest.StashKey[ResultCollector] = pytest.StashKey()
PYTEST_SESSION_KEY = pytest.StashKey[pytest.Session]()
PARAMS_KEY = pytest.StashKey[dict[tuple[str, Any], Any]]()
SESSION_TAG_KEY = pytest.StashKey[str]()
CALL_START_KEY = pytest.StashKey[float]()


def get_session(config: pytest.Config) -> SbxSession:
    """This process's SbxSession, made on first use (a run without sbxcheck items never makes one)."""
    existing = config.stash.get(SESSION_KEY, None)
    if existing is not None:
        return existing
    from sbxcheck.plugin.options import resolve
    from sbxcheck.plugin.session import SbxSession

    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    seed = workerinput.get("sbxcheck_sim_seed") if workerinput else sim_seed()
    session = SbxSession(
        session_tag=config.stash[SESSION_TAG_KEY],
        rootdir=Path(str(config.rootpath)),
        inventory_option=resolve(config, "sbx_inventory").value,
        force_sim=config.getoption("sbx_sim"),
        faults=list(config.getoption("sbx_sim_fault")),
        run_ids=list(config.getoption("sbx_run_id")),
        sim_seed=seed,
        invocation_dir=Path(str(config.invocation_params.dir)),
    )
    session.remediate = bool(config.getoption("sbx_remediate"))
    session.state_option = resolve(config, "sbx_state").value
    session.mount_names = list(config.getoption("sbx_mount"))
    session.sweep = bool(config.getoption("sbx_sweep"))
    session.max_parallel = config.getoption("sbx_max_parallel")
    from sbxcheck.plugin.options import max_spend_usd

    session.max_spend_usd = max_spend_usd(config)  # issue 21
    if workerinput is not None:
        session.run_ids.extend(r for r in workerinput.get("sbxcheck_mounted", []) if r not in session.run_ids)
        shared = workerinput.get("sbxcheck_inventory")
        if shared:
            session.inventory_path, session.force_sim = Path(shared), False
        if "sbxcheck_ledger_ids" in workerinput:
            session.ledger_ids = set(workerinput["sbxcheck_ledger_ids"])
    config.stash[SESSION_KEY] = session
    return session


def sim_seed() -> int | None:
    """``$SBXCHECK_SIM_SEED`` when set (a different fleet layout), else the simulator's fixed default."""
    value = os.environ.get("SBXCHECK_SIM_SEED", "")
    return int(value) if value.isdigit() else None


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
