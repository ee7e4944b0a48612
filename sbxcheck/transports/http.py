"""httpx failures mapped once onto sbxcheck's error tree (shared by every HTTP client)."""

from __future__ import annotations

import httpx

from sbxcheck.errors import CommandTimeout, HostUnreachable, SbxError, TransportError

RETRYABLE_HTTPX = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def map_httpx_error(
    exc: httpx.HTTPError, label: str, base_url: str, timeout_s: float, *, attempts: int | None = None
) -> SbxError:
    """The sbxcheck error for an httpx failure on ``label`` (e.g. ``"GET /api/health"``).

    A dropped connection (``RETRYABLE_HTTPX``) is the caller's to retry first; ``attempts`` is how
    many were made when it finally gives up.
    """
    if isinstance(exc, httpx.ConnectTimeout):
        return HostUnreachable(f"{label}: connect to {base_url} timed out")
    if isinstance(exc, httpx.ConnectError):
        return HostUnreachable(f"{label}: cannot connect to {base_url}")
    if isinstance(exc, httpx.TimeoutException):
        return CommandTimeout(f"{label}: no answer within {timeout_s:g}s")
    if isinstance(exc, RETRYABLE_HTTPX):
        tried = f" after {attempts} attempt(s)" if attempts is not None else ""
        return TransportError(f"{label}: connection lost ({type(exc).__name__}){tried}")
    return TransportError(f"{label}: {type(exc).__name__}")
