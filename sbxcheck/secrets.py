"""The one table of credential classes: the redactor masks them, discovery names them.

Each :class:`SecretClass` has a name (what discovery and exposure evidence say: ``"aws-secret-key"``),
a pattern, and optionally the group that holds the secret (the rest of the match, e.g. the
``AWS_SECRET_ACCESS_KEY=`` in front of it, is kept so a report still says *what* was masked) and a
predicate the matched secret must also satisfy (entropy, mixed character classes) to keep
false positives off git SHAs, paths and plain words. Values are never returned by this module,
only class names and spans.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

__all__ = [
    "GENERIC",
    "SECRET_CLASSES",
    "SecretClass",
    "classify",
    "entropy_bits",
    "find_secrets",
    "is_secret_name",
    "looks_like_env_name",
]


GENERIC: Final = "generic-secret"  # a generated-looking value under a secret-sounding name


def entropy_bits(text: str) -> float:
    """Shannon entropy of ``text`` in bits per character (0 for empty text)."""
    if not text:
        return 0.0
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _mixed(text: str) -> bool:
    """Upper case, lower case and a digit: how generated keys look and words, SHAs and paths do not."""
    return (
        any(c.isupper() for c in text) and any(c.islower() for c in text) and any(c.isdigit() for c in text)
    )


def _random_b64(m: re.Match[str]) -> bool:
    return _mixed(m.group(0)) and entropy_bits(m.group(0)) >= 4.0


_PLACEHOLDERS: Final = frozenset(
    {"", "null", "none", "true", "false", "changeme", "redacted", "[redacted]", "xxx", "****", "<secret>"}
)


def _generic_value(text: str) -> bool:
    """A value under a secret-sounding name that is worth masking: not a placeholder or an env-var name."""
    value = text.strip("\"'")
    if value.lower() in _PLACEHOLDERS or value.startswith(("[REDACTED", "${", "$(", "<", "*")):
        return False
    if value in CLASS_NAMES:  # discovery's own evidence: GH_TOKEN -> "github-token"
        return False
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", value):  # an env-var name (password_env = "SBX_PASSWORD")
        return False
    if re.fullmatch(r"[0-9.]+|[a-z]+", value) or value.startswith(("/", "~/", "./")):  # numbers, words, paths
        return False
    return len(value) >= 8 and entropy_bits(value) >= 2.5


@dataclass(frozen=True)
class SecretClass:
    """One kind of credential: how to find it, and which part of a match is the secret."""

    name: str
    pattern: re.Pattern[str]
    group: int = 0  # the group holding the secret; group 0 = the whole match
    accept: Callable[[re.Match[str]], bool] | None = None  # a further test the match must pass
    # a quick test that is true of every text :attr:`pattern` matches in: text it rejects is skipped
    hint: Callable[[str], object] | None = None

    def accepts(self, m: re.Match[str]) -> bool:
        """Whether a match of :attr:`pattern` is really this class (and not a SHA, path or word)."""
        return bool(m.group(self.group)) and (self.accept is None or self.accept(m))

    def matches(self, text: str) -> Iterator[re.Match[str]]:
        return (m for m in self.pattern.finditer(text) if self.accepts(m))


# A name that holds a secret: ...TOKEN..., ...SECRET..., ...PASSWORD..., ...KEY... (not a hash,
# a file or env-var *name*, an id, a public or host key, an idempotency key).
_SECRET_WORDS: Final = (
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY|_KEY"
)
_SECRET_NAME: Final = rf"[A-Za-z0-9_.-]*(?:{_SECRET_WORDS})"
_NOT_SECRET_SUFFIX: Final = (
    r"(?:_(?:HASH|ENV|FILE|PATH|IDS?|NAMES?|COUNT|URL|LIKE|PRESENT|EXP|AT|TYPE|KIND|CLASS|LEN|LENGTH|MODE|S))"
)
_SECRET_NAME_RE: Final = re.compile(rf"(?i){_SECRET_NAME}[A-Za-z0-9_]*")
_NOT_SECRET_NAME_RE: Final = re.compile(
    rf"(?i).*{_NOT_SECRET_SUFFIX}|.*(?:PUBLIC|HOST|IDEMPOTENCY|SORT|CACHE|PRIMARY|FOREIGN)_?KEY.*|.*TOKENS?_?(?:USED|IN|OUT|COUNT)"
)

_B64: Final = r"A-Za-z0-9/+"
_GENERIC_HINT: Final = re.compile(r"(?i)(?:token|secret|passw|passphrase|credential|key)[A-Za-z0-9_]*[\"']?\s*[:=]")
_NB: Final = r"(?<![A-Za-z0-9])"  # not the tail of a longer word ("task-…" is not "sk-…")
_NA: Final = r"(?![A-Za-z0-9_-])"

# Order matters when redacting: whole, prefixed shapes first (a JWT, a key block), so that the
# shapeless 40-character AWS secret cannot cut one of them in half before it is recognised.
SECRET_CLASSES: Final[tuple[SecretClass, ...]] = (
    SecretClass(
        "private-key",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
    ),
    SecretClass(
        "url-credentials",
        re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://([^\s/@:\"'<>]*:[^\s/@\"'<>]+)@"),
        group=1,
        hint=lambda t: "://" in t and "@" in t,
    ),
    SecretClass(
        "url-credentials",
        re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://([^\s/@:\"'<>]{16,})@"),
        group=1,
        hint=lambda t: "://" in t and "@" in t,
    ),
    SecretClass("jwt", re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    SecretClass("openrouter-key", re.compile(_NB + r"sk-or-(?:v1-)?[A-Za-z0-9_-]{16,}"), hint=lambda t: "sk-or-" in t),
    SecretClass("anthropic-key", re.compile(_NB + r"sk-ant-[A-Za-z0-9_-]{16,}"), hint=lambda t: "sk-ant-" in t),
    SecretClass(
        "openai-key", re.compile(_NB + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"), hint=lambda t: "sk-" in t
    ),
    SecretClass("github-token", re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    SecretClass(
        "aws-access-key-id",
        re.compile(
            r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA)[A-Z0-9]{16}(?![A-Z0-9])"
        ),
    ),
    SecretClass(
        "aws-session-token",
        re.compile(rf"(?i)(aws_?session_?token[\"']?\s*[:=]\s*[\"']?)([{_B64}=]{{40,}})"),
        group=2,
    ),
    SecretClass(
        "aws-session-token",
        re.compile(rf"(?<![{_B64}])(?:FwoG|FQoG|IQoJ)[{_B64}]{{20,}}={{0,2}}"),
        hint=lambda t: "FwoG" in t or "FQoG" in t or "IQoJ" in t,
    ),
    SecretClass(
        "aws-secret-key",
        re.compile(rf"(?i)(aws_?secret(?:_?access)?_?key[\"']?\s*[:=]\s*[\"']?)([{_B64}]{{40}})(?![{_B64}])"),
        group=2,
    ),
    SecretClass("google-oauth-client-secret", re.compile(r"GOCSPX-[A-Za-z0-9_-]{20,}")),
    SecretClass("google-api-key", re.compile(r"AIza[0-9A-Za-z_-]{32,}")),
    SecretClass("slack-token", re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}")),
    SecretClass("tailscale-key", re.compile(r"tskey-[A-Za-z0-9-]{10,}")),
    SecretClass("exe-dev-token", re.compile(r"exe1\.[A-Za-z0-9._-]{8,}")),
    SecretClass(
        "aws-secret-key", re.compile(rf"(?<![{_B64}=])[{_B64}]{{40}}(?![{_B64}=])"), accept=_random_b64
    ),
    SecretClass(
        "bearer-token", re.compile(r"(?i)(authorization:\s*(?:bearer|basic|token)\s+)([^\s\"']+)"), group=2
    ),
    SecretClass(
        "bearer-token",
        re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/=-]{12,})"),
        group=2,
        hint=lambda t: "bearer" in t.lower(),
    ),
    SecretClass(
        GENERIC,
        re.compile(rf"(?i)\b({_SECRET_NAME}[A-Za-z0-9_]*)([\"']?\s*[:=]\s*[\"']?)([^\s\"',;&}}\]]{{6,}})"),
        group=3,
        accept=lambda m: is_secret_name(m.group(1)) and _generic_value(m.group(3)),
        # the name is followed by its = or :, and every secret word ends in one of these
        hint=lambda t: ("=" in t or ":" in t) and _GENERIC_HINT.search(t),
    ),
)


CLASS_NAMES: Final = frozenset(c.name for c in SECRET_CLASSES)


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Spans ``(start, end, class)`` of every secret in ``text``, in table order (may overlap)."""
    spans: list[tuple[int, int, str]] = []
    for cls in SECRET_CLASSES:
        for m in cls.matches(text):
            spans.append((m.start(cls.group), m.end(cls.group), cls.name))
    return spans


def is_secret_name(name: str) -> bool:
    """Whether a variable called ``name`` would hold a secret (``*TOKEN*``, ``*PASSWORD*``, ``*_KEY``, …)."""
    return bool(_SECRET_NAME_RE.fullmatch(name)) and not _NOT_SECRET_NAME_RE.fullmatch(name)


def classify(value: str, name: str | None = None) -> str | None:
    """The credential class of ``value`` (held by a variable called ``name``), or None.

    A value that matches no class but sits under a secret-sounding name and looks generated
    (long enough, not a placeholder or a variable name) is ``generic-secret``.
    """
    spans = [
        (end - start, -i, cls) for i, (start, end, cls) in enumerate(find_secrets(value)) if cls != GENERIC
    ]
    if spans:
        length, _, cls = max(spans)  # the class that explains most of the value (a JWT, not its 40-char part)
        if length >= min(len(value), 8):
            return cls
    if name is not None and is_secret_name(name) and _generic_value(value):
        return GENERIC
    return None


_ENV_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def looks_like_env_name(value: str) -> bool:
    """Whether ``value`` could be the *name* of an environment variable and is not a pasted secret."""
    if not _ENV_NAME_RE.fullmatch(value):
        return False
    if find_secrets(value):
        return False
    # A generated value that happens to be an identifier (mixed case and digits, long, high entropy).
    return not (len(value) >= 20 and _mixed(value) and entropy_bits(value) >= 3.5)
