"""A canary run on the embedded fleet ends at pytest's last line: the simulator's servers stop quietly.

The control plane's live event stream is an endless response; stopping its server while a stream was
open made uvicorn wait out its graceful-shutdown timeout, cancel the response and log a starlette/anyio
CancelledError traceback after pytest's summary.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [("--sbx-sim-fault", "cp.backend-crash"), ("--sbx-history={tmp}/history",), ("--sbx-max-spend", "1")],
    ids=["backend-crash", "history", "max-spend"],
)
def test_a_canary_run_of_the_readme_ends_without_a_traceback(tmp_path: Path, options: tuple[str, ...]) -> None:
    argv = [
        sys.executable, "-m", "pytest", "-m", "canary", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
        f"--sbx-report={tmp_path / 'report'}", *(o.format(tmp=tmp_path) for o in options),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), output[-3000:]
    assert "Traceback" not in output and "CancelledError" not in output, output[-3000:]
    assert re.search(r" in [\d.]+s", proc.stdout.rstrip().splitlines()[-1]), output[-3000:]  # pytest's last line
