"""Waivers in a pytest run: a waived failure is pytest's xfail and ``waived`` in the reports (exit 0); another
cause, an expired waiver, a pass, a waiver matching nothing and one ending within a day say so; a bad
waiver stops the run before anything runs (exit 4, one line naming the file and the waiver).
"""

from __future__ import annotations

import datetime as dt
import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from support.schemas import validate_junit

import sbxcheck.plugin.fixtures  # imported once here: pytester drops modules a run imports itself
import sbxcheck.report.metrics  # noqa: F401

SUITE = """
import pytest
from sbxcheck.results import CheckResult, Classification

pytestmark = pytest.mark.gate


def test_ok(sbx_verdict):
    sbx_verdict(CheckResult.passed("ok", "vm-1", "fine", {"checked": "something"}))


def test_crash(sbx_verdict):
    sbx_verdict(CheckResult.failed(
        "crash", "vm-1", "failed before any tool call", {"signature": "fn3 is not a function"},
        Classification.INFRASTRUCTURE, cause="adapter-crash:opencode:fn3 is not a function",
    ))


def test_unreachable(sbx_verdict):
    sbx_verdict(CheckResult.errored("unreachable", "vm-2", "connection refused", Classification.INFRA_UNREACHABLE))
"""
QUIET = ("-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark")
REASON = "opencode adapter crash, upstream sandboxed.sh #797"


def _day(days: int) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(days=days)).date().isoformat()


def _waiver(match: str, until: str, **fields: str) -> str:
    extra = "".join(f'{k} = "{v}"\n' for k, v in fields.items())
    return (
        f'[[waivers]]\nmatch = "{match}"\nreason = "{fields.pop("reason", REASON)}"\nuntil = {until}\n{extra}'
    )


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(*QUIET, *args)


def _results(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "sbxcheck-report" / "results.json").read_text())
    return data


def _check(results: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in results["checks"] if c["nodeid"].endswith(f"::{name}"))
    return found


def test_a_waived_failure_is_an_xfail_left_out_of_the_verdict(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("w.toml").write_text(
        _waiver("test_suite.py::test_crash", _day(7), owner="alice", link="https://example.com/797"),
        encoding="utf-8",
    )
    result = _run(
        pytester,
        "-k",
        "ok or crash",
        "--sbx-waivers=w.toml",
        "--junitxml=pytest-junit.xml",
        "--alluredir=allure",
    )
    assert result.ret == 0, result.stdout.str()
    allure = {
        (d := json.loads(p.read_text()))["name"]: d for p in (pytester.path / "allure").glob("*-result.json")
    }
    assert allure["test_crash"]["status"] == "skipped"  # Allure's own reading of an xfail
    assert allure["test_crash"]["statusDetails"]["message"].startswith(
        f"XFAIL waived until {_day(7)}: {REASON}\n"
    )
    result.stdout.fnmatch_lines(
        [
            "verdict: HEALTHY — 1 passed, 1 waived (known failures)",
            "checks: 2 (1 waived, 1 passed)",
            "waived: 1 item(s), known failures left out of the verdict",
            "    WAIVED test_suite.py::test_crash [failed, infrastructure]",
            f"        *w.toml: waiver #1 (match 'test_suite.py::test_crash') until {_day(7)} "
            f"(6 days left, owner alice): {REASON} https://example.com/797",
            "*1 passed*1 xfailed*",
        ]
    )
    crash = _check(_results(pytester), "test_crash")
    assert crash["outcome"] == "waived" and crash["classification"] == "infrastructure"
    assert crash["message"].startswith(
        f"waived until {_day(7)} ({REASON}); failed for infrastructure (cause adapter-crash"
    )
    assert crash["waiver"]["status"] == "waived" and crash["waiver"]["item_outcome"] == "failed"
    assert _results(pytester)["summary"]["waived"] == 1 and _results(pytester)["incidents"] == []
    ours = pytester.path / "sbxcheck-report" / "junit.xml"
    [skipped] = ET.parse(ours).getroot().iter("skipped")
    assert skipped.get("type") == "sbxcheck.waived" and REASON in str(skipped.get("message"))
    [theirs] = ET.parse(pytester.path / "pytest-junit.xml").getroot().iter("skipped")
    assert (
        theirs.get("type") == "pytest.xfail" and theirs.get("message") == f"waived until {_day(7)}: {REASON}"
    )
    page = (pytester.path / "sbxcheck-report" / "report.html").read_text(encoding="utf-8")
    assert 'id="waived"' in page and "owner alice" in page and 'href="https://example.com/797"' in page
    validate_junit(pytester.path / "pytest-junit.xml")
    validate_junit(ours)


def test_a_failure_for_another_cause_stays_failed_naming_both(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("w.toml").write_text(
        _waiver("test_suite.py::test_crash", _day(7), cause="timeout")
    )
    result = _run(pytester, "-k", "crash", "--sbx-waivers=w.toml")
    assert result.ret == 1
    message = _check(_results(pytester), "test_crash")["message"]
    assert (
        message.startswith("not covered by waiver #1 of w.toml: ")
        and "it waives cause timeout, this is infrastructure" in message
    )
    result.stdout.fnmatch_lines(["waiver did not cover its items' failures (another cause): *"])


def test_an_expired_waiver_is_no_error_and_the_failure_names_its_date(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("w.toml").write_text(_waiver("test_suite.py::test_crash", _day(-2)))
    result = _run(pytester, "-k", "crash", "--sbx-waivers=w.toml")
    assert result.ret == 1
    assert (
        f"expired on {_day(-2)}: failed before any tool call"
        in _check(_results(pytester), "test_crash")["message"]
    )
    result.stdout.fnmatch_lines([f"waiver expired on {_day(-2)}: *; its items count again"])


def test_a_passing_waived_item_says_the_waiver_is_no_longer_needed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    waivers = _waiver("test_suite.py::test_ok", _day(30)) + _waiver(
        "gates/test_gate.py::test_gate_A_*", _day(30)
    )
    waivers += _waiver("test_suite.py::test_unreachable", f"{_day(1)}T00:00:00Z")
    pytester.path.joinpath("w.toml").write_text(waivers)
    result = _run(pytester, "--sbx-waivers=w.toml", "-k", "ok or unreachable")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "waiver no longer needed: test_suite.py::test_ok passed (*w.toml: waiver #1 *); remove it",
            "waiver matched no selected item: *w.toml: waiver #2 (match 'gates/test_gate.py::test_gate_A_*'), *",
            "warning: *w.toml: waiver #3 (match 'test_suite.py::test_unreachable') expires within a day *",
            "*1 xfailed, 1 xpassed*",  # pytest's own words for a waived failure and a needless waiver
        ]
    )
    results = _results(pytester)
    ok = _check(results, "test_ok")
    assert ok["outcome"] == "passed" and ok["waiver"]["status"] == "not needed"
    assert "waiver no longer needed" in ok["message"]
    assert [w["status"] for w in results["waivers"]] == ["not needed", "unmatched", "waiving"]
    assert [w["expires_soon"] for w in results["waivers"]] == [False, False, True]
    page = (pytester.path / "sbxcheck-report" / "report.html").read_text(encoding="utf-8")
    assert "Expires within a day" in page and "no longer needed: its items passed" in page
    assert "matched no selected item" in page


@pytest.mark.parametrize(
    ("waivers", "line"),
    [
        (_waiver("test_suite.py::test_crash", "2026-13-01"), "not valid TOML"),
        (
            '[[waivers]]\nmatch = "test_suite.py::test_crash"\nuntil = 2026-12-08\n',
            "*w.toml: waiver #1 (match 'test_suite.py::test_crash'): missing required field 'reason'*",
        ),
        (
            _waiver("test_suite.py::test_crash", _day(200)),
            f"*w.toml: waiver #1 (match 'test_suite.py::test_crash'): until {_day(200)} is 19? days ahead; at most 90*",
        ),
        (
            _waiver("test_suite.py::test_crash", _day(3)) + _waiver("test_suite.py::test_crahs", _day(3)),
            "ERROR: sbxcheck: waivers: *w.toml: waiver #2 (match 'test_suite.py::test_crahs') matches no item of "
            "test_suite.py (closest: test_suite.py::test_crash)",
        ),
    ],
    ids=["not-toml", "no-reason", "too-far-ahead", "matches-no-collected-item"],
)
def test_a_bad_waiver_stops_the_run_in_one_line(pytester: pytest.Pytester, waivers: str, line: str) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("w.toml").write_text(waivers)
    result = _run(
        pytester, "-k", "ok", "--sbx-waivers=w.toml"
    )  # judged before -k deselects: all were collected
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*{line}*" if not line.startswith(("*", "ERROR")) else line])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert not (pytester.path / "sbxcheck-report" / "results.json").exists()


def test_inventory_and_file_add_up_and_one_match_in_both_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("fleet.toml").write_text(_waiver("test_suite.py::test_crash", _day(5)))
    pytester.path.joinpath("w.toml").write_text(_waiver("test_suite.py::test_unreachable", _day(5)))
    result = _run(pytester, "--sbx-inventory=fleet.toml", "--sbx-waivers=w.toml")
    assert result.ret == 0, result.stdout.str()
    waived = {
        c["nodeid"]: c["waiver"]["source"] for c in _results(pytester)["checks"] if c["outcome"] == "waived"
    }
    assert waived == {
        "test_suite.py::test_crash": str(pytester.path / "fleet.toml"),
        "test_suite.py::test_unreachable": str(pytester.path / "w.toml"),
    }
    pytester.path.joinpath("w.toml").write_text(_waiver("test_suite.py::test_crash", _day(6)))
    twice = _run(pytester, "--sbx-inventory=fleet.toml", "--sbx-waivers=w.toml")
    assert twice.ret == 4
    twice.stderr.fnmatch_lines(
        ["*w.toml: waiver #1 (match 'test_suite.py::test_crash'): the same match as *fleet.toml*"]
    )


def test_the_rootdir_waivers_file_is_read_and_a_missing_named_one_is_an_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("sbxcheck-waivers.toml").write_text(_waiver("test_suite.py::test_crash", _day(5)))
    assert _run(pytester, "-k", "crash").ret == 0
    missing = _run(pytester, "-k", "crash", "--sbx-waivers=elsewhere.toml")
    assert missing.ret == 4
    missing.stderr.fnmatch_lines(
        ["*--sbx-waivers: *elsewhere.toml: cannot read the waivers file (No such file*"]
    )


def test_waived_items_are_their_own_metric_and_their_streak_is_told(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("w.toml").write_text(_waiver("test_suite.py::test_crash", _day(5)))
    args = ("--sbx-waivers=w.toml", "--sbx-history=h", "--sbx-metrics=m.prom")
    assert _run(pytester, *args, "-k", "crash").ret == 0
    second = _run(pytester, *args)
    second.stdout.fnmatch_lines(
        [
            "ERROR  test_suite.py::test_unreachable [infra_unreachable; new in this run] connection refused",
            "    WAIVED test_suite.py::test_crash [[]failed, infrastructure; failing for at least 2 runs, since *]",
        ]
    )
    metrics = (pytester.path / "m.prom").read_text(encoding="utf-8")
    assert 'sbxcheck_checks_waived{fleet="simulated",suite="gate"} 1.0' in metrics
    assert (
        'sbxcheck_item_outcome{fleet="simulated",item="gate/crash/vm-1",outcome="waived",suite="gate"} 1.0'
        in metrics
    )
    assert (
        'sbxcheck_waiver_expiry_timestamp_seconds{fleet="simulated",status="waiving",waiver="test_suite.py::test_crash"}'
        in metrics
    )


def test_xdist_workers_apply_the_controllers_waivers_and_judge_the_patterns(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("w.toml").write_text(_waiver("test_suite.py::test_crash", _day(5)))
    result = pytester.runpytest_subprocess(*QUIET, "-n", "2", "--sbx-waivers=w.toml", "-k", "ok or crash")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*1 passed*1 xfailed*"])
    assert _check(_results(pytester), "test_crash")["outcome"] == "waived"
    pytester.path.joinpath("w.toml").write_text(_waiver("test_suite.py::test_crahs", _day(5)))
    bad = pytester.runpytest_subprocess(*QUIET, "-n", "2", "--sbx-waivers=w.toml", "-k", "ok")
    assert bad.ret == 4
    assert "sbxcheck: waivers: " in bad.stdout.str() + bad.stderr.str()
    assert (
        "matches no item of test_suite.py (closest: test_suite.py::test_crash)"
        in bad.stdout.str() + bad.stderr.str()
    )


def test_a_teardown_error_after_a_waived_failure_is_never_waived(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_suite=SUITE
        + """

@pytest.fixture
def leaves_a_mess():
    yield
    raise RuntimeError("could not release the VM")


def test_crash_then_mess(sbx_verdict, leaves_a_mess):
    sbx_verdict(CheckResult.failed("crash", "vm-3", "failed before any tool call", {}, Classification.INFRASTRUCTURE))
"""
    )
    pytester.path.joinpath("w.toml").write_text(_waiver("test_suite.py::test_crash_then_mess", _day(5)))
    result = _run(pytester, "-k", "then_mess", "--sbx-waivers=w.toml")
    assert result.ret == 1
    check = _check(_results(pytester), "test_crash_then_mess")
    assert check["outcome"] == "error" and "could not release the VM" in check["message"]
    result.stdout.fnmatch_lines(["*1 xfailed, 1 error*"])
