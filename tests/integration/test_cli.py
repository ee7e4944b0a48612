"""The ``sbxcheck`` command: sim faults / up / down, and report."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.gate_harness import GATE_SUITE

from sbxcheck.sim.faults import FAULTS


def sbxcheck(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sbxcheck.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_sim_faults_lists_every_fault_on_one_line() -> None:
    result = sbxcheck("sim", "faults")
    assert result.returncode == 0
    lines = result.stdout.strip().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(FAULTS)
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)


def test_unknown_fault_is_one_readable_error(tmp_path: Path) -> None:
    result = sbxcheck("sim", "up", "--dir", str(tmp_path), "--fault", "vm.on-fire")
    assert result.returncode == 2
    assert result.stderr.startswith("sbxcheck: unknown fault 'vm.on-fire'; known faults: ")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "sbxcheck.toml").exists()


def test_unknown_control_plane_version_is_one_readable_error(tmp_path: Path) -> None:
    result = sbxcheck("sim", "up", "--dir", str(tmp_path), "--cp-version", "v0.3")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "sbxcheck: unknown control-plane version profile 'v0.3'; known: 1.3, cba9502, current, v0.7"
    )
    assert not (tmp_path / "sbxcheck.toml").exists()


def test_a_pi_version_that_is_not_a_release_is_one_readable_error(tmp_path: Path) -> None:
    result = sbxcheck("sim", "up", "--dir", str(tmp_path), "--pi-version", "latest")
    assert result.returncode == 2
    assert result.stderr == (
        "sbxcheck: pi version 'latest': expected a release such as 0.83.0 (MAJOR.MINOR.PATCH; tested: 0.73.1, "
        "0.83.0, 1.6.0)\n"
    )
    assert not (tmp_path / "sbxcheck.toml").exists()


@pytest.mark.slow
def test_sim_up_runs_the_pi_release_it_is_given(tmp_path: Path) -> None:
    up = sbxcheck("sim", "up", "--dir", str(tmp_path), "--pi-version", "1.6.0", "--runs", "1", timeout=420)
    try:
        assert up.returncode == 0, up.stderr
        inventory = tomllib.loads((tmp_path / "sbxcheck.toml").read_text())
        run_id = inventory["ssh"]["machines"][0].removesuffix(".exe.xyz")
        shim = (tmp_path / "vms" / run_id / "bin" / "pi").read_text(encoding="utf-8")
        assert "pi-earendil-works-1.6.0" in shim and "# real pi 1.6.0 (@earendil-works/pi-coding-agent;" in shim
        assert "the VMs run real pi 1.6.0 (@earendil-works/pi-coding-agent;" in (tmp_path / "sim.log").read_text()
    finally:
        sbxcheck("sim", "down", "--dir", str(tmp_path), timeout=60)


@pytest.mark.slow
def test_sim_up_with_an_older_control_plane(tmp_path: Path) -> None:
    import httpx

    up = sbxcheck("sim", "up", "--dir", str(tmp_path), "--cp-version", "v0.7", "--runs", "1", timeout=420)
    try:
        assert up.returncode == 0, up.stderr
        url = tomllib.loads((tmp_path / "sbxcheck.toml").read_text())["sandboxed"]["url"]
        assert httpx.get(f"{url}/api/health", timeout=10).json()["version"] == "0.7.0"
    finally:
        sbxcheck("sim", "down", "--dir", str(tmp_path), timeout=60)


@pytest.mark.slow
def test_sim_up_gate_down(tmp_path: Path, pytester: pytest.Pytester) -> None:
    fleet_dir = tmp_path / "fleet"
    up = sbxcheck("sim", "up", "--dir", str(fleet_dir), "--fault", "vm.head-mismatch", timeout=480)
    assert up.returncode == 0, up.stderr
    try:
        inventory = fleet_dir / "sbxcheck.toml"
        assert "pytest -m gate --sbx-inventory" in up.stdout
        assert f"(cd {fleet_dir / 'sssf'} && just sbx lifecycle execute alpha-" in up.stdout  # run items' setup
        assert tomllib.loads(inventory.read_text())["sim"]["faults"] == ["vm.head-mismatch"]
        pid = int((fleet_dir / "sim.pid").read_text())
        again = sbxcheck("sim", "up", "--dir", str(fleet_dir))
        assert again.returncode == 1 and "already running" in again.stderr
        (pytester.path / "test_gate.py").write_text(GATE_SUITE.read_text())
        report_dir = pytester.path / "report"
        result = pytester.runpytest_subprocess(
            "-m",
            "gate",
            f"--sbx-inventory={inventory}",  # the printed form: the space form would sway the rootdir
            f"--sbx-report={report_dir}",
            "-k",
            "A_git",
            timeout=300,
        )
        assert result.parseoutcomes() == {
            "failed": 1,
            "passed": 2,
            "deselected": 28,
        }  # 25 + test_vm_hygiene x3
        summary = sbxcheck("report", str(report_dir))
        assert summary.returncode == 1
        assert "1 failed" in summary.stdout and "test_gate_A_git_integrity" in summary.stdout
    finally:
        down = sbxcheck("sim", "down", "--dir", str(fleet_dir))
    assert down.returncode == 0 and "stopped" in down.stdout
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (fleet_dir / "sim.pid").exists()
    assert "nothing running" in sbxcheck("sim", "down", "--dir", str(fleet_dir)).stdout


def test_report_on_a_broken_file_is_readable(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text('{"schema": 1, "checks": [')
    result = sbxcheck("report", str(tmp_path))
    assert result.returncode == 2
    assert "results.json" in result.stderr and "Traceback" not in result.stderr


def _report_dir(tmp_path: Path, passed: int) -> Path:
    """A report of ``passed`` passed items and one failed item whose nodeid sorts after them."""
    from sbxcheck.redact import Redactor
    from sbxcheck.report import assemble_report, write_reports
    from sbxcheck.results import CheckRecord, Classification, InventoryInfo, Outcome

    def record(name: str, outcome: Outcome) -> CheckRecord:
        failed = outcome is Outcome.FAILED
        return CheckRecord(
            nodeid=f"gates/test_gate.py::test_{name}[vm-1]", suite="gate", check=name, target="vm-1",
            outcome=outcome, classification=Classification.CHECK_FAILED if failed else None,
            message="broke" if failed else "fine", evidence={"checked": name},
        )  # fmt: skip

    records = [record(f"a{i:05}", Outcome.PASSED) for i in range(passed)] + [record("zz", Outcome.FAILED)]
    report = assemble_report(
        records, started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:01:00Z",
        inventory=InventoryInfo(source="test", sim=True),
    )  # fmt: skip
    write_reports(report, tmp_path / "rep", Redactor())
    return tmp_path / "rep"


def test_report_lists_failures_before_passed_items(tmp_path: Path) -> None:
    result = sbxcheck("report", str(_report_dir(tmp_path, 3)))
    items = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ")]
    assert items[:2] == ["failed", "passed"], result.stdout


def test_report_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """``sbxcheck report DIR | head -1``: the reader leaves early; no BrokenPipeError, no traceback."""
    directory = _report_dir(tmp_path, 3000)  # far more than a pipe buffer holds
    proc = subprocess.Popen(
        [sys.executable, "-m", "sbxcheck.cli", "report", str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr, stderr
    assert proc.returncode == 141
