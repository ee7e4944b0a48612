"""What other sessions left in the ledger: every entry still open is one item.

Mount entries belong to the gate suite, mission entries to the canary suite. Each item first
leaves alone anything a live session owns (skipped, saying whose), then matches the entry to what
it created (run records for a mount, the mission list for a mission) before anything is done:
already gone → released in the ledger; nothing found → reported once as unmatched; kept on
purpose → shown, never swept. Otherwise ``--sbx-sweep`` releases it through the same recipe
(harvest, then teardown) or cancel call; without it, the item fails and says how to release it.
"""

from __future__ import annotations

from sbxcheck.suite import LedgerEntry, Session, Verdict, ledger_verdict


def test_ledger_leaked(sbx_ledger_entry: LedgerEntry, sbx_session: Session, sbx_verdict: Verdict) -> None:
    """An entry another session left open: left alone, reconciled, released (--sbx-sweep) or reported."""
    sbx_verdict(ledger_verdict(sbx_session, sbx_ledger_entry))
