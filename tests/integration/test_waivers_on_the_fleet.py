"""Waivers end to end on the embedded fleet: the opencode adapter crash (``cp.backend-crash``) waived until
next week leaves the nightly canary green, while an expired waiver, a waiver of another cause and a waiver
on a passing route each say what they are.

Each child runs the shipped canary suite against its own embedded fleet, ``-k`` narrowed to the route
items at hand (cheap: two or one missions).
"""

from __future__ import annotations

import datetime as dt
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from support.children import check_selection
from support.schemas import validate_junit

pytestmark = pytest.mark.slow  # end-to-end: child sessions against the embedded fleet

CRASHED = "canaries/test_routes.py::test_route_reaches_execution[opencode-*]"
ITEMS = {
    "canaries/test_routes.py::test_route_reaches_execution[opencode-glm]",
    "canaries/test_routes.py::test_route_reaches_execution[opencode-minimax]",
}
REASON = "opencode adapter crash (fn3 is not a function), upstream sandboxed.sh #797"


def _day(days: int) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(days=days)).date().isoformat()


def _waivers(path: Path, match: str, until: str, cause: str | None = None) -> str:
    cause_line = f'cause = "{cause}"\n' if cause else ""
    path.write_text(
        f'[[waivers]]\nmatch = "{match}"\nreason = "{REASON}"\nuntil = {until}\nowner = "oncall"\n'
        f'link = "https://github.com/Th0rgal/sandboxed.sh/issues/797"\n{cause_line}',
        encoding="utf-8",
    )
    return f"--sbx-waivers={path}"


def _canary(
    pytester: pytest.Pytester, name: str, *args: str
) -> tuple[pytest.RunResult, dict[str, Any], Path]:
    """The shipped canary suite on an embedded fleet with the opencode adapter crash, in a child pytest."""
    selection = ("-k", "reaches_execution and opencode")
    check_selection(selection, pytester.path)
    report = pytester.path / name
    result = pytester.runpytest_subprocess(
        "-m", "canary", "-p", "no:cacheprovider", "-p", "no:randomly", "--sbx-shipped-suites=yes",
        "--sbx-sim-fault", "cp.backend-crash", *selection, f"--sbx-report={report}",
        f"--junitxml={report}/pytest-junit.xml", *args,
        timeout=600,
    )  # fmt: skip
    return result, json.loads((report / "results.json").read_text(encoding="utf-8")), report


def test_a_known_crash_waived_until_next_week_leaves_the_canary_green(pytester: pytest.Pytester) -> None:
    plain, results, _ = _canary(pytester, "plain")
    assert plain.ret == 1
    assert {c["nodeid"] for c in results["checks"] if c["outcome"] == "failed"} == ITEMS

    waived, results, report = _canary(
        pytester, "waived", _waivers(pytester.path / "w.toml", CRASHED, _day(7))
    )
    assert waived.ret == 0, waived.stdout.str()[-3000:]
    assert results["summary"]["failed"] == 0 and results["summary"]["waived"] == 2
    assert {c["nodeid"] for c in results["checks"] if c["outcome"] == "waived"} == ITEMS
    for check in results["checks"]:  # the message says which cause each had (the waiver names none)
        assert check["message"].startswith(f"waived until {_day(7)} ({REASON}); failed for ")
        assert check["waiver"]["status"] == "waived" and check["waiver"]["owner"] == "oncall"
    assert results["waivers"][0]["status"] == "waiving"
    waived.stdout.fnmatch_lines(
        ["verdict: HEALTHY — 0 passed, 2 waived (known failures)", "waived: 2 item(s), *", "*2 xfailed*"]
    )
    for junit, kind in (
        (report / "junit.xml", "sbxcheck.waived"),
        (report / "pytest-junit.xml", "pytest.xfail"),
    ):
        skipped = list(ET.parse(junit).getroot().iter("skipped"))
        assert [s.get("type") for s in skipped] == [kind, kind]
        assert all(REASON in str(s.get("message")) for s in skipped)
        assert not list(ET.parse(junit).getroot().iter("failure"))
        validate_junit(junit)


def test_an_expired_or_other_cause_waiver_lets_the_crash_fail(pytester: pytest.Pytester) -> None:
    expired, results, _ = _canary(pytester, "expired", _waivers(pytester.path / "w.toml", CRASHED, _day(-1)))
    assert expired.ret == 1  # the run went on: an expired waiver is no usage error
    failed = [c for c in results["checks"] if c["outcome"] == "failed"]
    assert {c["nodeid"] for c in failed} == ITEMS
    assert all(c["message"].startswith(f"waiver #1 of w.toml expired on {_day(-1)}: ") for c in failed)
    expired.stdout.fnmatch_lines([f"waiver expired on {_day(-1)}: *"])

    other, results, _ = _canary(
        pytester, "other", _waivers(pytester.path / "w.toml", CRASHED, _day(7), "timeout")
    )
    assert other.ret == 1
    failed = [c for c in results["checks"] if c["outcome"] == "failed"]
    assert {c["nodeid"] for c in failed} == ITEMS
    assert all(
        "not covered by waiver #1 of w.toml" in c["message"] and "it waives cause timeout" in c["message"]
        for c in failed
    )


def test_a_waiver_on_a_passing_route_says_it_is_no_longer_needed(pytester: pytest.Pytester) -> None:
    """Run as ``--pyargs sbxcheck.suites.canaries`` (node ids ``test_routes.py::…``): the checkout-style
    pattern still matches."""
    selection = ("-k", "reaches_execution and gemini")
    check_selection(selection, pytester.path)
    flag = _waivers(
        pytester.path / "w.toml",
        "canaries/test_routes.py::test_route_reaches_execution[gemini-flash]",
        _day(3),
    )
    result = pytester.runpytest_subprocess(
        "--pyargs", "sbxcheck.suites.canaries", "-m", "canary", "-p", "no:cacheprovider", "-p", "no:randomly",
        "--sbx-sim", *selection, flag, timeout=600,
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(
        [
            "waiver no longer needed: test_routes.py::test_route_reaches_execution[[]gemini-flash] passed *",
            "*1 xpassed*",
        ]
    )
    results = json.loads((pytester.path / "sbxcheck-report" / "results.json").read_text(encoding="utf-8"))
    [check] = results["checks"]
    assert check["outcome"] == "passed" and check["waiver"]["status"] == "not needed"
    assert "waiver no longer needed" in check["message"] and results["waivers"][0]["status"] == "not needed"
