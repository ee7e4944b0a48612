"""Write the artifacts of a run: results.json, junit.xml, report.html, and optionally the history
entry and the Prometheus metrics file.

All are rendered from one document, ``redactor.redact`` applied to the dumped
:class:`~sbxcheck.results.RunReport`; junit.xml and report.html additionally pass their final
text through the redactor. The three are written as one set: each to a temporary file beside it,
and only when all three are on disk are they moved into place, so a full or broken disk leaves no
partial set that looks complete. What could not be written is returned (``Written.missing``), never
raised: the caller says so in one line and in the exit status.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from sbxcheck.redact import Redactor
from sbxcheck.report.history import DEFAULT_KEEP, HistoryStore, HistoryView, analyse
from sbxcheck.report.html import render_html
from sbxcheck.report.junit import render_junit_xml
from sbxcheck.report.results_json import report_dict, stage_text
from sbxcheck.report.streaks import annotate_streaks
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
    """What :func:`write_artifacts` wrote, the history it read, what it had to skip and what it could not write."""

    paths: dict[str, Path] = field(default_factory=dict)
    history: HistoryView | None = None
    report: RunReport | None = None  # the report as written (redacted; with history, each failure's streak)
    warnings: list[str] = field(default_factory=list)
    missing: dict[Path, str] = field(default_factory=dict)  # a file (or directory) not written -> why

    def problem(self) -> str:
        """One line naming every output that was not written and why; empty when all were."""
        by_reason: dict[str, list[str]] = {}
        for path, reason in self.missing.items():
            by_reason.setdefault(reason, []).append(str(path))
        return "; ".join(f"{', '.join(paths)} not written ({reason})" for reason, paths in by_reason.items())


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _write_set(out_dir: Path, texts: dict[str, str], written: Written) -> None:
    """Write every file of ``texts`` into ``out_dir``, or none of them (each listed in ``written.missing``)."""
    staged: dict[str, str] = {}
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            staged[name] = stage_text(out_dir / name, text)
    except OSError as exc:
        for tmp_name in staged.values():
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
        for name in texts:  # an older file of the same name must not stand in for this run's
            with contextlib.suppress(OSError):
                (out_dir / name).unlink(missing_ok=True)
            written.missing[out_dir / name] = _reason(exc)
        return
    for name, tmp_name in staged.items():
        path = out_dir / name
        try:
            os.replace(tmp_name, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            written.missing[path] = _reason(exc)
        else:
            written.paths[name] = path


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
    written = Written()
    store = HistoryStore(history_dir, history_keep) if history_dir is not None else None
    previous: list[RunReport] = []
    warnings: list[str] = []
    if store is not None:
        try:
            loaded, warnings = store.load()  # the earlier runs: each failure of this run says since when
        except OSError as exc:
            written.missing[Path(store.directory)] = _reason(exc)
            store = None
        else:
            previous = loaded[-(history_keep - 1) :] if history_keep > 1 else []
            report = annotate_streaks(report, previous)
    document = report_dict(report, redactor)
    results_text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    redacted = RunReport.model_validate(document)
    written.report = redacted
    if store is not None:
        try:
            entry = store.add(results_text, redacted.started_at)
        except OSError as exc:
            written.missing[Path(store.directory)] = _reason(exc)
        else:
            written.history = analyse([*previous, redacted], warnings)
            written.warnings.extend(warnings)
            written.paths["history"] = entry
    texts = {
        RESULTS_NAME: results_text,
        JUNIT_NAME: render_junit_xml(document, redactor),
        HTML_NAME: render_html(document, redactor, written.history),
    }
    _write_set(out_dir, texts, written)
    if metrics_path is not None:
        from sbxcheck.report.metrics import write_metrics

        try:
            written.paths[METRICS_NAME] = write_metrics(metrics_path, redacted, redactor, written.history)
        except OSError as exc:
            written.missing[Path(metrics_path)] = _reason(exc)
    return written


def write_reports(report: RunReport, out_dir: Path, redactor: Redactor) -> dict[str, Path]:
    """Write results.json, junit.xml and report.html into ``out_dir`` (created if needed).

    Returns ``{"results.json": path, "junit.xml": path, "report.html": path}``; raises OSError
    (naming every file not written) when the disk refused them.
    """
    written = write_artifacts(report, out_dir, redactor)
    if written.missing:
        raise OSError(written.problem())
    return written.paths
