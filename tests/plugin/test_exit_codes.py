"""Exit codes (docs/reports-and-alerting.md): sbxcheck keeps pytest's, and says "could not tell" in the reports.

0 all passed (or skipped) · 1 a check failed or could not tell · 2 interrupted · 4 usage or
configuration error · 5 nothing collected. Also: --sbx-history / ini sbx_history keep the runs, a
corrupt entry is skipped with a warning, --sbx-metrics writes the verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sbxcheck.plugin.fixtures  # imported once here: pytester drops modules a run imports itself
import sbxcheck.report.metrics  # noqa: F401

SUITE = """
import pytest
from sbxcheck.results import CheckResult, Classification

pytestmark = pytest.mark.gate


def test_ok(sbx_verdict):
    sbx_verdict(CheckResult.passed("ok", "vm-1", "fine", {"checked": "something"}))


def test_wrong(sbx_verdict):
    sbx_verdict(CheckResult.failed("wrong", "vm-1", "the tree is dirty", {"porcelain_lines": 2}))


def test_unreachable(sbx_verdict):
    sbx_verdict(CheckResult.errored("unreachable", "vm-2", "connection refused", Classification.INFRA_UNREACHABLE))


def test_interrupt():
    raise KeyboardInterrupt
"""


# hypothesis' plugin imports (and assert-rewrites) all of hypothesis again in every in-process run
QUIET = ("-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In process: a child interpreter per run costs seconds; the plugin keeps its state in config.stash."""
    return pytester.runpytest_inprocess(*QUIET, *args)


def _results(pytester: pytest.Pytester) -> dict[str, object]:
    data: dict[str, object] = json.loads((pytester.path / "sbxcheck-report" / "results.json").read_text())
    return data


def test_exit_codes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)

    assert _run(pytester, "-k", "ok").ret == 0  # all passed
    assert _run(pytester, "-k", "ok or wrong").ret == 1  # a failure
    errors_only = _run(pytester, "-k", "unreachable", "--sbx-metrics", "m.prom")
    assert errors_only.ret == 1  # could not tell: pytest's 1, the verdict says which
    results = _results(pytester)
    assert results["summary"] == {"passed": 0, "failed": 0, "error": 1, "skipped": 0, "waived": 0, "total": 1}
    assert all(c["duration_s"] > 0 for c in results["checks"])  # type: ignore[attr-defined]  # the item's own time
    assert (
        'sbxcheck_last_run_verdict{fleet="simulated",suite="gate",verdict="error"} 1.0'
        in (pytester.path / "m.prom").read_text()
    )
    interrupted = pytester.inline_run(*QUIET, "-k", "interrupt", no_reraise_ctrlc=True)
    assert interrupted.ret == 2  # interrupted
    assert _run(pytester, "--sbx-teardown", "sometimes").ret == 4  # usage error
    bad_keep = _run(pytester, "-k", "ok", "--sbx-history", "h", "--sbx-history-keep", "none")
    assert bad_keep.ret == 4
    bad_keep.stderr.fnmatch_lines(
        ["*--sbx-history-keep: expected a whole number of runs, at least 1; got 'none'*"]
    )
    assert _run(pytester, "-k", "no_such_item").ret == 5  # nothing collected


def test_history_from_ini_and_cli_with_a_corrupt_entry(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\nsbx_history = runs-kept\nsbx_history_keep = 2\n")
    for _ in range(3):
        assert _run(pytester, "-k", "ok or wrong").ret == 1
    kept = sorted((pytester.path / "runs-kept").glob("run-*.json"))
    assert len(kept) == 2  # bounded by the ini value
    kept[1].write_text("{ truncated", encoding="utf-8")  # the newest: the next run keeps it
    cli_dir = tmp_path / "cli-history"
    result = _run(pytester, "-k", "ok or wrong", "--sbx-history", str(cli_dir), "--sbx-history-keep", "5")
    assert result.ret == 1 and len(list(cli_dir.glob("run-*.json"))) == 1  # the CLI wins over the ini
    result = _run(pytester, "-k", "ok or wrong")
    result.stdout.fnmatch_lines(["*warning: history entry skipped: *run-*.json: not valid JSON*"])
    page = (pytester.path / "sbxcheck-report" / "report.html").read_text(encoding="utf-8")
    assert "history entry skipped" in page and f"{kept[1].name}: not valid JSON" in page


def test_a_fault_target_the_embedded_fleet_lacks_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """The embedded fleet's run ids are known before it starts: a target naming none of them is exit 4."""
    pytester.makepyfile(test_suite=SUITE)
    stale = _run(pytester, "-k", "ok", "--sbx-sim-fault", "openrouter.model-down@bravo-20261130-xxxxxx")
    assert stale.ret == 4
    stale.stderr.fnmatch_lines(["*no simulated run 'bravo-20261130-xxxxxx'; name a run by its task (alpha, bravo, *"])
    assert _run(pytester, "-k", "ok", "--sbx-sim-fault", "openrouter.model-down@bravo").ret == 0  # by task
    assert _run(pytester, "-k", "ok", "--sbx-sim-fault", "cp.backend-crash@opencode").ret == 0  # not a run fault
