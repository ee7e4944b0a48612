"""What every child pytest a test starts leaves out."""

from __future__ import annotations

import re
from pathlib import Path

# Plugins that no child session under test uses; each costs a child pytest ~0.1-0.4 s of CPU to
# import (hypothesis alone ~0.4 s), and the suite starts ~140 children. Blocked for children only:
# this session's own plugins are already loaded when a test runs. pytest's unraisableexception
# runs gc.collect() five times at exit (0.1-0.5 s in a child that served a fleet) to find warnings
# no test reads in a child's output; this session keeps it.
CHILD_BLOCKED_PLUGINS = (
    "hypothesispytest", "anyio", "benchmark", "xdist.looponfail", "unraisableexception", "timeout",
)  # fmt: skip


def child_blocked_plugins() -> str:
    """``-p no:NAME`` for each of :data:`CHILD_BLOCKED_PLUGINS`, for a child's ``PYTEST_ADDOPTS``."""
    return " ".join(f"-p no:{name}" for name in CHILD_BLOCKED_PLUGINS)


def check_selection(args: tuple[str, ...] | list[str], where: Path) -> None:
    """Fail when a child's ``-k`` expression names a word that is also in its test directory's name.

    ``-k`` matches the names of an item's parents too, the rootdir's directory among them (pytester
    names it after the test): such an expression selects every item, and the child runs the whole
    suite where the test meant a few items (a full gate: real pi calls on every VM).
    """
    args = list(args)
    if "-k" not in args:
        return
    expression = args[args.index("-k") + 1]
    words = [w for w in re.findall(r"[A-Za-z0-9_.\-]+", expression) if w.lower() not in ("and", "or", "not")]
    clashes = [w for w in words if w.lower() in where.name.lower()]
    assert not clashes, f"-k {expression!r}: {clashes} also in the directory {where.name!r}: name the items fully"
