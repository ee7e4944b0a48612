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


def waived_run(fleet: str, *, waived: bool, expires: str = "2026-12-11") -> RunReport:
    """A canary run whose two opencode routes crashed: waived (a run with only waived failures) or not."""
    match = "canaries/test_routes.py::test_route_reaches_execution[opencode-*]"
    waiver = {
        "match": match, "reason": "upstream #797", "until": expires, "source": "w.toml", "index": 1,
        "days_left": 3.0, "status": "waiving" if waived else "expired",
    }  # fmt: skip
    records = [
        CheckRecord(
            nodeid=match.replace("*", route), suite="canary", check="route_reaches_execution",
            target=f"opencode-{route}",
            outcome=Outcome.WAIVED if waived else Outcome.FAILED, classification=Classification.INFRASTRUCTURE,
            message="failed before any tool call", cause="adapter-crash:opencode:fn3 is not a function",
            waiver={**waiver, "status": "waived" if waived else "expired", "item_outcome": "failed"},
        )
        for route in ("glm", "minimax")
    ] + [
        CheckRecord(
            nodeid="canaries/test_routes.py::test_route_reaches_execution[codex-terra]", suite="canary",
            check="route_reaches_execution", target="codex-terra", outcome=Outcome.PASSED, message="reached it",
        )
    ]  # fmt: skip
    report = assemble_report(
        records,
        started_at="2026-12-08T01:00:00Z",
        finished_at="2026-12-08T01:05:00Z",
        inventory=InventoryInfo(source=f"/srv/{fleet}.toml", sim=False),
    )
    return report.model_copy(update={"waivers": [waiver]})


def test_a_run_with_only_waived_failures_pages_no_one(tmp_path: Path) -> None:
    """prod's crash is waived: no alert of the shipped rules fires for it. staging has the same crash with
    its waiver expired: it pages. lab's waiver ends within the hour: a ticket to renew or fix it."""
    tool = promtool()
    series: list[dict[str, str]] = []
    for fleet, waived in (("prod", True), ("staging", False), ("lab", True)):
        run = waived_run(fleet, waived=waived)
        assert (run.summary["failed"], run.summary["waived"]) == ((0, 2) if waived else (2, 0))
        for entry in input_series(write_metrics(tmp_path / f"{fleet}.prom", run, Redactor())):
            if fleet == "lab" and entry["series"].startswith("sbxcheck_waiver_expiry_timestamp_seconds"):
                entry["values"] = "3600x30"  # the rule test's clock starts at 0: this ends at 01:00
            series.append(entry)
    assert any('sbxcheck_checks_waived{fleet="prod",suite="canary"}' in s["series"] for s in series)
    names = [
        rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]
    expected: dict[str, list[dict[str, object]]] = {name: [] for name in names}
    expected["SbxcheckFleetFailing"] = [
        {
            "exp_labels": {"severity": "page", "fleet": "staging", "suite": "canary"},
            "exp_annotations": {
                "summary": "sbxcheck: the last run found the fleet wrong",
                "description": f"1 incident(s) open on staging (canary). {NEXT_STEP}",
                "report": NO_PAGE,
            },
        }
    ]
    expected["SbxcheckItemFailing"] = [
        {
            "exp_labels": {"severity": "ticket", "fleet": "staging", "suite": "canary", "item": item},
            "exp_annotations": {"summary": f"{item} did not pass in the last run", "report": NO_PAGE},
        }
        for item in (
            "canary/route_reaches_execution/opencode-glm",
            "canary/route_reaches_execution/opencode-minimax",
        )
    ]
    waiver = "canaries/test_routes.py::test_route_reaches_execution[opencode-*]"
    expected["SbxcheckWaiverExpiring"] = [
        {
            "exp_labels": {"severity": "ticket", "fleet": "lab", "waiver": waiver},
            "exp_annotations": {
                "summary": f"waiver {waiver} on lab ends within a day: renew it or fix the cause, else its "
                "failures page again"
            },
        }
    ]
    document = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": name, "exp_alerts": alerts}
                    for name, alerts in expected.items()
                ],
            }
        ],
    }
    test_file = tmp_path / "waived.rules.test.yml"
    test_file.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    proc = subprocess.run(
        [tool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
