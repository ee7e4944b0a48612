"""``sbxcheck waive``: appends a validated waiver to the waivers file, keeping its text; ``sbxcheck report``
and ``sbxcheck history`` show what the waivers did."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from sbxcheck.cli import main as cli_main
from sbxcheck.redact import Redactor
from sbxcheck.report import assemble_report
from sbxcheck.report.writers import write_artifacts
from sbxcheck.results import CheckRecord, Classification, InventoryInfo, Outcome
from sbxcheck.waivers import load_waivers_file

ROUTE = "canaries/test_routes.py::test_route_reaches_execution[opencode-*]"


def _in_days(days: int) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(days=days)).date().isoformat()


def test_waive_appends_to_the_default_file_and_says_how_a_run_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SBXCHECK_WAIVERS", raising=False)
    existing = "# prod's known failures\n"
    (tmp_path / "sbxcheck-waivers.toml").write_text(existing, encoding="utf-8")
    code = cli_main(
        ["waive", ROUTE, "--reason", "opencode adapter crash, upstream #797", "--until", "+7d", "--owner", "alice",
         "--cause", "adapter-crash:opencode:*", "--link", "https://github.com/Th0rgal/sandboxed.sh/issues/797"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert f"added waiver #1 to sbxcheck-waivers.toml: {ROUTE} until {_in_days(7)} (6 days left)" in out.replace(
        "(7 days left)", "(6 days left)"  # run at 00:00:00 UTC sharp, the date is still 7 whole days away
    )
    assert (
        f"--sbx-waivers={tmp_path / 'sbxcheck-waivers.toml'} (or as sbxcheck-waivers.toml in pytest's rootdir)"
        in out
    )
    text = (tmp_path / "sbxcheck-waivers.toml").read_text(encoding="utf-8")
    assert text.startswith(existing)
    [placed] = load_waivers_file(tmp_path / "sbxcheck-waivers.toml", now=dt.datetime.now(dt.UTC))
    assert (placed.waiver.owner, placed.waiver.cause, str(placed.waiver.until)) == (
        "alice", "adapter-crash:opencode:*", _in_days(7)
    )  # fmt: skip


def test_waive_uses_the_setting_and_refuses_a_bad_waiver_without_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SBXCHECK_WAIVERS", str(tmp_path / "team" / "waivers.toml"))
    assert cli_main(["waive", ROUTE, "--reason", "crash", "--until", _in_days(3)]) == 0
    written = tmp_path / "team" / "waivers.toml"
    before = written.read_text(encoding="utf-8")
    for args, problem in (
        ([ROUTE, "--reason", "again", "--until", _in_days(3)], "waiver #2 (match '"),
        (
            ["canaries/test_routes.py", "--reason", "r", "--until", _in_days(3)],
            "field 'match': must name a test",
        ),
        ([ROUTE + "x", "--reason", "r", "--until", _in_days(200)], "is 19"),
        ([ROUTE + "x", "--reason", "r", "--until", "next week"], "field 'until': expected a date"),
        (
            [ROUTE + "x", "--reason", "r", "--until", "+3d", "--cause", "crash"],
            "'crash' is no classification",
        ),
    ):
        assert cli_main(["waive", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("sbxcheck waive: ") and problem in err and "not changed" in err
        assert err.count("\n") == 1  # one line
    assert written.read_text(encoding="utf-8") == before


def test_report_lists_waived_items_and_needless_waivers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    waiver = {"match": ROUTE, "reason": "upstream #797", "until": "2026-12-11", "source": "w.toml", "index": 1,
              "days_left": 3.2, "owner": "alice"}  # fmt: skip
    records = [
        CheckRecord(
            nodeid=ROUTE.replace("*", "glm"), suite="canary", check="route_reaches_execution", target="opencode-glm",
            outcome=Outcome.WAIVED, classification=Classification.INFRASTRUCTURE, message="waived until …",
            waiver={**waiver, "status": "waived", "item_outcome": "failed"},
        ),
        CheckRecord(
            nodeid=ROUTE.replace("*", "minimax"), suite="canary", check="route_reaches_execution",
            target="opencode-minimax", outcome=Outcome.PASSED, message="reached execution",
            waiver={**waiver, "status": "not needed", "item_outcome": "passed"},
        ),
    ]  # fmt: skip
    report = assemble_report(
        records, started_at="2026-12-08T01:00:00Z", finished_at="2026-12-08T01:05:00Z",
        inventory=InventoryInfo(source="/srv/prod.toml", sim=False),
    )  # fmt: skip
    summary = {
        **waiver,
        "status": "waiving",
        "items": {"waived": [records[0].nodeid], "not needed": [records[1].nodeid]},
    }
    write_artifacts(report.model_copy(update={"waivers": [summary]}), tmp_path, Redactor())
    assert cli_main(["report", str(tmp_path)]) == 0  # a waived failure is no failure
    out = capsys.readouterr().out
    assert f"  waived  infrastructure     {records[0].nodeid}" in out
    assert f"    WAIVED {records[0].nodeid} [failed, infrastructure]" in out
    assert (
        "w.toml: waiver #1 (match '" + ROUTE + "') until 2026-12-11 (3 days left, owner alice): upstream #797"
        in out
    )
    assert f"waiver no longer needed: {records[1].nodeid} passed (w.toml: waiver #1" in out
