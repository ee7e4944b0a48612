"""An interrupted run always writes its report, marked interrupted, so no stale results.json survives it."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

SUITE = """
import pytest

pytestmark = pytest.mark.gate


def test_first():
    pass


def test_interrupted_here():
    raise KeyboardInterrupt


def test_never_reached():
    pass
"""


def _interrupted_over_a_stale_report(
    pytester: pytest.Pytester, suite: str
) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run ``suite`` (it raises KeyboardInterrupt) where a stale results.json waits; return the new one."""
    inventory = pytester.path / "fleet.toml"
    inventory.write_text("[ssh]\n")
    report_dir = pytester.path / "r"
    report_dir.mkdir()
    (report_dir / "results.json").write_text(json.dumps({"schema": 1, "checks": [], "stale": True}))
    pytester.makepyfile(test_suite=suite)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-m", "gate", "--sbx-inventory", str(inventory), "--sbx-report", str(report_dir)
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report: dict[str, Any] = json.loads((report_dir / "results.json").read_text())
    assert "stale" not in report and report["interrupted"] is True
    return result, report


def test_an_interrupted_run_replaces_the_stale_report(pytester: pytest.Pytester) -> None:
    result, report = _interrupted_over_a_stale_report(pytester, SUITE)
    ran = [c["nodeid"] for c in report["checks"] if "not_run" not in c["evidence"]]
    assert ran == ["test_suite.py::test_first"]
    assert report["not_run"] == ["test_suite.py::test_interrupted_here", "test_suite.py::test_never_reached"]
    not_run_items = [c for c in report["checks"] if "not_run" in c["evidence"]]  # each item says why
    assert [c["nodeid"] for c in not_run_items] == report["not_run"]
    assert all(c["outcome"] == "skipped" and c["message"].startswith("not run") for c in not_run_items)
    result.stdout.fnmatch_lines(["*interrupted: 2 selected item(s) did not run*"])
    # the count lines say "not run", never "skipped", for the items the interrupt left out
    result.stdout.fnmatch_lines(["checks: 3 (2 not run, 1 passed)"])
    page = (pytester.path / "r" / "report.html").read_text()
    assert "3 checks: 0 failed, 0 could not tell, 0 skipped, 2 not run, 1 passed" in page
    assert "2 skipped" not in page and "every check passed or was skipped" not in page
    # what did not run, as one command to copy, against the same fleet (terminal and page)
    rerun = f"pytest --sbx-inventory={pytester.path / 'fleet.toml'} {' '.join(report['not_run'])}"
    result.stdout.fnmatch_lines([f"    re-run what did not run: {rerun}"])
    assert f"<strong>Re-run what did not run</strong><div class=\"cmd\"><pre><code>{rerun}</code>" in page
    shown = pytester.run(sys.executable, "-m", "sbxcheck.cli", "report", str(pytester.path / "r"))
    shown.stdout.fnmatch_lines(["checks: 3 (2 not run, 1 passed)"])


def test_an_interrupt_before_any_item_still_marks_the_report(pytester: pytest.Pytester) -> None:
    first_raises = SUITE.replace("def test_first():\n    pass", "def test_first():\n    raise KeyboardInterrupt")
    _result, report = _interrupted_over_a_stale_report(pytester, first_raises)
    assert all("not_run" in c["evidence"] for c in report["checks"])  # nothing ran: only not-run items
    assert len(report["not_run"]) == 3
