"""What other sessions left in the ledger: every entry still open is one item.

Mount entries belong to the gate suite, mission entries to the canary suite. Each item first
leaves alone anything a live session owns (skipped, saying whose), then matches the entry to what
it created (run records for a mount, the mission list for a mission) before anything is done:
already gone → released in the ledger; nothing found → reported once as unmatched; kept on
purpose → shown, never swept. Otherwise ``--sbx-sweep`` releases it through the same recipe
(harvest, then teardown) or cancel call; without it, the item fails and says how to release it.
"""

from __future__ import annotations

from collections.abc import Callable

from sbxcheck.lifecycle.ledger import LedgerEntry
from sbxcheck.plugin.session import SbxSession
from sbxcheck.results import CheckResult, Classification, Outcome


def test_ledger_leaked(
    sbx_ledger_entry: LedgerEntry, sbx_session: SbxSession, sbx_verdict: Callable[[CheckResult], None]
) -> None:
    """An entry another session left open: left alone, reconciled, released (--sbx-sweep) or reported."""
    entry = sbx_ledger_entry
    review = sbx_session.review_entry(entry)
    target = f"{entry.kind}-{entry.ident}"
    if review.outcome == "passed":
        result = CheckResult.passed("ledger_leaked", target, review.message, review.evidence)
    elif review.outcome == "skipped":
        result = CheckResult(
            check="ledger_leaked",
            target=target,
            outcome=Outcome.SKIPPED,
            message=review.message,
            evidence=review.evidence,
        )
    else:
        result = CheckResult.failed(
            "ledger_leaked",
            target,
            review.message,
            review.evidence,
            Classification.CHECK_FAILED,
            recommendation=review.recommendation,
        )
    sbx_verdict(result)
