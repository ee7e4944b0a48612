"""What earlier sessions left behind: every ledger entry still open is a ``leaked`` item.

Mount leaks belong to the gate suite, mission leaks to the canary suite. With ``--sbx-sweep`` the
item releases the entry through the same recipe (harvest, then teardown) or cancel call; without
it, the item fails and says how to release it. Deliberately kept runs (a failed gate) are not leaks.
"""

from __future__ import annotations

from collections.abc import Callable

from sbxcheck.ledger import LedgerEntry
from sbxcheck.results import CheckResult, Classification
from sbxcheck.session import SbxSession


def test_ledger_leaked(
    sbx_ledger_entry: LedgerEntry, sbx_session: SbxSession, sbx_verdict: Callable[[CheckResult], None]
) -> None:
    """An entry an earlier session left open: released with --sbx-sweep, else reported."""
    entry = sbx_ledger_entry
    target = f"{entry.kind}-{entry.ident}"
    evidence = {
        "entry": entry.id,
        "kind": entry.kind,
        "ident": entry.ident,
        "state": entry.state,
        "owner": entry.owner,
        "opened_at": entry.opened_at,
        "owner_alive": sbx_session.ledger().owner_alive(entry),
    }
    if not sbx_session.sweep:
        how = (
            f"just sbx lifecycle teardown {entry.ident} (after just sbx manage harvest {entry.ident})"
            if entry.kind == "mount"
            else f"cancel mission {entry.ident}"
        )
        sbx_verdict(
            CheckResult.failed(
                "ledger_leaked",
                target,
                f"leaked: {entry.kind} {entry.ident} left {entry.state} by {entry.owner} at {entry.opened_at}",
                evidence,
                Classification.CHECK_FAILED,
                recommendation=f"re-run with --sbx-sweep to release it through the same recipes, or: {how}",
            )
        )
        return
    ok, detail = sbx_session.release_entry(entry)
    evidence.update(detail)
    if ok:
        sbx_verdict(
            CheckResult.passed(
                "ledger_leaked", target, f"released by --sbx-sweep: {entry.kind} {entry.ident}", evidence
            )
        )
    else:
        sbx_verdict(
            CheckResult.failed(
                "ledger_leaked", target, f"--sbx-sweep could not release {entry.kind} {entry.ident}", evidence
            )
        )
