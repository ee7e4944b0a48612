"""How long each failing item has failed for the same cause, across the kept runs (``--sbx-history``).

A failing or waived item of this run is followed back through the earlier runs, newest first, while it
failed (or was waived) with the same cause: its classification and its stable cause key (run ids reduced
to their run name). A run the item was not in (not selected, not run) is passed over; a pass, a skip or a
failure of another cause ends the streak. So tonight's item says ``new in this run`` or ``failing for 6
runs since 2026-12-01`` — waived or not: a waiver never hides how old a failure is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sbxcheck.report.history import item_identity, stable_text
from sbxcheck.results import CheckRecord, Outcome, RunReport

__all__ = ["Streak", "annotate_streaks", "cause_key", "failure_streaks"]

_FAILING = (Outcome.FAILED, Outcome.ERROR, Outcome.WAIVED)


def cause_key(record: CheckRecord) -> str:
    """What "the same cause" means across runs: the classification and the stable cause key."""
    classification = record.classification.value if record.classification else "check_failed"
    return f"{classification}:{stable_text(record.cause or '')}"


@dataclass(frozen=True)
class Streak:
    """One failing item's run of failures for its cause, this run included."""

    runs: int
    since: str  # started_at of the first run of the streak
    reaches_window_start: bool  # the oldest kept run failed the same way: it may be older still
    last_passed: str | None  # started_at of the newest kept run in which it passed
    window: int  # earlier runs kept

    def text(self) -> str:
        if self.runs <= 1:
            return "new in this run" if self.window else "first run kept in the history"
        if self.reaches_window_start:
            return f"failing for at least {self.runs} runs, since {self.since[:10]} or earlier"
        return f"failing for {self.runs} runs since {self.since[:10]}"


def failure_streaks(previous: Sequence[RunReport], current: RunReport) -> dict[str, Streak]:
    """node id -> its streak, for every failing or waived item of ``current`` (``previous`` oldest first)."""
    earlier = [{item_identity(r): r for r in run.checks if "not_run" not in r.evidence} for run in previous]
    out: dict[str, Streak] = {}
    for record in current.checks:
        if record.outcome not in _FAILING:
            continue
        identity, key = item_identity(record), cause_key(record)
        runs, since, broke = 1, current.started_at, False
        last_passed = None
        for run, by_identity in zip(reversed(previous), reversed(earlier), strict=True):
            before = by_identity.get(identity)
            if before is None:
                continue
            if not broke and before.outcome in _FAILING and cause_key(before) == key:
                runs, since = runs + 1, run.started_at
                continue
            broke = True
            if before.outcome is Outcome.PASSED:
                last_passed = run.started_at
                break
        reaches = not broke and runs > 1  # never broken: the oldest kept run failed the same way
        out[record.nodeid] = Streak(runs, since, reaches, last_passed, len(previous))
    return out


def annotate_streaks(report: RunReport, previous: Sequence[RunReport]) -> RunReport:
    """``report`` with ``failing_for`` on each failing or waived item."""
    streaks = failure_streaks(previous, report)
    if not streaks:
        return report
    checks = [
        r.model_copy(update={"failing_for": streaks[r.nodeid].text()}) if r.nodeid in streaks else r
        for r in report.checks
    ]
    return report.model_copy(update={"checks": checks})
