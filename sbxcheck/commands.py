"""The commands sbxcheck offers a person to type (report.html's copy boxes), built from its own templates.

A next step's prose may quote what a server, a VM or an agent wrote (a looping tool's name, a user
name from ``stat``); a command is never lifted from it. Each command is made here from a template
whose words sbxcheck chose, and a value from outside fills one word of it, quoted (``shlex``). A value
that cannot be one printable word (empty, or holding a line break or another control character) makes
no command at all: a person is offered nothing rather than something two lines long.
"""

from __future__ import annotations

import shlex
import unicodedata
from collections.abc import Sequence

__all__ = ["commands", "filled", "on_host", "one_word", "shell_command"]


def one_word(value: str) -> bool:
    """Whether ``value`` can be one word of a printed command: non-empty, no control or format
    character (a line break, an escape, a bidirectional override), nothing but printable text."""
    return bool(value) and all(unicodedata.category(ch)[0] != "C" for ch in value)


def shell_command(*words: str) -> str | None:
    """``words`` as one command line, each quoted where the shell needs it; None when one is not
    :func:`one_word`."""
    if not words or not all(one_word(w) for w in words):
        return None
    return shlex.join(words)


def filled(template: str, **values: str) -> str | None:
    """``template`` (sbxcheck's own text, ``str.format`` fields) with each value quoted as one word;
    None when a value is not :func:`one_word`."""
    if not all(one_word(v) for v in values.values()):
        return None
    return template.format(**{name: shlex.quote(value) for name, value in values.items()})


def on_host(login: Sequence[str], remote: str | None) -> str | None:
    """``LOGIN 'REMOTE'``: the command line ``remote`` (built by :func:`shell_command` or :func:`filled`)
    run over the ``ssh`` login ``login`` (the words of ``ssh [-F CONFIG] HOST``); None without one."""
    return None if remote is None else shell_command(*login, remote)


def commands(*candidates: str | None) -> list[str]:
    """The commands that could be built, in order, each once."""
    return list(dict.fromkeys(c for c in candidates if c))
