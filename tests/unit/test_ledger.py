"""Ledger: append/fold, torn lines, concurrent appenders, owner lock exclusivity, entry states."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from sbxcheck.lifecycle.ledger import Ledger, LedgerEntry, LedgerError, OwnerLock, default_owner

_CTX = multiprocessing.get_context("fork")


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_append_and_fold(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    a = ledger.record_intent("mount", "fix-login", run_id=None, detail={"limit": 5})
    b = ledger.record_intent("mission", "m-1", run_id="r-abc123")
    ledger.mark_created(a, "fix-login-20260801-a1b2c3")
    ledger.mark_released(b, "cancelled")

    raw = _lines(tmp_path / "ledger.jsonl")
    assert [r["op"] for r in raw] == ["intent", "intent", "created", "released"]
    assert all(r["v"] == 1 and isinstance(r["ts"], str) for r in raw)

    by_id = {e.id: e for e in ledger.state()}
    assert by_id[a].state == "created"
    assert by_id[a].ident == "fix-login-20260801-a1b2c3"
    assert by_id[a].intended_ident == "fix-login"
    assert by_id[a].owner == default_owner()
    assert by_id[a].detail == {"limit": 5}
    assert by_id[b].state == "released" and by_id[b].how == "cancelled"
    assert ledger.warnings == []


def test_last_status_wins_and_open_entries(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    opened = ledger.record_intent("mount", "a", run_id=None)
    created = ledger.record_intent("mount", "b", run_id=None)
    kept = ledger.record_intent("mount", "c", run_id=None)
    released = ledger.record_intent("mount", "d", run_id=None)
    ledger.mark_created(created, "b-000001")
    ledger.mark_created(kept, "c-000002")
    ledger.mark_kept(kept, "gate failed: VM kept for diagnosis")
    ledger.mark_created(released, "d-000003")
    ledger.mark_released(released, "teardown")

    states = {e.id: e.state for e in ledger.state()}
    assert states == {opened: "open", created: "created", kept: "kept", released: "released"}
    open_ids = {e.id for e in ledger.open_entries()}
    assert open_ids == {opened, created, kept}
    assert next(e for e in ledger.state() if e.id == kept).why == "gate failed: VM kept for diagnosis"
    assert ledger.open_entries(exclude_owner=default_owner()) == []


def test_unknown_entry_id_is_refused(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.record_intent("mount", "a", run_id=None)
    with pytest.raises(LedgerError, match="no ledger entry"):
        ledger.mark_released("0" * 32, "teardown")


def test_secrets_in_detail_are_redacted(tmp_path: Path) -> None:
    secret = "sk-or-v1-" + "ab" * 32
    Ledger(tmp_path).record_intent("mission", "m", run_id=None, detail={"note": f"key {secret}"})
    assert secret not in (tmp_path / "ledger.jsonl").read_text()


def test_torn_last_line_and_unknown_fields(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    good = ledger.record_intent("mount", "a", run_id=None)
    path = tmp_path / "ledger.jsonl"
    with path.open("a") as fh:
        fh.write(json.dumps({"v": 1, "op": "created", "id": good, "ident": "a-1", "future": [1, 2]}) + "\n")
        fh.write('{"v":1,"op":"released","id":"' + good[:10])  # crash mid-write: no newline

    entries = ledger.state()
    assert [(e.id, e.state, e.ident) for e in entries] == [(good, "created", "a-1")]
    assert len(ledger.warnings) == 1 and "torn last line" in ledger.warnings[0]

    # the next append starts a fresh line, so the torn fragment never swallows it
    ledger.mark_released(good, "teardown")
    assert [e.state for e in ledger.state()] == ["released"]
    assert len(ledger.warnings) == 1 and "unparseable line" in ledger.warnings[0]


def test_missing_ledger_is_empty(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "nope")
    assert ledger.state() == [] and ledger.open_entries() == []


def _appender(state_dir: str, worker: int, count: int) -> None:
    ledger = Ledger(Path(state_dir))
    for i in range(count):
        entry = ledger.record_intent(
            "mission", f"w{worker}-{i}", run_id=None, detail={"pad": "x" * 6000, "worker": worker}
        )
        ledger.mark_created(entry, f"w{worker}-{i}-made")


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    workers, count = 4, 40
    procs = [_CTX.Process(target=_appender, args=(str(tmp_path), w, count)) for w in range(workers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0

    raw = (tmp_path / "ledger.jsonl").read_text()
    lines = raw.splitlines()
    assert raw.endswith("\n") and len(lines) == workers * count * 2
    parsed = [json.loads(line) for line in lines]  # every line intact
    assert sum(p["op"] == "intent" for p in parsed) == workers * count
    ledger = Ledger(tmp_path)
    entries = ledger.state()
    assert ledger.warnings == []
    assert len(entries) == workers * count
    assert all(e.state == "created" and e.ident.endswith("-made") for e in entries)


def _dead_pid() -> int:
    proc = _CTX.Process(target=os._exit, args=(0,))
    proc.start()
    proc.join(timeout=10)
    assert proc.pid is not None
    return proc.pid


def _entry(owner: str, start: str | None = None) -> LedgerEntry:
    return LedgerEntry(id="x", kind="mount", ident="a", run_id=None, owner=owner, owner_start=start)


def test_owner_alive(tmp_path: Path) -> None:
    host = socket.gethostname()
    ledger = Ledger(tmp_path / "elsewhere")  # no owner locks there: the pid rule decides
    assert ledger.owner_alive(_entry(default_owner()))
    assert not ledger.owner_alive(_entry(f"{_dead_pid()}@{host}"))
    assert ledger.owner_alive(_entry("1234@some-other-host"))  # cannot tell: assume alive
    assert ledger.owner_alive(_entry("garbage"))
    # the same pid with a different start tick is a reused pid, so the owner is gone
    assert not ledger.owner_alive(_entry(default_owner(), start="1"))
    entry_id = Ledger(tmp_path).record_intent("mount", "a", run_id=None)
    assert Ledger(tmp_path).owner_alive(next(e for e in Ledger(tmp_path).state() if e.id == entry_id))


def _hold_lock(state_dir: str, held: object, release: object) -> None:
    lock = OwnerLock(Path(state_dir), "owner")
    assert lock.acquire(timeout_s=5)
    held.set()  # type: ignore[attr-defined]
    release.wait(10)  # type: ignore[attr-defined]
    lock.release()


def test_owner_lock_exclusive_across_processes(tmp_path: Path) -> None:
    held, release = _CTX.Event(), _CTX.Event()
    child = _CTX.Process(target=_hold_lock, args=(str(tmp_path), held, release))
    child.start()
    try:
        assert held.wait(10)
        lock = OwnerLock(tmp_path, "owner")
        start = time.monotonic()
        assert not lock.acquire(timeout_s=0.3)
        waited = time.monotonic() - start
        assert 0.25 <= waited < 1.5  # bounded wait, not forever
        assert lock.holder() == f"{child.pid}@{socket.gethostname()}"
        with pytest.raises(LedgerError, match="held by"), OwnerLock(tmp_path, "owner", timeout_s=0.1):
            pass

        # the holder lets go part-way through our wait: we get it
        timer = threading.Timer(0.3, release.set)
        timer.start()
        start = time.monotonic()
        assert lock.acquire(timeout_s=5)
        assert 0.25 <= time.monotonic() - start < 3
        assert lock.held and lock.holder() == default_owner()
        other = OwnerLock(tmp_path, "owner")
        assert not other.acquire(timeout_s=0)  # exclusive within one process too
        lock.release()
        with other:
            assert other.held
        assert not other.held
    finally:
        release.set()
        child.join(timeout=10)
    assert child.exitcode == 0


def test_owner_lock_dies_with_its_process(tmp_path: Path) -> None:
    held, release = _CTX.Event(), _CTX.Event()
    child = _CTX.Process(target=_hold_lock, args=(str(tmp_path), held, release))
    child.start()
    assert held.wait(10)
    child.kill()
    child.join(timeout=10)
    assert OwnerLock(tmp_path, "owner").acquire(timeout_s=2)


def test_owner_lock_name_is_checked(tmp_path: Path) -> None:
    with pytest.raises(LedgerError):
        OwnerLock(tmp_path, "../escape")


# -- owner liveness by lock, and reconciling intents with what they created -----------------------


def _write_intent_and_exit(state_dir: str) -> None:
    Ledger(Path(state_dir)).record_intent("mount", "demo", run_id=None)
    os._exit(0)


def test_owner_lock_tells_a_live_session_from_a_dead_one(tmp_path: Path) -> None:
    mine = Ledger(tmp_path).record_intent("mount", "mine", run_id=None)
    child = _CTX.Process(target=_write_intent_and_exit, args=(str(tmp_path),))
    child.start()
    child.join(10)
    ledger = Ledger(tmp_path)
    by_ident = {e.ident: e for e in ledger.state()}
    assert ledger.owner_alive(by_ident["mine"]) and by_ident["mine"].id == mine
    assert not ledger.owner_alive(by_ident["demo"])  # its lock died with it


def test_abandoned_and_unmatched_states(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path, session="s1")
    a = ledger.record_intent("mount", "demo", run_id=None)
    b = ledger.record_intent("mission", "key-1", run_id=None)
    ledger.mark_abandoned(a, "second interrupt during the mount")
    ledger.mark_unmatched(b, "nothing found")
    by_id = {e.id: e for e in ledger.state()}
    assert (by_id[a].state, by_id[a].why, by_id[a].session) == (
        "abandoned",
        "second interrupt during the mount",
        "s1",
    )
    assert by_id[b].state == "unmatched" and not by_id[b].is_open
    assert [e.id for e in ledger.open_entries()] == [a]  # abandoned is open; unmatched is not


def _mount_entry(
    opened: str, *, state: str = "open", updated: str | None = None, ident: str = "demo"
) -> LedgerEntry:
    return LedgerEntry(
        id="e1",
        kind="mount",
        ident=ident,
        intended_ident="demo",
        run_id=None,
        owner="1@h",
        state=state,
        opened_at=opened,
        updated_at=updated or opened,  # type: ignore[arg-type]
    )


def test_resolve_mount_by_name_prefix_and_window() -> None:
    from sbxcheck.lifecycle.reconcile import RecordFact, resolve_mount

    records = [
        RecordFact("demo-aaaaaa", "2026-01-01T10:00:03Z", None),
        RecordFact("demo-old000", "2026-01-01T09:00:00Z", None),  # before the intent
        RecordFact("demox-bbbbbb", "2026-01-01T10:00:04Z", None),  # another name
        RecordFact("other-cccccc", "2026-01-01T10:00:04Z", None),
    ]
    got = resolve_mount(_mount_entry("2026-01-01T10:00:01Z"), records)
    assert (got.status, got.ident, got.closed) == ("resolved", "demo-aaaaaa", False)
    # claimed by another entry: not a candidate, so nothing matches
    got = resolve_mount(_mount_entry("2026-01-01T10:00:01Z"), records, claimed={"demo-aaaaaa"})
    assert got.status == "unmatched" and got.ident is None
    # an abandoned mount made nothing after it was abandoned
    late = [*records, RecordFact("demo-dddddd", "2026-01-01T10:05:00Z", None)]
    entry = _mount_entry("2026-01-01T10:00:01Z", state="abandoned", updated="2026-01-01T10:00:10Z")
    assert resolve_mount(entry, late).ident == "demo-aaaaaa"
    # without an end, two in the window are ambiguous: nothing is done on a guess
    got = resolve_mount(_mount_entry("2026-01-01T10:00:01Z"), late)
    assert got.status == "ambiguous" and got.candidates == ["demo-aaaaaa", "demo-dddddd"]


def test_resolve_mount_with_a_known_run_id_reads_its_record() -> None:
    from sbxcheck.lifecycle.reconcile import RecordFact, resolve_mount

    entry = _mount_entry("2026-01-01T10:00:01Z", state="created", ident="demo-aaaaaa")
    closed = [RecordFact("demo-aaaaaa", "2026-01-01T10:00:03Z", "2026-01-01T11:00:00Z")]
    got = resolve_mount(entry, closed)
    assert (got.status, got.ident, got.closed) == ("resolved", "demo-aaaaaa", True)
    assert resolve_mount(entry, []).ident == "demo-aaaaaa"  # no record: still its run id, not the name


def test_resolve_mission_by_title_then_id() -> None:
    # mission ids are UUIDs (issue 20: a listed id of another shape is never acted on)
    m_old, m_new, m_other, m_k, m_twin = (f"00000000-0000-4000-8000-00000000000{c}" for c in "abcde")
    from sbxcheck.lifecycle.reconcile import resolve_mission

    entry = LedgerEntry(
        id="e2",
        kind="mission",
        ident="sbxcheck-key",
        intended_ident="sbxcheck-key",
        run_id=None,
        owner="1@h",
        opened_at="2026-01-01T10:00:00Z",
        detail={"title": "sbxcheck abc route x"},
    )
    missions = [
        {"id": m_old, "title": "sbxcheck abc route x", "created_at": "2026-01-01T09:00:00.000Z"},
        {"id": m_new, "title": "sbxcheck abc route x", "created_at": "2026-01-01T10:00:00.412Z"},
        {"id": m_other, "title": "something else", "created_at": "2026-01-01T10:00:01Z"},
    ]
    got = resolve_mission(entry, missions)
    assert (got.status, got.ident) == ("resolved", m_new)
    assert resolve_mission(entry, missions[2:]).status == "unmatched"
    by_key = [{"id": m_k, "idempotency_key": "sbxcheck-key", "created_at": "2026-01-01T10:00:01Z"}]
    assert resolve_mission(entry, by_key).ident == m_k
    assert resolve_mission(entry, [*missions, {**missions[1], "id": m_twin}]).status == "ambiguous"


def test_threads_of_one_process_share_its_owner_lock(tmp_path: Path) -> None:
    """The mission dispatcher writes intents from a thread pool: the first ones race for the owner lock."""
    ledger = Ledger(tmp_path / "state")
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        barrier.wait()
        try:
            ledger.record_intent("mission", f"key-{n}", run_id=None, detail={})
        except BaseException as exc:  # the test reports every thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert len(ledger.open_entries()) == 8
