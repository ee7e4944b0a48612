"""Waivers (sbxcheck/waivers.py): the validator, matching, what a waiver does to one result, a run's summary,
and appending one to a file.

Every bad waiver is one line naming the file and the waiver (its number and match); an expired one is
no error, it stops applying.
"""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path

import pytest

from sbxcheck.errors import InventoryError
from sbxcheck.inventory import load_inventory
from sbxcheck.results import CheckRecord, Classification, Outcome
from sbxcheck.waivers import (
    PlacedWaiver,
    Waiver,
    append_waiver,
    decide,
    duplicate_problems,
    glob_match,
    load_waivers_file,
    read_waivers,
    summarise,
)

NOW = dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.UTC)
ROUTE = "canaries/test_routes.py::test_route_reaches_execution[opencode-*]"
GLM = "canaries/test_routes.py::test_route_reaches_execution[opencode-glm]"
GOOD = f'match = "{ROUTE}"\nreason = "opencode adapter crash, upstream #797"\nuntil = 2026-12-08\n'


def _one_line_error(text: str, source: str = "w.toml") -> str:
    with pytest.raises(InventoryError) as caught:
        read_waivers(tomllib.loads(text)["waivers"], source, now=NOW)
    message = caught.value.message
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        (f'match = "{ROUTE}"\nuntil = 2026-12-08', "missing required field 'reason' (why the failure is accepted)"),
        (f'match = "{ROUTE}"\nreason = "r"', "missing required field 'until' (the date it stops applying, at most 90"),
        (f'match = "{ROUTE}"\nreason = " "\nuntil = 2026-12-08', "field 'reason': must not be empty"),
        (GOOD + "expires = 2026-12-09", "unknown field 'expires' (a waiver has match, reason, until, cause, owner"),
        (f'match = "{ROUTE}"\nreason = "r"\nuntil = 2027-06-01', "until 2027-06-01 is 181 days ahead; at most 90"),
        (f'match = "{ROUTE}"\nreason = "r"\nuntil = 20261208', "field 'until': expected a TOML date"),
        (f'match = "{ROUTE}"\nreason = "r"\nuntil = 06:00:00', "field 'until': expected a TOML date"),
        (GOOD + 'cause = "infrastucture"', "field 'cause': 'infrastucture' is no classification"),
        (GOOD + 'link = "javascript:alert(1)"', "field 'link': expected an http:// or https:// URL"),
        (f'match = "{ROUTE}"\nreason = "two\\nlines"\nuntil = 2026-12-08', "field 'reason': must be one line of text"),
        (GOOD + 'link = "https://u:pw@example.com/797"', "field 'link': must not carry a user name or password"),
    ],
    ids=[
        "no-reason", "no-until", "empty-reason", "unknown-field", "until-past-limit", "until-a-number",
        "until-a-time", "cause-no-classification", "link-not-web", "reason-two-lines", "link-with-password",
    ],
)  # fmt: skip
def test_each_bad_waiver_is_one_line_naming_file_and_waiver(table: str, problem: str) -> None:
    text = f"[[waivers]]\n{GOOD}\n[[waivers]]\n{table}\n"
    message = _one_line_error(text)
    assert message.startswith("w.toml: waiver #2 (match '"), message
    assert problem in message, message
    assert "waiver #1" not in message  # the good one is not named


@pytest.mark.parametrize(
    "match",
    [
        "canaries/test_routes.py",
        "test_route_reaches_execution[opencode-*]",
        "canaries/test_routes.py::*[opencode-glm]",
    ],
    ids=["no-test", "no-path", "no-test-name"],
)
def test_a_pattern_that_names_no_test_is_refused(match: str) -> None:
    message = _one_line_error(f'[[waivers]]\nmatch = "{match}"\nreason = "r"\nuntil = 2026-12-08\n')
    assert message == (
        f"w.toml: waiver #1 (match '{match}'): field 'match': must name a test: <path>::test_<name>[<params>] "
        "(`*` and `?` allowed)"
    )


def test_the_same_match_twice_is_refused_naming_both() -> None:
    message = _one_line_error(f"[[waivers]]\n{GOOD}\n[[waivers]]\n{GOOD}")
    assert (
        message == f"w.toml: waiver #2 (match '{ROUTE}'): the same match as #1; keep one waiver per pattern"
    )
    inventory = read_waivers([tomllib.loads(GOOD)], "fleet.toml", now=NOW)
    file = read_waivers([tomllib.loads(GOOD)], "waivers.toml", now=NOW)
    assert duplicate_problems([*inventory, *file]) == [
        f"waivers.toml: waiver #1 (match '{ROUTE}'): the same match as fleet.toml: waiver #1 (match '{ROUTE}'); "
        "keep one waiver per pattern"
    ]


def test_an_expired_waiver_is_no_error() -> None:
    [placed] = read_waivers([tomllib.loads(GOOD.replace("2026-12-08", "2026-11-01"))], "w.toml", now=NOW)
    assert placed.expired(NOW)


def test_a_waivers_file_holds_only_waivers(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text(f"[sandboxed]\nurl = 'x'\n[[waivers]]\n{GOOD}", encoding="utf-8")
    with pytest.raises(
        InventoryError, match=r"w.toml: unknown table or key 'sandboxed' \(a waivers file holds only"
    ):
        load_waivers_file(path, now=NOW)
    path.write_text("[[waivers]\n", encoding="utf-8")
    with pytest.raises(InventoryError, match=r"w.toml: not valid TOML"):
        load_waivers_file(path, now=NOW)
    with pytest.raises(InventoryError, match=r"cannot read the waivers file"):
        load_waivers_file(tmp_path / "absent.toml", now=NOW)


def test_a_bad_waiver_in_the_inventory_names_the_inventory_file(tmp_path: Path) -> None:
    inventory = tmp_path / "fleet.toml"
    good = GOOD.replace(
        "2026-12-08", (dt.date.today() + dt.timedelta(days=7)).isoformat()
    )  # read at the real now
    bad = f"match = '{ROUTE}x'\nuntil = 2026-12-08\n"
    inventory.write_text(f"[[waivers]]\n{good}\n[[waivers]]\n{bad}", encoding="utf-8")
    with pytest.raises(InventoryError) as caught:
        load_inventory(inventory)
    assert caught.value.message.startswith(
        f"{inventory}: waiver #2 (match '{ROUTE}x'): missing required field 'reason"
    )
    inventory.write_text(f"[[waivers]]\n{GOOD.replace('2026-12-08', 'today')}", encoding="utf-8")
    with pytest.raises(InventoryError, match="not valid TOML"):
        load_inventory(inventory)


def test_brackets_are_literal_and_stars_are_any_text() -> None:
    assert glob_match(ROUTE, GLM)
    assert glob_match(ROUTE, "canaries/test_routes.py::test_route_reaches_execution[opencode-minimax]")
    assert not glob_match(ROUTE, "canaries/test_routes.py::test_route_reaches_execution[codex-terra]")
    assert not glob_match(ROUTE, "canaries/test_routes.py::test_route_reaches_execution[o]")  # fnmatch would
    assert glob_match("gates/test_gate.py::test_gate_?_*", "gates/test_gate.py::test_gate_A_git_integrity[r]")


def test_a_date_ends_at_midnight_utc_and_a_local_time_is_utc() -> None:
    [day, local] = read_waivers(
        [
            tomllib.loads(GOOD),
            tomllib.loads(GOOD.replace(ROUTE, GLM).replace("2026-12-08", "2026-12-08T06:30:00")),
        ],
        "w.toml",
        now=NOW,
    )
    assert day.waiver.expires_at == dt.datetime(2026, 12, 8, tzinfo=dt.UTC)
    assert local.waiver.expires_at == dt.datetime(2026, 12, 8, 6, 30, tzinfo=dt.UTC)
    assert not day.expired(dt.datetime(2026, 12, 7, 23, 59, tzinfo=dt.UTC))
    assert day.expired(dt.datetime(2026, 12, 8, tzinfo=dt.UTC))


def _placed(cause: str | None = None, until: str = "2026-12-08", match: str = ROUTE) -> PlacedWaiver:
    table = {"match": match, "reason": "opencode adapter crash", "until": until} | (
        {"cause": cause} if cause else {}
    )
    return PlacedWaiver(Waiver.model_validate(table), "w.toml", 1)


def _record(outcome: Outcome = Outcome.FAILED, classification: Classification | None = Classification.INFRASTRUCTURE,
            cause: str | None = "adapter-crash:opencode:fn3 is not a function") -> CheckRecord:  # fmt: skip
    return CheckRecord(
        nodeid=GLM, suite="canary", check="route_reaches_execution", target="opencode-glm", outcome=outcome,
        classification=classification, message="failed before any tool call", cause=cause,
    )  # fmt: skip


@pytest.mark.parametrize(
    "cause", [None, "infrastructure", "adapter-crash:opencode:*", "infrastructure:adapter-crash:*"]
)
def test_a_failure_for_the_waived_cause_is_waived_and_says_which_cause(cause: str | None) -> None:
    decision = decide([_placed(cause)], [GLM], _record(), NOW)
    assert decision is not None and decision.status == "waived" and decision.outcome is Outcome.WAIVED
    message = decision.message(_record())
    assert message == (
        "waived until 2026-12-08 (opencode adapter crash); failed for infrastructure "
        "(cause adapter-crash:opencode:fn3 is not a function): failed before any tool call"
    )
    assert decision.describe(_record())["status"] == "waived"


@pytest.mark.parametrize("cause", ["timeout", "adapter-crash:codex:*"])
def test_a_failure_for_another_cause_stays_failed_naming_both_causes(cause: str) -> None:
    decision = decide([_placed(cause)], [GLM], _record(), NOW)
    assert decision is not None and decision.status == "not covering" and decision.outcome is None
    assert decision.message(_record()) == (
        f"not covered by waiver #1 of w.toml: it waives cause {cause}, this is "
        "infrastructure (cause adapter-crash:opencode:fn3 is not a function): failed before any tool call"
    )


def test_an_expired_waiver_stops_applying_and_the_failure_names_the_date() -> None:
    decision = decide([_placed(until="2026-11-30")], [GLM], _record(), NOW)
    assert decision is not None and decision.status == "expired" and decision.outcome is None
    assert decision.message(_record()) == (
        "waiver #1 of w.toml expired on 2026-11-30: failed before any tool call"
    )


def test_a_passing_item_says_the_waiver_is_no_longer_needed() -> None:
    passed = _record(Outcome.PASSED, None, None)
    decision = decide([_placed()], [GLM], passed, NOW)
    assert decision is not None and decision.status == "not needed"
    assert "waiver no longer needed" in decision.message(passed)
    assert decision.pytest_reason().startswith("waiver no longer needed: it passed")


def test_no_matching_waiver_decides_nothing_and_a_skip_learns_nothing() -> None:
    assert (
        decide([_placed()], ["canaries/test_routes.py::test_route_dispatched[opencode-glm]"], _record(), NOW)
        is None
    )
    skipped = decide([_placed()], [GLM], _record(Outcome.SKIPPED, None, None), NOW)
    assert (
        skipped is not None
        and skipped.status == "skipped"
        and skipped.message(_record()) == _record().message
    )


def test_the_run_summary_gives_each_waiver_a_status() -> None:
    waived, passing, other, unmatched, expired = (
        PlacedWaiver(_placed(match=m).waiver, "w.toml", i)
        for i, m in enumerate(
            [
                ROUTE,
                "c/test_r.py::test_ok",
                "c/test_r.py::test_other",
                "c/test_r.py::test_gone",
                "c/test_r.py::test_x",
            ],
            start=1,
        )
    )
    expired = PlacedWaiver(_placed(until="2026-11-01", match="c/test_r.py::test_x").waiver, "w.toml", 5)
    waivers = [waived, passing, other, unmatched, expired]
    records = []
    for nodeid, record in ((GLM, _record()), ("c/test_r.py::test_ok", _record(Outcome.PASSED, None, None)),
                           ("c/test_r.py::test_other", _record(Outcome.ERROR, Classification.TIMEOUT, None)),
                           ("c/test_r.py::test_x", _record())):  # fmt: skip
        record = record.model_copy(update={"nodeid": nodeid})
        decision = decide(waivers, [nodeid], record, NOW)
        assert decision is not None
        records.append(record.model_copy(update={"waiver": decision.describe(record)}))
    summary = summarise(waivers, records, NOW)
    assert [s["status"] for s in summary] == ["waiving", "not needed", "waiving", "unmatched", "expired"]
    assert summary[0]["items"] == {"waived": [GLM]} and summary[0]["days_left"] == 6.88
    assert [s["expires_soon"] for s in summary] == [False, False, False, False, False]
    soon = summarise([_placed(until="2026-12-02T01:00:00Z")], [], NOW)
    assert soon[0]["expires_soon"] is True


def test_appending_keeps_the_file_and_validates_first(tmp_path: Path) -> None:
    path = tmp_path / "sbxcheck-waivers.toml"
    original = (
        f"# known failures of the prod fleet\n[[waivers]]\n{GOOD}owner = 'alice'  # on call this week\n"
    )
    path.write_text(original, encoding="utf-8")
    path.chmod(0o640)
    added = Waiver.model_validate(
        {"match": "gates/test_gate.py::test_gate_B_pi_models[alpha-*]", "reason": 'a "quoted" \\ need, ünïcode',
         "until": dt.date(2026, 12, 20), "cause": "check_failed", "link": "https://example.com/1"}
    )  # fmt: skip
    assert append_waiver(path, added, now=NOW) == 2
    text = path.read_text(encoding="utf-8")
    assert text.startswith(original)  # the existing text, comments and all, is kept as it was
    assert (path.stat().st_mode & 0o777) == 0o640
    [first, second] = load_waivers_file(path, now=NOW)
    assert first.waiver.owner == "alice" and second.waiver == added
    with pytest.raises(InventoryError, match=r"waiver #3 .*the same match as #2"):
        append_waiver(path, added, now=NOW)
    assert path.read_text(encoding="utf-8") == text  # refused: not changed
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    fresh = tmp_path / "new" / "w.toml"
    assert append_waiver(fresh, added, now=NOW) == 1 and load_waivers_file(fresh, now=NOW)[0].waiver == added


def test_the_plugin_looks_for_the_same_default_file_the_command_writes() -> None:
    from sbxcheck.plugin.waiving import DEFAULT_FILE
    from sbxcheck.waivers import WAIVERS_FILENAME

    assert DEFAULT_FILE == WAIVERS_FILENAME == "sbxcheck-waivers.toml"
