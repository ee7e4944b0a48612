"""An append-only ledger of what a session created, and a lock that names one owner.

The ledger is written *before* a thing is created, so a crash between "asked for" and
"recorded" still leaves a trace, and a later session (or the orphan audit) can report it.
It never deletes anything and nothing in it triggers a deletion: it only remembers.

On disk: ``<state_dir>/ledger.jsonl``, UTF-8, one JSON object per line, never rewritten.
Every line has ``v`` (format version, 1), ``op``, ``id`` (entry id, 32 hex) and ``ts``
(UTC ``YYYY-MM-DDTHH:MM:SSZ``). ``op`` is one of::

    intent    kind ("mount"|"mission"), ident, run_id (str|null), owner ("<pid>@<host>"),
              owner_start (str|null: the owner's process start tick, guards pid reuse),
              session (str|null: the pytest session tag, shared by xdist workers),
              detail (object, redacted before writing)       -> state "open"
    created   ident (the resolved identity, e.g. the printed run id) -> state "created"
    released  how   (e.g. "teardown", "cancelled")                   -> state "released"
    kept      why   (deliberately left, e.g. a failed gate's VM)      -> state "kept"
    abandoned why   (a second interrupt cut the step short; still to release) -> state "abandoned"
    unmatched why   (a later session found nothing this intent created) -> state "unmatched"

"Open" means not released and not unmatched: open, created, kept and abandoned entries all stand
for something that may still exist.

Folding: the ``intent`` line makes the entry; each later status line for its id replaces the
state (last wins). Unknown fields are ignored; unknown ops, status lines for unknown ids and
unparseable lines (a torn last line after a crash) are skipped with a warning.

Writers take ``flock(LOCK_EX)`` on the file, start a fresh line if a crash left the file
without a final newline, write the whole line with one ``O_APPEND`` write and ``fsync``
before unlocking, so concurrent processes (pytest-xdist workers) never interleave a line.
Readers take ``LOCK_SH``. Every lock wait is bounded.

Liveness: a process that writes an intent holds an exclusive ``flock`` on
``<state_dir>/owners/<pid>-<start>-<host>.lock`` until it exits (the kernel drops it then, even on
SIGKILL). An entry's owner is alive while that lock is held; nothing of a live owner is ever
treated as leaked. Without a lock file (an older ledger), a pid that no longer runs on this host
is the only proof of death; an owner on another host then counts as alive.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from sbxcheck.errors import LedgerError
from sbxcheck.redact import default_redactor
from sbxcheck.safeio import loads_bounded

__all__ = [
    "LEDGER_FILE",
    "EntryKind",
    "EntryState",
    "Ledger",
    "LedgerEntry",
    "LedgerError",
    "OwnerLock",
    "default_owner",
]

LEDGER_FILE = "ledger.jsonl"
FORMAT_VERSION = 1
LOCK_WAIT_S = 10.0  # an append holds the lock for one write + fsync; this is generous
_POLL_S = 0.02
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

EntryKind = Literal["mount", "mission"]
EntryState = Literal["open", "created", "released", "kept", "abandoned", "unmatched"]
_STATUS_OPS: dict[str, EntryState] = {
    "created": "created",
    "released": "released",
    "kept": "kept",
    "abandoned": "abandoned",
    "unmatched": "unmatched",
}
CLOSED_STATES: frozenset[str] = frozenset({"released", "unmatched"})
OWNERS_DIR = "owners"
_HELD_OWNER_LOCKS: dict[tuple[str, int], OwnerLock] = {}  # (state dir, pid) -> this process's lock
_OWNER_LOCKS_GUARD = threading.Lock()

log = logging.getLogger(__name__)


def default_owner() -> str:
    """``<pid>@<hostname>`` of this process."""
    return f"{os.getpid()}@{socket.gethostname()}"


def _proc_start(pid: int) -> str | None:
    """The kernel's start tick of ``pid`` (Linux ``/proc``), or None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    # after "pid (comm) ", field 3 (state) is index 0, so starttime (field 22) is index 19
    return fields[19] if len(fields) > 19 else None


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _flock(fd: int, op: int, timeout_s: float, what: str) -> None:
    """Take ``op`` (LOCK_EX or LOCK_SH) on ``fd``: try at once, then poll until the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
        if time.monotonic() >= deadline:
            raise LedgerError(f"{what}: lock not free after {timeout_s:.1f}s")
        time.sleep(_POLL_S)


@dataclass
class LedgerEntry:
    """One created (or about-to-be-created) thing, folded from its ledger lines."""

    id: str
    kind: str
    ident: str
    run_id: str | None
    owner: str
    state: EntryState = "open"
    intended_ident: str = ""
    owner_start: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    opened_at: str = ""
    updated_at: str = ""
    how: str | None = None  # set by "released"
    why: str | None = None  # set by "kept", "abandoned" and "unmatched"
    session: str | None = None

    @property
    def released(self) -> bool:
        return self.state == "released"

    @property
    def is_open(self) -> bool:
        """Whatever it stands for may still exist (not released, not found to be nothing)."""
        return self.state not in CLOSED_STATES


class Ledger:
    """Append-only record of a session's creations in ``state_dir/ledger.jsonl``."""

    def __init__(
        self, state_dir: Path, *, lock_timeout_s: float = LOCK_WAIT_S, session: str | None = None
    ) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / LEDGER_FILE
        self.lock_timeout_s = lock_timeout_s
        self.session = session  # written on every intent: which pytest session (xdist workers share it)
        self.warnings: list[str] = []  # from the last fold

    # -- writing ---------------------------------------------------------------------------

    def record_intent(
        self,
        kind: EntryKind,
        ident: str,
        *,
        run_id: str | None,
        owner: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> str:
        """Append an ``open`` entry before the thing is created; return its entry id."""
        if kind not in ("mount", "mission"):
            raise LedgerError(f"unknown ledger kind {kind!r}; expected 'mount' or 'mission'")
        entry_id = uuid.uuid4().hex
        own = owner or default_owner()
        start = _proc_start(os.getpid()) if own == default_owner() else None
        if own == default_owner():
            self._hold_owner_lock(start)
        self._append(
            {
                "op": "intent",
                "id": entry_id,
                "kind": kind,
                "ident": ident,
                "run_id": run_id,
                "owner": own,
                "owner_start": start,
                "session": self.session,
                "detail": default_redactor().redact(dict(detail or {})),
            }
        )
        return entry_id

    def _hold_owner_lock(self, start: str | None) -> None:
        """Hold this process's owner lock from its first intent until it exits (proof of life)."""
        key = (str(self.state_dir.resolve()), os.getpid())
        with _OWNER_LOCKS_GUARD:  # threads of one process (the mission dispatcher's pool) share one lock
            if key in _HELD_OWNER_LOCKS:
                return
            lock = OwnerLock(self.state_dir / OWNERS_DIR, owner_lock_name(default_owner(), start))
            if not lock.acquire(timeout_s=self.lock_timeout_s):
                raise LedgerError(
                    f"{lock.path}: this process's owner lock is held by {lock.holder() or 'another'}"
                )
            _HELD_OWNER_LOCKS[key] = lock

    def mark_created(self, entry_id: str, ident: str) -> None:
        """The thing exists; ``ident`` is its real identity (for a mount, the printed run id)."""
        self._append({"op": "created", "id": entry_id, "ident": ident}, must_exist=True)

    def mark_released(self, entry_id: str, how: str) -> None:
        """The thing is gone (or was never made); ``how`` says by what means."""
        self._append({"op": "released", "id": entry_id, "how": how}, must_exist=True)

    def mark_kept(self, entry_id: str, why: str) -> None:
        """The thing is deliberately left in place by policy; ``why`` is reported."""
        self._append({"op": "kept", "id": entry_id, "why": why}, must_exist=True)

    def mark_abandoned(self, entry_id: str, why: str) -> None:
        """A second interrupt cut the step short: the entry stays open, saying what is known."""
        self._append({"op": "abandoned", "id": entry_id, "why": why}, must_exist=True)

    def mark_unmatched(self, entry_id: str, why: str) -> None:
        """A later session found nothing this intent created: reported once, never retried."""
        self._append({"op": "unmatched", "id": entry_id, "why": why}, must_exist=True)

    def _append(self, record: dict[str, Any], *, must_exist: bool = False) -> None:
        line = {"v": FORMAT_VERSION, "ts": _utc_now(), **default_redactor().redact(record)}  # how/why too
        data = (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot open ledger ({exc.strerror})") from None
        try:
            _flock(fd, fcntl.LOCK_EX, self.lock_timeout_s, str(self.path))
            if must_exist and not self._has_intent(fd, record["id"]):
                raise LedgerError(f"{self.path}: no ledger entry with id {record['id']!r}")
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # a torn line stays alone on its own line
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot append to ledger ({exc.strerror})") from None
        finally:
            os.close(fd)  # closing drops the flock

    def _has_intent(self, fd: int, entry_id: str) -> bool:
        """Whether an intent line for ``entry_id`` exists (read through ``fd``, lock held)."""
        for raw in self._read_fd(fd).splitlines():
            if entry_id not in raw:
                continue
            with contextlib.suppress(ValueError):
                obj = loads_bounded(raw)
                if isinstance(obj, dict) and obj.get("op") == "intent" and obj.get("id") == entry_id:
                    return True
        return False

    @staticmethod
    def _read_fd(fd: int) -> str:
        size = os.fstat(fd).st_size
        chunks, offset = [], 0
        while offset < size:
            chunk = os.pread(fd, min(1 << 20, size - offset), offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")

    # -- reading ---------------------------------------------------------------------------

    def state(self) -> list[LedgerEntry]:
        """Fold the log into entries (in intent order); problems go to ``self.warnings``."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self.warnings = []
            return []
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot read ledger ({exc.strerror})") from None
        try:
            _flock(fd, fcntl.LOCK_SH, self.lock_timeout_s, str(self.path))
            text = self._read_fd(fd)
        finally:
            os.close(fd)
        entries, warnings = _fold(text, str(self.path))
        self.warnings = warnings
        for message in warnings:
            log.warning("%s", message)
        return entries

    def open_entries(self, exclude_owner: str | None = None) -> list[LedgerEntry]:
        """Entries that may still stand for something (open, created, kept, abandoned)."""
        return [e for e in self.state() if e.is_open and e.owner != exclude_owner]

    def owner_alive(self, entry: LedgerEntry) -> bool:
        """True unless the owner is provably gone.

        With the owner's lock file: alive exactly while the lock is held. Without one (a ledger
        written before owner locks): gone only when it is a pid on *this* host that no longer runs;
        an owner on another host, or one we cannot parse, counts as alive (we cannot tell).
        """
        lock_path = self.state_dir / OWNERS_DIR / f"{owner_lock_name(entry.owner, entry.owner_start)}.lock"
        held = _lock_is_held(lock_path)
        if held is not None:
            return held
        return _pid_alive(entry)


def owner_lock_name(owner: str, start: str | None) -> str:
    """The owner-lock file stem of ``<pid>@<host>`` started at ``start`` (safe characters only)."""
    pid, _, host = owner.partition("@")
    stem = f"{pid}-{start or 0}-{host}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:100]


def _lock_is_held(path: Path) -> bool | None:
    """Whether someone holds ``flock`` on ``path``; None when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return True
        return None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _pid_alive(entry: LedgerEntry) -> bool:
    pid_text, sep, host = entry.owner.partition("@")
    if not sep or not pid_text.isdigit() or host != socket.gethostname():
        return True
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    start = _proc_start(pid)
    if entry.owner_start is not None and start is not None and start != entry.owner_start:
        return False  # the pid was reused by a later process
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    rest = stat[stat.rfind(")") + 2 :]
    return rest[:1] in ("Z", "X")


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _fold(text: str, source: str) -> tuple[list[LedgerEntry], list[str]]:
    entries: dict[str, LedgerEntry] = {}
    warnings: list[str] = []
    lines = text.split("\n")
    last = len(lines) - 1
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{source}:{number}"
        try:
            obj = loads_bounded(raw)
        except ValueError:
            torn = number - 1 == last  # no final newline: a write cut short by a crash
            what = "torn last line" if torn else "unparseable line"
            warnings.append(f"{where}: {what} skipped ({len(raw)} bytes)")
            continue
        op = obj.get("op") if isinstance(obj, dict) else None
        entry_id = obj.get("id") if isinstance(obj, dict) else None
        if not isinstance(entry_id, str) or not isinstance(op, str):
            warnings.append(f"{where}: line without 'op' and 'id' skipped")
            continue
        ts = _opt_str(obj.get("ts")) or ""
        if op == "intent":
            if entry_id in entries:
                warnings.append(f"{where}: duplicate intent for {entry_id} skipped")
                continue
            ident = _opt_str(obj.get("ident")) or ""
            detail = obj.get("detail")
            entries[entry_id] = LedgerEntry(
                id=entry_id,
                kind=_opt_str(obj.get("kind")) or "?",
                ident=ident,
                intended_ident=ident,
                run_id=_opt_str(obj.get("run_id")),
                owner=_opt_str(obj.get("owner")) or "?",
                owner_start=_opt_str(obj.get("owner_start")),
                session=_opt_str(obj.get("session")),
                detail=detail if isinstance(detail, dict) else {},
                opened_at=ts,
                updated_at=ts,
            )
            continue
        state = _STATUS_OPS.get(op)
        if state is None:
            warnings.append(f"{where}: unknown op {op!r} skipped")
            continue
        entry = entries.get(entry_id)
        if entry is None:
            warnings.append(f"{where}: {op!r} for unknown entry {entry_id} skipped")
            continue
        entry.state = state
        entry.updated_at = ts
        if op == "created":
            entry.ident = _opt_str(obj.get("ident")) or entry.ident
        elif op == "released":
            entry.how = _opt_str(obj.get("how"))
        else:  # kept, abandoned, unmatched
            entry.why = _opt_str(obj.get("why"))
    return list(entries.values()), warnings


class OwnerLock:
    """An exclusive ``flock`` on ``state_dir/<name>.lock``: one process owns creation/teardown.

    The lock dies with its process (the kernel drops it), so a crashed owner never blocks the
    next session. The file itself is never deleted (deleting lock files races); while held
    it contains the holder's ``<pid>@<host>`` for diagnostics.
    """

    def __init__(self, state_dir: Path, name: str, *, timeout_s: float = 30.0) -> None:
        if not _NAME_RE.match(name):
            raise LedgerError(f"lock name {name!r}: expected [A-Za-z0-9_.-], at most 100 characters")
        self.path = Path(state_dir) / f"{name}.lock"
        self.timeout_s = timeout_s
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, timeout_s: float | None = None) -> bool:
        """Try at once, then wait at most ``timeout_s``; True when this object holds the lock."""
        if self._fd is not None:
            return True
        wait = self.timeout_s if timeout_s is None else max(0.0, timeout_s)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot open lock file ({exc.strerror})") from None
        try:
            _flock(fd, fcntl.LOCK_EX, wait, str(self.path))
        except LedgerError:
            os.close(fd)
            return False
        except OSError as exc:
            os.close(fd)
            raise LedgerError(f"{self.path}: cannot lock ({exc.strerror})") from None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, (default_owner() + "\n").encode(), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        """Drop the lock (a no-op when not held)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the only descriptor drops the flock

    def holder(self) -> str:
        """Who last announced holding the lock (``<pid>@<host>``), or "" when nobody did."""
        try:
            return self.path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""

    def __enter__(self) -> OwnerLock:
        if not self.acquire():
            who = self.holder() or "another process"
            raise LedgerError(f"{self.path}: held by {who}; not free after {self.timeout_s:.1f}s")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
