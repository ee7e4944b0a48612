"""How long each failing item has failed for the same cause (report/streaks.py), waived or not, and what
``sbxcheck history`` says of the waivers (days left, still needed)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sbxcheck.redact import Redactor
from sbxcheck.report import assemble_report
from sbxcheck.report.history import HistoryStore, analyse, render_history_text
from sbxcheck.report.streaks import failure_streaks
from sbxcheck.report.writers import write_artifacts
from sbxcheck.results import CheckRecord, Classification, InventoryInfo, Outcome, RunReport

GLM = "canaries/test_routes.py::test_route_reaches_execution[opencode-glm]"
CRASH = "adapter-crash:opencode:fn3 is not a function"
INVENTORY = InventoryInfo(source="/srv/prod.toml", sim=False)


def _run(day: int, outcome: Outcome | None, cause: str | None = CRASH, **extra: object) -> RunReport:
    """One nightly run on 2026-12-<day> with the opencode item (``None``: not in that run)."""
    records = []
    if outcome is not None:
        failing = outcome is not Outcome.PASSED
        records.append(
            CheckRecord(
                nodeid=GLM, suite="canary", check="route_reaches_execution", target="opencode-glm", outcome=outcome,
                classification=Classification.INFRASTRUCTURE if failing else None, cause=cause if failing else None,
                message="crashed" if failing else "reached execution", **extra,  # type: ignore[arg-type]
            )
        )  # fmt: skip
    return assemble_report(
        records, started_at=f"2026-12-{day:02d}T01:00:00Z", finished_at=f"2026-12-{day:02d}T01:05:00Z",
        inventory=INVENTORY,
    )  # fmt: skip


def test_an_item_failing_for_the_same_cause_says_for_how_many_runs_since_when() -> None:
    previous = [_run(1, Outcome.PASSED), _run(2, Outcome.FAILED), _run(3, Outcome.WAIVED), _run(4, None)]
    previous += [_run(5, Outcome.FAILED)]
    streak = failure_streaks(previous, _run(6, Outcome.WAIVED))[GLM]
    # a waived night still failed underneath; a night without the item is passed over
    assert (streak.runs, streak.since, streak.last_passed) == (
        4,
        "2026-12-02T01:00:00Z",
        "2026-12-01T01:00:00Z",
    )
    assert streak.text() == "failing for 4 runs since 2026-12-02"


def test_another_cause_or_a_pass_makes_it_new_tonight() -> None:
    other = [_run(day, Outcome.FAILED, cause="control-plane-timeout") for day in (1, 2)]
    assert failure_streaks(other, _run(3, Outcome.FAILED))[GLM].text() == "new in this run"
    passed = [_run(1, Outcome.FAILED), _run(2, Outcome.PASSED)]
    assert failure_streaks(passed, _run(3, Outcome.FAILED))[GLM].text() == "new in this run"
    assert failure_streaks([], _run(3, Outcome.FAILED))[GLM].text() == "first run kept in the history"
    assert GLM not in failure_streaks(passed, _run(3, Outcome.PASSED))  # only failing items have a streak


def test_a_streak_as_old_as_the_window_says_at_least() -> None:
    streak = failure_streaks([_run(1, Outcome.FAILED), _run(2, Outcome.ERROR)], _run(3, Outcome.FAILED))[GLM]
    assert streak.text() == "failing for at least 3 runs, since 2026-12-01 or earlier"


def test_each_written_failure_carries_its_streak(tmp_path: Path) -> None:
    history = tmp_path / "history"
    for day in (1, 2):
        write_artifacts(_run(day, Outcome.FAILED), tmp_path / f"r{day}", Redactor(), history_dir=history)
    written = write_artifacts(_run(3, Outcome.WAIVED), tmp_path / "r3", Redactor(), history_dir=history)
    assert written.report is not None
    [record] = written.report.checks
    assert record.failing_for == "failing for at least 3 runs, since 2026-12-01 or earlier"
    results = (tmp_path / "r3" / "results.json").read_text(encoding="utf-8")
    assert '"failing_for": "failing for at least 3 runs, since 2026-12-01 or earlier"' in results
    assert "failing for at least 3 runs" in (tmp_path / "r3" / "junit.xml").read_text(encoding="utf-8")
    assert "failing for at least 3 runs" in (tmp_path / "r3" / "report.html").read_text(encoding="utf-8")
    without = write_artifacts(_run(3, Outcome.FAILED), tmp_path / "r4", Redactor())
    assert (
        without.report is not None and without.report.checks[0].failing_for is None
    )  # no history: nothing said


def _waiver(status: str, until: str = "2026-12-09") -> dict[str, object]:
    return {
        "match": "canaries/test_routes.py::test_route_reaches_execution[opencode-*]", "reason": "upstream #797",
        "until": until, "owner": "alice", "source": "w.toml", "index": 1, "status": status,
    }  # fmt: skip


def test_history_lists_the_waivers_with_days_left_and_whether_still_needed(tmp_path: Path) -> None:
    runs = [
        _run(day, Outcome.WAIVED).model_copy(update={"waivers": [_waiver(status)]})
        for day, status in ((1, "not needed"), (2, "waiving"), (3, "waiving"))
    ]
    text = render_history_text(analyse(runs), now=dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC))
    assert (
        "  canaries/test_routes.py::test_route_reaches_execution[opencode-*]  until 2026-12-09 (4.5 days left, "
        "owner alice) — still needed (waiving for 2 runs)"
    ) in text
    runs[-1] = runs[-1].model_copy(update={"waivers": [_waiver("not needed", "2026-12-04T06:00:00Z")]})
    text = render_history_text(analyse(runs), now=dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC))
    assert "(expired, owner alice) — no longer needed: its items passed" in text
    store = HistoryStore(tmp_path)
    store.add(runs[0].to_json(), runs[0].started_at)
    assert "waivers (1, as the last run saw them" in render_history_text(analyse(store.load()[0]))
