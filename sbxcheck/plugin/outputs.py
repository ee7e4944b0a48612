"""Output paths are checked before a run starts, and a report dir never keeps a previous run's files.

:func:`output_path_problem` says, in one line, why a configured output (report dir, history dir,
Allure dir, state dir, metrics file) cannot be used: the wrong type, a symlink (named with its
target: sbxcheck writes where it is told, never through a link), or not writable. The plugin turns
a problem into a usage error (exit 4) at configure time, before anything is mounted or run.
:func:`remove_stale_reports` deletes the files a previous run left in the report dir at session
start, and when a run ends in a usage error, so a crashed, interrupted, failing or misconfigured run
can never leave the last run's green report behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

PathKind = Literal["dir", "file"]
# what sbxcheck writes into the report dir (writers.py's names); nothing else there is touched
REPORT_FILES: tuple[str, ...] = ("results.json", "junit.xml", "report.html")


def _describe(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file or directory"


def output_path_problem(path: Path, kind: PathKind, source: str) -> str | None:
    """Why ``path`` (from ``source``, e.g. ``--sbx-report``) cannot be written as a ``kind``; None when it can."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # not there yet: its nearest parent decides
        st = None
    except OSError as exc:
        return f"{source} {path}: cannot be inspected ({exc.strerror})"
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            real = "directory" if kind == "dir" else "file"
            return (
                f"{source} {path}: is a symlink (to {os.readlink(path)}); name the real {real} instead "
                "(sbxcheck never writes through a link)"
            )
        want = stat.S_ISDIR(st.st_mode) if kind == "dir" else stat.S_ISREG(st.st_mode)
        if not want:
            expected = "a directory" if kind == "dir" else "a regular file (or a path that does not exist yet)"
            return f"{source} {path}: is {_describe(st.st_mode)}, expected {expected}"
        probe: Path | None = path if kind == "dir" else path.parent
    else:
        probe = _nearest_existing(path.parent)
        if probe is None:
            return f"{source} {path}: no existing parent directory"
        if not probe.is_dir():
            return f"{source} {path}: {probe} is not a directory, so {path} cannot be created"
    if probe is not None and not os.access(probe, os.W_OK | os.X_OK):
        return f"{source} {path}: {probe} is not writable by this user"
    return None


def _nearest_existing(path: Path) -> Path | None:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return None


def output_problems(specs: Iterable[tuple[str, Path | None, PathKind]]) -> list[str]:
    """The problems of every configured output ``(source, path or None, kind)``, in order."""
    found = []
    for source, path, kind in specs:
        if path is not None:
            problem = output_path_problem(path, kind, source)
            if problem is not None:
                found.append(problem)
    return found


def remove_stale_reports(report_dir: Path) -> list[Path]:
    """Delete the report files a previous run left in ``report_dir`` (regular files only); return them.

    Only in a real directory: nothing is deleted through a symlink.
    """
    try:
        if not stat.S_ISDIR(os.lstat(report_dir).st_mode):
            return []
    except OSError:
        return []
    removed = []
    for name in REPORT_FILES:
        path = report_dir / name
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                path.unlink()
                removed.append(path)
    return removed
