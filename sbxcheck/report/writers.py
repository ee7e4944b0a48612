"""Write the artifacts of a run: results.json, junit.xml, report.html, and optionally the history
entry and the Prometheus metrics file.

All are rendered from one document, ``redactor.redact`` applied to the dumped
:class:`~sbxcheck.results.RunReport`; junit.xml and report.html additionally pass their final
text through the redactor. Each file is written atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sbxcheck.redact import Redactor
from sbxcheck.report.history import DEFAULT_KEEP, HistoryStore, HistoryView, analyse
from sbxcheck.report.html import render_html
from sbxcheck.report.junit import render_junit_xml
from sbxcheck.report.results_json import atomic_write_text, report_dict
from sbxcheck.results import RunReport

__all__ = [
    "HTML_NAME",
    "JUNIT_NAME",
    "METRICS_NAME",
    "RESULTS_NAME",
    "Written",
    "write_artifacts",
    "write_reports",
]

RESULTS_NAME = "results.json"
JUNIT_NAME = "junit.xml"
HTML_NAME = "report.html"
METRICS_NAME = "metrics"


@dataclass
class Written:
    """What :func:`write_artifacts` wrote, the history it read, and what it had to skip."""

    paths: dict[str, Path] = field(default_factory=dict)
    history: HistoryView | None = None
    warnings: list[str] = field(default_factory=list)


def write_artifacts(
    report: RunReport,
    out_dir: Path,
    redactor: Redactor,
    *,
    history_dir: Path | None = None,
    history_keep: int = DEFAULT_KEEP,
    metrics_path: Path | None = None,
) -> Written:
    """Write the reports into ``out_dir``; with ``history_dir`` also keep this run there (the last
    ``history_keep`` runs) and show the history on the page; with ``metrics_path`` also write metrics.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    document = report_dict(report, redactor)
    results_text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    written = Written()
    redacted = RunReport.model_validate(document)
    if history_dir is not None:
        store = HistoryStore(history_dir, history_keep)
        entry = store.add(results_text, redacted.started_at)
        previous, warnings = store.load(exclude=entry)
        runs = [*previous[-(history_keep - 1) :], redacted] if history_keep > 1 else [redacted]
        written.history = analyse(runs, warnings)
        written.warnings.extend(warnings)
        written.paths["history"] = entry
    texts = {
        RESULTS_NAME: results_text,
        JUNIT_NAME: render_junit_xml(document, redactor),
        HTML_NAME: render_html(document, redactor, written.history),
    }
    for name, text in texts.items():
        path = out_dir / name
        atomic_write_text(path, text)
        written.paths[name] = path
    if metrics_path is not None:
        from sbxcheck.report.metrics import write_metrics

        written.paths[METRICS_NAME] = write_metrics(metrics_path, redacted, redactor, written.history)
    return written


def write_reports(report: RunReport, out_dir: Path, redactor: Redactor) -> dict[str, Path]:
    """Write results.json, junit.xml and report.html into ``out_dir`` (created if needed).

    Returns ``{"results.json": path, "junit.xml": path, "report.html": path}``.
    """
    return write_artifacts(report, out_dir, redactor).paths
