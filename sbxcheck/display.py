"""The one sanitiser for display: what the fleet says can never steer a terminal or break a file.

Text from outside (a VM's output, an HTTP body, a status field, a record name) may carry terminal
escapes (OSC 52 sets the reader's clipboard, OSC 0 the title, ``ESC[2J`` clears the screen), CR,
VT and FF that overwrite or forge lines, bidi overrides that reorder them, and bytes XML 1.0
forbids. :func:`neutralise` keeps printable text, ``\\n`` and ``\\t``, and shows every other
control character visibly: C0 and DEL in caret notation (``ESC`` → ``^[``, ``CR`` → ``^M``),
C1, bidi and other invisible format characters as ``\\u202e``. It is idempotent.

:func:`for_display` is the fixed order every output path uses: redact first (a secret is
recognised whole), then neutralise. A line printed to a terminal is one line whatever it holds:
:func:`for_display_line` (what :class:`SanitisingWriter` and the CLI print with) also shows ``\n``
as ``^J``, so an error text holding ``\nverdict: HEALTHY`` can never start a line of its own
(every other line break, CR, VT, FF, NEL, U+2028/2029, is already shown by :func:`neutralise`).
:func:`xml_text` is the last pass of an XML writer.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any, Final

from sbxcheck.errors import SbxError
from sbxcheck.redact import Redactor, default_redactor

# C0 but \t and \n; DEL; C1; zero-width, bidi, line/paragraph separators; BOM; XML's non-characters
_UNSAFE: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffe\uffff"
    "\ud800-\udfff]"
)
# what XML 1.0 cannot hold at all (a writer's last pass; :func:`neutralise` already covers it)
_XML_ILLEGAL: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"\\u{code:04x}"


def neutralise(text: str) -> str:
    """``text`` with every control character but ``\\n`` and ``\\t`` shown visibly (idempotent)."""
    return _UNSAFE.sub(_visible, text) if text else text


def has_control_characters(text: str) -> bool:
    """True when :func:`neutralise` would change ``text``."""
    return _UNSAFE.search(text) is not None


def for_display(text: str, redactor: Redactor | None = None) -> str:
    """Redact, then neutralise: the one order every output path shows outside text in."""
    return neutralise((redactor or default_redactor()).redact_text(text))


def one_line(text: str) -> str:
    """:func:`neutralise`, and a line feed shown as ``^J`` too: ``text`` is one line, whatever it holds."""
    return neutralise(text).replace("\n", "^J") if text else text


def for_display_line(text: str, redactor: Redactor | None = None) -> str:
    """:func:`for_display`, as one line (:func:`one_line`): redacted first, so a secret is still seen whole."""
    return one_line((redactor or default_redactor()).redact_text(text))


def display_data(obj: Any, redactor: Redactor | None = None) -> Any:
    """:func:`for_display` applied to every string (keys too) inside JSON-like data."""
    r = redactor or default_redactor()
    if isinstance(obj, str):
        return for_display(obj, r)
    if isinstance(obj, dict):
        return {for_display(str(k), r): display_data(v, r) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [display_data(v, r) for v in obj]
    return obj


def xml_text(text: str) -> str:
    """``text`` safe for an XML 1.0 document: any character XML forbids is shown visibly."""
    return _XML_ILLEGAL.sub(_visible, text)


class SanitisingWriter:
    """Wraps a terminal writer (pytest's TerminalReporter): every line is :func:`for_display_line` text,
    so each ``write_line`` prints exactly one line."""

    def __init__(self, writer: Any, redactor: Redactor | None = None) -> None:
        self._writer = writer
        self._clean: Callable[[str], str] = lambda t: for_display_line(t, redactor)

    def write_line(self, line: str, **markup: bool) -> None:
        self._writer.write_line(self._clean(str(line)), **markup)

    def section(self, title: str, sep: str = "=", **markup: bool) -> None:
        self._writer.section(self._clean(str(title)), sep, **markup)

    def write_sep(self, sep: str, title: str | None = None, **markup: bool) -> None:
        self._writer.write_sep(sep, None if title is None else self._clean(title), **markup)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


def neutralise_report(report: Any) -> None:
    """Neutralise a pytest TestReport in place (after :func:`sbxcheck.redact.redact_report`).

    A rich longrepr whose text holds no control character is kept (its structure feeds pytest's
    short summary and ``--tb`` styles); one that does is replaced by its neutralised text.
    """
    longrepr = getattr(report, "longrepr", None)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason), one line in -rs
        report.longrepr = (longrepr[0], longrepr[1], one_line(str(longrepr[2])))
    elif longrepr is not None:
        text = str(longrepr)
        if has_control_characters(text):
            report.longrepr = neutralise(text)
    report.sections = [(neutralise(t), neutralise(s)) for t, s in getattr(report, "sections", [])]
    crash: Any = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if isinstance(message, str):  # the short summary's one line (printed whole under CI or -vv)
        with contextlib.suppress(AttributeError, TypeError):
            crash.message = one_line(message)


def neutralise_exception(excinfo: Any) -> None:
    """Neutralise the string arguments of a raised exception (and its chain), like ``redact_exception``.

    Allure and pytest format ``call.excinfo`` themselves: rewriting it first keeps escapes out of both.
    sbxcheck's errors and pytest's outcomes (``pytest.fail``, whose text pytest prints at column 0)
    become one line (:func:`one_line`); another exception keeps its line feeds (an assertion's
    explanation), which pytest prints indented.
    """
    exc = getattr(excinfo, "value", None)
    seen: set[int] = set()
    while isinstance(exc, BaseException) and id(exc) not in seen:
        seen.add(id(exc))
        msg = getattr(exc, "msg", None)  # pytest's outcome exceptions (pytest.fail) keep .msg
        clean = one_line if isinstance(exc, SbxError) or isinstance(msg, str) else neutralise
        try:
            exc.args = tuple(clean(a) if isinstance(a, str) else a for a in exc.args)
            if isinstance(msg, str):
                exc.msg = clean(msg)  # type: ignore[attr-defined]
            if isinstance(exc, SbxError):
                exc.message = clean(exc.message)  # what str() of it says
        except (AttributeError, TypeError):
            pass  # a type that refuses new args keeps them
        exc = exc.__cause__ or exc.__context__
