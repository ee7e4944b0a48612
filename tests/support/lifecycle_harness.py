"""Child pytest sessions that mount, gate, sweep and get interrupted, against one simulated fleet.

Shared by tests/integration/test_lifecycle.py and tests/reliability/. Every child writes its report
to ``<tmp>/report`` and its ledger to ``<tmp>/state`` (or a state dir the test names, so sessions
can share one). Interrupts land at markers the child or the simulated recipes write, never after
a sleep.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sbxcheck.lifecycle.ledger import Ledger, LedgerEntry
from sbxcheck.sim.fleet import SimFleet
from support.children import check_selection
from support.gate_harness import REPO

LEDGER_SUITE = REPO / "gates" / "test_gate_ledger.py"
CHILD_TIMEOUT_S = 300

# A stand-in for the gate that costs nothing: three gate items per run, each recording a pass. The
# one named by $SBX_TEST_HOLD_AT touches $SBX_TEST_MARKER and waits for $SBX_TEST_RELEASE (bounded).
QUICK_GATE = """
import os, pathlib, time
import pytest
from sbxcheck.results import CheckResult

pytestmark = pytest.mark.gate


def _step(name, run, verdict):
    if os.environ.get("SBX_TEST_HOLD_AT") == name:
        pathlib.Path(os.environ["SBX_TEST_MARKER"]).touch()
        release = pathlib.Path(os.environ["SBX_TEST_RELEASE"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not release.exists():
            time.sleep(0.05)
    verdict(CheckResult.passed("quick_" + name, run.run_id, "step " + name, {"step": name}))


def test_quick_one(sbx_gate_run, sbx_verdict):
    _step("one", sbx_gate_run, sbx_verdict)


def test_quick_two(sbx_gate_run, sbx_verdict):
    _step("two", sbx_gate_run, sbx_verdict)


def test_quick_three(sbx_gate_run, sbx_verdict):
    _step("three", sbx_gate_run, sbx_verdict)
"""


def child_argv(suites: Path, inventory: Path, tmp: Path, *args: str, marks: str = "gate") -> list[str]:
    """``pytest -m <marks>`` on ``suites``; the report in ``tmp/report``, the ledger in ``tmp/state``
    unless ``args`` name another ``--sbx-state``."""
    check_selection(args, tmp)
    state = [] if "--sbx-state" in args else ["--sbx-state", str(tmp / "state")]
    return [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        marks,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-q",
        str(suites),
        "--sbx-inventory",
        str(inventory),
        "--sbx-report",
        str(tmp / "report"),
        *state,
        *args,
    ]


def suites_dir(tmp: Path, *files: Path, quick_gate: bool = False) -> Path:
    """``tmp/suites`` holding copies of ``files`` (and the quick gate)."""
    suites = tmp / "suites"
    suites.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy(path, suites / path.name)
    if quick_gate:
        (suites / "test_quick_gate.py").write_text(QUICK_GATE)
    return suites


def read_report(tmp: Path) -> dict[str, Any]:
    path = tmp / "report" / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def run_child(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a child pytest to the end (bounded); its exit status and output."""
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return proc.returncode, proc.stdout[-6000:] + proc.stderr[-3000:]


def start_child(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def wait_for(marker: Path, proc: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    """Wait (bounded) until ``marker`` exists; fail if the child ends first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not marker.exists() and proc.poll() is None:
        time.sleep(0.05)
    if not marker.exists():
        out = proc.communicate(timeout=30)[0] if proc.poll() is not None else b""
        raise AssertionError(f"the child never reached {marker.name}: {out.decode(errors='replace')[-3000:]}")


def interrupt(proc: subprocess.Popen[bytes], sig: int, times: int = 1) -> str:
    """Send ``sig`` ``times`` times (the second after the child announced the first), return its output."""
    try:
        for n in range(times):
            proc.send_signal(sig)
            if n + 1 < times:
                time.sleep(0.3)  # let the first one be noted before the second arrives
        out, _ = proc.communicate(timeout=CHILD_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    return out.decode(errors="replace")


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child (its recipes, in their own process groups, are not signalled)."""
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)


def wait_until_no_process(needle: str, timeout_s: float = 60) -> None:
    """Wait (bounded) until no process has ``needle`` in its command line (a detached recipe ended)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = False
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or proc.name == str(os.getpid()):
                continue
            try:
                if needle.encode() in (proc / "cmdline").read_bytes():
                    busy = True
                    break
            except OSError:
                continue
        if not busy:
            return
        time.sleep(0.1)
    raise AssertionError(f"a process naming {needle} still runs after {timeout_s}s")


def teardown_by_hand(fleet: SimFleet, run_id: str) -> None:
    """What the operator types to release a kept run."""
    subprocess.run(
        ["just", "sbx", "lifecycle", "teardown", run_id],
        cwd=fleet.checkout,
        capture_output=True,
        timeout=300,
        check=True,
    )


def open_entries(state: Path) -> list[LedgerEntry]:
    return Ledger(state).open_entries()


def sweep(fleet: SimFleet, tmp: Path, state: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """A ``--sbx-sweep`` session running only the ledger items (gate and canary) on ``state``."""
    work = tmp / f"sweep-{time.monotonic_ns()}"
    work.mkdir()
    argv = child_argv(
        suites_dir(work, LEDGER_SUITE),
        fleet.inventory_path,
        work,
        "--sbx-sweep",
        "--sbx-state",
        str(state),
        *args,
        marks="gate or canary",
    )
    ret, out = run_child(argv, work)
    return ret, read_report(work), out
