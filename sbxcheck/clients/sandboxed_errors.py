"""The errors of the sandboxed.sh REST client and the parsers of the server's error text.

A 4xx/5xx answer becomes one of these in :meth:`sbxcheck.clients.sandboxed_wire.SandboxedWire._send`;
the MCP channel rebuilds the same :class:`MissionRejected` from a tool's relayed REST text.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sbxcheck import errors
from sbxcheck.errors import BadResponseError, SbxError, TransportError
from sbxcheck.redact import default_redactor
from sbxcheck.safeio import loads_bounded

_EXCERPT_CHARS: Final = 160
_REASON_CHARS: Final = 600
_MODEL_NOT_FOUND_RE: Final = re.compile(r"Model '([^']*)' not found in (\S+) catalog", re.IGNORECASE)
_SUPPORTED_RE: Final = re.compile(r"Supported values:\s*(.+)", re.IGNORECASE | re.DOTALL)
_ID_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")


# ---- errors ---------------------------------------------------------------------------------


class _HttpStatusError(SbxError):
    """An HTTP answer that is an error: the endpoint, status, the server's reason and error code."""

    def __init__(self, endpoint: str, status: int, reason: str, *, error_code: str | None = None) -> None:
        super().__init__(
            f"{endpoint} -> {status}: {reason}",
            evidence={"endpoint": endpoint, "status": status, "reason": reason, "error_code": error_code},
        )
        self.endpoint = endpoint
        self.status = status
        self.reason = reason
        self.error_code = error_code


class ApiRejected(_HttpStatusError, BadResponseError):
    """The server understood the request and refused it with a 4xx (not auth, not 429)."""


class NotFound(ApiRejected):
    """404: the mission, workspace or node does not exist (or is gone)."""


class MissionRejected(ApiRejected):
    """Create refused (a 4xx). ``valid_models``/``supported_efforts`` are parsed from the server's text."""

    def __init__(
        self,
        endpoint: str,
        status: int,
        reason: str,
        *,
        error_code: str | None = None,
        valid_models: Sequence[str] = (),
        supported_efforts: Sequence[str] = (),
        holder: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(endpoint, status, reason, error_code=error_code)
        self.valid_models: list[str] = list(valid_models)
        self.supported_efforts: list[str] = list(supported_efforts)
        self.evidence.update(valid_models=self.valid_models, supported_efforts=self.supported_efforts)
        # a 409 conflict names the mission that holds the workspace/lease: its id and title, so the
        # message can say which mission to wait for or cancel
        self.holder: dict[str, str] = {
            k: default_redactor().redact_text(v)[:200]
            for k, v in (holder or {}).items()
            if k in ("mission_id", "title") and isinstance(v, str)
        }


class SlotsFull(ApiRejected):
    """409 from ``POST .../missions/:id/parallel``: every slot for a running mission is taken
    (``Maximum parallel missions (N) reached. M running.``); nothing was started."""

    def __init__(self, endpoint: str, status: int, reason: str, *, error_code: str | None = None) -> None:
        super().__init__(endpoint, status, reason, error_code=error_code)
        found = _SLOTS_RE.search(reason)
        dropped = _DROPPED_RE.search(reason)
        self.max_parallel: int | None = int(found.group(1)) if found else int(dropped.group(1)) if dropped else None
        self.running: int | None = int(found.group(2)) if found else None
        self.evidence.update(max_parallel=self.max_parallel, running=self.running)


_SLOTS_RE: Final = re.compile(r"Maximum parallel missions \((\d{1,6})\) reached\.\s*(\d{1,6}) running", re.IGNORECASE)


#: 1.3.0's error event when it drops a first message it cannot start (control/mod.rs:10247)
_DROPPED_RE: Final = re.compile(r"Cannot start mission \S+: max parallel missions \((\d{1,6})\) reached", re.IGNORECASE)


def slots_full(reason: str) -> bool:
    """Whether a 409's text says every mission slot is taken."""
    return _SLOTS_RE.search(reason) is not None


def message_dropped(text: str) -> bool:
    """Whether an error event says the control plane dropped a mission's first message: no slot was free."""
    return _DROPPED_RE.search(text) is not None


class ServerError(_HttpStatusError, TransportError):
    """429 or 5xx: the control plane could not serve the request right now."""


class RateLimited(ServerError, errors.RateLimited):
    """429 (or 503 with Retry-After) still answered when the pushback deadline was spent."""


# ---- helpers --------------------------------------------------------------------------------


def excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    """A one-line, redacted, truncated excerpt of a response body."""
    flat = " ".join(default_redactor().redact_text(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_error_text(text: str) -> tuple[str, str | None, dict[str, Any]]:
    """Split an error body into ``(reason, error_code, json_doc)``; plain text stays the reason."""
    raw = text.strip()
    doc: dict[str, Any] = {}
    code: str | None = None
    reason = raw
    with contextlib.suppress(ValueError):
        parsed = loads_bounded(raw)
        if isinstance(parsed, dict):
            doc = parsed
            err = parsed.get("error")
            msg = parsed.get("message")
            code = err if isinstance(err, str) else None
            if isinstance(msg, str) and msg:
                reason = msg
            elif code:
                reason = code
        elif isinstance(parsed, str):
            reason = parsed
    reason = default_redactor().redact_text(reason)
    if len(reason) > _REASON_CHARS:
        reason = reason[: _REASON_CHARS - 1] + "…"
    return reason, code, doc


def _id_tokens(text: str) -> list[str]:
    out: list[str] = []
    for raw in re.split(r"[\s,;|]+", text):
        token = raw.strip("`'\"[](){}<>*•").rstrip(".:").lstrip("-")
        if _ID_TOKEN_RE.fullmatch(token) and (
            any(c.isdigit() for c in token) or "-" in token or "/" in token
        ):
            out.append(token)
    return list(dict.fromkeys(out))


def parse_valid_models(text: str, doc: Mapping[str, Any] | None = None) -> list[str]:
    """Valid catalog ids from a model-not-found error (spec 3.4 step 23); ``[]`` if none listed."""
    for key in ("valid_models", "available_models", "valid_ids", "models"):
        listed = (doc or {}).get(key)
        if isinstance(listed, list) and all(isinstance(x, str) for x in listed):
            return list(dict.fromkeys(listed))
    match = _MODEL_NOT_FOUND_RE.search(text)
    if not match:
        return []
    tail = text[match.end() :]
    _label, colon, rest = tail.partition(":")
    return _id_tokens(rest if colon else tail)


def parse_supported_efforts(text: str) -> list[str]:
    """Supported values from ``Invalid model_effort for backend '<b>'. Supported values: ...``."""
    match = _SUPPORTED_RE.search(text)
    if not match:
        return []
    return list(dict.fromkeys(re.findall(r"[a-z]+", match.group(1).lower())))
