"""Issue 20: output paths are checked before the run, and a report dir never keeps an older run's files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sbxcheck.plugin.fixtures  # noqa: F401  imported once here: pytester drops modules a run imports itself
from sbxcheck.plugin.outputs import output_path_problem, remove_stale_reports

REPO = Path(__file__).resolve().parents[2]

SUITE = """
import os
import pytest
from sbxcheck.results import CheckResult

pytestmark = pytest.mark.gate


def test_ok(sbx_verdict):
    sbx_verdict(CheckResult.passed("ok", "vm-1", "fine", {"checked": "something"}))


def test_crash(sbx_verdict):
    if os.environ.get("SBX_TEST_CRASH"):
        os._exit(3)  # the process dies mid-run: no report is written
    sbx_verdict(CheckResult.passed("crash", "vm-1", "did not crash", {"checked": "something"}))
"""
QUIET = ("-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark")


@pytest.mark.parametrize(
    ("option", "make", "expected"),
    [
        ("--sbx-report", "file", "is a regular file, expected a directory"),
        ("--sbx-history", "file", "is a regular file, expected a directory"),
        ("--sbx-metrics", "dir", "is a directory, expected a regular file"),
        ("--sbx-report", "link", "is a symlink (to "),
        ("--alluredir", "file", "is a regular file, expected a directory"),  # before allure's own configure
    ],
)
def test_a_wrong_output_path_is_one_usage_line_and_nothing_runs(
    pytester: pytest.Pytester, option: str, make: str, expected: str
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    target = pytester.path / "out"
    if make == "file":
        target.write_text("not a directory\n")
    elif make == "dir":
        target.mkdir()
    else:
        (pytester.path / "elsewhere").mkdir()
        target.symlink_to(pytester.path / "elsewhere")
    result = pytester.runpytest_inprocess(*QUIET, option, str(target))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: {option} {target}: {expected}"), errors
    assert not (pytester.path / "sbxcheck-report").exists()  # nothing ran, nothing was written


def test_output_path_checks(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    problem = output_path_problem(tmp_path / "file" / "history", "dir", "--sbx-history")
    assert problem is not None and "is not a directory" in problem
    assert output_path_problem(tmp_path / "new" / "deeper", "dir", "--sbx-history") is None
    assert "FIFO" in (output_path_problem(_fifo(), "file", "--sbx-metrics") or "")


def test_old_reports_are_never_removed_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "results.json").write_text("{}\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert remove_stale_reports(tmp_path / "link") == []
    assert (tmp_path / "real" / "results.json").exists()
    assert remove_stale_reports(tmp_path / "real") == [tmp_path / "real" / "results.json"]


def _fifo() -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "fifo"
    os.mkfifo(path)
    return path


def test_a_crashed_run_after_a_passing_one_leaves_no_green_report(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    argv = [sys.executable, "-m", "pytest", *QUIET, "-q", str(tmp_path / "test_suite.py"), "--sbx-report", "rep"]
    first = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert first.returncode == 0, first.stdout[-2000:]
    assert {p.name for p in (tmp_path / "rep").iterdir()} >= {"results.json", "junit.xml", "report.html"}
    crashed = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SBX_TEST_CRASH": "1"},
    )  # fmt: skip
    assert crashed.returncode == 3
    left = {p.name for p in (tmp_path / "rep").iterdir()}
    assert not left & {"results.json", "junit.xml", "report.html"}, left


def test_a_password_in_a_configured_url_reaches_no_output(tmp_path: Path) -> None:
    """Issue 20: ``http://user:PASSWORD@host`` is refused at load; the password is in no output at all."""
    password = "Hunter2-Passw0rd-xyz"
    (tmp_path / "inv.toml").write_text(
        f'[sandboxed]\nurl = "http://admin:{password}@127.0.0.1:9/"\npassword_env = "SBX_TEST_PW"\n'
        f'[sssf]\ncheckout = "."\nopenrouter_base_url = "https://u:{password}@127.0.0.1:9/api/v1"\n'
    )
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", *QUIET, "-q", str(REPO / "canaries" / "test_fleet.py"), "-m", "canary",
            "--sbx-inventory", "inv.toml", "--sbx-report", "rep", "--sbx-history", "hist",
            "--alluredir", "allure",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "SBX_TEST_PW": "not-the-url-one"},
    )  # fmt: skip
    # issue 18: an invalid inventory is one usage error before collection (exit 4), on stderr
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "must not carry a user name or password" in proc.stderr
    outputs = [proc.stdout, proc.stderr] + [
        p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.name != "inv.toml"
    ]
    assert sum(text.count(password) for text in outputs) == 0


def _file_size_limit(limit: int) -> None:
    """In the child: every regular-file write past ``limit`` bytes fails (EFBIG), like a disk that fills up."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize(("failing", "expected"), [("", 3), ("1", 1)])
def test_a_disk_that_refuses_the_report_is_one_line_and_no_partial_set(
    tmp_path: Path, failing: str, expected: int
) -> None:
    """results.json and junit.xml fit under the limit and report.html does not: no file of the set is
    left, one line on stderr names them, the summary still prints, and a green run is not exit 0."""
    suite = SUITE + (
        "\n\ndef test_broken(sbx_verdict):\n"
        "    if os.environ.get('SBX_TEST_FAIL'):\n"
        "        sbx_verdict(CheckResult.failed('broken', 'vm-1', 'it broke', {'checked': 'x'}))\n"
        "    sbx_verdict(CheckResult.passed('broken', 'vm-1', 'fine', {'checked': 'x'}))\n"
    )
    (tmp_path / "test_suite.py").write_text(suite)
    argv = [sys.executable, "-m", "pytest", *QUIET, "-q", "test_suite.py", "--sbx-report", "rep"]
    proc = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SBX_TEST_FAIL": failing}, preexec_fn=lambda: _file_size_limit(6000),
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output and "INTERNALERROR" not in output, output[-3000:]
    assert proc.returncode == expected, output[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("sbxcheck: "), errors
    assert all(name in errors[0] for name in ("results.json", "junit.xml", "report.html")), errors
    assert "File too large" in errors[0], errors
    assert not list((tmp_path / "rep").iterdir())
    assert "verdict: " in proc.stdout and "report: FAILED: " in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize(
    "wrong",
    [
        ("--sbx-history-keep", "0"),  # a bad setting: the report dir is read on its own
        ("--sbx-metrics", "out-dir"),  # a wrong output path
        ("--sbx-sim-fault", "no.such-fault"),  # a configuration the preflight refuses
        ("no_such_test_file.py",),  # pytest's own usage error, after configure
    ],
    ids=["setting", "output", "preflight", "pytest"],
)
def test_a_usage_error_leaves_no_green_report_of_an_earlier_run(
    pytester: pytest.Pytester, wrong: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    (pytester.path / "out-dir").mkdir()
    first = pytester.runpytest_inprocess(*QUIET, "test_suite.py", "--sbx-report", "rep")
    assert first.ret == pytest.ExitCode.OK
    assert {p.name for p in (pytester.path / "rep").iterdir()} >= {"results.json", "junit.xml", "report.html"}
    (pytester.path / "rep" / "notes.txt").write_text("not sbxcheck's\n")
    result = pytester.runpytest_inprocess(*QUIET, "test_suite.py", "--sbx-report", "rep", *wrong)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
    assert sorted(p.name for p in (pytester.path / "rep").iterdir()) == ["notes.txt"]
