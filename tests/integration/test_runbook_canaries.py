"""The control-plane runbook canaries end to end (issue 21): hygiene, readiness, contracts, credits.

Three sessions: the healthy fleet (every new item passes, the spend line is reported); every fault
that bends its own items at once, with the route and workspace canaries beside them (each item
fails for its reason, nothing else changes outcome, doomed routes are never created); and the
unregistered agent, which dooms every route and canary (one incident, no mission at all).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.gate_harness import CANARY_SUITES, REPO, run_suite

from sbxcheck.checks.hygiene import SIGNALS
from sbxcheck.sim.faults import FAULTS
from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

SUITES = tuple(REPO / "canaries" / f"test_{n}.py" for n in ("hygiene", "readiness", "contracts", "spend"))
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
OPENCODE = ("opencode-glm", "opencode-minimax")
NEW_ITEMS = (
    [("missions_integrity", ""), ("running_health", ""), ("mission_verdicts", "")]
    + [("mission_signals", s) for s in SIGNALS]
    + [("catalog", r) for r in ROUTES]
    + [("workspace_ready", w) for w in ("verity", "lean-lab")]
    + [("dispatch_contract", r) for r in ("codex-terra", "claudecode-opus")]
    + [("credits", "")]
)
F, SKIP = "failed", ("skipped", None)
CD = (F, "config_defect")
EXPECTED: dict[str, dict[tuple[str, str], tuple[str, str | None]]] = {
    "ops.orphaned-pending": {
        ("missions_integrity", ""): (F, "check_failed"),
        ("mission_verdicts", ""): (F, "check_failed"),
    },
    "ops.stale-active": {
        ("missions_integrity", ""): (F, "check_failed"),
        ("mission_verdicts", ""): (F, "check_failed"),
    },
    "ops.stalled-severe": {("running_health", ""): (F, "check_failed")},
    "ops.auth-error-storm": {("mission_signals", "auth_error"): (F, "auth_failed")},
    "ops.tool-loop": {("mission_signals", "suspected_loop"): (F, "check_failed")},
    "ops.workspace-pending": {
        ("workspace_ready", "verity"): (F, "infrastructure"),
        ("workspace_visible", "codex-verity"): (F, "infrastructure"),
        ("workspace_visible", "opencode-verity"): (F, "infrastructure"),
    },
    "ops.missing-init-script": {("workspace_ready", "lean-lab"): CD},
    # the catalog's reading only warns (passed); the server's own 400 fails the route with its ids
    "ops.removed-provider": {
        ("route_dispatched", "opencode-minimax"): CD,
        ("route_record_echoes_request", "opencode-minimax"): SKIP,
        ("route_reaches_execution", "opencode-minimax"): SKIP,
    },
    "ops.track-key-ignored": {
        ("dispatch_contract", "codex-terra"): (F, "check_failed"),
        ("route_dispatched", "codex-terra"): (F, "check_failed"),
    },
    "openrouter.balance-low": {("credits", ""): (F, "check_failed")},
    "ops.model-silent": {("route_reaches_execution", "gemini-flash"): (F, "no_usable_answer")},
    # every route and canary asks for agent `build`: only opencode validates agents at create (codex, claudecode
    # and gemini skip it upstream), so only its routes and canary are kept back, as one incident
    "ops.agent-unregistered": {("catalog", r): CD for r in OPENCODE}
    | {("route_dispatched", r): CD for r in OPENCODE}
    | {("route_record_echoes_request", r): SKIP for r in OPENCODE}
    | {("route_reaches_execution", r): SKIP for r in OPENCODE}
    | {("workspace_visible", "opencode-verity"): CD},
}
TOGETHER = tuple(f for f in EXPECTED if f != "ops.agent-unregistered")


def _items(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for check in report["checks"]:
        test, _, param = check["nodeid"].split("::", 1)[1].partition("[")
        out[(test.removeprefix("test_"), param.rstrip("]"))] = check
    return out


def _mismatches(items: dict[tuple[str, str], dict[str, Any]], faults: tuple[str, ...]) -> list[str]:
    want: dict[tuple[str, str], tuple[str, str | None]] = {}
    for fault in faults:
        want.update(EXPECTED[fault])
    return [
        f"{key}: want {want.get(key, ('passed', None))}, got {(e['outcome'], e['classification'])}: {e['message']}"
        for key, e in sorted(items.items())
        if key[0] != "prompt_limits"
        and (e["outcome"], e["classification"]) != want.get(key, ("passed", None))
    ]


def test_every_issue21_fault_is_in_the_matrix() -> None:
    ours = {f for f in FAULTS if f.startswith("ops.")} | {"openrouter.balance-low"}
    assert sorted(EXPECTED) == sorted(ours)


def test_the_healthy_fleet_passes_every_new_item_and_reports_its_spend(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    with SimFleet(tmp_path / "fleet") as fleet:
        outcome = run_suite(pytester, fleet, "canary", SUITES)
    items = _items(outcome.report)
    assert sorted(items) == sorted(NEW_ITEMS)
    assert not _mismatches(items, ()), "\n".join(_mismatches(items, ()))
    assert outcome.ret == 0
    assert "completion is not acceptance" in items[("dispatch_contract", "codex-terra")]["message"]
    spend = outcome.report["spend"]
    assert spend["missions"] == 2 and spend["cap_usd"] is None  # the two contract routes
    assert f"spend: ${spend['total_usd']:.4f} on 2 mission(s)" in outcome.stdout


def test_each_fault_fails_its_items_for_its_reason(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet", list(TOGETHER)) as fleet:
        outcome = run_suite(pytester, fleet, "canary", (*SUITES, *CANARY_SUITES))
        assert fleet.controlplane is not None
        titles = [
            str(fleet.controlplane.mission(m).get("title", "")) for m in fleet.controlplane.mission_ids()
        ]
        left = [m for m in fleet.controlplane.missions_nonterminal() if not _seeded(fleet, m)]
    items = _items(outcome.report)
    mismatches = _mismatches(items, TOGETHER)
    assert not mismatches, "\n".join(mismatches)
    assert outcome.ret == 1 and left == []
    # doomed routes and canaries were never created (a refused create made nothing)
    assert not [
        t
        for t in titles
        if t.endswith(("route opencode-minimax", "canary codex-verity", "canary opencode-verity"))
    ]
    auth = items[("mission_signals", "auth_error")]
    assert "5 in-flight mission(s)" in auth["message"]
    [incident] = [i for i in outcome.report["incidents"] if i["classification"] == "auth_failed"]
    assert incident["checks"] == [auth["nodeid"]] and "renew" in incident["recommendation"]
    assert "`bash` (4x)" in items[("mission_signals", "suspected_loop")]["message"]
    [pending] = [i for i in outcome.report["incidents"] if i["classification"] == "infrastructure"]
    assert len(pending["checks"]) == 3  # the workspace item and its two canaries
    # the classification and next step reach the terminal, the junit message and the page
    junit = (outcome.report_dir / "junit.xml").read_text(encoding="utf-8")
    page = (outcome.report_dir / "report.html").read_text(encoding="utf-8")
    for text in (outcome.stdout, junit, page):
        assert "auth_failed" in text and "renew the refused provider credential" in text
        assert "orphaned pending" in text and "is not a catalog id for opencode; valid ids:" in text


def _seeded(fleet: SimFleet, mission_id: str) -> bool:
    assert fleet.controlplane is not None
    return "seeded-by-fault" in (fleet.controlplane.mission(mission_id).get("tags") or [])


def test_an_unregistered_agent_dooms_only_the_routes_whose_create_validates_agents(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """The library lacks `build`: opencode's create would refuse it (its routes are kept back, no mission);
    codex, claudecode and gemini skip agent validation upstream, so theirs are dispatched with a warning
    and pass (they were all kept back before)."""
    with SimFleet(tmp_path / "fleet", ["ops.agent-unregistered"]) as fleet:
        outcome = run_suite(pytester, fleet, "canary", (SUITES[1], SUITES[2], *CANARY_SUITES))
        assert fleet.controlplane is not None
        backends = {fleet.controlplane.mission(m)["backend"] for m in fleet.controlplane.mission_ids()}
    items = _items(outcome.report)
    mismatches = _mismatches(items, ("ops.agent-unregistered",))
    assert not mismatches, "\n".join(mismatches)
    assert "opencode" not in backends and backends >= {"codex", "claudecode", "gemini"}  # none doomed in vain
    assert "skips agent validation for codex" in items[("catalog", "codex-terra")]["message"]
    [incident] = outcome.report["incidents"]
    assert incident["classification"] == "config_defect" and len(incident["checks"]) == 2 * len(OPENCODE) + 1
