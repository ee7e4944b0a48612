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
