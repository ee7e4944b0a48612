"""--sbx-max-spend below one route's cost: dispatching stops, the run fails, what was not run is said everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.gate_harness import CANARY_SUITES, run_suite

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: a child session against a fleet


def test_a_cap_below_one_routes_cost_stops_dispatching(pytester: pytest.Pytester, tmp_path: Path) -> None:
    metrics = tmp_path / "sbxcheck.prom"
    with SimFleet(tmp_path / "fleet") as fleet:
        outcome = run_suite(
            pytester, fleet, "canary", CANARY_SUITES, "--sbx-max-spend=0.01", f"--sbx-metrics={metrics}"
        )
        assert fleet.controlplane is not None
        created = fleet.controlplane.mission_ids()
        left = fleet.controlplane.missions_nonterminal()
    assert outcome.ret == 1
    assert len(created) == 1 and left == [], (created, left)  # one mission ran; none left behind
    spend = outcome.report["spend"]
    assert spend["cap_usd"] == 0.01 and spend["cap_reached"] and spend["total_usd"] == 0.02
    assert len(spend["not_run"]) == 9  # 6 more routes and 3 canaries
    held = [c for c in outcome.report["checks"] if c["classification"] == "spend_cap"]
    assert sorted(c["nodeid"] for c in held) == spend["not_run"]
    assert all(c["outcome"] == "error" and "--sbx-max-spend $0.0100 reached" in c["message"] for c in held)
    line = "spend: $0.0200 on 1 mission(s); cap $0.0100 reached: 9 item(s) not run"
    assert line in outcome.stdout
    page = (outcome.report_dir / "report.html").read_text(encoding="utf-8")
    assert "$0.0200 on 1 mission(s); cap $0.0100 reached: 9 item(s) not run" in page
    prom = metrics.read_text(encoding="utf-8")
    labels = '{fleet="simulated",suite="canary"}'  # every run-level series is labelled (issue 19)
    assert f"sbxcheck_last_run_spend_usd{labels} 0.02" in prom and f"sbxcheck_spend_cap_usd{labels} 0.01" in prom


def test_a_bad_cap_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--sbx-max-spend=lots", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--sbx-max-spend: expected a spend cap in USD*got 'lots'*"])
