"""Prometheus text exposition of a run (``--sbx-metrics FILE``), for node_exporter's textfile
collector or a push gateway.

Series (every label value passed the redactor; items are named by their stable identity). Every
series also carries ``fleet`` (``simulated`` for the embedded fleet, else the inventory's name: its
file's stem, or its directory's name for a plain ``sbxcheck.toml``); run-level series (incidents and
``last_run``) also carry ``suite`` (``gate``, ``canary``, ``triage``, or ``canary+gate`` for a run of
several), so a gate file and a canary file of one fleet never collide in one collector or gateway:

- ``sbxcheck_item_outcome{item, suite, outcome}`` 1 for the item's outcome, 0 for the others
- ``sbxcheck_item_duration_seconds{item, suite}``
- ``sbxcheck_item_flaky_flips{item, suite}`` flips in the history window (only with ``--sbx-history``)
- ``sbxcheck_credit_remaining_usd{key, run_id}`` and ``sbxcheck_credit_floor_usd{key, run_id}`` (gate E;
  an uncapped key has no remaining series)
- ``sbxcheck_incidents_open{classification}``, and ``sbxcheck_last_run_incidents`` their sum (0 when none);
  the sum's old name ``sbxcheck_incidents_open_total`` is still written, untyped, until the next release
  (a gauge may not end in ``_total``: ``promtool check metrics`` rejects it)
- ``sbxcheck_last_run_timestamp_seconds``, ``sbxcheck_last_run_duration_seconds``
- ``sbxcheck_last_run_verdict{verdict}`` 1 for the verdict (passed, failed, error, empty, interrupted),
  else 0
- ``sbxcheck_last_run_not_run`` selected items that never ran (an interrupted run)
- ``sbxcheck_last_run_checks{outcome}`` counts
- ``sbxcheck_checks_waived{suite}`` items that failed for a waived cause (0 for a suite without any): the
  shipped alert rules never page on them
- ``sbxcheck_waiver_expiry_timestamp_seconds{waiver, status}`` when each waiver of the run ends (``waiver``
  is its match pattern)
- ``sbxcheck_last_run_info{report_url}`` 1, when ``--sbx-report-url`` names where the run's page is
  published (alert annotations look it up by ``fleet`` and ``suite``)
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile
from prometheus_client.core import Metric, UnknownMetricFamily
from prometheus_client.registry import Collector

from sbxcheck.redact import Redactor
from sbxcheck.report.history import HistoryView, credit_of, item_identity, run_duration_s, verdict_of
from sbxcheck.results import Outcome, RunReport

__all__ = ["DEPRECATED_SERIES", "VERDICTS", "build_registry", "fleet_label", "suite_label", "write_metrics"]

VERDICTS = ("passed", "failed", "error", "empty", "interrupted")
#: Old series name -> the one that replaces it; each is still written (untyped) for one more release.
DEPRECATED_SERIES = {"sbxcheck_incidents_open_total": "sbxcheck_last_run_incidents"}


def fleet_label(report: RunReport) -> str:
    """``simulated``, or the inventory's name (``prod`` for ``/srv/prod.toml``, ``ops`` for ``ops/sbxcheck.toml``)."""
    inventory = report.inventory
    if inventory.sim:
        return "simulated"
    path = Path(inventory.source)
    if path.suffix == ".toml":
        return (path.parent.name or path.stem) if path.stem == "sbxcheck" else path.stem
    return inventory.source or "inventory"


def suite_label(report: RunReport) -> str:
    """The run's suite (``gate``/``canary``/``triage``), several joined by ``+``, ``none`` for no items."""
    return "+".join(sorted({r.suite for r in report.checks if r.suite})) or "none"


def build_registry(
    report: RunReport, redactor: Redactor, history: HistoryView | None = None
) -> CollectorRegistry:
    """A registry holding the run's series (see the module doc)."""
    registry = CollectorRegistry()
    r = redactor.redact_text
    fleet, run_suite = r(fleet_label(report)), r(suite_label(report))

    outcome = Gauge(
        "sbxcheck_item_outcome",
        "1 for the item's outcome in the last run, 0 for the others",
        ["item", "suite", "outcome", "fleet"],
        registry=registry,
    )
    duration = Gauge(
        "sbxcheck_item_duration_seconds",
        "how long the item took in the last run",
        ["item", "suite", "fleet"],
        registry=registry,
    )
    for record in report.checks:
        item, suite = r(item_identity(record)), r(record.suite)
        for value in Outcome:
            outcome.labels(item, suite, value.value, fleet).set(1 if record.outcome is value else 0)
        duration.labels(item, suite, fleet).set(record.duration_s)
    if history is not None:
        flips = Gauge(
            "sbxcheck_item_flaky_flips",
            "pass/fail flips of the item in the history window (flaky at 2 or more)",
            ["item", "suite", "fleet"],
            registry=registry,
        )
        suites = {item_identity(rec): rec.suite for rec in report.checks}
        for identity, hist in history.items.items():
            flips.labels(r(identity), r(suites.get(identity, identity.split("/", 1)[0])), fleet).set(
                hist.flips
            )

    remaining = Gauge(
        "sbxcheck_credit_remaining_usd",
        "remaining credit of the runtime key (gate E)",
        ["key", "run_id", "fleet"],
        registry=registry,
    )
    floor = Gauge(
        "sbxcheck_credit_floor_usd",
        "the credit floor gate E compares against",
        ["key", "run_id", "fleet"],
        registry=registry,
    )
    for point in credit_of(report):
        labels = (r(point.key), r(point.run_id), fleet)
        if point.remaining_usd is not None:
            remaining.labels(*labels).set(point.remaining_usd)
        if point.floor_usd is not None:
            floor.labels(*labels).set(point.floor_usd)

    _waiver_series(report, registry, r, fleet)
    per_class = Counter(i.classification.value for i in report.incidents)
    open_by_class = Gauge(
        "sbxcheck_incidents_open",
        "incidents open after the last run, per classification",
        ["classification", "suite", "fleet"],
        registry=registry,
    )
    for name, count in per_class.items():
        open_by_class.labels(name, run_suite, fleet).set(count)
    run = {"suite": run_suite, "fleet": fleet}
    Gauge(
        "sbxcheck_last_run_incidents", "incidents open after the last run", list(run), registry=registry
    ).labels(**run).set(len(report.incidents))
    registry.register(_Deprecated("sbxcheck_incidents_open_total", run, len(report.incidents)))
    if report.report_url:
        Gauge(
            "sbxcheck_last_run_info",
            "1; report_url is where the last run's report.html is published",
            ["report_url", *run],
            registry=registry,
        ).labels(r(report.report_url), run_suite, fleet).set(1)

    finished = _timestamp(report.finished_at)
    if finished is not None:
        Gauge(
            "sbxcheck_last_run_timestamp_seconds",
            "when the last run finished (unix time)",
            list(run),
            registry=registry,
        ).labels(**run).set(finished)
    wall = run_duration_s(report)
    if wall is not None:
        Gauge(
            "sbxcheck_last_run_duration_seconds", "wall time of the last run", list(run), registry=registry
        ).labels(**run).set(wall)
    verdict = verdict_of(report)
    verdict_gauge = Gauge(
        "sbxcheck_last_run_verdict",
        "1 for the last run's verdict: passed, failed, error (could not tell), empty, interrupted",
        ["verdict", *run],
        registry=registry,
    )
    for name in VERDICTS:
        verdict_gauge.labels(name, run_suite, fleet).set(1 if name == verdict else 0)
    Gauge(
        "sbxcheck_last_run_not_run",
        "selected items of the last run that never ran",
        list(run),
        registry=registry,
    ).labels(**run).set(len(report.not_run))
    checks = Gauge(
        "sbxcheck_last_run_checks", "items of the last run per outcome", ["outcome", *run], registry=registry
    )
    for value in Outcome:
        checks.labels(value.value, run_suite, fleet).set(report.summary.get(value.value, 0))
    if report.spend:  # what the last run spent, and its cap (labelled like every run-level series)
        Gauge(
            "sbxcheck_last_run_spend_usd",
            "what the last run's missions reported costing (USD)",
            list(run),
            registry=registry,
        ).labels(**run).set(float(report.spend.get("total_usd") or 0.0))
        Gauge(
            "sbxcheck_last_run_spend_unknown_missions",
            "missions of the last run that reported no cost",
            list(run),
            registry=registry,
        ).labels(**run).set(int(report.spend.get("missions_cost_unknown") or 0))
        if report.spend.get("cap_usd") is not None:
            Gauge(
                "sbxcheck_spend_cap_usd", "the --sbx-max-spend cap of the last run", list(run), registry=registry
            ).labels(**run).set(float(report.spend["cap_usd"]))
    return registry


def _waiver_series(report: RunReport, registry: CollectorRegistry, r: Callable[[str], str], fleet: str) -> None:
    """Waived items per suite (0 where a suite had none), and when each waiver of the run ends."""
    waived = Gauge(
        "sbxcheck_checks_waived",
        "items of the last run that failed for a waived cause (left out of the verdict)",
        ["suite", "fleet"],
        registry=registry,
    )
    per_suite = Counter(rec.suite for rec in report.checks if rec.outcome is Outcome.WAIVED)
    for suite in sorted({rec.suite for rec in report.checks}):
        waived.labels(r(suite), fleet).set(per_suite.get(suite, 0))
    ends = Gauge(
        "sbxcheck_waiver_expiry_timestamp_seconds",
        "when the waiver stops applying (unix time); status: waiving, not needed, not covering, unmatched, "
        "not tested or expired in the last run",
        ["waiver", "status", "fleet"],
        registry=registry,
    )
    for waiver in report.waivers:
        until = _timestamp(str(waiver.get("until") or ""))
        if until is not None:
            ends.labels(r(str(waiver.get("match"))), str(waiver.get("status")), fleet).set(until)


class _Deprecated(Collector):
    """A renamed series under its old name, untyped (a gauge named ``*_total`` fails ``promtool check metrics``)."""

    def __init__(self, name: str, labels: dict[str, str], value: float) -> None:
        self.name, self.labels, self.value = name, labels, value

    def collect(self) -> Iterable[Metric]:
        family = UnknownMetricFamily(
            self.name,
            f"deprecated: renamed {DEPRECATED_SERIES[self.name]}; this name goes in the next release",
            labels=list(self.labels),
        )
        family.add_metric(list(self.labels.values()), self.value)
        yield family


def write_metrics(
    path: Path, report: RunReport, redactor: Redactor, history: HistoryView | None = None
) -> Path:
    """Write the exposition to ``path`` (prometheus_client writes a temporary file and renames it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), build_registry(report, redactor, history))
    return path


def _timestamp(text: str) -> float | None:
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()
