"""An interrupted run is INTERRUPTED in every output: terminal, report.html, junit.xml, results.json,
metrics and the history entry, each naming what did not run (Ctrl-C, ``-x``, a crash)."""

from __future__ import annotations

import json
import signal
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.gate_harness import CANARY_SUITES
from support.lifecycle_harness import child_argv, interrupt, start_child, suites_dir, wait_for
from support.schemas import validate_junit

from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.report.history import HistoryStore, analyse
from sbxcheck.sim.fleet import SimFleet

SUITE = """
import pytest

pytestmark = pytest.mark.gate


def test_first():
    pass


def test_stops_here():
    {stop}


def test_never_reached():
    pass
"""
NEVER = ["test_suite.py::test_never_reached"]


def _run(pytester: pytest.Pytester, stop: str, *args: str) -> tuple[pytest.RunResult, Path]:
    inventory = pytester.path / "fleet.toml"
    inventory.write_text("[ssh]\n")
    pytester.makepyfile(test_suite=SUITE.format(stop=stop))
    out = pytester.path / "r"
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", "-m", "gate", f"--sbx-inventory={inventory}",
        f"--sbx-report={out}", f"--sbx-metrics={out / 'metrics.prom'}", f"--sbx-history={out / 'hist'}",
        *args,
    )  # fmt: skip
    return result, out


def read_outputs(out: Path) -> dict[str, Any]:
    """Every artifact of the run, parsed."""
    history = HistoryStore(out / "hist")
    runs, _ = history.load()
    return {
        "results": json.loads((out / "results.json").read_text()),
        "html": (out / "report.html").read_text(),
        "junit": ET.fromstring((out / "junit.xml").read_text()),
        "metrics": (out / "metrics.prom").read_text(),
        "history": analyse(runs),
    }


def _metric(text: str, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels`` (run-level series add suite and fleet)."""
    [value] = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    ]
    return float(value)


def assert_interrupted_everywhere(result: pytest.RunResult, out: Path, not_run: list[str], why: str) -> None:
    o = read_outputs(out)
    results = o["results"]
    assert results["interrupted"] is True and results["not_run"] == not_run
    assert results["interrupted_reason"] == why
    assert 'data-verdict="interrupted"' in o["html"] and "HEALTHY" not in o["html"]
    assert "INTERRUPTED" in o["html"] and all(f"<code>{n}</code>" in o["html"] for n in not_run)
    props = {p.get("name"): p.get("value") for p in o["junit"].iter("property")}
    assert props["sbxcheck.verdict"] == "interrupted" and props["sbxcheck.not_run"] == str(len(not_run))
    assert all(n in "".join(o["junit"].itertext()) for n in not_run)
    metrics = o["metrics"]
    assert _metric(metrics, "sbxcheck_last_run_verdict", verdict="interrupted") == 1
    assert _metric(metrics, "sbxcheck_last_run_verdict", verdict="passed") == 0
    assert _metric(metrics, "sbxcheck_last_run_not_run") == len(not_run)
    [point] = o["history"].runs
    assert point.verdict == "interrupted"
    text = "\n".join(result.outlines)
    if result.ret == pytest.ExitCode.INTERNAL_ERROR:  # pytest prints no summary: one line on stderr
        err = "\n".join(result.errlines)
        assert f"sbxcheck: verdict: INTERRUPTED ({why}): {len(not_run)} selected item(s) did not run" in err
        return
    assert f"verdict: INTERRUPTED — the run was stopped before it finished ({why})" in text
    assert f"interrupted: {len(not_run)} selected item(s) did not run ({why})" in text
    assert all(f"not run: {n}" in text for n in not_run)


def test_ctrl_c_is_interrupted_in_every_output(pytester: pytest.Pytester) -> None:
    result, out = _run(pytester, "raise KeyboardInterrupt")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert_interrupted_everywhere(result, out, [*NEVER, "test_suite.py::test_stops_here"], "Ctrl-C")
    validate_junit(out / "junit.xml")  # the properties and the suite's system-out keep junit.xml valid


def test_exitfirst_fills_not_run_and_is_interrupted(pytester: pytest.Pytester) -> None:
    result, out = _run(pytester, "assert False", "-x")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # pytest's own exit code is kept
    assert_interrupted_everywhere(result, out, NEVER, "stopping after 1 failures")
    results = json.loads((out / "results.json").read_text())
    assert {c["nodeid"]: c["outcome"] for c in results["checks"]}[
        "test_suite.py::test_stops_here"
    ] == "failed"


def test_a_complete_run_is_not_interrupted(pytester: pytest.Pytester) -> None:
    result, out = _run(pytester, "pass", "-x")
    assert result.ret == 0
    o = read_outputs(out)
    assert o["results"]["interrupted"] is False and o["results"]["not_run"] == []
    props = {p.get("name"): p.get("value") for p in o["junit"].iter("property")}
    assert 'data-verdict="passed"' in o["html"]
    assert set(props) == {"sbxcheck.fleet", "sbxcheck.inventory", "sbxcheck.verdict"}  # no interrupt properties
    assert props["sbxcheck.verdict"] == "passed"
    assert _metric(o["metrics"], "sbxcheck_last_run_verdict", verdict="passed") == 1


def test_a_crash_is_interrupted(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_runtest_logfinish(nodeid, location):\n"
        "    if nodeid.endswith('test_stops_here'):\n"
        "        raise RuntimeError('plugin bug')\n"
    )
    result, out = _run(pytester, "pass")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    assert_interrupted_everywhere(result, out, NEVER, "internal error (a crash)")


# ------------------------------------------------------------------ SIGINT / SIGTERM, gate and canary


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    with SimFleet(tmp_path_factory.mktemp("fleet")) as shared:
        yield shared


def _outputs_args(tmp: Path) -> list[str]:
    out = tmp / "report"
    return [f"--sbx-metrics={out / 'metrics.prom'}", f"--sbx-history={out / 'hist'}"]


def _signal_name(sig: int) -> str:
    return "SIGTERM" if sig == signal.SIGTERM else "Ctrl-C"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_signal_mid_gate_is_interrupted_in_every_output(fleet: SimFleet, tmp_path: Path, sig: int) -> None:
    argv = child_argv(
        suites_dir(tmp_path, quick_gate=True), fleet.inventory_path, tmp_path, *_outputs_args(tmp_path)
    )
    env = {
        "SBX_TEST_HOLD_AT": "two",
        "SBX_TEST_MARKER": str(tmp_path / "held"),
        "SBX_TEST_RELEASE": str(tmp_path / "go"),
    }
    proc = start_child(argv, tmp_path, env)
    wait_for(tmp_path / "held", proc)
    out = interrupt(proc, sig)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    report = json.loads((tmp_path / "report" / "results.json").read_text())
    ran = {c["nodeid"] for c in report["checks"] if "not_run" not in c["evidence"]}
    assert len(ran) == len(fleet.run_ids)  # test_quick_one on every run, then the signal
    assert len(report["not_run"]) == 2 * len(fleet.run_ids)
    _assert_outputs(out, tmp_path / "report", report["not_run"], _signal_name(sig))


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_signal_mid_canary_is_interrupted_in_every_output(fleet: SimFleet, tmp_path: Path, sig: int) -> None:
    assert fleet.controlplane is not None
    fleet.controlplane.inject("cp.stuck-pending", "gemini")  # the missions wait: the signal lands mid-wait
    try:
        suites = suites_dir(tmp_path, *CANARY_SUITES)
        argv = child_argv(
            suites,
            fleet.inventory_path,
            tmp_path,
            "-k",
            "gemini-flash",
            *_outputs_args(tmp_path),
            marks="canary",
        )
        proc = start_child(argv, tmp_path)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
            e.state == "created" for e in Ledger(tmp_path / "state").state()
        ):
            time.sleep(0.05)
        out = interrupt(proc, sig)
    finally:
        fleet.controlplane.clear_faults()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    report = json.loads((tmp_path / "report" / "results.json").read_text())
    assert report["not_run"], out[-3000:]
    _assert_outputs(out, tmp_path / "report", report["not_run"], _signal_name(sig))


def _assert_outputs(out: str, report_dir: Path, not_run: list[str], why: str) -> None:
    o = read_outputs(report_dir)
    assert o["results"]["interrupted"] is True and o["results"]["interrupted_reason"] == why
    assert 'data-verdict="interrupted"' in o["html"] and "HEALTHY" not in o["html"]
    assert all(f"<code>{n}</code>" in o["html"] for n in not_run[:20])
    props = {p.get("name"): p.get("value") for p in o["junit"].iter("property")}
    assert props["sbxcheck.verdict"] == "interrupted"
    assert sum(
        int(p.get("value") or 0) for p in o["junit"].iter("property") if p.get("name") == "sbxcheck.not_run"
    ) == len(not_run)
    assert _metric(o["metrics"], "sbxcheck_last_run_verdict", verdict="interrupted") == 1
    assert _metric(o["metrics"], "sbxcheck_last_run_verdict", verdict="passed") == 0
    assert [p.verdict for p in o["history"].runs] == ["interrupted"]
    assert f"verdict: INTERRUPTED — the run was stopped before it finished ({why})" in out, out[-3000:]
