"""History across runs: keep the last N results.json documents and read trends out of them.

Items are matched across runs by :func:`item_identity` (suite, check and a stable form of the
target), incidents by :func:`incident_key` (classification and a stable form of the cause), never
by object reprs, temp paths or the random parts of run ids: a gate run is a new VM every night,
``demo-20261130-abc123`` today and ``demo-20261201-9f0e11`` tomorrow, both the run named ``demo``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from sbxcheck.errors import BadResponseError
from sbxcheck.results import CheckRecord, Incident, Outcome, RunReport

__all__ = [
    "DEFAULT_KEEP",
    "CreditPoint",
    "HistoryStore",
    "HistoryView",
    "IncidentStatus",
    "ItemHistory",
    "RunPoint",
    "WaiverHistory",
    "analyse",
    "credit_of",
    "history_lines",
    "incident_key",
    "item_identity",
    "render_history_text",
    "run_duration_s",
    "stable_text",
    "verdict_of",
]

#: How many runs a history directory keeps by default.
DEFAULT_KEEP = 30

#: ``<task>-<YYYYMMDD>-<6 hex>`` (SSSF's new-id), optionally followed by ``-<rest>`` (a C item's model).
_RUN_ID = re.compile(
    r"^(?P<stem>[a-z0-9][a-z0-9-]*?)-(?P<date>\d{8})-(?P<hex>[0-9a-f]{6})(?:-(?P<rest>.+))?$"
)
_RUN_ID_ANYWHERE = re.compile(r"\b(?P<stem>[a-z0-9][a-z0-9-]*?)-\d{8}-[0-9a-f]{6}\b")
_OBJECT_REPR = re.compile(r"<[^<>]*? (?:object )?at 0x[0-9a-fA-F]+>|\bat 0x[0-9a-fA-F]+")
_TEMP_PATH = re.compile(r"(?:/private)?/(?:tmp|var/folders|var/tmp)/[^\s\]\[,;:'\"]*")
_FAILING = (Outcome.FAILED.value, Outcome.ERROR.value, Outcome.WAIVED.value)  # a waived item fails underneath
FILE_PREFIX = "run-"


def stable_text(text: str) -> str:
    """``text`` without what changes between runs: run-id dates and hex, object reprs, temp paths."""
    text = _RUN_ID_ANYWHERE.sub(lambda m: m.group("stem"), text)
    text = _OBJECT_REPR.sub("<object>", text)
    return _TEMP_PATH.sub("<tmp>", text)


def item_identity(record: CheckRecord) -> str:
    """The identity of an item across runs: ``suite/check/target`` with the target made stable.

    A gate item's target starts with its run id; that becomes ``@<run name>`` at the end, so
    ``test_gate_C_model_answers[demo-20261130-abc123-google/gemini-3.6-flash]`` is
    ``gate/C_model_answers/google/gemini-3.6-flash@demo`` and ``test_gate_A_git_integrity[demo-…]``
    is ``gate/A_git_integrity@demo`` (the run name keeps two VMs of one night apart).
    """
    target = record.target
    if record.suite in ("gate", "run"):  # the SSSF run items are per run too
        match = _RUN_ID.match(target)
        if match:
            rest = match.group("rest")
            return f"{record.suite}/{record.check}" + (f"/{rest}" if rest else "") + f"@{match.group('stem')}"
    subject = stable_text(target)
    return f"{record.suite}/{record.check}" + (f"/{subject}" if subject else "")


def incident_key(incident: Incident, report: RunReport) -> str:
    """A stable key for an incident: its classification and the stable cause of its members.

    Members without a cause were grouped by target, so the target stands in for the cause.
    """
    members = {r.nodeid: r for r in report.checks}
    causes = sorted({stable_text(c.cause) for n in incident.checks if (c := members.get(n)) and c.cause})
    if not causes:
        causes = sorted({stable_text(c.target) for n in incident.checks if (c := members.get(n))})
    return f"{incident.classification.value}:{'|'.join(causes) or stable_text(incident.summary)}"


def verdict_of(report: RunReport) -> str:
    """``interrupted`` (stopped before every selected item ran: Ctrl-C, SIGTERM, ``-x``, a crash),
    ``failed`` (the system is wrong), ``error`` (could not tell), ``passed``, or ``empty``.

    An interrupted run is never a pass, whatever its items said before it stopped.
    """
    if report.interrupted:
        return "interrupted"
    outcomes = {r.outcome for r in report.checks}
    if Outcome.FAILED in outcomes:
        return "failed"
    if Outcome.ERROR in outcomes:
        return "error"
    return "passed" if report.checks else "empty"


def _parse_time(text: str) -> dt.datetime | None:
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def run_duration_s(report: RunReport) -> float | None:
    """Wall time of the run from its start and finish stamps (None when either is unreadable)."""
    start, end = _parse_time(report.started_at), _parse_time(report.finished_at)
    return (end - start).total_seconds() if start and end else None


@dataclass(frozen=True)
class CreditPoint:
    """Remaining credit of one runtime key (gate E evidence) in one run."""

    key: str  # the run name: a run's runtime key is minted per run, the name recurs nightly
    run_id: str
    remaining_usd: float | None  # None: uncapped
    limit_usd: float | None
    floor_usd: float | None
    nodeid: str


def credit_of(report: RunReport) -> list[CreditPoint]:
    """Credit remaining per runtime key from the gate E items that read it."""
    points = []
    for record in report.checks:
        ev = record.evidence
        if record.check != "E_credit_remaining" or "usage_usd" not in ev:
            continue
        match = _RUN_ID.match(record.target)
        points.append(
            CreditPoint(
                key=match.group("stem") if match else record.target,
                run_id=record.target,
                remaining_usd=_number(ev.get("remaining_usd")),
                limit_usd=_number(ev.get("limit_usd")),
                floor_usd=_number(ev.get("floor_usd")),
                nodeid=record.nodeid,
            )
        )
    return points


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# ------------------------------------------------------------------ the store


class HistoryStore:
    """A directory of the last ``keep`` results.json documents, one file per run, written atomically."""

    def __init__(self, directory: Path, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError(f"history keep must be at least 1, got {keep}")
        self.directory = Path(directory)
        self.keep = keep

    def add(self, results_json: str, started_at: str) -> Path:
        """Store one (already redacted) results.json text, then drop the oldest beyond ``keep``."""
        from sbxcheck.report.results_json import atomic_write_text

        stamp = re.sub(r"\D", "", started_at)[:14].ljust(14, "0")
        digest = hashlib.sha1(results_json.encode(), usedforsecurity=False).hexdigest()[:8]
        path = self.directory / f"{FILE_PREFIX}{stamp}-{digest}.json"
        atomic_write_text(path, results_json)
        self.prune()
        return path

    def entries(self) -> list[Path]:
        """The stored files, oldest first (names start with the run's start time)."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.glob(f"{FILE_PREFIX}*.json") if p.is_file())

    def prune(self) -> list[Path]:
        """Remove the oldest entries beyond ``keep``; returns what was removed."""
        entries = self.entries()
        dropped = entries[: max(0, len(entries) - self.keep)]
        for path in dropped:
            path.unlink(missing_ok=True)
        return dropped

    def load(self, *, exclude: Path | None = None) -> tuple[list[RunReport], list[str]]:
        """The stored runs, oldest first, and one warning per entry that could not be read (skipped)."""
        from sbxcheck.report.results_json import load_report

        runs: list[RunReport] = []
        warnings: list[str] = []
        for path in self.entries()[-self.keep :]:
            if exclude is not None and path == exclude:
                continue
            try:
                runs.append(load_report(path))
            except BadResponseError as exc:
                warnings.append(f"history entry skipped: {exc.message}")
        return runs, warnings


# ------------------------------------------------------------------ analysis


@dataclass(frozen=True)
class RunPoint:
    started_at: str
    finished_at: str
    verdict: str
    summary: dict[str, int]
    duration_s: float | None


@dataclass
class ItemHistory:
    """One item across the window: outcomes and durations aligned with :attr:`HistoryView.runs`."""

    identity: str
    outcomes: list[str | None]  # None: the item was not in that run
    durations: list[float | None]
    flips: int = 0
    failing_since: str | None = None  # start of the first run of the current failing streak
    failing_runs: int = 0  # length of the current failing streak
    streak_reaches_window_start: bool = False

    @property
    def flaky(self) -> bool:
        """Flipped between passing and not passing at least twice in the window."""
        return self.flips >= 2

    @property
    def current(self) -> str | None:
        return self.outcomes[-1] if self.outcomes else None


@dataclass
class IncidentStatus:
    """An incident of the current run (``new`` or ``ongoing``) or of the previous one (``resolved``)."""

    key: str
    status: str  # new | ongoing | resolved
    incident: Incident
    since: str  # start of the first run of its streak (resolved: of the previous run)
    runs: int  # consecutive runs it has been open (resolved: runs it was open)


@dataclass(frozen=True)
class WaiverHistory:
    """A waiver of the last run and how many runs in a row (up to the last) it waived an item."""

    waiver: dict[str, object]
    waiving_runs: int


@dataclass
class HistoryView:
    runs: list[RunPoint]
    items: dict[str, ItemHistory]
    incidents: list[IncidentStatus]
    credit: dict[str, list[tuple[str, CreditPoint | None]]]  # key -> (started_at, point) per run
    warnings: list[str] = field(default_factory=list)
    waivers: list[WaiverHistory] = field(default_factory=list)  # the last run's waivers

    def status_of(self, incident: Incident) -> IncidentStatus | None:
        return next(
            (s for s in self.incidents if s.incident.id == incident.id and s.status != "resolved"), None
        )

    @property
    def resolved(self) -> list[IncidentStatus]:
        return [s for s in self.incidents if s.status == "resolved"]

    @property
    def flaky(self) -> list[ItemHistory]:
        return sorted((i for i in self.items.values() if i.flaky), key=lambda i: (-i.flips, i.identity))

    @property
    def failing(self) -> list[ItemHistory]:
        return sorted(
            (i for i in self.items.values() if i.current in _FAILING),
            key=lambda i: (-i.failing_runs, i.identity),
        )


def _flips(outcomes: Sequence[str | None]) -> int:
    """Changes between passing and failing/error among consecutive runs where the item ran (skips ignored)."""
    states = [o == Outcome.PASSED.value for o in outcomes if o is not None and o != Outcome.SKIPPED.value]
    return sum(1 for a, b in itertools.pairwise(states) if a != b)


def analyse(runs: Sequence[RunReport], warnings: Sequence[str] = ()) -> HistoryView:
    """Trends over ``runs`` (oldest first; the last one is the current run)."""
    points = [
        RunPoint(r.started_at, r.finished_at, verdict_of(r), dict(r.summary), run_duration_s(r)) for r in runs
    ]
    current_ids = {item_identity(rec) for rec in runs[-1].checks} if runs else set()
    per_run = [{item_identity(rec): rec for rec in r.checks} for r in runs]
    items: dict[str, ItemHistory] = {}
    for identity in sorted(current_ids):
        records = [by_id.get(identity) for by_id in per_run]
        hist = ItemHistory(
            identity=identity,
            # an item an interrupted run never ran was not in that run: neither a pass nor a flip
            outcomes=[
                rec.outcome.value if rec and "not_run" not in rec.evidence else None for rec in records
            ],
            durations=[rec.duration_s if rec else None for rec in records],
        )
        hist.flips = _flips(hist.outcomes)
        if hist.current in _FAILING:
            index = len(records) - 1
            while index >= 0 and hist.outcomes[index] in _FAILING:
                index -= 1
            hist.failing_since = runs[index + 1].started_at
            hist.failing_runs = len(records) - 1 - index
            hist.streak_reaches_window_start = index < 0
        items[identity] = hist

    credit: dict[str, list[tuple[str, CreditPoint | None]]] = {}
    credit_per_run = [{p.key: p for p in credit_of(r)} for r in runs]
    for key in sorted({k for by_key in credit_per_run[-1:] for k in by_key}):
        credit[key] = [
            (r.started_at, by_key.get(key)) for r, by_key in zip(runs, credit_per_run, strict=True)
        ]

    return HistoryView(points, items, _incident_statuses(runs), credit, list(warnings), _waiver_histories(runs))


def _waiver_histories(runs: Sequence[RunReport]) -> list[WaiverHistory]:
    """The last run's waivers, each with the runs in a row (newest back) in which it waived an item."""
    if not runs:
        return []
    out = []
    for waiver in runs[-1].waivers:
        streak = 0
        for run in reversed(runs):
            same = next((w for w in run.waivers if w.get("match") == waiver.get("match")), None)
            if same is None or same.get("status") != "waiving":
                break
            streak += 1
        out.append(WaiverHistory(dict(waiver), streak))
    return out


def _incident_statuses(runs: Sequence[RunReport]) -> list[IncidentStatus]:
    if not runs:
        return []
    keyed = [{incident_key(i, r): i for i in r.incidents} for r in runs]
    current, previous = keyed[-1], (keyed[-2] if len(keyed) > 1 else {})
    out = []
    for key, incident in current.items():
        index = len(runs) - 1
        while index >= 0 and key in keyed[index]:
            index -= 1
        streak = len(runs) - 1 - index
        out.append(
            IncidentStatus(
                key, "ongoing" if key in previous else "new", incident, runs[index + 1].started_at, streak
            )
        )
    for key, incident in previous.items():
        if key not in current:
            index = len(runs) - 2
            while index >= 0 and key in keyed[index]:
                index -= 1
            out.append(
                IncidentStatus(key, "resolved", incident, runs[index + 1].started_at, len(runs) - 2 - index)
            )
    return out


# ------------------------------------------------------------------ terminal

_SYMBOL = {"passed": ".", "failed": "F", "error": "E", "waived": "w", "skipped": "s", "interrupted": "!", None: " "}


def strip_text(outcomes: Sequence[str | None]) -> str:
    """One character per run, oldest first: ``.`` passed, ``F`` failed, ``E`` error, ``w`` waived,
    ``s`` skipped, ``!`` interrupted (a run verdict)."""
    return "".join(_SYMBOL.get(o, "?") for o in outcomes)


def render_history_text(view: HistoryView, now: dt.datetime | None = None) -> str:
    """:func:`history_lines` as one text."""
    return "\n".join(history_lines(view, now)) + "\n"


def history_lines(view: HistoryView, now: dt.datetime | None = None) -> list[str]:
    """What ``sbxcheck history DIR`` prints, line by line: runs, incidents new/ongoing/resolved,
    failing, flaky, trends, and the last run's waivers with their days left (from ``now``) and whether
    they are still needed. A line may hold a line break from a stored text: the printer shows it."""
    lines = []
    if not view.runs:
        lines.append("no runs in the history")
        lines.extend(view.warnings)
        return lines
    last = view.runs[-1]
    lines.append(
        f"{_runs(len(view.runs))}, {view.runs[0].started_at} → {last.started_at}; "
        f"last verdict: {last.verdict} ({_counts(last.summary)})"
    )
    lines.append(
        "verdicts (oldest → newest): "
        + strip_text([r.verdict if r.verdict != "empty" else None for r in view.runs])
    )
    lines.append("")
    lines.append("incidents:")
    if not view.incidents:
        lines.append("  none now, none in the previous run")
    for status in sorted(view.incidents, key=lambda s: ("new", "ongoing", "resolved").index(s.status)):
        label = status.status.upper()
        if status.status == "ongoing":
            label += f" since {status.since} ({_runs(status.runs)})"
        lines.append(
            f"  {label:<9} {status.incident.id} [{status.incident.classification.value}] "
            f"{status.incident.summary}"
        )
        if status.status != "resolved":
            lines.append(f"            next step: {status.incident.recommendation}")
    lines.append("")
    failing = view.failing
    lines.append(f"failing now ({len(failing)}):")
    for item in failing:
        since = "at least since" if item.streak_reaches_window_start else "since"
        lines.append(
            f"  {strip_text(item.outcomes)}  {item.identity}  — {item.current} {since} "
            f"{item.failing_since} ({_runs(item.failing_runs)})"
        )
    flaky = view.flaky
    lines.append(f"flaky ({len(flaky)}; flipped at least twice in {_runs(len(view.runs))}):")
    for item in flaky:
        lines.append(f"  {strip_text(item.outcomes)}  {item.identity}  — {item.flips} flips")
    slow = sorted(
        (i for i in view.items.values() if i.durations and i.durations[-1]),
        key=lambda i: -(i.durations[-1] or 0.0),
    )[:5]
    if slow:
        lines.append("slowest now (seconds, last vs median of the window):")
        for item in slow:
            known = [d for d in item.durations if d is not None]
            lines.append(f"  {item.durations[-1] or 0:8.2f}  median {median(known):8.2f}  {item.identity}")
    if view.credit:
        lines.append("credit remaining per key (USD, oldest → newest):")
        for key, series in view.credit.items():
            values = [_money(p) for _, p in series]
            floor = next((p.floor_usd for _, p in reversed(series) if p and p.floor_usd is not None), None)
            lines.append(
                f"  {key}: {' '.join(values)}" + (f"  (floor {floor:.2f})" if floor is not None else "")
            )
    lines.extend(_waiver_text(view.waivers, now or dt.datetime.now(dt.UTC)))
    for warning in view.warnings:
        lines.append(f"warning: {warning}")
    return lines


_NEEDED = {
    "waiving": "still needed",
    "not needed": "no longer needed: its items passed",
    "not covering": "not covering: its items failed for another cause",
    "unmatched": "matched no item",
    "not tested": "its items were skipped",
    "expired": "expired",
}


def _waiver_text(waivers: Sequence[WaiverHistory], now: dt.datetime) -> list[str]:
    if not waivers:
        return []
    lines = [f"waivers ({len(waivers)}, as the last run saw them; days left from now):"]
    for entry in waivers:
        w = entry.waiver
        ends = _parse_time(str(w.get("until") or ""))
        left = (ends - now).total_seconds() / 86400 if ends else None
        days = "?" if left is None else "expired" if left <= 0 else f"{left:.1f} days left"
        status = str(w.get("status"))
        needed = _NEEDED.get(status, status)
        if status == "waiving" and entry.waiving_runs > 1:
            needed += f" (waiving for {entry.waiving_runs} runs)"
        owner = f", owner {w['owner']}" if w.get("owner") else ""
        lines.append(f"  {w.get('match')}  until {w.get('until')} ({days}{owner}) — {needed}")
        lines.append(f"      {w.get('reason')}  [{w.get('source')} #{w.get('index')}]")
    return lines


def _runs(count: int) -> str:
    return f"{count} run" + ("" if count == 1 else "s")


def _money(point: CreditPoint | None) -> str:
    if point is None:
        return "-"
    return "uncapped" if point.remaining_usd is None else f"{point.remaining_usd:.2f}"


def _counts(summary: dict[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in summary.items() if k != "total" and v) or "no checks"
