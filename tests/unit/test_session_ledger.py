"""Session side of the ledger: where it lives (never rootdir- or spelling-dependent) and how entries are reviewed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sbxcheck.fleetsource import FleetSource
from sbxcheck.plugin.runstate import RunState
from sbxcheck.plugin.session import SbxSession
from sbxcheck.plugin.settings import Settings


def _session(
    inventory: str | None, rootdir: Path, invocation: Path, state: str | None = None, *, sweep: bool = False
) -> SbxSession:
    settings = Settings.defaults(rootdir, invocation, state=Path(state) if state else None, sweep=sweep)
    return SbxSession(settings, FleetSource.choose(inventory, "--sbx-inventory", rootdir, force_sim=False))


def test_state_dir_is_beside_the_inventory_however_it_is_spelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ops" / "sub").mkdir(parents=True)
    inventory = tmp_path / "ops" / "fleet.toml"
    inventory.write_text("[ssh]\n")
    monkeypatch.chdir(tmp_path / "ops" / "sub")
    spellings = ["../fleet.toml", str(inventory), "../sub/../fleet.toml", os.path.relpath(inventory)]
    roots = [tmp_path, tmp_path / "ops", Path("/")]
    dirs = {_session(spelling, root, Path.cwd()).state_dir() for spelling in spellings for root in roots}
    assert dirs == {inventory.resolve().parent / ".sbxcheck" / "state"}


def test_explicit_state_is_relative_to_the_invocation_dir(tmp_path: Path) -> None:
    inventory = tmp_path / "fleet.toml"
    inventory.write_text("[ssh]\n")
    got = _session(str(inventory), Path("/"), tmp_path / "here", state="st").state_dir()
    assert got == (tmp_path / "here" / "st")
    assert _session(str(inventory), Path("/"), tmp_path, state="/abs/st").state_dir() == Path("/abs/st")


def test_inventory_state_section_wins_over_the_default(tmp_path: Path) -> None:
    inventory = tmp_path / "fleet.toml"
    inventory.write_text('[state]\ndir = "ledger-here"\n')
    assert _session(str(inventory), Path("/"), Path("/")).state_dir() == tmp_path / "ledger-here"


# -- reviewing what other sessions left: live owners are skipped, intents reconciled, unmatched once --


def _fleet_inventory(tmp_path: Path) -> Path:
    runs = tmp_path / "checkout" / ".sandbox" / "runs"
    runs.mkdir(parents=True)
    roster = tmp_path / "checkout" / "adws" / "adw_sssf_config" / "sssf.config.yaml"  # checked at load
    roster.parent.mkdir(parents=True)
    roster.write_text("models: []\n")
    inventory = tmp_path / "fleet.toml"
    inventory.write_text(f'[sssf]\ncheckout = "{tmp_path / "checkout"}"\n')
    return inventory


def _dead_intent(state: Path, name: str) -> None:
    """An intent written by a process that then died (its owner lock died with it)."""
    import multiprocessing

    def write() -> None:
        from sbxcheck.lifecycle.ledger import Ledger

        Ledger(state, session="gone").record_intent("mount", name, run_id=None)
        os._exit(0)

    child = multiprocessing.get_context("fork").Process(target=write)
    child.start()
    child.join(10)


def test_review_skips_a_live_owner_and_reports_an_unmatched_intent_once(tmp_path: Path) -> None:
    from sbxcheck.lifecycle.ledger import Ledger

    inventory = _fleet_inventory(tmp_path)
    session = _session(str(inventory), tmp_path, tmp_path, sweep=True)
    state = session.state_dir()
    live = Ledger(state, session="other-live").record_intent(
        "mount", "busy", run_id=None
    )  # this process: alive
    _dead_intent(state, "ghost")
    entries = session.ledger_mounts.ledger_entries(RunState())
    reviews = {e.intended_ident: session.review_entry(e) for e in entries}
    assert reviews["busy"].outcome == "skipped" and "live session" in reviews["busy"].message
    assert reviews["ghost"].outcome == "failed" and reviews["ghost"].message.startswith("unmatched:")
    # nothing was run for either; the unmatched one is closed in the ledger and never reported again
    assert [e.intended_ident for e in session.ledger_mounts.ledger_entries(RunState())] == ["busy"]
    assert {e.id for e in Ledger(state).open_entries()} == {live}


def test_review_resolves_a_killed_mount_by_its_run_record(tmp_path: Path) -> None:
    import json
    import time

    from sbxcheck.lifecycle.ledger import Ledger

    inventory = _fleet_inventory(tmp_path)
    session = _session(str(inventory), tmp_path, tmp_path)
    state = session.state_dir()
    _dead_intent(state, "demo")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = {"run_id": "demo-20260101-abcdef", "created_at": now, "closed_at": now}
    (tmp_path / "checkout" / ".sandbox" / "runs" / "demo-20260101-abcdef.json").write_text(json.dumps(record))
    [entry] = session.ledger_mounts.ledger_entries(RunState())
    review = session.review_entry(entry)  # its record is closed: released in the ledger, nothing run
    assert review.outcome == "passed" and "demo-20260101-abcdef" in review.message
    [folded] = Ledger(state).state()
    assert (folded.state, folded.ident) == ("released", "demo-20260101-abcdef")
