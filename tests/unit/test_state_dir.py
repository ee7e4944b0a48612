"""The ledger's directory does not depend on pytest's rootdir or on how the inventory path is spelled."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sbxcheck.session import SbxSession


def _session(inventory: str | None, rootdir: Path, invocation: Path, state: str | None = None) -> SbxSession:
    session = SbxSession(
        rootdir=rootdir,
        inventory_option=inventory,
        force_sim=False,
        faults=[],
        run_ids=[],
        sim_seed=None,
        invocation_dir=invocation,
    )
    session.state_option = state
    return session


def test_state_dir_is_beside_the_inventory_however_it_is_spelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ops" / "sub").mkdir(parents=True)
    inventory = tmp_path / "ops" / "fleet.toml"
    inventory.write_text("[ssh]\n")
    monkeypatch.chdir(tmp_path / "ops" / "sub")
    spellings = ["../fleet.toml", str(inventory), "../sub/../fleet.toml", os.path.relpath(inventory)]
    roots = [tmp_path, tmp_path / "ops", Path("/")]
    dirs = {
        _session(spelling, root, Path.cwd()).state_dir() for spelling in spellings for root in roots
    }
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
