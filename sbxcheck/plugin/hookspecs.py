"""Hooks a conftest.py (or another plugin) can implement to react to sbxcheck's verdicts.

All three are called on the process that writes the reports (the xdist controller, or the single
process), after redaction: what they receive is what results.json says. Example::

    # conftest.py
    def pytest_sbxcheck_result(record, config):
        if record.outcome in ("failed", "error"):
            print(f"{record.nodeid}: {record.classification} -> {record.recommendation}")

    def pytest_sbxcheck_incident(incident, config):
        page_on_call(incident.id, incident.summary, incident.recommendation)

    def pytest_sbxcheck_report(report, paths, config):
        upload(paths["results.json"])

See examples/conftest_hooks.py for a runnable version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from sbxcheck.results import CheckRecord, Incident, RunReport

hookspec = pytest.hookspec


@hookspec
def pytest_sbxcheck_result(record: CheckRecord, config: pytest.Config) -> None:
    """One item's final verdict (after setup, call and teardown), as it will appear in results.json."""


@hookspec
def pytest_sbxcheck_incident(incident: Incident, config: pytest.Config) -> None:
    """One incident (failures that share a cause, with its next step), once per run, before the reports."""


@hookspec
def pytest_sbxcheck_report(report: RunReport, paths: dict[str, Path], config: pytest.Config) -> None:
    """The run's report, after results.json, junit.xml and report.html were written to ``paths``.

    Not called when the disk refused them (the run says so on stderr and does not exit 0).
    """
