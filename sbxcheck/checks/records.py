"""Run-record validity as a check: every selected run gets one item saying whether it can be gated."""

from __future__ import annotations

from sbxcheck.clients.runrecords import RECORD_FIELDS, RunEntry, gate_problem
from sbxcheck.results import CheckResult, Classification


def check_run_record(entry: RunEntry) -> CheckResult:
    """Pass when the record parses against the closed schema, is open, and has vm_name and commit_sha."""
    check, target = "run_record", entry.run_id
    evidence: dict[str, object] = {"path": str(entry.path)}
    problem = entry.problem
    if entry.record is not None:
        rec = entry.record
        evidence.update(
            fields=len(RECORD_FIELDS),
            open=rec.is_open,
            vm_name=rec.vm_name,
            commit_sha=rec.commit_sha,
            key_minted=rec.key_hash is not None,
            limit=rec.limit,
            created_at=rec.created_at,
        )
        problem = problem or gate_problem(rec, entry.path)
    if problem:
        return CheckResult.errored(
            check,
            target,
            problem,
            Classification.CONFIG_DEFECT,
            evidence,
            recommendation="fix the run record or the phase that should have written it; the gate did not run "
            "for this run and nothing was changed",
        )
    return CheckResult.passed(
        check, target, "record has the 12 fields, is open, and names its VM and commit", evidence
    )
