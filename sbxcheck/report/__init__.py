"""Run reports: incidents, results.json, junit.xml and report.html.

This package reads results only; it imports neither pytest, the plugin, the transports nor the
simulator.
"""

from __future__ import annotations

from sbxcheck.report.incidents import (
    DEFAULT_RECOMMENDATIONS,
    INFRA_CLASSIFICATIONS,
    TARGET_CLASSIFICATIONS,
    build_incidents,
    default_recommendation,
    incident_id,
    leftover_incidents,
)
from sbxcheck.report.results_json import (
    assemble_report,
    load_report,
    render_results_json,
    report_dict,
)
from sbxcheck.report.writers import HTML_NAME, JUNIT_NAME, RESULTS_NAME, write_reports

__all__ = [
    "DEFAULT_RECOMMENDATIONS",
    "HTML_NAME",
    "INFRA_CLASSIFICATIONS",
    "JUNIT_NAME",
    "RESULTS_NAME",
    "TARGET_CLASSIFICATIONS",
    "assemble_report",
    "build_incidents",
    "default_recommendation",
    "incident_id",
    "leftover_incidents",
    "load_report",
    "render_results_json",
    "report_dict",
    "write_reports",
]
