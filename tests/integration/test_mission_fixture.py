"""The ``sbx_mission`` fixture: an ad-hoc mission is in the ledger before it exists and cancelled after."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: a child session against its own fleet

CANARY = """
import time
import pytest

pytestmark = pytest.mark.canary


def test_adhoc(sbx_mission, sbx_verdict):
    from sbxcheck.results import CheckResult
    mission = sbx_mission(backend="codex", model_override="gpt-5.6-terra", prompt="echo ok")
    assert mission["status"] in ("pending", "active")
    sbx_verdict(CheckResult.passed("adhoc", mission["id"], "dispatched", {"mission_id": mission["id"]}))
"""


def test_mission_fixture_dispatches_records_and_cancels(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(test_adhoc=CANARY)
    state = tmp_path / "state"
    with SimFleet(tmp_path / "fleet", ["cp.stuck-pending@codex"]) as fleet:
        assert fleet.controlplane is not None
        result = pytester.runpytest_subprocess(
            "-m",
            "canary",
            "--sbx-inventory",
            str(fleet.inventory_path),
            "--sbx-state",
            str(state),
            "--sbx-report",
            str(tmp_path / "report"),
        )
        result.assert_outcomes(passed=1)
        [mission_id] = fleet.controlplane.mission_ids()
        assert fleet.controlplane.missions_nonterminal() == []  # cancelled at teardown although still pending
    [entry] = Ledger(state).state()
    assert (entry.kind, entry.ident, entry.state) == ("mission", mission_id, "released")
    assert entry.how == "cancelled at teardown"
