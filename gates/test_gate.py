"""The SSSF setup gate, A–E, as separate items per run (and per roster model for C).

Run after ``just sbx lifecycle setup``: ``pytest -m gate``. The first gate item starts every VM's
checks at once (one SSH connection per VM, its checks concurrent over it); each item waits for and
reports its own check's result. The runtime key is only ever read inside the VM.
"""

from __future__ import annotations

import pytest

from sbxcheck.results import CheckResult, Classification
from sbxcheck.suite import (
    GateRun,
    Inventory,
    Remote,
    Verdict,
    check_cost_reported,
    check_credit_remaining,
    check_git_integrity,
    check_model_answers,
    check_pi_models,
    check_roster_matches,
    check_run_record,
    check_vm_hygiene,
    remote_check,
    vm_hygiene_verdict,
)

pytestmark = pytest.mark.gate


def test_gate_run_record(sbx_run_entry: GateRun | str, sbx_verdict: Verdict) -> None:
    """The run record parses against the closed schema and the run can be gated."""
    if isinstance(sbx_run_entry, str):  # the inventory itself could not be read
        sbx_verdict(
            CheckResult.errored("run_record", "inventory", sbx_run_entry, Classification.CONFIG_DEFECT)
        )
        return
    sbx_verdict(check_run_record(sbx_run_entry.entry))


@remote_check(check_git_integrity)
def test_gate_A_git_integrity(sbx_gate_run: GateRun, sbx_gate_result: Remote, sbx_verdict: Verdict) -> None:
    """A: HEAD matches the recorded commit_sha (prefix) and the working tree is clean."""
    sbx_verdict(sbx_gate_result())


@remote_check(check_pi_models)
def test_gate_B_pi_models(sbx_gate_run: GateRun, sbx_gate_result: Remote, sbx_verdict: Verdict) -> None:
    """B: pi is on PATH and lists every roster model."""
    sbx_verdict(sbx_gate_result())


@remote_check(check_roster_matches)
def test_gate_C_roster_matches(sbx_gate_run: GateRun, sbx_gate_result: Remote, sbx_verdict: Verdict) -> None:
    """C (roster): the VM's roster is the one the C items were collected for."""
    sbx_verdict(sbx_gate_result())


@remote_check(check_model_answers)
def test_gate_C_model_answers(
    sbx_gate_model: tuple[GateRun, str | None], sbx_gate_result: Remote, sbx_verdict: Verdict
) -> None:
    """C: one roster model answers a ping sent from inside the VM."""
    run, model = sbx_gate_model
    if model is None:
        sbx_verdict(
            CheckResult.errored(
                "C_model_answers", run.run_id, run.problem or "empty roster", Classification.CONFIG_DEFECT
            )
        )
        return
    sbx_verdict(sbx_gate_result())


@remote_check(check_cost_reported)
def test_gate_D_cost_reported(sbx_gate_run: GateRun, sbx_gate_result: Remote, sbx_verdict: Verdict) -> None:
    """D: pi reports a non-zero cost on a live call, and models.json carries four-field rates."""
    sbx_verdict(sbx_gate_result())


@remote_check(check_credit_remaining)
def test_gate_E_credit_remaining(
    sbx_gate_run: GateRun, sbx_gate_result: Remote, sbx_verdict: Verdict
) -> None:
    """E: the runtime key's remaining credit is above the floor (uncapped passes, saying so)."""
    sbx_verdict(sbx_gate_result())


@remote_check(check_vm_hygiene)
def test_vm_hygiene(
    sbx_gate_run: GateRun, sbx_gate_result: Remote, sbx_inventory: Inventory, sbx_verdict: Verdict
) -> None:
    """Secret files are 0600 (VM .env, models.json; the host's .key) and the provisioning key is not on the VM."""
    sbx_verdict(vm_hygiene_verdict(sbx_gate_run, sbx_gate_result(), sbx_inventory))
