"""The child ``pytest`` session each benchmark runs against an embedded fleet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_suite(
    marker: str, suite: str, inventory: Path, report: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``pytest -m MARKER REPO/SUITE`` on ``inventory``, reports in ``report``; bounded at 600 s."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            marker,
            "-q",
            "-p",
            "no:cacheprovider",
            *extra,
            "--sbx-inventory",
            str(inventory),
            "--sbx-report",
            str(report),
            str(REPO / suite),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
