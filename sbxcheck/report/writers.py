"""Write the three report artifacts of a run: results.json, junit.xml and report.html.

All three are rendered from one document, ``redactor.redact`` applied to the dumped
:class:`~sbxcheck.results.RunReport`; junit.xml and report.html additionally pass their final
text through the redactor. Each file is written atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import json
from pathlib import Path

from sbxcheck.redact import Redactor
from sbxcheck.report.html import render_html
from sbxcheck.report.junit import render_junit_xml
from sbxcheck.report.results_json import atomic_write_text, report_dict
from sbxcheck.results import RunReport

__all__ = ["HTML_NAME", "JUNIT_NAME", "RESULTS_NAME", "write_reports"]

RESULTS_NAME = "results.json"
JUNIT_NAME = "junit.xml"
HTML_NAME = "report.html"


def write_reports(report: RunReport, out_dir: Path, redactor: Redactor) -> dict[str, Path]:
    """Write results.json, junit.xml and report.html into ``out_dir`` (created if needed).

    Returns ``{"results.json": path, "junit.xml": path, "report.html": path}``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    document = report_dict(report, redactor)
    texts = {
        RESULTS_NAME: json.dumps(document, indent=2, ensure_ascii=False) + "\n",
        JUNIT_NAME: render_junit_xml(document, redactor),
        HTML_NAME: render_html(document, redactor),
    }
    paths: dict[str, Path] = {}
    for name, text in texts.items():
        path = out_dir / name
        atomic_write_text(path, text)
        paths[name] = path
    return paths
