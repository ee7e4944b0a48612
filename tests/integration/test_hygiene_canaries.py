"""Mission-hygiene canaries end to end: healthy passes; each ops.* fault turns exactly its items."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gate_harness import CANARY_SUITES, REPO, run_suite

from sbxcheck.sim.faults import FAULTS
from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

HYGIENE = REPO / "canaries" / "test_hygiene.py"
SIGNALS = (
    "auth_error",
    "rate_limited",
    "capacity_limited",
    "context_limit",
    "network_error",
    "suspected_loop",
)
ITEMS = [("missions_integrity", ""), ("running_health", ""), ("mission_verdicts", "")] + [
    ("mission_signals", s) for s in SIGNALS
]
F = "failed"
EXPECTED: dict[str, dict[tuple[str, str], tuple[str, str]]] = {
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
}
HYGIENE_FAULTS = tuple(EXPECTED)


def _items(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for check in report["checks"]:
        name = check["nodeid"].split("::", 1)[1]
        test, _, param = name.partition("[")
        out[(test.removeprefix("test_"), param.rstrip("]"))] = check
    return out


def test_every_hygiene_fault_is_in_the_matrix() -> None:
    assert sorted(EXPECTED) == sorted(f for f in FAULTS if f in HYGIENE_FAULTS)


def test_healthy_fleet_passes_every_hygiene_item(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet") as fleet:
        outcome = run_suite(pytester, fleet, "canary", (HYGIENE,))
    items = _items(outcome.report)
    assert sorted(items) == sorted(ITEMS)
    bad = {k: (v["outcome"], v["message"]) for k, v in items.items() if v["outcome"] != "passed"}
    assert not bad and outcome.ret == 0, bad
    assert "GET /api/control/missions/integrity" in str(items[("missions_integrity", "")]["evidence"])


def test_each_hygiene_fault_fails_its_items_for_its_reason(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """All five faults in one session, with the route and workspace canaries: nothing else changes."""
    with SimFleet(tmp_path / "fleet", list(HYGIENE_FAULTS)) as fleet:
        outcome = run_suite(pytester, fleet, "canary", (HYGIENE, *CANARY_SUITES))
        assert fleet.controlplane is not None
    items = _items(outcome.report)
    want: dict[tuple[str, str], tuple[str, str]] = {}
    for fault in HYGIENE_FAULTS:
        want.update(EXPECTED[fault])
    mismatches = [
        f"{key}: want {want.get(key, ('passed', None))}, got {(e['outcome'], e['classification'])}: {e['message']}"
        for key, e in sorted(items.items())
        if (e["outcome"], e["classification"]) != want.get(key, ("passed", None))
    ]
    assert not mismatches, "\n".join(mismatches)
    assert outcome.ret == 1
    auth = items[("mission_signals", "auth_error")]
    assert "5 in-flight mission(s)" in auth["message"]
    [incident] = [i for i in outcome.report["incidents"] if i["classification"] == "auth_failed"]
    assert incident["checks"] == [auth["nodeid"]] and "renew" in incident["recommendation"]
    assert "`bash` (4x)" in items[("mission_signals", "suspected_loop")]["message"]
    # the classification and next step reach the terminal, the junit message and the page
    junit = (outcome.report_dir / "junit.xml").read_text(encoding="utf-8")
    page = (outcome.report_dir / "report.html").read_text(encoding="utf-8")
    for text in (outcome.stdout, junit, page):
        assert "auth_failed" in text and "renew the refused provider credential" in text
        assert "orphaned pending" in text
