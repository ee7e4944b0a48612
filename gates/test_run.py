"""A run that has executed or been observed, as items per run: ``pytest -m run``.

Run after ``just sbx lifecycle execute`` and ``observe``. Parametrized from the run records like the
gate (one item per open, gateable run, each VM's items on one SSH connection, started at once by the
first item). A run without a recorded pid skips its SDLC items, one without ports its observe items;
both say so. The inventory's ``[sssf] observe_probe`` says how app and trace UI are reached.
"""

from __future__ import annotations

import pytest

from sbxcheck.suite import (
    GateRun,
    Verdict,
    check_observe_app,
    check_observe_obs,
    check_run_alive,
    check_run_log_clean,
    remote_check,
    run_precondition,
)

pytestmark = pytest.mark.run


def _judge(run: GateRun, check: str, request: pytest.FixtureRequest, verdict: Verdict) -> None:
    """Skip (before any connection) when the record says the phase never ran; else the VM's result."""
    assert run.target is not None
    skip = run_precondition(run.target, check)
    verdict(skip if skip is not None else request.getfixturevalue("sbx_gate_result")())


@remote_check(check_run_alive)
def test_run_alive(sbx_gate_run: GateRun, request: pytest.FixtureRequest, sbx_verdict: Verdict) -> None:
    """The recorded pid is the SDLC and alive on the VM, or the run finished with an outcome in run.log."""
    _judge(sbx_gate_run, "alive", request, sbx_verdict)


@remote_check(check_run_log_clean)
def test_run_log_clean(sbx_gate_run: GateRun, request: pytest.FixtureRequest, sbx_verdict: Verdict) -> None:
    """No known fatal line in ~/app/run.log (402 credits, 401 dead key, no ZDR endpoint, User not found)."""
    _judge(sbx_gate_run, "log_clean", request, sbx_verdict)


@remote_check(check_observe_app)
def test_observe_app(sbx_gate_run: GateRun, request: pytest.FixtureRequest, sbx_verdict: Verdict) -> None:
    """The app on the recorded app port answers 200 anonymously."""
    _judge(sbx_gate_run, "observe_app", request, sbx_verdict)


@remote_check(check_observe_obs)
def test_observe_obs(sbx_gate_run: GateRun, request: pytest.FixtureRequest, sbx_verdict: Verdict) -> None:
    """The trace UI on the recorded obs port answers anything but 000 or ≥ 500 (307/401 is correct there)."""
    _judge(sbx_gate_run, "observe_obs", request, sbx_verdict)
