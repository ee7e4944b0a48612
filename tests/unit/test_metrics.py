"""--sbx-metrics: Prometheus text exposition a textfile collector or push gateway can read."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from support import report_scenarios as scenarios

from sbxcheck.redact import MASK, Redactor
from sbxcheck.report.history import analyse
from sbxcheck.report.metrics import write_metrics
from sbxcheck.results import Outcome


def _samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = path.read_text(encoding="utf-8")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_series_of_a_gate_fault(tmp_path: Path) -> None:
    report = scenarios.gate_fault()
    path = write_metrics(tmp_path / "textfile" / "sbxcheck.prom", report, Redactor())
    samples = _samples(path)

    run = {"suite": "canary+gate", "fleet": "simulated"}  # the scenario holds gate and canary items

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted({"fleet": "simulated", **labels}.items())))]

    dirty = "gate/A_git_integrity@charlie"
    assert value("sbxcheck_item_outcome", item=dirty, suite="gate", outcome="failed") == 1
    assert value("sbxcheck_item_outcome", item=dirty, suite="gate", outcome="passed") == 0
    assert value("sbxcheck_item_duration_seconds", item=dirty, suite="gate") > 0
    assert value("sbxcheck_credit_remaining_usd", key="alpha", run_id=scenarios.RUNS[0]) == 0.42
    assert value("sbxcheck_credit_floor_usd", key="alpha", run_id=scenarios.RUNS[0]) == 1.0
    assert value("sbxcheck_last_run_incidents", **run) == len(report.incidents) == 1
    assert value("sbxcheck_incidents_open", classification="host_key_mismatch", **run) == 1
    assert value("sbxcheck_last_run_verdict", verdict="failed", **run) == 1
    assert value("sbxcheck_last_run_verdict", verdict="passed", **run) == 0
    assert value("sbxcheck_last_run_timestamp_seconds", **run) > 1.7e9
    assert value("sbxcheck_last_run_checks", outcome="error", **run) == report.summary["error"]
    per_item = [k for k in samples if k[0] == "sbxcheck_item_outcome"]
    assert len(per_item) == len(report.checks) * len(Outcome)


def test_metrics_with_history_and_redaction(tmp_path: Path) -> None:
    runs = scenarios.history_runs(10)
    secret = "s3cr3t-value-in-a-target"
    current = runs[-1]
    current.checks[0] = current.checks[0].model_copy(update={"target": f"node-{secret}"})
    redactor = Redactor([secret])
    path = write_metrics(tmp_path / "m.prom", current, redactor, analyse(runs))
    text = path.read_text(encoding="utf-8")
    assert secret not in text and MASK in text
    samples = _samples(path)
    flips = (
        "sbxcheck_item_flaky_flips",
        (("fleet", "simulated"), ("item", scenarios.FLAKY_ITEM), ("suite", "canary")),
    )
    assert samples[flips] == 5


def test_every_series_names_its_fleet_and_run_level_series_their_suite(tmp_path: Path) -> None:
    """A gate file and a canary file of one fleet, and two fleets' files, never share a series."""
    from sbxcheck.results import InventoryInfo

    report = scenarios.gate_fault()
    gate = report.model_copy(update={"checks": [c for c in report.checks if c.suite == "gate"]})
    canary = report.model_copy(update={"checks": [c for c in report.checks if c.suite == "canary"]})
    prod = gate.model_copy(update={"inventory": InventoryInfo(source="/srv/fleets/prod.toml", sim=False)})
    ops = gate.model_copy(update={"inventory": InventoryInfo(source="/srv/ops/sbxcheck.toml", sim=False)})
    keys: list[set[tuple[str, tuple[tuple[str, str], ...]]]] = []
    for n, run in enumerate((gate, canary, prod, ops)):
        samples = _samples(write_metrics(tmp_path / f"{n}.prom", run, Redactor()))
        for name, labels in samples:
            assert "fleet" in dict(labels), name
            if name.startswith(("sbxcheck_last_run", "sbxcheck_incidents_open")):
                assert "suite" in dict(labels), name
        keys.append(set(samples))
    fleets = [{dict(labels)["fleet"] for _, labels in k} for k in keys]
    assert fleets == [{"simulated"}, {"simulated"}, {"prod"}, {"ops"}]
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            assert not keys[a] & keys[b], (a, b)


def test_the_renamed_incident_sum_keeps_its_old_name_untyped_and_the_report_url_is_a_series(
    tmp_path: Path,
) -> None:
    """``sbxcheck_incidents_open_total`` was a gauge named like a counter: its successor is a gauge, the
    old name stays one release as an untyped series (which promtool accepts), and the page's URL is a label."""
    from sbxcheck.report.metrics import DEPRECATED_SERIES

    url = "https://ci.example.com/job/42/artifacts/report.html"
    report = scenarios.gate_fault().model_copy(update={"report_url": url})
    text = write_metrics(tmp_path / "m.prom", report, Redactor()).read_text(encoding="utf-8")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert DEPRECATED_SERIES == {"sbxcheck_incidents_open_total": "sbxcheck_last_run_incidents"}
    assert families["sbxcheck_last_run_incidents"].type == "gauge"
    old = families["sbxcheck_incidents_open_total"]
    assert old.type == "unknown" and "deprecated" in old.documentation
    assert [s.value for s in old.samples] == [s.value for s in families["sbxcheck_last_run_incidents"].samples]
    [info] = families["sbxcheck_last_run_info"].samples
    assert info.value == 1 and info.labels == {"report_url": url, "suite": "canary+gate", "fleet": "simulated"}
    bare = write_metrics(tmp_path / "bare.prom", scenarios.gate_fault(), Redactor()).read_text(encoding="utf-8")
    assert "sbxcheck_last_run_info" not in bare
