"""Issue 20: the ledger is a bounded, regular file: never followed, never blocking, compacted."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from sbxcheck.lifecycle import ledger as ledger_module
from sbxcheck.lifecycle import ledger_format
from sbxcheck.lifecycle.ledger import LEDGER_FILE, OWNERS_DIR, Ledger, LedgerError, release_owner_locks


def test_a_fifo_at_the_ledger_is_one_clear_error_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / LEDGER_FILE)
    ledger = Ledger(tmp_path, lock_timeout_s=0.5)
    for call in (ledger.state, lambda: ledger.record_intent("mount", "demo", run_id=None)):
        start = time.monotonic()
        with pytest.raises(LedgerError, match="is a FIFO, not a regular file"):
            call()
        assert time.monotonic() - start < 1.0


def test_a_symlinked_ledger_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / LEDGER_FILE).symlink_to(target)
    ledger = Ledger(tmp_path / "state")
    with pytest.raises(LedgerError, match=r"is a symlink \(to .*elsewhere.txt\); sbxcheck never follows"):
        ledger.record_intent("mount", "demo", run_id=None)
    with pytest.raises(LedgerError, match="is a symlink"):
        ledger.state()
    assert target.read_text() == "precious\n"


def test_reads_are_incremental_and_appends_do_not_reread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger(tmp_path)
    ids = [ledger.record_intent("mission", f"key-{i}", run_id=None) for i in range(20)]
    assert len(ledger.state()) == 20
    read: list[int] = []
    real = ledger_format.read_lines

    def counting(fd: int, start: int, end: int):  # type: ignore[no-untyped-def]
        read.append(end - start)
        return real(fd, start, end)

    monkeypatch.setattr(ledger_format, "read_lines", counting)  # the fold's reads
    monkeypatch.setattr(ledger_module, "read_lines", counting)  # the ledger's scan for an old intent
    for entry_id in ids:
        ledger.mark_released(entry_id, "teardown")  # its own intents: no read at all
    assert read == []
    assert {e.state for e in ledger.state()} == {"released"}
    size = (tmp_path / LEDGER_FILE).stat().st_size
    assert sum(read) < size / 2  # only what was appended since the last fold


def test_compaction_keeps_every_open_entry_and_the_recent_closed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_format, "KEEP_CLOSED", 5)
    ledger = Ledger(tmp_path)
    kept = ledger.record_intent("mount", "demo", run_id=None)
    ledger.mark_created(kept, "demo-1")
    ledger.mark_kept(kept, "failed gate")
    opened = ledger.record_intent("mission", "key-open", run_id=None, detail={"title": "t"})
    for i in range(30):
        ledger.mark_released(ledger.record_intent("mission", f"key-{i}", run_id=None), "cancelled")
    before = {e.id: e for e in ledger.state()}
    assert len(before) == 2 + 5  # the fold itself is bounded
    result = ledger.compact()
    assert (result.open_kept, result.closed_kept, result.closed_dropped) == (2, 5, 25)
    assert result.bytes_after < result.bytes_before
    assert (tmp_path / f"{LEDGER_FILE}.old").stat().st_size == result.bytes_before
    after = {e.id: e for e in Ledger(tmp_path).state()}
    assert after == before
    assert (after[kept].state, after[kept].ident, after[kept].why) == ("kept", "demo-1", "failed gate")
    assert after[opened].detail == {"title": "t"}
    ledger.mark_released(opened, "cancelled")  # an object that read the old file follows the new one
    assert Ledger(tmp_path).state()[1].state == "released"


def test_compacting_where_there_is_no_ledger_says_so_and_writes_nothing(tmp_path: Path) -> None:
    result = Ledger(tmp_path / "state").compact()
    assert not result.found
    assert result.describe() == (
        f"{tmp_path / 'state' / LEDGER_FILE}: no ledger here, nothing to compact (is this the --sbx-state directory?)"
    )
    assert not (tmp_path / "state").exists()


def test_a_large_ledger_is_compacted_on_read_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_format, "KEEP_CLOSED", 10)
    monkeypatch.setattr(ledger_module, "COMPACT_ABOVE_BYTES", 4096)
    ledger = Ledger(tmp_path)
    live = ledger.record_intent("mission", "live", run_id=None)
    for i in range(40):
        ledger.mark_released(ledger.record_intent("mission", f"key-{i}", run_id=None), "cancelled")
    reader = Ledger(tmp_path)
    entries = reader.state()
    assert [e.id for e in entries if e.is_open] == [live]
    assert any("compacted" in w for w in reader.warnings)
    assert (tmp_path / LEDGER_FILE).stat().st_size < 4096


def _append_many(state_dir: str, n: int) -> None:
    ledger = Ledger(Path(state_dir))
    for i in range(n):
        ledger.mark_released(ledger.record_intent("mission", f"p{os.getpid()}-{i}", run_id=None), "done")
    ledger.record_intent("mission", f"open-{os.getpid()}", run_id=None)


def test_appends_during_compactions_are_never_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_format, "KEEP_CLOSED", 1)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), 40)) for _ in range(2)]
    for p in procs:
        p.start()
    ledger = Ledger(tmp_path)
    while any(p.is_alive() for p in procs):
        ledger.compact()
        time.sleep(0.005)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    opened = sorted(e.ident for e in Ledger(tmp_path).open_entries())
    assert opened == sorted(f"open-{p.pid}" for p in procs)
    for line in (tmp_path / LEDGER_FILE).read_text().splitlines():
        json.loads(line)  # whole lines only


def test_owner_lock_files_are_removed_when_the_session_ends(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.record_intent("mount", "demo", run_id=None)
    [lock] = list((tmp_path / OWNERS_DIR).iterdir())
    assert release_owner_locks(tmp_path) == [lock]
    assert list((tmp_path / OWNERS_DIR).iterdir()) == []
    ledger.record_intent("mount", "again", run_id=None)  # a later intent takes a new one
    assert len(list((tmp_path / OWNERS_DIR).iterdir())) == 1
    release_owner_locks(tmp_path)


def test_an_unusable_ledger_is_a_config_defect(tmp_path: Path) -> None:
    from sbxcheck.results import Classification

    os.mkfifo(tmp_path / LEDGER_FILE)
    with pytest.raises(LedgerError) as info:
        Ledger(tmp_path).state()
    assert info.value.classification is Classification.CONFIG_DEFECT


def test_sbxcheck_ledger_compact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sbxcheck.cli import main

    ledger = Ledger(tmp_path)
    live = ledger.record_intent("mission", "live", run_id=None)
    ledger.mark_released(ledger.record_intent("mission", "gone", run_id=None), "cancelled")
    assert main(["ledger", "compact", str(tmp_path)]) == 0
    assert "kept 1 open and 1 recent closed entries" in capsys.readouterr().out
    assert [e.id for e in Ledger(tmp_path).open_entries()] == [live]
    release_owner_locks(tmp_path)
