"""The single redactor every artifact passes through.

It removes two kinds of secret: values registered at run time (for example the values of the
env vars an inventory names) and anything of a credential class in :mod:`sbxcheck.secrets`
(GitHub, OpenRouter/OpenAI/Anthropic, AWS, Google, Slack, JWTs, private keys, URL userinfo,
high-entropy values under secret names, …). Redaction is idempotent, and always comes before
any cut (:meth:`Redactor.trim`): a trimmed secret would no longer match its class.
"""

from __future__ import annotations

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


class Redactor:
    """Masks registered secret values and credential-shaped strings."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        for value in secrets:
            self.register(value)

    def register(self, value: str | None) -> None:
        """Remember a secret value so that it is masked wherever it appears."""
        if value and len(value) >= _MIN_REGISTERED_LEN:
            with self._lock:
                self._secrets.add(value)

    def redact_text(self, text: str) -> str:
        """Return ``text`` with every secret masked."""
        if not text:
            return text
        with self._lock:
            secrets = sorted(self._secrets, key=len, reverse=True)
        for value in secrets:
            if value in text:
                text = text.replace(value, MASK)
        for cls in SECRET_CLASSES:
            text = cls.pattern.sub(_masker(cls), text)
        return text

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
