"""Run-record validity as a check: every record in the checkout gets one item.

- unreadable, or a field the gate uses is unusable → ``error`` (config_defect): the run is not gated;
- closed → ``skipped``: the run is over, the item says when and which key hash the orphan audit checks;
- readable but deviating from upstream's schema in fields the gate does not use → ``failed``
  (config_defect; upstream's ``list``/``reap`` may refuse it), while the run is still gated;
- otherwise ``passed``.
"""

from __future__ import annotations

import math
from typing import Any

from sbxcheck.clients.runrecords import RECORD_FIELDS, RunEntry, closed_note, gate_problem
from sbxcheck.results import CheckResult, Classification, Outcome


def _json_safe(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def check_run_record(entry: RunEntry) -> CheckResult:
    """Pass when the record is readable, open, names its VM and commit, and matches upstream's schema."""
    check, target = "run_record", entry.run_id
    evidence: dict[str, object] = {"path": str(entry.path)}
    problem = entry.problem
    rec = entry.record
    if rec is not None:
        evidence.update(
            fields=len(RECORD_FIELDS),
            open=rec.is_open,
            vm_name=rec.vm_name,
            commit_sha=rec.commit_sha,
            key_minted=rec.key_hash is not None,
            key_hash=rec.key_hash,
            limit=_json_safe(rec.limit),
            created_at=rec.created_at,
            closed_at=rec.closed_at,
        )
        if rec.deviations:
            evidence["deviations"] = list(rec.deviations)
        if problem is None and not rec.is_open:
            return CheckResult(
                check=check,
                target=target,
                outcome=Outcome.SKIPPED,
                message=closed_note(rec),
                evidence=evidence,
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
    assert rec is not None
    if rec.deviations:
        return CheckResult.failed(
            check,
            target,
            f"{entry.path}: the record deviates from upstream's schema ({'; '.join(rec.deviations)}); "
            "the gate still ran, since it does not use these fields",
            evidence,
            Classification.CONFIG_DEFECT,
            recommendation="correct the record with `run_record.py set` (upstream's list and reap read it "
            "strictly); nothing was changed",
        )
    return CheckResult.passed(
        check, target, "record has the 12 fields, is open, and names its VM and commit", evidence
    )
