"""Who owns a ledger entry, and whether that owner is alive: one flock'ed lock file per session process
(``<state_dir>/owners/<pid>-<start>-<host>.lock``), held until the session ends or the process exits."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import socket
import stat
import threading
import time
from pathlib import Path
from types import TracebackType

from sbxcheck.errors import LedgerError

_POLL_S = 0.02
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def flock_within(fd: int, op: int, timeout_s: float, what: str) -> None:
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


OWNERS_DIR = "owners"
_HELD_OWNER_LOCKS: dict[tuple[str, int], OwnerLock] = {}  # (state dir, pid) -> this process's lock
_OWNER_LOCKS_GUARD = threading.Lock()


def default_owner() -> str:
    """``<pid>@<hostname>`` of this process."""
    return f"{os.getpid()}@{socket.gethostname()}"


def proc_start(pid: int) -> str | None:
    """The kernel's start tick of ``pid`` (Linux ``/proc``), or None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    # after "pid (comm) ", field 3 (state) is index 0, so starttime (field 22) is index 19
    return fields[19] if len(fields) > 19 else None


def release_owner_locks(state_dir: Path | None = None) -> list[Path]:
    """At session end: drop this process's owner lock(s) and remove their files (of ``state_dir``, or all).

    Owner-lock names are unique to one process, so no one else ever waits on the file: removing it
    (before the lock is dropped) cannot race. A later intent of this process takes a new one.
    """
    wanted = None if state_dir is None else str(Path(state_dir).resolve())
    removed = []
    with _OWNER_LOCKS_GUARD:
        for key in [k for k in _HELD_OWNER_LOCKS if k[1] == os.getpid() and wanted in (None, k[0])]:
            lock = _HELD_OWNER_LOCKS.pop(key)
            with contextlib.suppress(FileNotFoundError):
                lock.path.unlink()
                removed.append(lock.path)
            lock.release()
    return removed


def hold_owner_lock(state_dir: Path, start: str | None, timeout_s: float) -> None:
    """Hold this process's owner lock under ``state_dir`` until the session ends or the process exits.

    Threads of one process (the mission dispatcher's pool) share one lock: a second call is a no-op.
    """
    key = (str(state_dir.resolve()), os.getpid())
    with _OWNER_LOCKS_GUARD:
        if key in _HELD_OWNER_LOCKS:
            return
        lock = OwnerLock(state_dir / OWNERS_DIR, owner_lock_name(default_owner(), start))
        if not lock.acquire(timeout_s=timeout_s):
            raise LedgerError(f"{lock.path}: this process's owner lock is held by {lock.holder() or 'another'}")
        _HELD_OWNER_LOCKS[key] = lock


def owner_lock_name(owner: str, start: str | None) -> str:
    """The owner-lock file stem of ``<pid>@<host>`` started at ``start`` (safe characters only)."""
    pid, _, host = owner.partition("@")
    stem = f"{pid}-{start or 0}-{host}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:100]


def lock_is_held(path: Path) -> bool | None:
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


def is_zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits to be reaped (state Z or X in ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    rest = stat[stat.rfind(")") + 2 :]
    return rest[:1] in ("Z", "X")


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
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot open lock file ({exc.strerror})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise LedgerError(f"{self.path}: is not a regular file; move it away")
        try:
            flock_within(fd, fcntl.LOCK_EX, wait, str(self.path))
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
