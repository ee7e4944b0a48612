"""The simulator's pace knob: $SBXCHECK_SIM_LATENCY_SCALE scales the control plane's waits, or stops the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbxcheck.errors import SimError
from sbxcheck.fleetsource import EMBEDDED, FleetSource
from sbxcheck.preflight import configuration_problem
from sbxcheck.sim.controlplane.model import LATENCY_SCALE_ENV, latency_scale_from_env
from sbxcheck.sim.fleet import SimFleet


@pytest.mark.parametrize(("raw", "scale"), [("", 1.0), ("0", 0.0), ("0.2", 0.2), (" 10 ", 10.0)])
def test_a_number_from_0_to_10_is_the_scale(monkeypatch: pytest.MonkeyPatch, raw: str, scale: float) -> None:
    monkeypatch.setenv(LATENCY_SCALE_ENV, raw)
    assert latency_scale_from_env() == scale


@pytest.mark.parametrize("raw", ["fast", "-0.5", "11", "nan", "inf"])
def test_anything_else_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(LATENCY_SCALE_ENV, raw)
    with pytest.raises(SimError, match=rf"\$SBXCHECK_SIM_LATENCY_SCALE: expected a number from 0 to 10, got '{raw}'"):
        latency_scale_from_env()


def test_the_fleet_takes_the_environment_unless_told(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(LATENCY_SCALE_ENV, "0.5")
    assert SimFleet(tmp_path / "a").latency_scale == 0.5
    assert SimFleet(tmp_path / "b", latency_scale=2.0).latency_scale == 2.0


def test_a_bad_value_stops_an_embedded_suite_run_before_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LATENCY_SCALE_ENV, "quick")
    choice = FleetSource(None, EMBEDDED)
    problem = configuration_problem(choice, required=(False, ""), faults=[], markexpr="canary")
    assert problem == (
        "sbxcheck: embedded fleet: $SBXCHECK_SIM_LATENCY_SCALE: expected a number from 0 to 10, got 'quick'"
    )
    assert configuration_problem(choice, required=(False, ""), faults=[], markexpr="") is None  # no suite asked
