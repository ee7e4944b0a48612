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


def test_mission_fixture_never_cancels_a_mission_its_create_joined(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    from sbxcheck.sim.controlplane.lies import FOREIGN_ID

    pytester.makepyfile(
        test_adhoc=CANARY.replace('backend="codex", model_override="gpt-5.6-terra"', 'backend="claudecode"')
    )
    state = tmp_path / "state"
    with SimFleet(tmp_path / "fleet", ["cp.coalesce-foreign"]) as fleet:
        cp = fleet.controlplane
        assert cp is not None
        result = pytester.runpytest_subprocess(
            "-m", "canary", f"--sbx-inventory={fleet.inventory_path}", "--sbx-state", str(state),
            "--sbx-report", str(tmp_path / "report"),
        )  # fmt: skip
        result.assert_outcomes(errors=1)  # could not tell: the create made nothing of ours
        assert cp.missions_nonterminal() == [FOREIGN_ID]  # the person's mission runs on
        assert [r.method for r in cp.requests if FOREIGN_ID in r.path] == []
    [entry] = Ledger(state).state()
    assert entry.state == "released" and entry.how is not None and FOREIGN_ID in entry.how
    assert "did not create" in result.stdout.str()
