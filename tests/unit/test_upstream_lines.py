"""The lines the upstream SSSF recipes print, as they print them, each read right.

The integration test (tests/integration/test_real_recipes.py) gets these lines by running the
real recipes; these pin the reading without a fleet.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from sbxcheck.checks.run import finish_outcome, judge_run_alive
from sbxcheck.lifecycle.quirks import explain_quirk
from sbxcheck.lifecycle.recipes import parse_harvest_output, parse_teardown_output, recipe_path
from sbxcheck.lifecycle.reconcile import RecordFact, resolve_mount
from sbxcheck.results import Outcome
from tests.unit.test_ledger import _mount_entry
from tests.unit.test_run_checks import TARGET, probe_output, ran

RID = "demo-20261204-a1b2c3"
# the SDLC's closing panel as rich prints it into run.log (no tty: plain box characters)
PANEL = [
    "╭──────────────── ADW complete ─────────────────╮",
    "│  status   {status}                              │",
    "│  phases   1/3 passed                          │",
    "│  tokens   12,345                              │",
    "│  cost     $0.0123                             │",
    "╰───────────────────────────────────────────────╯",
]


def _panel(status: str) -> list[str]:
    return [line.format(status=status) for line in PANEL]


def test_no_key_teardown_is_a_success() -> None:
    out = (
        f"── teardown {RID}\n   vm:  <none> (gone or never created)\n"
        "   spend: n/a — no key was ever minted for this run\n   artifacts: skipped (no vm)\n"
        "   harvest: skipped (no vm)\n   key: none minted for this run — nothing to revoke\n"
        "   vm: nothing to destroy\n   record closed\n"
        f"✓ teardown complete for {RID} (no key was ever minted)\n"
    )
    got = parse_teardown_output(out, run_id=RID)
    assert got.ok and got.run_id == RID, got
    assert (got.key, got.gate) == ("never_minted", "not_needed")


def test_minted_key_teardown_still_reads_revoked() -> None:
    out = (
        "   key: revoked (abc)\n✓ gate: key absent from https://openrouter.ai/api/v1/keys\n"
        f"✓ teardown complete for {RID}\n"
    )
    got = parse_teardown_output(out, run_id=RID)
    assert got.ok and (got.key, got.gate) == ("revoked", "passed")


def test_harvest_answers_are_named() -> None:
    cases = {
        "   harvest: no vm_name in the record — nothing to harvest": "no_vm",
        "   harvest: no commit_sha in the record — FILL never completed": "no_commit_sha",
        f"   harvest: no app/ repo on {RID} — nothing to harvest": "norepo",
        f"   harvest: sbx/{RID} is still at 0123abc — the run committed nothing": "nocommits",
    }
    for line, status in cases.items():
        got = parse_harvest_output(line + "\n", run_id=RID)
        assert (got.ok, got.status, got.count) == (True, status, 0), (line, got)
    done = parse_harvest_output(f"   harvest: 2 commit(s) -> refs/sandbox/{RID}\n", run_id=RID)
    assert (done.ok, done.status, done.count) == (True, "harvested", 2)
    assert parse_harvest_output(f"!! harvest: could not reach {RID} over ssh — VM left alone\n").status == "failed"


def test_run_log_panel_reads_its_status_row() -> None:
    failed = [*_panel("✗ fail"), "error: Recipe `sdlc` failed on line 69 with exit code 1"]
    assert finish_outcome(failed) == ("failed", "error: Recipe `sdlc` failed on line 69 with exit code 1")
    assert finish_outcome(_panel("✗ fail"))[0] == "failed"  # type: ignore[index]
    assert finish_outcome(_panel("✓ success")) == ("finished", "status   ✓ success")
    assert finish_outcome(["╭──── ADW complete ────╮"]) is None  # the title alone says nothing


def test_a_failed_run_with_the_complete_panel_fails_run_alive() -> None:
    log = ["adw_id: abc   engineer pi", *_panel("✗ fail"), "error: Recipe `sdlc` failed on line 69 with exit code 1"]
    result = judge_run_alive(TARGET, ran(probe_output(ps=None, log=log)))
    assert result.outcome is Outcome.FAILED and "failed on line 69" in result.message
    ok = judge_run_alive(TARGET, ran(probe_output(ps=None, log=["adw_id: abc", *_panel("✓ success")])))
    assert ok.outcome is Outcome.PASSED


def test_just_recipe_failure_alone_reads_failed() -> None:
    assert finish_outcome(["error: Recipe `sdlc` failed on line 12 with exit code 2"])[0] == "failed"  # type: ignore[index]


def test_abandoned_mount_matches_the_slugified_name() -> None:
    entry = dataclasses.replace(_mount_entry("2026-01-01T10:00:01Z"), ident="Fix Login!", intended_ident="Fix Login!")
    records = [
        RecordFact("fix-login-20260101-aaaaaa", "2026-01-01T10:00:03Z", None),
        RecordFact("other-20260101-bbbbbb", "2026-01-01T10:00:03Z", None),
    ]
    got = resolve_mount(entry, records)
    assert (got.status, got.ident) == ("resolved", "fix-login-20260101-aaaaaa"), got
    # a name that already ends in -<6 hex> is kept as is by create: only that record is it
    exact = dataclasses.replace(entry, ident="demo-abcdef", intended_ident="demo-abcdef")
    both = [RecordFact("demo-abcdef", "2026-01-01T10:00:03Z", None), *records]
    assert resolve_mount(exact, both).ident == "demo-abcdef"


def test_recipe_path_puts_the_interpreters_tool_dir_first() -> None:
    own = os.path.dirname(sys.executable)
    got = recipe_path("/usr/bin:/bin").split(os.pathsep)
    assert own in got[:2] and got[-2:] == ["/usr/bin", "/bin"]
    assert recipe_path(f"/usr/bin:{own}").split(os.pathsep).count(own) == 1


def test_gnu_mktemp_failure_names_the_recipe_line(tmp_path: Path) -> None:
    recipe = tmp_path / "just" / "sandbox" / "teardown.just"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(
        'teardown:\n    # mktemp -t "old"\n    A=$(mktemp -t "sbx-$RUN_ID")\n'
        '    B=$(mktemp -d -t sbx-reap)\n    C=$(mktemp -t "ok.XXXXXX.py")\n',
        encoding="utf-8",
    )
    quirk = explain_quirk("mktemp: too few X's in template ‘sbx-demo’\nerror: Recipe `teardown` failed", tmp_path)
    assert quirk is not None and quirk.sites == ["just/sandbox/teardown.just:3", "just/sandbox/teardown.just:4"]
    assert "XXXXXX" in quirk.fix and "teardown.just:3" in quirk.summary()
    assert explain_quirk("some other failure", tmp_path) is None
