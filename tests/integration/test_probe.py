"""--sbx-probe=ROUTE: exactly one narrow no-push probe mission of one route, nothing else (issue 21)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.gate_harness import CANARY_SUITES, run_suite

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: a child session against a fleet


def test_probe_runs_one_mission_of_one_route(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet") as fleet:
        outcome = run_suite(pytester, fleet, "canary", CANARY_SUITES, "--sbx-probe=opencode-glm")
        assert fleet.controlplane is not None
        created = fleet.controlplane.mission_ids()
        events = fleet.controlplane.events(created[0]) if created else []
        prompt = next((e["content"] for e in events if e["event_type"] == "user_message"), "")
    assert outcome.ret == 0, outcome.stdout[-2000:]
    names = sorted(c["nodeid"].split("::")[1] for c in outcome.report["checks"])
    assert names == [
        "test_route_dispatched[opencode-glm]",
        "test_route_reaches_execution[opencode-glm]",
        "test_route_record_echoes_request[opencode-glm]",
    ]
    assert len(created) == 1, "exactly one create: no idempotency retry, no other route, no canary"
    assert "no push" in prompt and "push nothing" in prompt
    assert "probe: one narrow no-push probe of route opencode-glm; nothing else was run" in outcome.stdout


def test_probe_of_an_unknown_route_is_a_usage_error(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet") as fleet:
        suite = pytester.path / "canarys"
        suite.mkdir()
        (suite / "test_routes.py").write_text(CANARY_SUITES[0].read_text(encoding="utf-8"), encoding="utf-8")
        result = pytester.runpytest_subprocess(
            "-m", "canary", "-p", "no:randomly", f"--sbx-inventory={fleet.inventory_path}", str(suite),
            "--sbx-probe=nope",
        )  # fmt: skip
        created = fleet.controlplane.mission_ids() if fleet.controlplane else []
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--sbx-probe=nope: no selected route item has that route*"])
    assert created == []
