"""The roadmap contract canary night after night on one control plane: the track keeps every night's
missions, and each night's verdict counts only that session's intent."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.gate_harness import REPO, run_suite

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow


def test_the_contract_canary_passes_on_its_third_night(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Three sessions on one plane: the track holds missions of three nights (and their keyed retries'
    answers), and every night the roadmap contract still passes."""
    suite = (REPO / "canaries" / "test_contracts.py",)
    with SimFleet(tmp_path / "fleet", runs=1) as fleet:
        roadmap = "test_dispatch_contract and codex-terra and not mcp"
        nights = [run_suite(pytester, fleet, "canary", suite, "-k", roadmap) for _ in range(3)]
    verdicts = [
        [(c["outcome"], c["message"]) for c in outcome.report["checks"] if c["check"] == "dispatch_contract"]
        for outcome in nights
    ]
    assert [[outcome for outcome, _ in night] for night in verdicts] == [["passed"]] * 3, verdicts
    assert [len(n.report["checks"][0]["evidence"]["intent_missions"]) for n in nights] == [1, 1, 1]
    assert nights[-1].report["checks"][0]["evidence"]["track_row"]["total"] >= 3  # every night's mission
