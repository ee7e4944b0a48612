"""Fresh secrets of every class in the table, for the leak tests (random each call, shaped like the real ones)."""

from __future__ import annotations

import secrets
import string

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
B64 = ALNUM + "/+"


def _r(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _mixed_draw(alphabet: str, n: int) -> str:
    """A random value with upper, lower and digits, as a generated secret has (a draw without digits
    is 1 in 280 for 32 alphanumerics: the leak tests would then see an identifier, not a secret)."""
    while True:
        value = _r(alphabet, n)
        if (
            any(c.isupper() for c in value)
            and any(c.islower() for c in value)
            and any(c.isdigit() for c in value)
        ):
            return value


def seeded_secrets() -> dict[str, str]:
    """One fresh value per class, as it would appear in text (some with the name that gives the context)."""
    pem_body = "\n".join(_r(B64, 64) for _ in range(4))
    return {
        "github-token": "ghp_" + _r(ALNUM, 36),
        "github-oauth": "gho_" + _r(ALNUM, 36),
        "github-server": "ghs_" + _r(ALNUM, 36),
        "github-user": "ghu_" + _r(ALNUM, 36),
        "github-pat": "github_pat_" + _r(ALNUM, 22) + "_" + _r(ALNUM, 59),
        "openrouter-key": "sk-or-v1-" + secrets.token_hex(32),
        "openai-key": "sk-proj-" + _r(ALNUM + "_-", 48),
        "anthropic-key": "sk-ant-api03-" + _r(ALNUM + "_-", 90),
        "aws-access-key-id": "AKIA" + _r(UPPER, 16),
        "aws-sts-key-id": "ASIA" + _r(UPPER, 16),
        "aws-secret-key": _mixed_draw(B64, 40),
        "aws-session-token": "IQoJb3JpZ2luX2VjE" + _r(B64, 300),
        "google-oauth-client-secret": "GOCSPX-" + _r(ALNUM + "_-", 28),
        "google-api-key": "AIza" + _r(ALNUM + "_-", 35),
        "slack-token": "xoxb-" + _r(string.digits, 12) + "-" + _r(ALNUM, 24),
        "jwt": "eyJhbGciOiJIUzI1NiJ9." + _r(ALNUM + "_-", 40) + "." + _r(ALNUM + "_-", 43),
        "private-key": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{pem_body}\n-----END OPENSSH PRIVATE KEY-----",
        "url-password": _r(ALNUM, 18),
        "generic-token": _mixed_draw(ALNUM, 32),
    }


def in_context(name: str, value: str) -> str:
    """How each value shows up in real output (an env line, a URL, a file name, a header)."""
    if name in ("github-token", "aws-access-key-id", "slack-token"):
        return f"?? notes/{value}.txt\n?? backup-{value}"  # git porcelain: glued to a path
    if name == "url-password":
        return f"fatal: could not read from https://deploy:{value}@git.example.com/org/repo.git"
    if name == "generic-token":
        return f"export SERVICE_AUTH_TOKEN={value}"
    if name == "aws-session-token":
        return f"AWS_SESSION_TOKEN={value}"
    return f"output line with {value} in it"


SELF_IDENTIFYING = frozenset(seeded_secrets()) - {"url-password", "generic-token"}
"""Classes recognisable from the value alone (the other two need their URL or variable name)."""
