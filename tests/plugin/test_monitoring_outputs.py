"""A real gate run and a real canary run on the embedded fleet, seen by monitoring: the metrics file
passes ``promtool check metrics``, and ``--sbx-report-url`` reaches the metrics, junit.xml, results.json
and the terminal summary, so an alert can link to the page."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.gate_harness import GateOutcome, run_canary, run_gate

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # child sessions against the embedded fleet

URL = "https://ci.example.com/fleet/job/7/artifacts/report.html"


@pytest.mark.parametrize("suite", ["gate", "canary"])
def test_a_runs_metrics_pass_promtool_and_carry_the_report_url(
    pytester: pytest.Pytester, healthy_fleet: SimFleet, suite: str
) -> None:
    metrics = pytester.path / "sbxcheck.prom"
    run = run_gate if suite == "gate" else run_canary
    outcome: GateOutcome = run(pytester, healthy_fleet, f"--sbx-metrics={metrics}", f"--sbx-report-url={URL}")
    assert outcome.ret == 0, outcome.stdout[-3000:]

    text = metrics.read_text(encoding="utf-8")
    samples = {s.name: s for family in text_string_to_metric_families(text) for s in family.samples}
    info = samples["sbxcheck_last_run_info"]
    assert info.value == 1 and info.labels == {"report_url": URL, "suite": suite, "fleet": "simulated"}
    assert samples["sbxcheck_last_run_incidents"].value == 0

    props = {p.get("name"): p.get("value") for p in ET.parse(outcome.report_dir / "junit.xml").iter("property")}
    assert props["sbxcheck.verdict"] == "passed" and props["sbxcheck.report_url"] == URL
    assert outcome.report["report_url"] == URL
    assert f"report page: {URL}" in outcome.stdout

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus): metrics not linted")
    proc = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
