"""Reading untrusted files and JSON without hanging, exhausting memory or overflowing the stack.

Run records, ledger lines, inventories and HTTP bodies come from places sbxcheck does not
control. Every such read goes through here:

* :func:`read_regular_file` opens without blocking and refuses anything but a regular file (a
  FIFO named ``*.json`` would otherwise block forever) and anything above a size cap;
* :func:`loads_bounded` refuses text above a size cap and JSON nested deeper than a bound
  (``json`` raises RecursionError on deep nesting, which is not a ValueError and would escape
  every ``except ValueError`` around it).

Both raise :class:`UnsafeInput`, a ValueError with one readable sentence and no content.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

MAX_FILE_BYTES: Final = 16 * 1024 * 1024
MAX_JSON_BYTES: Final = 16 * 1024 * 1024
MAX_JSON_DEPTH: Final = 64


class UnsafeInput(ValueError):
    """Input refused before parsing: not a regular file, too large or nested too deep."""


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


def read_regular_file(path: Path, cap: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``cap`` bytes.

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor, so a FIFO,
    socket or device is refused at once instead of blocking. OSError propagates (unreadable).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a FIFO, "
                if stat.S_ISFIFO(st.st_mode)
                else "a directory, "
                if stat.S_ISDIR(st.st_mode)
                else ""
            )
            raise UnsafeInput(f"{path}: {kind}not a regular file; only regular files are read")
        if st.st_size > cap:
            raise UnsafeInput(f"{path}: {st.st_size} bytes, above the {_mib(cap)} cap; not read")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:  # grew while being read
                raise UnsafeInput(f"{path}: more than the {_mib(cap)} cap; not read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text_file(path: Path, cap: int = MAX_FILE_BYTES) -> str:
    """:func:`read_regular_file` decoded as UTF-8 (UnsafeInput when it is not UTF-8)."""
    data = read_regular_file(path, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeInput(f"{path}: not UTF-8 text (byte {exc.start})") from None


def json_depth_ok(value: Any, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether parsed JSON ``value`` nests at most ``max_depth`` containers (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return False
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


def loads_bounded(
    text: str | bytes,
    *,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    parse_constant: Callable[[str], Any] | None = None,
) -> Any:
    """``json.loads`` that refuses oversized or deeply nested input with :class:`UnsafeInput`.

    Malformed JSON still raises ``json.JSONDecodeError`` (also a ValueError).
    """
    if len(text) > max_bytes:
        raise UnsafeInput(f"JSON of {len(text)} bytes, above the {_mib(max_bytes)} cap; not parsed")
    try:
        value = json.loads(text, parse_constant=parse_constant)
    except RecursionError:
        raise UnsafeInput(f"JSON nested deeper than {max_depth} levels; not parsed") from None
    if not json_depth_ok(value, max_depth):
        raise UnsafeInput(f"JSON nested deeper than {max_depth} levels; not parsed")
    return value


@dataclass(frozen=True)
class PathState:
    """What a path is, judged as itself (``lstat``): a link is a link, never what it points to."""

    kind: str  # "missing", "file", "symlink", "directory", "fifo", "socket", "device"
    mode: int | None  # the permission bits of the path itself (None when missing or a link)
    target: str | None = None  # where a symlink points (``readlink``; not followed, not checked)

    def describe(self) -> str:
        """A few words a person reads: ``a symlink to /x``, ``a FIFO``, ``mode 0644``."""
        if self.kind == "symlink":
            return f"a symlink to {self.target}"
        if self.kind == "file":
            return f"mode {self.mode:04o}" if self.mode is not None else "a file"
        return {"fifo": "a FIFO", "directory": "a directory", "missing": "missing"}.get(self.kind, f"a {self.kind}")


def path_state(path: Path) -> PathState:
    """``path`` as ``lstat`` sees it, with a symlink's target read, not followed (OSError: ``missing``)."""
    try:
        st = os.lstat(path)
    except OSError:
        return PathState("missing", None)
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return PathState("symlink", None, target)
    kinds = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"))
    kind = next((name for test, name in kinds if test(st.st_mode)), "device")
    return PathState(kind, stat.S_IMODE(st.st_mode))
