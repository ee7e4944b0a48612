"""Ctrl-C during the gate fan-out: in-flight checks are cut at once and the report names what did not run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.gate_harness import GATE_SUITE

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # a child session against its own fleet

# the first fanned-out item says so once its setup is done (every VM's checks are in flight by then)
MARK_FANOUT_STARTED = """
import os, pathlib
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if "sbx_gate_result" in item.fixturenames:
        pathlib.Path(os.environ["SBX_TEST_FANOUT_STARTED"]).touch()
    return (yield)
"""


def test_sigint_cancels_in_flight_checks_and_the_report_says_what_did_not_run(tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet", runs=1) as fleet:
        hung = fleet.runs[0].home / "bin" / "pi"  # B and D hang in pi on this VM
        pi_started = tmp_path / "pi-started"  # a line per hung pi: B, D (and the C models) in flight
        hung.write_text(f"#!/bin/bash\necho $$ >> {pi_started}\nsleep 120\n")
        suites = tmp_path / "suites"
        suites.mkdir()
        shutil.copy(GATE_SUITE, suites / GATE_SUITE.name)
        (suites / "conftest.py").write_text(MARK_FANOUT_STARTED)
        marker = tmp_path / "fanout-started"
        report = tmp_path / "report"
        argv = [sys.executable, "-m", "pytest", "-m", "gate", "-p", "no:cacheprovider", "-p", "no:randomly",
                "--sbx-inventory", str(fleet.inventory_path), "--sbx-report", str(report), str(suites)]  # fmt: skip
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env={**os.environ, "SBX_TEST_FANOUT_STARTED": str(marker)},
        )
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and not marker.exists() and proc.poll() is None:
                time.sleep(0.05)
            assert marker.exists(), "the child never started the fan-out"
            while time.monotonic() < deadline and _lines(pi_started) < 2 and proc.poll() is None:
                time.sleep(0.05)  # a loaded machine starts the VM's commands later than the fan-out
            time.sleep(1.0)  # B and D are now in flight (hung in pi)
            interrupted = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=90)
            ended_after = time.monotonic() - interrupted
        finally:
            if proc.poll() is None:
                proc.kill()
        text = out.decode(errors="replace")
    assert proc.returncode == 2, text[-3000:]
    assert ended_after < 60, "the hung commands were waited for instead of cancelled"
    checks = {c["check"]: c for c in json.loads((report / "results.json").read_text())["checks"]}
    assert len(checks) == 8, sorted(checks)  # run_record, A, B, C roster, C (x3 share a name), D, E, hygiene
    for name in ("B_pi_models", "D_cost_reported"):
        assert checks[name]["outcome"] == "skipped", checks[name]
        assert checks[name]["evidence"]["not_run"] == "cancelled while in flight", checks[name]
        assert checks[name]["message"].startswith("not run: the session was interrupted")
    assert "selected item(s) did not run" in text


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0
