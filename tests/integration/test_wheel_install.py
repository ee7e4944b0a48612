"""A wheel of this checkout in a fresh venv, with no checkout in sight: the shipped suites run green.

What an adopting operator does: ``pip install 'sbxcheck[sim]'`` into a clean venv (no system site
packages), ``sbxcheck sim up`` for an inventory, then ``pytest -m gate`` and ``pytest -m canary`` with it
from an empty directory. Slow (a venv and an install, about a minute with a warm pip cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _run(
    argv: list[str | Path], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{argv[:4]} exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


def _operator_env() -> dict[str, str]:
    """This environment without what points into the checkout or shapes the project's own children."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "VIRTUAL_ENV")}
    keep = ("SBXCHECK_CACHE", "SBXCHECK_SIM_LATENCY_SCALE")  # the test bed's pi cache and pace (tests/conftest.py)
    return {k: v for k, v in env.items() if not k.startswith("SBXCHECK_") or k in keep}


def test_a_wheel_in_a_fresh_venv_runs_the_shipped_gate_and_canaries_from_an_empty_directory(
    tmp_path: Path,
) -> None:
    env = _operator_env()
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, REPO], tmp_path, env, 300)
    [wheel] = wheels.glob("sbxcheck-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], tmp_path, env, 120)  # clean: no --system-site-packages
    bin_dir = venv / "bin"
    _run([bin_dir / "python", "-m", "pip", "install", "-q", f"{wheel}[sim]"], tmp_path, env, 600)
    fleet, empty = tmp_path / "fleet", tmp_path / "operator"
    empty.mkdir()
    _run([bin_dir / "sbxcheck", "sim", "up", "--dir", fleet], tmp_path, env, 300)
    try:
        where = _run([bin_dir / "python", "-c", "import sbxcheck; print(sbxcheck.__file__)"], empty, env, 60)
        assert Path(where.stdout.strip()).is_relative_to(venv)  # the installed package, not the checkout
        for marker, suite_dir in (("gate", "gates/"), ("canary", "canaries/")):
            report = tmp_path / f"report-{marker}"
            argv = [bin_dir / "pytest", "-m", marker, f"--sbx-inventory={fleet / 'sbxcheck.toml'}",
                    f"--sbx-report={report}", "-p", "no:cacheprovider", "-q"]  # fmt: skip
            _run(argv, empty, env, 600)
            records = json.loads((report / "results.json").read_text())["checks"]
            assert records and all(r["nodeid"].startswith(suite_dir) for r in records)
            not_passed = [r for r in records if r["outcome"] != "passed"]
            # the simulated fleet keeps one closed run: its record item is the gate's one skip
            assert all(r["outcome"] == "skipped" and "run closed" in r["message"] for r in not_passed), (
                not_passed
            )
            assert len(not_passed) == (1 if marker == "gate" else 0)
    finally:
        subprocess.run(
            [str(bin_dir / "sbxcheck"), "sim", "down", "--dir", str(fleet)],
            env=env, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
