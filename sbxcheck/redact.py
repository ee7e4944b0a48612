"""The single redactor every artifact passes through.

It removes two kinds of secret: values registered at run time (for example the values of the
env vars an inventory names) and anything shaped like a known credential (OpenRouter keys,
bearer tokens, exe.dev tokens, JWTs, private-key blocks). Redaction is idempotent.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any

MASK = "[REDACTED]"

# Shapes of credentials that must never reach an artifact, whatever their origin.
SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"sk-or-v1-[0-9A-Za-z]{16,}"),
    re.compile(r"sk-or-[A-Za-z0-9_-]{20,}"),
    re.compile(r"sk-(?:ant|proj)-[A-Za-z0-9_-]{16,}"),
    re.compile(r"exe1\.[A-Za-z0-9._-]{8,}"),
    re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    re.compile(r"(?i)(authorization:\s*bearer\s+)[^\s\"']+"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{12,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL),
)

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
        for pattern in SECRET_PATTERNS:
            replacement = (lambda m: m.group(1) + MASK) if pattern.groups else MASK
            text = pattern.sub(replacement, text)
        return text

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


_default = Redactor()


def default_redactor() -> Redactor:
    """The process-wide redactor used by the plugin and every report writer."""
    return _default
