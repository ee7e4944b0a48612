"""The single redactor every artifact passes through.

It removes two kinds of secret: values registered at run time (for example the values of the
env vars an inventory names) and anything of a credential class in :mod:`sbxcheck.secrets`
(GitHub, OpenRouter/OpenAI/Anthropic, AWS, Google, Slack, JWTs, private keys, URL userinfo,
high-entropy values under secret names, …). Redaction is idempotent, and always comes before
any cut (:meth:`Redactor.trim`): a trimmed secret would no longer match its class.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from sbxcheck.secrets import SECRET_CLASSES, SecretClass

MASK = "[REDACTED]"

# Shapes of credentials that must never reach an artifact, whatever their origin: the one table
# (sbxcheck.secrets) that discovery also names exposures by.
SECRET_PATTERNS: tuple[re.Pattern[str], ...] = tuple(c.pattern for c in SECRET_CLASSES)


_MIN_REGISTERED_LEN = 6
# No credential class matches in fewer characters (the shortest is a URL's userinfo, ``a://:b@``).
SHORTEST_SHAPE = 7
_MAX_REMEMBERED = 8192  # texts whose redaction is kept
_MAX_REMEMBERED_CHARS = 4096


class Redactor:
    """Masks registered secret values and credential-shaped strings."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: list[str] = []  # longest first: a secret inside another is masked with it
        # text -> redacted text, for the secrets registered when it was made (a report redacts the
        # same keys and evidence many times: results.json, junit, the page, the terminal)
        self._done: dict[str, str] = {}
        for value in secrets:
            self.register(value)

    def register(self, value: str | None) -> None:
        """Remember a secret value so that it is masked wherever it appears."""
        if value and len(value) >= _MIN_REGISTERED_LEN:
            with self._lock:
                if value not in self._secrets:
                    self._secrets = sorted([*self._secrets, value], key=len, reverse=True)
                    self._done = {}  # what was redacted before did not know this one

    def redact_text(self, text: str) -> str:
        """Return ``text`` with every secret masked."""
        if not text:
            return text
        done = self._done
        cached = done.get(text)
        if cached is not None:
            return cached
        secrets = self._secrets
        redacted = text
        for value in secrets:
            if value in redacted:
                redacted = redacted.replace(value, MASK)
        if len(redacted) >= SHORTEST_SHAPE:
            for cls in SECRET_CLASSES:
                if cls.hint is None or cls.hint(redacted):
                    redacted = cls.pattern.sub(_masker(cls), redacted)
        if len(text) <= _MAX_REMEMBERED_CHARS:
            with self._lock:
                if self._done is done:  # no secret registered meanwhile
                    if len(done) >= _MAX_REMEMBERED:
                        done.clear()
                    done[text] = redacted
        return redacted

    def trim(self, text: str, limit: int, marker: str = "…") -> str:
        """Redact ``text``, then cut it to ``limit`` characters: a cut never leaves part of a secret."""
        text = self.redact_text(text)
        return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker

    def redact(self, obj: Any) -> Any:
        """Redact strings anywhere inside JSON-like data (dicts, lists, tuples, scalars)."""
        if isinstance(obj, str):
            return self.redact_text(obj)
        if isinstance(obj, dict):
            return {self.redact_text(str(k)): self.redact(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.redact(v) for v in obj]
        return obj

    def contains_secret(self, text: str) -> bool:
        """True when ``text`` would be changed by redaction."""
        return self.redact_text(text) != text


def _masker(cls: SecretClass) -> Callable[[re.Match[str]], str]:
    def mask(m: re.Match[str]) -> str:
        if not cls.accepts(m):
            return m.group(0)
        start, end = m.start(cls.group) - m.start(), m.end(cls.group) - m.start()
        whole = m.group(0)
        return whole[:start] + MASK + whole[end:]

    return mask


_default = Redactor()


def default_redactor() -> Redactor:
    """The process-wide redactor used by the plugin and every report writer."""
    return _default


def clip(text: str, limit: int, marker: str = "…") -> str:
    """``text`` redacted by the default redactor, then cut to ``limit`` characters (the one safe cut)."""
    return _default.trim(text, limit, marker)


# ---------------------------------------------------------------- logs and pytest reports


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in the message, arguments, traceback and stack text.

    It rewrites the record itself (``msg`` becomes the redacted, formatted message; ``args`` are
    dropped), so every handler after it, and ``caplog.records``, see only redacted text.
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor or _default

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep what there is, redacted
            message = f"{record.msg} {record.args}"
        record.msg, record.args = self.redactor.redact_text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.redact_text(record.stack_info)
        return True


_PYTEST_LOG_HANDLERS = ("caplog_handler", "report_handler", "log_cli_handler", "log_file_handler")


def install_log_redaction(pluginmanager: Any = None, redactor: Redactor | None = None) -> None:
    """Put a :class:`RedactingFilter` on the root logger's handlers and on pytest's logging handlers.

    ``pluginmanager`` is pytest's (``config.pluginmanager``): its ``logging-plugin`` owns the
    handlers behind ``caplog``, the "Captured log" report sections, ``--log-cli-level`` and
    ``--log-file``. Installing twice is harmless.
    """
    handlers: list[Any] = list(logging.getLogger().handlers)
    plugin = pluginmanager.get_plugin("logging-plugin") if pluginmanager is not None else None
    handlers += [getattr(plugin, name, None) for name in _PYTEST_LOG_HANDLERS]
    for handler in handlers:
        if isinstance(handler, logging.Handler) and not any(
            isinstance(f, RedactingFilter) for f in handler.filters
        ):
            handler.addFilter(RedactingFilter(redactor))


def redact_report(report: Any, redactor: Redactor | None = None) -> None:
    """Redact a pytest TestReport in place: its longrepr (``-l`` locals, ``--tb=long``) and sections.

    A rich longrepr is kept as it is when its rendered text holds no secret, and replaced by its
    redacted text when it does, so reporters, junit and xdist only ever see the redacted form.
    """
    r = redactor or _default
    longrepr = getattr(report, "longrepr", None)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        report.longrepr = (longrepr[0], longrepr[1], r.redact_text(str(longrepr[2])))
    elif longrepr is not None:
        text = str(longrepr)
        # ``-l`` locals are cut by pytest's saferepr before anyone can redact them: drop the cut ones
        redacted = _CUT_LOCAL.sub(lambda m: f"{m['name']}{m['pad']} = {_CUT_NOTE}", r.redact_text(text))
        if redacted != text or not hasattr(longrepr, "toterminal"):
            report.longrepr = redacted
    report.sections = [(title, r.redact_text(text)) for title, text in getattr(report, "sections", [])]


def redact_exception(excinfo: Any, redactor: Redactor | None = None) -> None:
    """Redact the text of a raised exception (and its chain) in place, before any reporter reads it.

    pytest, junit and Allure all format the exception from ``call.excinfo``; rewriting its string
    arguments once, first, means none of them can show a secret the message carried.
    """
    r = redactor or _default
    exc = getattr(excinfo, "value", None)
    seen: set[int] = set()
    while isinstance(exc, BaseException) and id(exc) not in seen:
        seen.add(id(exc))
        with contextlib.suppress(AttributeError, TypeError):  # a type that refuses new args keeps them
            exc.args = tuple(r.redact_text(a) if isinstance(a, str) else a for a in exc.args)
        exc = exc.__cause__ or exc.__context__


_CUT_LOCAL = re.compile(
    r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<pad>\s*) = (?P<value>.*\.\.\..*)$", re.MULTILINE
)
_CUT_NOTE = "[value cut by pytest's repr: not shown, a cut secret would no longer be recognised]"
