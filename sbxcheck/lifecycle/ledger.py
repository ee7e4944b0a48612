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
    left      why   (the close tried to end it and it is still there, e.g. "still pending: ...") -> "left"
    unmatched why   (a later session found nothing this intent created) -> state "unmatched"

"Open" means not released and not unmatched: open, created, kept, abandoned and left entries all
stand for something that may still exist.

Folding: the ``intent`` line makes the entry; each later status line for its id replaces the
state (last wins). Unknown fields are ignored; unknown ops, status lines for unknown ids and
unparseable lines (a torn last line after a crash) are skipped with a warning.

Writers take ``flock(LOCK_EX)`` on the file, start a fresh line if a crash left the file
without a final newline, write the whole line with one ``O_APPEND`` write and ``fsync``
before unlocking, so concurrent processes (pytest-xdist workers) never interleave a line.
Readers take ``LOCK_SH``. Every lock wait is bounded.

Hostile or broken state never steers a run: the ledger is opened with ``O_NOFOLLOW`` and ``O_NONBLOCK``
and must be a regular file; a symlink, FIFO or device at its path is one clear
:class:`~sbxcheck.errors.LedgerError`, at once. Reads are incremental: a :class:`Ledger` folds the
file once and afterwards reads only what was appended since (an append never re-reads the file).
A fold keeps every open entry and the last
:data:`~sbxcheck.lifecycle.ledger_format.KEEP_CLOSED` closed ones (the lines and their fold are in
:mod:`sbxcheck.lifecycle.ledger_format`). Above
:data:`COMPACT_ABOVE_BYTES` the ledger is compacted (automatically, with a warning, or by
``sbxcheck ledger compact``): rewritten to its kept entries, atomically, under the exclusive lock;
the previous file stays beside it as ``ledger.jsonl.old`` (one generation). Every writer and reader
re-opens the path when it finds, under its lock, that a compaction replaced the file.

Liveness: a process that writes an intent holds an exclusive ``flock`` on
``<state_dir>/owners/<pid>-<start>-<host>.lock`` until its session ends (the file is then
removed: :func:`release_owner_locks`) or it exits (the kernel drops the lock then, even on
SIGKILL). An entry's owner is alive while that lock is held; nothing of a live owner is ever
treated as leaked. Without a lock file (an older ledger), a pid that no longer runs on this host
is the only proof of death; an owner on another host then counts as alive. The owner locks live in
:mod:`sbxcheck.lifecycle.owners`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sbxcheck.errors import LedgerError
from sbxcheck.lifecycle.ledger_format import (
    FORMAT_VERSION,
    EntryKind,
    EntryState,
    Fold,
    LedgerEntry,
    entry_lines,
    read_lines,
)
from sbxcheck.lifecycle.owners import (
    OWNERS_DIR,
    OwnerLock,
    default_owner,
    flock_within,
    hold_owner_lock,
    is_zombie,
    lock_is_held,
    owner_lock_name,
    proc_start,
    release_owner_locks,
)
from sbxcheck.redact import default_redactor
from sbxcheck.results import Classification
from sbxcheck.safeio import loads_bounded

__all__ = [
    "LEDGER_FILE",
    "EntryKind",
    "EntryState",
    "Ledger",
    "LedgerEntry",
    "LedgerError",
    "LedgerFileError",
    "OwnerLock",
    "default_owner",
    "release_owner_locks",
]

LEDGER_FILE = "ledger.jsonl"
LOCK_WAIT_S = 10.0  # an append holds the lock for one write + fsync; this is generous
COMPACT_ABOVE_BYTES = 1 << 20  # a larger ledger is compacted on its next read (with a warning)
_REOPEN_TRIES = 1000  # re-opens after compactions replaced the file (also bounded by the lock wait)

log = logging.getLogger(__name__)


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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
        self._fold: Fold | None = None  # what was read so far (incremental)
        self._written: set[str] = set()  # intent ids this object appended
        self._logged = 0  # fold warnings already logged
        self._auto_compacted = False

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
        start = proc_start(os.getpid()) if own == default_owner() else None
        if own == default_owner():
            hold_owner_lock(self.state_dir, start, self.lock_timeout_s)
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

    def mark_left(self, entry_id: str, why: str) -> None:
        """The session tried to end the thing and it is still there: the entry stays open, ``why`` says how."""
        self._append({"op": "left", "id": entry_id, "why": why}, must_exist=True)

    def mark_unmatched(self, entry_id: str, why: str) -> None:
        """A later session found nothing this intent created: reported once, never retried."""
        self._append({"op": "unmatched", "id": entry_id, "why": why}, must_exist=True)

    def _append(self, record: dict[str, Any], *, must_exist: bool = False) -> None:
        line = {"v": FORMAT_VERSION, "ts": _utc_now(), **default_redactor().redact(record)}  # how/why too
        data = (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot open ledger ({exc.strerror})") from None
        fd = self._open_locked(os.O_RDWR | os.O_APPEND, fcntl.LOCK_EX, create=True)
        assert fd is not None
        try:
            if must_exist and not self._has_intent(fd, record["id"]):
                raise LedgerError(f"{self.path}: no ledger entry with id {record['id']!r}")
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # a torn line stays alone on its own line
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            if record.get("op") == "intent":
                self._written.add(record["id"])
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot append to ledger ({exc.strerror})") from None
        finally:
            os.close(fd)  # closing drops the flock

    def _open_locked(self, flags: int, lock: int, *, create: bool = False) -> int | None:
        """The ledger opened safely (:func:`_open_regular`) and locked; None when it does not exist.

        A compaction replaces the file while others wait on the old one's lock: whoever then gets
        that lock finds the path naming another file, and opens again (bounded).
        """
        deadline = time.monotonic() + self.lock_timeout_s
        for _ in range(_REOPEN_TRIES):
            fd = _open_regular(self.path, flags, create=create)
            if fd is None:
                return None
            try:
                flock_within(fd, lock, self.lock_timeout_s, str(self.path))
                held = os.fstat(fd)
                try:
                    now = os.stat(self.path, follow_symlinks=False)
                except FileNotFoundError:
                    now = None
            except BaseException:
                os.close(fd)
                raise
            if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                return fd
            os.close(fd)
            if time.monotonic() >= deadline:
                break
        raise LedgerError(f"{self.path}: replaced by compactions again and again while waiting for its lock")

    def _has_intent(self, fd: int, entry_id: str) -> bool:
        """Whether an intent line for ``entry_id`` exists (lock held): known ones at once, else a scan."""
        if entry_id in self._written:
            return True
        fold = self._refresh(fd)
        if entry_id in fold.entries:
            return True
        # an old closed entry the fold no longer keeps: stream through the file (bounded memory)
        needle = entry_id.encode()
        for _, raw, _whole in read_lines(fd, 0, os.fstat(fd).st_size):
            if needle not in raw:
                continue
            with contextlib.suppress(ValueError):
                obj = loads_bounded(raw)
                if isinstance(obj, dict) and obj.get("op") == "intent" and obj.get("id") == entry_id:
                    return True
        return False

    def _refresh(self, fd: int) -> Fold:
        """Fold what was appended since the last read (everything, when the file is another one)."""
        st = os.fstat(fd)
        fold = self._fold
        if fold is None or (fold.dev, fold.ino) != (st.st_dev, st.st_ino) or st.st_size < fold.offset:
            fold = self._fold = Fold(st.st_dev, st.st_ino, source=str(self.path))
        fold.read(fd, st.st_size)
        return fold

    # -- reading ---------------------------------------------------------------------------

    def state(self) -> list[LedgerEntry]:
        """Fold the log into entries (in intent order); problems go to ``self.warnings``.

        Every open entry is returned, and the last
        :data:`~sbxcheck.lifecycle.ledger_format.KEEP_CLOSED` closed ones.
        """
        fd = self._open_locked(os.O_RDONLY, fcntl.LOCK_SH)
        if fd is None:
            self._fold = None
            self.warnings = []
            return []
        try:
            fold = self._refresh(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        entries = fold.materialized()
        for message in fold.warnings[self._logged :]:
            log.warning("%s", message)
        self._logged = len(fold.warnings)
        self.warnings = list(fold.warnings)
        if size > COMPACT_ABOVE_BYTES and fold.dropped and not self._auto_compacted:
            self._auto_compacted = True  # once per Ledger: a ledger of open entries alone stays as it is
            message = self.compact().describe()
            log.warning("%s", message)
            entries = self.state()
            self.warnings.append(message)
            return entries
        return [replace(e, detail=dict(e.detail)) for e in entries]

    def open_entries(self, exclude_owner: str | None = None) -> list[LedgerEntry]:
        """Entries that may still stand for something (open, created, kept, abandoned)."""
        return [e for e in self.state() if e.is_open and e.owner != exclude_owner]

    def compact(self) -> CompactResult:
        """Rewrite the ledger to its open entries and last closed ones; the old file becomes ``.old``.

        Under the exclusive lock, written to a temporary file, fsynced, then renamed over the ledger
        (atomic: a reader sees the old file or the new one). Nothing open is ever dropped.
        """
        fd = self._open_locked(os.O_RDWR, fcntl.LOCK_EX)
        if fd is None:
            return CompactResult(str(self.path), 0, 0, 0, 0, 0, found=False)
        tmp = self.state_dir / f".{LEDGER_FILE}.compact-{os.getpid()}"
        try:
            before = os.fstat(fd).st_size
            fold = self._refresh(fd)  # what this object folded already is not read again
            kept = fold.materialized()
            text = "".join(entry_lines(e) for e in kept).encode("utf-8")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(text)
                while view:
                    view = view[os.write(out, view) :]
                os.fsync(out)
            finally:
                os.close(out)
            old = self.path.with_name(LEDGER_FILE + ".old")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old)
            os.link(self.path, old, follow_symlinks=False)
            os.replace(tmp, self.path)
            _fsync_dir(self.state_dir)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise LedgerError(f"{self.path}: cannot compact the ledger ({exc.strerror})") from None
        finally:
            os.close(fd)
        opened = sum(1 for e in kept if e.is_open)
        self._fold = None
        return CompactResult(str(self.path), before, len(text), opened, len(kept) - opened, fold.dropped)

    def owner_alive(self, entry: LedgerEntry) -> bool:
        """True unless the owner is provably gone.

        With the owner's lock file: alive exactly while the lock is held. Without one (a ledger
        written before owner locks): gone only when it is a pid on *this* host that no longer runs;
        an owner on another host, or one we cannot parse, counts as alive (we cannot tell).
        """
        lock_path = self.state_dir / OWNERS_DIR / f"{owner_lock_name(entry.owner, entry.owner_start)}.lock"
        held = lock_is_held(lock_path)
        if held is not None:
            return held
        return _pid_alive(entry)


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
    start = proc_start(pid)
    if entry.owner_start is not None and start is not None and start != entry.owner_start:
        return False  # the pid was reused by a later process
    return not is_zombie(pid)


class LedgerFileError(LedgerError):
    """The ledger's path holds something else than a regular file (a symlink, FIFO, device, ...).

    A state-dir problem the operator fixes (``config_defect``), not a bug of sbxcheck.
    """

    classification = Classification.CONFIG_DEFECT


def _open_regular(path: Path, flags: int, *, create: bool = False) -> int | None:
    """Open ``path`` only as a regular file, never through a symlink and never blocking on a FIFO.

    None when it does not exist (and ``create`` is false); a symlink, FIFO, socket or device is a
    :class:`LedgerError` naming what was found, at once.
    """
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise LedgerError(f"{path}: cannot open ledger ({exc.strerror})") from None
    if found is None and not create:
        return None
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise LedgerFileError(_not_regular(path, found.st_mode))
    extra = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags | extra, 0o600)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # swapped for a symlink or a FIFO since lstat
            raise LedgerFileError(_not_regular(path, os.lstat(path).st_mode)) from None
        raise LedgerError(f"{path}: cannot open ledger ({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise LedgerFileError(_not_regular(path, mode))
    return fd


def _not_regular(path: Path, mode: int) -> str:
    if stat.S_ISLNK(mode):
        what = f"a symlink (to {os.readlink(path)}); sbxcheck never follows a link to its ledger"
    elif stat.S_ISFIFO(mode):
        what = "a FIFO"
    elif stat.S_ISDIR(mode):
        what = "a directory"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        what = "a device or socket"
    else:
        what = "not a regular file"
    return f"{path}: is {what}, not a regular file; move it away or use another --sbx-state"


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class CompactResult:
    """What :meth:`Ledger.compact` did."""

    path: str
    bytes_before: int
    bytes_after: int
    open_kept: int
    closed_kept: int
    closed_dropped: int
    found: bool = True  # False: there was no ledger at path, and nothing was written

    def describe(self) -> str:
        if not self.found:
            return f"{self.path}: no ledger here, nothing to compact (is this the --sbx-state directory?)"
        return (
            f"{self.path}: compacted {self.bytes_before} -> {self.bytes_after} bytes: kept {self.open_kept} "
            f"open and {self.closed_kept} recent closed entries, dropped {self.closed_dropped} closed ones "
            f"(the previous file is {LEDGER_FILE}.old)"
        )
