"""The canary suite against a control plane of the v0.7.0 release (the simulator's ``v0.7`` profile).

A person reading the report sees what that release cannot do, named with its version, and nothing
that reads like an outage: no error and no timeout from a missing route, each mission created once
and followed to its verdict (its prompt sent as the first message), each event and cost counted once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.gate_harness import run_canary, run_suite

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

REPO = Path(__file__).resolve().parents[2]
NOT_SERVED = "not served by this control plane (version 0.7.0)"
ROUTE_CHECKS = ("route_dispatched", "route_record_echoes_request", "route_reaches_execution")
MCP_ITEMS = {f"{c}[codex-terra-mcp]" for c in ROUTE_CHECKS}


def _items(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["nodeid"].split("::", 1)[1].removeprefix("test_"): c for c in report["checks"]}


ALL_CANARIES = tuple(sorted((REPO / "canaries").glob("test_*.py")))
SIGNALS = ("auth_error", "capacity_limited", "context_limit", "network_error", "rate_limited", "suspected_loop")
#: what v0.7.0 lacks, by item: the assistant MCP, fleet health, remote nodes, integrity, tracks, contract fields
EXPECTED_SKIPS = {
    *MCP_ITEMS,
    "workspace_discovery[mcp]",
    "github_auth[lean-lab-mcp]",
    *(f"mission_signals[{s}]" for s in SIGNALS),
    "fleet_health",
    *(f"fleet_node[{n}]" for n in ("ashur", "babylon", "dgx-spark", "nippur")),
    "missions_integrity",
    "dispatch_contract[codex-terra]",
    "dispatch_contract[claudecode-opus]",
}


def test_canary_suite_on_v07_skips_what_it_lacks_and_judges_the_rest(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    with SimFleet(tmp_path / "fleet", cp_version="v0.7") as fleet:
        outcome = run_suite(pytester, fleet, "canary", ALL_CANARIES)
        assert fleet.controlplane is not None
        left = fleet.controlplane.missions_nonterminal()
        created = fleet.controlplane.mission_ids()
        stored = [e for mid in created for e in fleet.controlplane.events(mid)]
    items = _items(outcome.report)
    outcomes = {k: (v["outcome"], v["message"][:120]) for k, v in items.items() if v["outcome"] != "passed"}
    assert not [k for k, v in items.items() if v["outcome"] in ("error", "failed")], outcomes
    skipped = {k for k, v in items.items() if v["outcome"] == "skipped"}
    assert skipped == EXPECTED_SKIPS, outcomes
    assert all(items[k]["message"].startswith(NOT_SERVED) for k in skipped), outcomes
    assert "GET /api/health/fleet" in items["fleet_health"]["message"]
    assert "integrity" in items["missions_integrity"]["message"]
    assert left == []
    # one mission per REST route and canary (no idempotency retry on a release without keys)
    assert len(created) == 6 + 3, created
    terra = items["route_dispatched[codex-terra]"]["evidence"]
    assert terra["first_message"] and terra["idempotency_supported"] is False
    machines = items["fleet_machine_inventory"]["evidence"]  # SSH rows stand without registered compute
    assert machines["remote_nodes"].startswith(NOT_SERVED)
    # the session booked each mission's cost once: the sum of the stored assistant_message costs
    spend = outcome.report["spend"]
    cents = sum(e["metadata"].get("cost_cents", 0) for e in stored if e["event_type"] == "assistant_message")
    # one mission at a time on v0.7: the last may still run when the session ends (cancelled, no cost yet)
    cancelled = [c for c in outcome.report["cleanup"] if c["action"] == "cancelled"]
    assert spend["missions"] == len(created) and spend["missions_cost_unknown"] == len(cancelled) <= 1
    assert round(spend["total_usd"], 6) == round(cents / 100.0, 6) > 0


def test_route_canaries_on_v07_pass_as_on_todays(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The route and workspace canaries (the fault matrix's suites) give today's verdicts, MCP aside."""
    with SimFleet(tmp_path / "fleet", cp_version="v0.7") as fleet:
        outcome = run_canary(pytester, fleet)
    items = _items(outcome.report)
    not_passed = {k: v["outcome"] for k, v in items.items() if v["outcome"] != "passed"}
    assert not_passed == dict.fromkeys(MCP_ITEMS, "skipped"), not_passed


def test_a_slot_held_by_another_mission_is_could_not_tell_and_nothing_reaches_it(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """v0.7 runs one mission at a time and the operator's own long mission holds it: each route waits for
    a slot of its own while the queue could move, then says it could not tell (one incident); its prompt
    is never queued on the running mission, which POST /api/control/message would have done."""
    with SimFleet(tmp_path / "fleet", ["cp.slot-held"], cp_version="v0.7") as fleet:
        outcome = run_suite(pytester, fleet, "canary", (REPO / "canaries" / "test_routes.py",))
        assert fleet.controlplane is not None
        turns = fleet.controlplane.parallel_state()
        log = fleet.controlplane.requests
    items = _items(outcome.report)
    rest = {k: v for k, v in items.items() if k.startswith("route_dispatched[") and "mcp" not in k}
    assert rest and all(v["outcome"] == "error" for v in rest.values()), {k: v["message"] for k, v in rest.items()}
    assert all("no slot came free" in v["message"] for v in rest.values())
    assert all(v["classification"] == "infrastructure" for v in rest.values())
    incidents = [i for i in outcome.report["incidents"] if set(i["checks"]) & {v["nodeid"] for v in rest.values()}]
    assert len(incidents) == 1, incidents
    [holder] = [t for t in turns.values() if t["title"].startswith("operator:")]
    assert holder["user_turns"] == [], holder  # nothing of this session's reached the operator's mission
    assert not [r for r in log if r.path == "/api/control/message"]


# ---- 1.3.0 and the newest release the index shows (cba9502) ------------------------------------------

#: what each release lacks, by item: 1.3.0 has no remote nodes or integrity route, and its create takes no
#: idempotency_key or origin_session_id (the two dispatch contracts); cba9502 serves all the suite asks
RELEASE_SKIPS = {
    "1.3": {
        "dispatch_contract[codex-terra]",
        "dispatch_contract[claudecode-opus]",
        *(f"fleet_node[{n}]" for n in ("ashur", "babylon", "dgx-spark", "nippur")),
        "missions_integrity",
    },
    "cba9502": set(),
}
RELEASE_VERSIONS = {"1.3": "1.3.0", "cba9502": "cba9502"}


@pytest.mark.parametrize("release", sorted(RELEASE_SKIPS))
def test_canary_suite_on_a_release_is_green_and_each_skip_names_what_it_lacks(
    pytester: pytest.Pytester, tmp_path: Path, release: str
) -> None:
    """A healthy plane of the release: 0 failed, 0 errors, no incident, nothing left behind; 1.3.0's routes
    start (their prompt sent as the first message in a slot of their own), its finished turns are
    acknowledged at close, and its idempotency retry makes no second mission."""
    with SimFleet(tmp_path / "fleet", cp_version=release) as fleet:
        outcome = run_suite(pytester, fleet, "canary", ALL_CANARIES)
        cp = fleet.controlplane
        assert cp is not None
        left = [m for m in cp.missions_nonterminal() if cp.mission(m)["status"] != "acknowledged"]
        created = cp.mission_ids()
    items = _items(outcome.report)
    problems = {k: (v["outcome"], v["message"][:160]) for k, v in items.items() if v["outcome"] in ("error", "failed")}
    assert not problems, problems
    skipped = {k: v["message"] for k, v in items.items() if v["outcome"] == "skipped"}
    assert set(skipped) == RELEASE_SKIPS[release], skipped
    version = RELEASE_VERSIONS[release]
    assert all(m.startswith(f"not served by this control plane (version {version})") for m in skipped.values())
    assert outcome.report["incidents"] == [] and outcome.report["left"] == [] and outcome.ret == 0
    assert all(c["ok"] for c in outcome.report["cleanup"]), outcome.report["cleanup"]
    routes = 7 + 3  # six REST routes and one MCP route, three canaries
    if release == "1.3":
        assert len(created) == routes  # no keyed retry: a second mission would be real work
        assert "needs idempotency_key" in skipped["dispatch_contract[codex-terra]"]
        assert "needs origin_session_id" in skipped["dispatch_contract[claudecode-opus]"]
        terra = items["route_dispatched[codex-terra]"]["evidence"]
        assert terra["first_message"].startswith("POST /api/control/missions/:id/parallel")
        assert "its record lacks origin" in terra["older_create"]
        assert {c["action"].split(":")[0] for c in outcome.report["cleanup"]} == {"acknowledged"}
        assert left == []  # every finished turn was acknowledged
    else:
        assert len(created) == routes  # each keyed retry returned the first mission
        assert left == []
        assert "fleet ok: control actor responsive, disk" in items["fleet_health"]["message"]


def test_a_cancel_answered_404_leaves_the_mission_open_and_is_an_incident(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """1.3.0 cancels only what it runs: the mission the fault keeps pending answers its cancel 404 `Mission
    <id> not found` and stays pending. The close reads it back: the ledger keeps it open as a leftover with
    its status, the cleanup line fails, and the report has an incident naming the mission and its status
    (it was released as "already gone", and the run was green)."""
    with SimFleet(tmp_path / "fleet", ["cp.stuck-pending"], cp_version="1.3") as fleet:
        outcome = run_suite(
            pytester, fleet, "canary", (REPO / "canaries" / "test_routes.py",), "-k", "gemini-flash"
        )
        assert fleet.controlplane is not None
        stuck = fleet.controlplane.missions_nonterminal()
        cancels = [r for r in fleet.controlplane.requests if r.path.endswith("/cancel")]
    [mission_id] = stuck
    assert [(r.path, r.status) for r in cancels] == [(f"/api/control/missions/{mission_id}/cancel", 404)]
    [line] = [c for c in outcome.report["cleanup"] if c["ident"] == mission_id]
    assert line["ok"] is False and line["left_status"] == "pending"
    assert line["action"].startswith("still pending: the cancel answered 404")
    [incident] = [i for i in outcome.report["incidents"] if mission_id in i["summary"]]
    assert f"mission {mission_id} is still pending" in incident["summary"]
    assert incident["classification"] == "infrastructure"
    assert [(e["ident"], e["state"]) for e in outcome.report["left"]] == [(mission_id, "left")]
    assert outcome.ret != 0
    assert "still pending" in items_message(outcome.report, "route_reaches_execution[gemini-flash]")


def items_message(report: dict[str, Any], key: str) -> str:
    return str(_items(report)[key]["message"])


#: faults that mean something on 1.3.0 and cba9502, each caught for its reason (the rest pass)
RELEASE_FAULTS: dict[tuple[str, ...], dict[str, tuple[str, str | None]]] = {
    ("cp.record-drops-model", "cp.stuck-pending", "cp.mount-missing"): {
        "route_record_echoes_request[claudecode-opus]": ("failed", "check_failed"),
        "route_reaches_execution[gemini-flash]": ("failed", "timeout"),
        "workspace_visible[opencode-verity]": ("failed", "workspace_mount_defect"),
    },
    ("cp.backend-crash", "cp.env-values-exposed", "cp.server-shutdown"): {
        "route_reaches_execution[opencode-glm]": ("failed", "infrastructure"),
        "route_reaches_execution[opencode-minimax]": ("failed", "infrastructure"),
        "workspace_visible[opencode-verity]": ("skipped", None),
        "workspace_discovery[rest]": ("failed", "security_exposure"),
        "route_reaches_execution[gemini-flash]": ("error", "infrastructure"),
    },
}


@pytest.mark.parametrize("faults", list(RELEASE_FAULTS), ids=["+".join(f) for f in RELEASE_FAULTS])
@pytest.mark.parametrize("release", sorted(RELEASE_SKIPS))
def test_faults_on_a_release_are_caught_for_their_reason(
    pytester: pytest.Pytester, tmp_path: Path, release: str, faults: tuple[str, ...]
) -> None:
    suites = tuple(REPO / "canaries" / f"test_{n}.py" for n in ("routes", "workspaces", "fleet"))
    with SimFleet(tmp_path / "fleet", list(faults), cp_version=release) as fleet:
        outcome = run_suite(pytester, fleet, "canary", suites)
    items = _items(outcome.report)
    want = RELEASE_FAULTS[faults]
    expected_skips = {k for k in RELEASE_SKIPS[release] if k in items}
    mismatches = [
        f"{key}: want {want.get(key, ('skipped', None) if key in expected_skips else ('passed', None))}, "
        f"got {(e['outcome'], e['classification'])}: {e['message'][:200]}"
        for key, e in sorted(items.items())
        if (e["outcome"], e["classification"])
        != want.get(key, ("skipped", None) if key in expected_skips else ("passed", None))
    ]
    assert not mismatches, "\n".join(mismatches)
    if "cp.server-shutdown" in faults:  # a deploy ended it: it says so, as infrastructure, never a failed dispatch
        message = items["route_reaches_execution[gemini-flash]"]["message"]
        assert "terminal_reason server_shutdown" in message and "failed dispatch" not in message
    if "cp.stuck-pending" in faults and release == "1.3":  # 1.3.0 keeps the pending mission: an incident
        assert [c["left_status"] for c in outcome.report["cleanup"] if "left_status" in c] == ["pending"]


def test_an_integer_pr_on_one_mission_never_stops_the_items_judging_the_others(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """1.3.0's github_pr is an integer: a mission carrying one used to fail every list read (and with it the
    hygiene items and the close's listing). Now its row is read with the number as text and named."""
    from sbxcheck.sim.controlplane.ops import seed_mission

    with SimFleet(tmp_path / "fleet", cp_version="1.3") as fleet:
        assert fleet.controlplane is not None
        for i, pr in enumerate((1234, 77)):
            seeded = seed_mission(fleet.controlplane, title=f"review PR {pr}", status="active", age_s=30 + i)
            seeded.record["github_pr"] = pr
        outcome = run_suite(
            pytester, fleet, "canary", tuple(REPO / "canaries" / f"test_{n}.py" for n in ("hygiene", "routes"))
        )
    items = _items(outcome.report)
    problems = {k: v["message"][:200] for k, v in items.items() if v["outcome"] in ("error", "failed")}
    assert not problems, problems
    verdicts = items["mission_verdicts"]
    assert verdicts["evidence"]["non_terminal"] >= 2
    assert any("github_pr 1234 is a int: read as text" in n for n in verdicts["evidence"]["rows_read_leniently"])
