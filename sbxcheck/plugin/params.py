"""Parametrization from the inventory: the targets of each sbx_* fixture, their ids and xdist groups."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sbxcheck.plugin.stash import PARAMS_KEY, get_session

if TYPE_CHECKING:
    from sbxcheck.plugin.session import GateRun


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

    session = get_session(config)
    try:
        runs = session.gate_runs()
    except InventoryError as exc:
        return [], exc.message
    if not runs:
        inv = session.inventory()
        if inv.sssf is None:
            return [], f"the inventory {session.describe_source()} has no [sssf] section"
        if session.run_ids:
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


def _sandboxed_params(config: pytest.Config, kind: str) -> list[Any]:
    """Parameters for the canary suite: route labels, canary labels, or (name, prompt) pairs."""
    from sbxcheck.errors import InventoryError

    session = get_session(config)
    try:
        section = session.inventory().sandboxed
    except InventoryError as exc:
        return [pytest.param(None, id="inventory", marks=pytest.mark.skip(reason=exc.message))]
    if section is None:
        reason = f"the inventory {session.describe_source()} has no [sandboxed] section"
        return [pytest.param(None, id="no-control-plane", marks=pytest.mark.skip(reason=reason))]
    if kind == "node":
        params = [pytest.param(n, id=n) for n in section.expected_nodes]
    elif kind == "discovery_via":
        params = [pytest.param("rest", id="rest")] + ([pytest.param("mcp", id="mcp")] if section.mcp else [])
    elif kind == "github_probe":
        params = []
        for p in section.github_probes:
            key = f"{p.workspace}-{p.via}"
            params.append(pytest.param(_keyed(config, "sbx_github_probe", key, p), id=key))
    elif kind == "route":
        params = [pytest.param(r.label, id=r.label, marks=CONTROL_PLANE_GROUP) for r in section.routes]
    elif kind == "canary":
        params = [pytest.param(c.label, id=c.label, marks=CONTROL_PLANE_GROUP) for c in section.canaries]
    elif kind == "catalog":  # every route, judged before dispatch (selecting it dispatches nothing)
        params = [pytest.param(r.label, id=r.label, marks=CONTROL_PLANE_GROUP) for r in section.routes]
    elif kind == "contract":  # routes with an opt-in dispatch contract
        contracts = [r for r in section.routes if r.contract != "none"]
        params = [pytest.param(r.label, id=r.label, marks=CONTROL_PLANE_GROUP) for r in contracts]
    elif kind == "workspace":  # expected workspaces, then those routes and canaries use
        names = [w.name for w in section.workspaces] + [r.workspace for r in section.routes if r.workspace]
        names += [c.workspace for c in section.canaries]
        params = [pytest.param(n, id=n, marks=CONTROL_PLANE_GROUP) for n in dict.fromkeys(names)]
    else:
        from sbxcheck.lifecycle.prompts import canary_prompt

        prompts = [(f"route-{r.label}", r.prompt) for r in section.routes]
        prompts += [(f"canary-{c.label}", canary_prompt(c)) for c in section.canaries]
        params = [pytest.param(p, id=p[0]) for p in prompts]
    return params or [
        pytest.param(None, id=f"no-{kind}s", marks=pytest.mark.skip(reason=f"no {kind}s declared"))
    ]


def _ledger_params(config: pytest.Config) -> list[Any]:
    """Entries other sessions left open (kept ones too): mounts are gate items, missions canary items."""
    from sbxcheck.errors import InventoryError

    session = get_session(config)
    try:
        entries = session.ledger_entries()
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
    if session.ledger_problem is not None:  # an unreadable ledger is one error item, not silence
        key = _keyed(config, "sbx_ledger_entry", "unreadable", session.ledger_problem)
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


def parametrize(metafunc: pytest.Metafunc) -> None:
    """Parametrize every sbx_* target fixture the test requests (the plugin's pytest_generate_tests)."""
    names = set(metafunc.fixturenames)
    config = metafunc.config
    kinds = ("route", "canary", "prompt", "node", "discovery_via", "github_probe")
    for kind in (*kinds, "workspace", "contract", "catalog"):  # the readiness and contract kinds
        if f"sbx_{kind}" in names:
            metafunc.parametrize(
                f"sbx_{kind}", _sandboxed_params(config, kind), indirect=f"sbx_{kind}" in OBJECT_PARAMS
            )
    if "sbx_ledger_entry" in names:
        metafunc.parametrize("sbx_ledger_entry", _ledger_params(config), indirect=True)
    if "sbx_dgx" in names:
        metafunc.parametrize("sbx_dgx", _dgx_params(config), indirect=True)
    if not names & {"sbx_run_entry", "sbx_gate_run", "sbx_gate_model"}:
        return
    runs, why_none = _gate_runs(config)
    if "sbx_run_entry" in names:
        if why_none and not runs:
            params = [pytest.param(_keyed(config, "sbx_run_entry", "inventory", why_none), id="inventory")]
        else:
            params = [
                pytest.param(_keyed(config, "sbx_run_entry", r.run_id, r), id=r.run_id, marks=_vm_group(r))
                for r in runs
            ]
        metafunc.parametrize("sbx_run_entry", params, indirect=True)
    elif "sbx_gate_run" in names:
        gateable = [r for r in runs if r.target is not None]
        params = [
            pytest.param(_keyed(config, "sbx_gate_run", r.run_id, r), id=r.run_id, marks=_vm_group(r))
            for r in gateable
        ] or [
            pytest.param(None, id="no-runs", marks=pytest.mark.skip(reason=why_none or "no run can be gated"))
        ]
        metafunc.parametrize("sbx_gate_run", params, indirect=True)
    elif "sbx_gate_model" in names:
        params = []
        for r in runs:
            if r.target is None:
                continue
            models: list[str | None] = list(r.target.roster) or [None]
            for m in models:
                key = (r.run_id, m)
                pid = f"{r.run_id}-{m}" if m is not None else f"{r.run_id}-no-roster"
                params.append(
                    pytest.param(_keyed(config, "sbx_gate_model", key, (r, m)), id=pid, marks=_vm_group(r))
                )
        if not params:
            params = [
                pytest.param(
                    None, id="no-runs", marks=pytest.mark.skip(reason=why_none or "no run can be gated")
                )
            ]
        metafunc.parametrize("sbx_gate_model", params, indirect=True)

