"""An example conftest.py reacting to sbxcheck's verdicts through its hooks (copy what you need).

The hooks run on the process that writes the reports (the xdist controller, or the only process),
after redaction. Here: a one-line note per failed item, a JSON line per incident for a pager, and
the report paths for a CI step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sbxcheck.results import CheckRecord, Incident, RunReport


def pytest_sbxcheck_result(record: CheckRecord, config: pytest.Config) -> None:
    """Each item's final verdict (after setup, call and teardown)."""
    if record.outcome.value in ("failed", "error"):
        print(f"\n[sbxcheck] {record.nodeid}: {record.classification} — {record.message}", file=sys.stderr)


def pytest_sbxcheck_incident(incident: Incident, config: pytest.Config) -> None:
    """Each incident once per run: append it where a pager or chat bot picks it up."""
    with open("sbxcheck-incidents.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(incident.model_dump(mode="json")) + "\n")


def pytest_sbxcheck_report(report: RunReport, paths: dict[str, Path], config: pytest.Config) -> None:
    """The whole run, after results.json, junit.xml and report.html were written."""
    summary = ", ".join(f"{n} {k}" for k, n in report.summary.items() if k != "total" and n)
    print(f"\n[sbxcheck] {summary}; results: {paths['results.json']}", file=sys.stderr)
