"""The child ``pytest`` session each benchmark runs against an embedded fleet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def foreign_plugins() -> list[str]:
    """``-p no:NAME`` for each pytest plugin that ``pip install sbxcheck`` would not have installed.

    The quick start installs sbxcheck and its dependencies (pytest-xdist, allure-pytest, anyio's
    plugin come with them); the test extras and whatever else this machine has (hypothesis,
    pytest-benchmark, ...) also load into every pytest and would be timed as the gate's cost.
    """
    from importlib.metadata import PackageNotFoundError, distribution, distributions

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    brought: set[str] = set()
    pending = ["sbxcheck"]
    while pending:
        name = canonicalize_name(pending.pop())
        if name in brought:
            continue
        brought.add(name)
        try:
            requirements = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for line in requirements:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                pending.append(req.name)
    blocked: list[str] = []
    for dist in distributions():
        if canonicalize_name(dist.metadata["Name"]) not in brought:
            blocked += [
                arg for ep in dist.entry_points if ep.group == "pytest11" for arg in ("-p", f"no:{ep.name}")
            ]
    return blocked


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
