"""Parametrization from the inventory: the targets of each sbx_* fixture, their ids and xdist groups."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from sbxcheck.plugin.stash import PARAMS_KEY, get_session, run_state

if TYPE_CHECKING:  # annotations only: an unrelated pytest run imports no inventory model
    from sbxcheck.inventory import SandboxedSection
    from sbxcheck.plugin.gateruns import GateRun


#: The parameter of "nothing leaked": the item is dropped at collection (an empty parametrization would skip).
NOTHING_LEAKED = "sbxcheck:nothing-leaked"


#: Parameters whose values are objects: they are parametrized indirectly by a stable key (run id, host,
#: ledger entry id), so node ids, xdist and Allure's historyId never see a repr with paths or times.
OBJECT_PARAMS = (
    "sbx_run_entry",
    "sbx_gate_run",
    "sbx_gate_model",
    "sbx_ledger_entry",
    "sbx_dgx",
    "sbx_github_probe",
)


def _gate_runs(config: pytest.Config) -> tuple[list[GateRun], str | None]:
    """The gate runs, or why there are none (an inventory problem is reported, not raised)."""
    from sbxcheck.errors import InventoryError

    session, state = get_session(config), run_state(config)
    try:
        runs = session.gate_runs(state)
    except InventoryError as exc:
        return [], exc.message
    if not runs:
        inv = session.inventory()
        if inv.sssf is None:
            return [], f"the inventory {session.describe_source()} has no [sssf] section"
        if state.run_ids:
            return [], f"no run records for the named runs under {inv.sssf.runs_path}"
        if not inv.sssf.runs_path.is_dir():
            return (
                [],
                f"no run records: {inv.sssf.runs_path} does not exist (no run was created from this checkout)",
            )
        return [], f"no run records under {inv.sssf.runs_path}"
    return runs, None


# Under -n a group goes to one worker (sbxcheck.plugin.xdist): one SSH connection per VM, one owner of
# the missions.
# The marks ride on the parameters, so they exist before any plugin's collection hooks run.
CONTROL_PLANE_GROUP = pytest.mark.xdist_group(name="sandboxed-control-plane")


def _vm_group(run: GateRun) -> pytest.MarkDecorator:
    return pytest.mark.xdist_group(name=run.run_id)


def _keyed(config: pytest.Config, fixture: str, key: Any, value: Any) -> Any:
    """Remember ``value`` under a stable ``key``; the indirect fixture of the same name returns it."""
    config.stash[PARAMS_KEY][(fixture, key)] = value
    return key


SandboxedTargets = Callable[[pytest.Config, "SandboxedSection"], list[Any]]


def _nodes(config: pytest.Config, section: SandboxedSection) -> list[Any]:
    return [pytest.param(n, id=n) for n in section.expected_nodes]


def _discovery_vias(config: pytest.Config, section: SandboxedSection) -> list[Any]:
    return [pytest.param("rest", id="rest")] + ([pytest.param("mcp", id="mcp")] if section.mcp else [])


def _github_probes(config: pytest.Config, section: SandboxedSection) -> list[Any]:
    params = []
    for p in section.github_probes:
        key = f"{p.workspace}-{p.via}"
        params.append(pytest.param(_keyed(config, "sbx_github_probe", key, p), id=key))
    return params


def _routes(config: pytest.Config, section: SandboxedSection) -> list[Any]:
    """Every route (the catalog kind too: judged before dispatch, selecting it dispatches nothing)."""
    return [pytest.param(r.label, id=r.label, marks=CONTROL_PLANE_GROUP) for r in section.routes]


def _canaries(config: pytest.Config, section: SandboxedSection) -> list[Any]:
    return [pytest.param(c.label, id=c.label, marks=CONTROL_PLANE_GROUP) for c in section.canaries]


def _contracts(config: pytest.Config, section: SandboxedSection) -> list[Any]:
    """Routes with an opt-in dispatch contract."""
    contracts = [r for r in section.routes if r.contract != "none"]
    return [pytest.param(r.label, id=r.label, marks=CONTROL_PLANE_GROUP) for r in contracts]


def _workspaces(config: pytest.Config, section: SandboxedSection) -> list[Any]:
    """Expected workspaces, then those routes and canaries use."""
    names = [w.name for w in section.workspaces] + [r.workspace for r in section.routes if r.workspace]
    names += [c.workspace for c in section.canaries]
    return [pytest.param(n, id=n, marks=CONTROL_PLANE_GROUP) for n in dict.fromkeys(names)]


def _prompts(config: pytest.Config, section: SandboxedSection) -> list[Any]:
    """(name, prompt) pairs of every route and canary."""
    from sbxcheck.lifecycle.prompts import canary_prompt

    prompts = [(f"route-{r.label}", r.prompt) for r in section.routes]
    prompts += [(f"canary-{c.label}", canary_prompt(c)) for c in section.canaries]
    return [pytest.param(p, id=p[0]) for p in prompts]


def _sandboxed(kind: str, targets: SandboxedTargets) -> Callable[[pytest.Config], list[Any]]:
    """The parameters of a canary-suite kind: ``targets`` of the [sandboxed] section, or one skip saying why not."""

    def params(config: pytest.Config) -> list[Any]:
        from sbxcheck.errors import InventoryError

        session = get_session(config)
        try:
            section = session.inventory().sandboxed
        except InventoryError as exc:
            return [pytest.param(None, id="inventory", marks=pytest.mark.skip(reason=exc.message))]
        if section is None:
            reason = f"the inventory {session.describe_source()} has no [sandboxed] section"
            return [pytest.param(None, id="no-control-plane", marks=pytest.mark.skip(reason=reason))]
        return targets(config, section) or [
            pytest.param(None, id=f"no-{kind}s", marks=pytest.mark.skip(reason=f"no {kind}s declared"))
        ]

    return params


def _ledger_params(config: pytest.Config) -> list[Any]:
    """Entries other sessions left open (kept ones too): mounts are gate items, missions canary items."""
    from sbxcheck.errors import InventoryError

    session, state = get_session(config), run_state(config)
    try:
        entries = session.ledger_mounts.ledger_entries(state)
    except InventoryError as exc:
        return [
            pytest.param(None, id="inventory", marks=[pytest.mark.gate, pytest.mark.skip(reason=exc.message)])
        ]
    params = [
        pytest.param(
            _keyed(config, "sbx_ledger_entry", e.id, e),
            id=f"{e.kind}-{e.ident}",
            marks=pytest.mark.gate if e.kind == "mount" else pytest.mark.canary,
        )
        for e in entries
    ]
    if state.ledger_problem is not None:  # an unreadable ledger is one error item, not silence
        key = _keyed(config, "sbx_ledger_entry", "unreadable", state.ledger_problem)
        params.append(pytest.param(key, id="unreadable", marks=pytest.mark.gate))
    # nothing leaked: a parameter that collection removes (an empty parametrization would be a skip)
    return params or [pytest.param(NOTHING_LEAKED, id="none", marks=pytest.mark.gate)]


def _dgx_params(config: pytest.Config) -> list[Any]:
    from sbxcheck.errors import InventoryError

    session = get_session(config)
    try:
        section = session.inventory().dgx
    except InventoryError as exc:
        return [pytest.param(None, id="inventory", marks=pytest.mark.skip(reason=exc.message))]
    if section is None:
        return [
            pytest.param(
                None, id="no-dgx", marks=pytest.mark.skip(reason="the inventory has no [dgx] section")
            )
        ]
    cores = section.per_agent_core()  # one item per agent-core; a single one keeps the plain DGX id
    params = []
    for core in cores:
        key = core.dgx_host if len(cores) == 1 else f"{core.core}-{core.dgx_host}"
        params.append(pytest.param(_keyed(config, "sbx_dgx", key, core), id=key))
    return params


def _no_gate_runs(why_none: str | None) -> list[Any]:
    return [pytest.param(None, id="no-runs", marks=pytest.mark.skip(reason=why_none or "no run can be gated"))]


def _run_entry_params(config: pytest.Config) -> list[Any]:
    """Every recorded run, gateable or not (the run-record check judges the record itself)."""
    runs, why_none = _gate_runs(config)
    if why_none and not runs:
        return [pytest.param(_keyed(config, "sbx_run_entry", "inventory", why_none), id="inventory")]
    return [
        pytest.param(_keyed(config, "sbx_run_entry", r.run_id, r), id=r.run_id, marks=_vm_group(r)) for r in runs
    ]


def _gate_run_params(config: pytest.Config) -> list[Any]:
    runs, why_none = _gate_runs(config)
    return [
        pytest.param(_keyed(config, "sbx_gate_run", r.run_id, r), id=r.run_id, marks=_vm_group(r))
        for r in runs
        if r.target is not None
    ] or _no_gate_runs(why_none)


def _gate_model_params(config: pytest.Config) -> list[Any]:
    """One item per (gateable run, roster model); a run without a roster gets one ``-no-roster`` item."""
    runs, why_none = _gate_runs(config)
    params = []
    for r in runs:
        if r.target is None:
            continue
        models: list[str | None] = list(r.target.roster) or [None]
        for m in models:
            key = (r.run_id, m)
            pid = f"{r.run_id}-{m}" if m is not None else f"{r.run_id}-no-roster"
            params.append(pytest.param(_keyed(config, "sbx_gate_model", key, (r, m)), id=pid, marks=_vm_group(r)))
    return params or _no_gate_runs(why_none)


#: Every kind of target: the fixture a test requests -> its parameters (one item per target), in the
#: order they are parametrized. A new kind is one row here and its fixture in ``plugin/fixtures.py``
#: (indirect, keyed, when it is in ``OBJECT_PARAMS``).
TARGET_KINDS: dict[str, Callable[[pytest.Config], list[Any]]] = {
    "sbx_route": _sandboxed("route", _routes),
    "sbx_canary": _sandboxed("canary", _canaries),
    "sbx_prompt": _sandboxed("prompt", _prompts),
    "sbx_node": _sandboxed("node", _nodes),
    "sbx_discovery_via": _sandboxed("discovery_via", _discovery_vias),
    "sbx_github_probe": _sandboxed("github_probe", _github_probes),
    "sbx_workspace": _sandboxed("workspace", _workspaces),
    "sbx_contract": _sandboxed("contract", _contracts),
    "sbx_catalog": _sandboxed("catalog", _routes),
    "sbx_ledger_entry": _ledger_params,
    "sbx_dgx": _dgx_params,
    "sbx_run_entry": _run_entry_params,
    "sbx_gate_run": _gate_run_params,
    "sbx_gate_model": _gate_model_params,
}

#: One run per item: a test requesting more than one of these is parametrized by the first.
RUN_KINDS = ("sbx_run_entry", "sbx_gate_run", "sbx_gate_model")


def parametrize(metafunc: pytest.Metafunc) -> None:
    """Parametrize every sbx_* target fixture the test requests (the plugin's pytest_generate_tests)."""
    names = set(metafunc.fixturenames)
    run_kind = next((k for k in RUN_KINDS if k in names), None)
    for fixture, params in TARGET_KINDS.items():
        if fixture in names and (fixture not in RUN_KINDS or fixture == run_kind):
            metafunc.parametrize(fixture, params(metafunc.config), indirect=fixture in OBJECT_PARAMS)
