"""Workspace and catalog readiness end to end: each fault fails its items, and doomed routes are never created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gate_harness import CANARY_SUITES, REPO, run_suite

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

READINESS = REPO / "canaries" / "test_readiness.py"
ROUTES = (
    "codex-terra",
    "codex-terra-mcp",
    "codex-sol-max",
    "claudecode-opus",
    "opencode-glm",
    "opencode-minimax",
    "gemini-flash",
)
CANARIES = ("codex-verity", "opencode-verity", "claudecode-lean-lab")
F = "failed"
CD = (F, "config_defect")
SKIP = ("skipped", None)
NOT_CREATED = {("route_record_echoes_request", r): SKIP for r in ROUTES} | {
    ("route_reaches_execution", r): SKIP for r in ROUTES
}
EXPECTED: dict[str, dict[tuple[str, str], tuple[str, str | None]]] = {
    "ops.workspace-pending": {
        ("workspace_ready", "verity"): (F, "infrastructure"),
        ("workspace_visible", "codex-verity"): (F, "infrastructure"),
        ("workspace_visible", "opencode-verity"): (F, "infrastructure"),
    },
    "ops.missing-init-script": {("workspace_ready", "lean-lab"): CD},
    "ops.removed-provider": {
        ("catalog", "opencode-minimax"): CD,
        ("route_dispatched", "opencode-minimax"): CD,
        ("route_record_echoes_request", "opencode-minimax"): SKIP,
        ("route_reaches_execution", "opencode-minimax"): SKIP,
    },
    # every route and canary asks for agent `build`: nothing is dispatched, one incident
    "ops.agent-unregistered": {("catalog", r): CD for r in ROUTES}
    | {("route_dispatched", r): CD for r in ROUTES}
    | NOT_CREATED
    | {("workspace_visible", c): CD for c in CANARIES},
}
GROUPS = [
    ("ops.workspace-pending", "ops.missing-init-script", "ops.removed-provider"),
    ("ops.agent-unregistered",),
]


def _items(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for check in report["checks"]:
        test, _, param = check["nodeid"].split("::", 1)[1].partition("[")
        out[(test.removeprefix("test_"), param.rstrip("]"))] = check
    return out


def test_every_readiness_fault_is_in_a_group() -> None:
    assert sorted(f for g in GROUPS for f in g) == sorted(EXPECTED)


def test_healthy_fleet_is_ready(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet") as fleet:
        outcome = run_suite(pytester, fleet, "canary", (READINESS,))
    items = _items(outcome.report)
    assert sorted(items) == sorted(
        [("catalog", r) for r in ROUTES] + [("workspace_ready", w) for w in ("verity", "lean-lab")]
    )
    assert all(v["outcome"] == "passed" for v in items.values()), outcome.stdout[-3000:]


@pytest.mark.parametrize("group", GROUPS, ids=["+".join(g) for g in GROUPS])
def test_readiness_faults_fail_their_items_and_doomed_routes_are_not_created(
    pytester: pytest.Pytester, tmp_path: Path, group: tuple[str, ...]
) -> None:
    with SimFleet(tmp_path / "fleet", list(group)) as fleet:
        outcome = run_suite(pytester, fleet, "canary", (READINESS, *CANARY_SUITES))
        assert fleet.controlplane is not None
        titles = [fleet.controlplane.mission(m).get("title", "") for m in fleet.controlplane.mission_ids()]
        left = fleet.controlplane.missions_nonterminal()
    items = _items(outcome.report)
    want: dict[tuple[str, str], tuple[str, str | None]] = {}
    for fault in group:
        want.update(EXPECTED[fault])
    mismatches = [
        f"{key}: want {want.get(key, ('passed', None))}, got {(e['outcome'], e['classification'])}: {e['message']}"
        for key, e in sorted(items.items())
        if key[0] != "prompt_limits"
        and (e["outcome"], e["classification"]) != want.get(key, ("passed", None))
    ]
    assert not mismatches, "\n".join(mismatches)
    assert left == []
    doomed = {key[1] for key, w in want.items() if key[0] == "route_dispatched"} | {
        f"canary {key[1]}" for key in want if key[0] == "workspace_visible"
    }
    assert not [t for t in titles if any(t.endswith(f"route {d}") or t.endswith(d) for d in doomed)], titles
    if "ops.agent-unregistered" in group:
        [incident] = outcome.report["incidents"]
        assert incident["classification"] == "config_defect" and len(incident["checks"]) == 17
        assert titles == []  # no mission at all: no money burned on doomed missions
