"""The shipped alert rules, evaluated by promtool over the series sbxcheck really writes.

Two fleets' metrics files (prod: 2 incidents and a published report page; staging: 5, no page)
become one promtool rule test: every alert's text must name its own fleet's numbers and link.
Skipped, saying so, where promtool is not installed (Debian: ``apt-get install prometheus``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sbxcheck.redact import Redactor
from sbxcheck.report import assemble_report
from sbxcheck.report.history import item_identity
from sbxcheck.report.metrics import write_metrics
from sbxcheck.results import CheckRecord, Classification, InventoryInfo, Outcome, RunReport

RULES = Path(__file__).resolve().parents[2] / "examples" / "alerts" / "sbxcheck.rules.yml"
PROD_URL = "https://ci.example.com/prod/job/42/artifacts/report.html"
NEXT_STEP = "Open report.html of the last run: incidents come first, each with its next step."
NO_PAGE = "report.html in the CI job's artifacts"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus): alert rules not evaluated")
    return found


def failing_run(fleet: str, incidents: int, report_url: str = "") -> RunReport:
    """A gate run on ``/srv/<fleet>.toml`` with ``incidents`` incidents (two failed items each)."""
    records = [
        CheckRecord(
            nodeid=f"gates/test_gate.py::test_gate_{check}[run-{n}]",
            suite="gate",
            check=check,
            target=f"run-{n}",
            outcome=Outcome.FAILED,
            classification=Classification.CHECK_FAILED,
            message=f"{check} failed on run-{n}",
            cause=f"run-{n} lost its checkout",
            duration_s=1.0,
        )
        for n in range(incidents)
        for check in ("A_git_integrity", "B_pi_models")
    ]
    report = assemble_report(
        records,
        started_at="2026-12-04T01:00:00Z",
        finished_at="2026-12-04T01:05:00Z",
        inventory=InventoryInfo(source=f"/srv/{fleet}.toml", sim=False),
    )
    assert len(report.incidents) == incidents
    return report.model_copy(update={"report_url": report_url})


def input_series(path: Path) -> list[dict[str, str]]:
    """Every sample of a metrics file as a promtool input series, constant over the test."""
    out = []
    for family in text_string_to_metric_families(path.read_text(encoding="utf-8")):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out.append({"series": f"{sample.name}{{{labels}}}", "values": f"{sample.value:g}x30"})
    return out


def rule_test(tmp_path: Path) -> Path:
    """A promtool rule test over two fleets' metrics files, expecting each alert's own fleet's text."""
    series: list[dict[str, str]] = []
    fleet_alerts: list[dict[str, object]] = []
    item_alerts: list[dict[str, object]] = []
    for fleet, incidents, url in (("prod", 2, PROD_URL), ("staging", 5, "")):
        run = failing_run(fleet, incidents, url)
        series += input_series(write_metrics(tmp_path / f"{fleet}.prom", run, Redactor()))
        report = url or NO_PAGE
        fleet_alerts.append(
            {
                "exp_labels": {"severity": "page", "fleet": fleet, "suite": "gate"},
                "exp_annotations": {
                    "summary": "sbxcheck: the last run found the fleet wrong",
                    "description": f"{incidents} incident(s) open on {fleet} (gate). {NEXT_STEP}",
                    "report": report,
                },
            }
        )
        for record in run.checks:
            item = item_identity(record)
            item_alerts.append(
                {
                    "exp_labels": {"severity": "ticket", "fleet": fleet, "suite": "gate", "item": item},
                    "exp_annotations": {"summary": f"{item} did not pass in the last run", "report": report},
                }
            )
    document = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": "SbxcheckFleetFailing", "exp_alerts": fleet_alerts},
                    {"eval_time": "5m", "alertname": "SbxcheckItemFailing", "exp_alerts": item_alerts},
                ],
            }
        ],
    }
    path = tmp_path / "sbxcheck.rules.test.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def test_each_fleets_alert_names_its_own_incidents_and_report_page(tmp_path: Path) -> None:
    tool = promtool()
    test_file = rule_test(tmp_path)
    proc = subprocess.run(
        [tool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("report_url", ["", PROD_URL])
def test_a_metrics_file_passes_promtool_check_metrics(tmp_path: Path, report_url: str) -> None:
    tool = promtool()
    path = write_metrics(tmp_path / "m.prom", failing_run("prod", 2, report_url), Redactor())
    proc = subprocess.run(
        [tool, "check", "metrics"], input=path.read_text(encoding="utf-8"), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
