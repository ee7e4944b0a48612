"""HTTP shared by every client: one bounded request, one retry policy, failures mapped once.

:func:`send` gives each attempt a whole-request deadline (a server dribbling a byte per second
cannot hold a check past it) and a body cap (16 MiB on the wire and decoded, checked as the body is
decoded piece by piece: a larger body is refused, not parsed), and retries by one
:class:`RetryPolicy` (a count, bounded backoff, ``Retry-After`` honoured and capped). Every client
is made by :func:`new_client` (a bounded cookie jar).

Pushback (a 429, or a 503 with ``Retry-After``) means the server did not act on the request, so
every method — POST included — is sent again after ``Retry-After``, until the caller's deadline
(:func:`pushback_until`, else the policy's ``pushback_budget_s``) or ``pushback_retries`` is spent;
then the last response is returned and the client maps it (``rate_limited``).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import email.utils
import ipaddress
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import httpx

from sbxcheck.errors import BadResponseError, CommandTimeout, HostUnreachable, SbxError, TransportError
from sbxcheck.transports.cookies import BoundedCookieJar
from sbxcheck.transports.http_body import ACCEPT_ENCODING, BodyEncodingError, decoded, raw_body

RETRYABLE_HTTPX = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def map_httpx_error(
    exc: httpx.HTTPError, label: str, base_url: str, timeout_s: float, *, attempts: int | None = None
) -> SbxError:
    """The sbxcheck error for an httpx failure on ``label`` (e.g. ``"GET /api/health"``).

    A dropped connection (``RETRYABLE_HTTPX``) is the caller's to retry first; ``attempts`` is how
    many were made when it finally gives up.
    """
    # what is known decides what may exist: a connect that failed (refused, DNS, TLS, connect timeout)
    # never sent the request, so it created nothing; a request sent without an answer may have
    if isinstance(exc, httpx.ConnectTimeout):
        return HostUnreachable(
            f"{label}: connect to {base_url} timed out", evidence=_sent(base_url, False, "connect timed out")
        )
    if isinstance(exc, httpx.ConnectError):
        untrusted = untrusted_certificate(exc)
        if untrusted is not None:
            return HostUnreachable(
                f"{label}: {base_url} presents a TLS certificate this machine does not trust ({untrusted}); "
                "not connected",
                evidence=_sent(base_url, False, f"TLS certificate not trusted: {untrusted}"),
                recommendation="if the certificate is the control plane's own, add its CA to this machine's "
                "trust store (SSL_CERT_FILE names a CA bundle); else fix the server's certificate",
            )
        return HostUnreachable(
            f"{label}: cannot connect to {base_url}", evidence=_sent(base_url, False, _reason(exc))
        )
    if isinstance(exc, httpx.TimeoutException):
        return CommandTimeout(
            f"{label}: no answer within {timeout_s:g}s", evidence=_sent(base_url, True, "no answer in time")
        )
    if isinstance(exc, RETRYABLE_HTTPX):
        tried = f" after {attempts} attempt(s)" if attempts is not None else ""
        return TransportError(
            f"{label}: connection lost ({type(exc).__name__}){tried}",
            evidence=_sent(base_url, True, "connection lost"),
        )
    return TransportError(f"{label}: {type(exc).__name__}", evidence=_sent(base_url, True, type(exc).__name__))


def _sent(base_url: str, sent: bool, reason: str) -> dict[str, Any]:
    """Evidence of a failed request: the service, why, and whether it can have had an effect."""
    return {"service": service_of(base_url), "request_sent": sent, "reason": reason}


def cleartext_to_network(url: str) -> bool:
    """Whether ``url`` is plain ``http://`` to a host other than this machine's loopback (what is sent
    there crosses a network unencrypted). A name is judged as written, never resolved."""
    try:
        parsed = urlsplit(url)
        host = (parsed.hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    if parsed.scheme.lower() != "http":
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def service_of(url: str) -> str:
    """``scheme://host:port`` of a URL: the one name of a service, whatever path its clients use."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return url
    return f"{parsed.scheme}://{parsed.netloc.decode()}" if parsed.scheme else url


_VERIFY_FAILED: Final = re.compile(r"certificate verify failed:?\s*([^(]*)", re.IGNORECASE)


def untrusted_certificate(exc: BaseException) -> str | None:
    """Why the server's TLS certificate was refused (``self-signed certificate``, ``certificate has
    expired``, ``unable to get local issuer certificate``, a host name mismatch), or None."""
    found = _VERIFY_FAILED.search(str(exc))
    if found is None:
        return None
    why = " ".join(found.group(1).split()).rstrip(" .")
    return why[:120] or "verification failed"


def _reason(exc: httpx.HTTPError) -> str:
    """``connection refused``, ``name not resolved``, ``TLS handshake failed`` or the error's own words."""
    text = str(exc).lower()
    for needle, reason in (
        ("refused", "connection refused"),
        ("name or service", "name not resolved"),
        ("nodename", "name not resolved"),
        ("temporary failure in name", "name not resolved"),
        ("ssl", "TLS handshake failed"),
        ("certificate", "TLS certificate refused"),
    ):
        if needle in text:
            return reason
    return " ".join(str(exc).split())[:120] or type(exc).__name__


# ---------------------------------------------------------------- one bounded request, one retry policy

MAX_BODY_BYTES: Final = 16 * 1024 * 1024
_now: Final = time.monotonic  # bound once: request deadlines run on the real clock, whatever polls do
_DROP_HEADERS: Final = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class _DeadlineExceeded(Exception):
    pass


class _BodyTooLarge(Exception):
    pass


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before another attempt: the one policy of every HTTP client.

    ``retries`` extra attempts (a count, never a loop), on a dropped connection or one of
    ``statuses``; the wait is the server's ``Retry-After`` (seconds or an HTTP date) when given,
    else the backoff step, and never more than ``max_wait_s``.
    """

    retries: int = 2
    backoff_s: tuple[float, ...] = (0.2, 0.5, 1.0)
    max_wait_s: float = 2.0
    statuses: frozenset[int] = frozenset({429, 502, 503, 504})
    pushback_budget_s: float = 60.0  # without a caller's deadline (pushback_until)
    pushback_retries: int = 30
    pushback_default_wait_s: float = 1.0  # a 429 without Retry-After

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError("retries must be >= 0")

    def wait_s(self, attempt: int, resp: httpx.Response | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        hinted = retry_after_s(resp) if resp is not None else None
        step = self.backoff_s[min(attempt, len(self.backoff_s) - 1)] if self.backoff_s else 0.0
        return min(step if hinted is None else hinted, self.max_wait_s)


def http_date(value: str | None) -> dt.datetime | None:
    """An HTTP date (``Date``, ``Retry-After``) as an aware datetime; None when absent or not a date."""
    if not value or len(value) > 64:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def retry_after_s(resp: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds (delta-seconds or HTTP date), or None.

    A date is read against the answer's own ``Date`` header where it has one: the server's clock
    wrote both, so a server minutes behind or ahead of this machine still asks for the wait it means.
    """
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        when = http_date(value)
        if when is None:
            return None
        sent = http_date(resp.headers.get("date")) or dt.datetime.now(dt.UTC)
        seconds = (when - sent).total_seconds()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


_pushback_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "sbxcheck_pushback_deadline", default=None
)


@contextlib.contextmanager
def pushback_until(deadline: float) -> Iterator[None]:
    """Within this block (this thread/context), pushback is absorbed until ``deadline`` (monotonic)."""
    token = _pushback_deadline.set(deadline)
    try:
        yield
    finally:
        _pushback_deadline.reset(token)


def pushback_deadline(budget_s: float) -> float:
    """The monotonic deadline for absorbing pushback here: the caller's, else ``budget_s`` from now."""
    deadline = _pushback_deadline.get()
    return _now() + budget_s if deadline is None else deadline


def pushback_wait_s(resp: httpx.Response, default_s: float = 1.0) -> float | None:
    """Seconds the server asks to wait before the same request: a 429, or a 503 with Retry-After."""
    if resp.status_code == 429:
        hinted = retry_after_s(resp)
        return default_s if hinted is None else hinted
    if resp.status_code == 503 and "retry-after" in resp.headers:
        return retry_after_s(resp)
    return None


def _attempt(
    client: httpx.Client,
    method: str,
    url: str,
    deadline: float,
    max_bytes: int,
    kwargs: dict[str, Any],
    *,
    truncate: bool = False,
) -> httpx.Response:
    """One request, read whole within ``deadline`` (monotonic) and ``max_bytes``, or an exception.

    ``max_bytes`` holds on the wire and after decoding: the raw bytes are decoded incrementally
    (:mod:`sbxcheck.transports.http_body`) and counted as they come out, so a compressed bomb is
    refused at the cap, never inflated whole. It runs on a daemon thread so that not even a server
    dribbling its headers can hold the caller past the deadline; the thread itself stops at its
    next chunk or read timeout. With ``truncate`` a body above ``max_bytes`` is cut there instead.
    """
    box: dict[str, Any] = {}
    done = threading.Event()
    headers = httpx.Headers(kwargs.get("headers"))
    headers["Accept-Encoding"] = ACCEPT_ENCODING  # only what sbxcheck decodes itself, boundedly
    kwargs = {**kwargs, "headers": headers}

    def wire(chunks: Iterator[bytes]) -> Iterator[bytes]:
        received = 0
        for chunk in chunks:
            if received + len(chunk) > max_bytes:
                if truncate:
                    yield chunk[: max_bytes - received]
                    return
                raise _BodyTooLarge
            received += len(chunk)
            if _now() > deadline:
                raise _DeadlineExceeded
            yield chunk

    def work() -> None:
        try:
            with client.stream(method, url, **kwargs) as resp:
                box["stream"] = resp
                declared = resp.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes and not truncate:
                    raise _BodyTooLarge
                body = bytearray()
                chunks, layers = raw_body(resp)
                for piece in decoded(wire(chunks), layers):
                    body += piece
                    if len(body) > max_bytes:
                        if truncate:
                            del body[max_bytes:]
                            break
                        raise _BodyTooLarge
                    if _now() > deadline:
                        raise _DeadlineExceeded
                headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in _DROP_HEADERS]
                box["response"] = httpx.Response(
                    resp.status_code, headers=headers, content=bytes(body), request=resp.request
                )
        except BaseException as exc:  # handed to the caller, who raises it
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="sbxcheck-http", daemon=True).start()
    if not done.wait(max(0.0, deadline - _now())):
        stream = box.get("stream")
        if isinstance(stream, httpx.Response):
            with contextlib.suppress(Exception):
                stream.close()
        raise _DeadlineExceeded
    if "error" in box:
        raise box["error"]
    response: httpx.Response = box["response"]
    return response


def new_client(**kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` whose cookie jar is bounded (:class:`BoundedCookieJar`): every client's."""
    return httpx.Client(cookies=BoundedCookieJar(), **kwargs)


def get_start(url: str, *, timeout_s: float, max_bytes: int) -> httpx.Response:
    """One anonymous GET of ``url`` as a person would open it, for a probe that judges a page's start.

    No redirect is followed (a 3xx is returned, not raised), the whole request — headers dribbled a
    byte at a time included — is bounded by ``timeout_s``, and the body is cut at ``max_bytes``
    (raw and decoded). httpx's errors propagate; the deadline is :class:`CommandTimeout`, a body in
    an encoding not read :class:`BadResponseError`.
    """
    with new_client(timeout=timeout_s, follow_redirects=False) as client:
        try:
            return _attempt(client, "GET", url, _now() + timeout_s, max_bytes, {}, truncate=True)
        except _DeadlineExceeded:
            raise CommandTimeout(f"GET {url}: no complete answer within {timeout_s:g}s") from None
        except BodyEncodingError as exc:
            raise BadResponseError(f"GET {url}: {exc}; not read") from None


def send(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    label: str,
    base_url: str,
    timeout_s: float,
    policy: RetryPolicy,
    retry: bool = True,
    deadline_s: float | None = None,
    max_bytes: int = MAX_BODY_BYTES,
    redirects: Literal["refuse", "return"] = "refuse",
    **kwargs: Any,
) -> httpx.Response:
    """Send one request with a whole-request deadline and a body cap, retried by ``policy``.

    Returns the last response, whatever its status (the caller maps statuses to errors);
    transport failures are mapped here. ``deadline_s`` (default ``timeout_s``) bounds each
    attempt as a whole, so a server that dribbles a byte at a time cannot outlast it; a body
    above ``max_bytes`` is refused, never parsed. Pushback (429, 503 + Retry-After) is waited out
    for every method until the :func:`pushback_until` deadline (or ``policy.pushback_budget_s``).
    A 3xx is never followed: it is refused (:func:`redirect_error`), or with ``redirects="return"``
    returned for the caller to judge (a login page a proxy sends an expired session to).
    """
    attempts = 1 + (policy.retries if retry else 0)
    per_attempt = timeout_s if deadline_s is None else deadline_s
    kwargs.setdefault("timeout", timeout_s)
    until = pushback_deadline(policy.pushback_budget_s)
    attempt = pushbacks = 0
    while True:
        last = attempt + 1 >= attempts
        try:
            resp = _attempt(client, method, url, _now() + per_attempt, max_bytes, kwargs)
        except _DeadlineExceeded:
            raise CommandTimeout(
                f"{label}: no complete answer within {per_attempt:g}s (whole-request deadline)",
                evidence={"endpoint": label, "deadline_s": per_attempt},
            ) from None
        except _BodyTooLarge:
            raise BadResponseError(
                f"{label}: response body above {_size(max_bytes)} (on the wire or decoded); refused, not parsed",
                evidence={"endpoint": label, "max_bytes": max_bytes},
            ) from None
        except BodyEncodingError as exc:
            raise BadResponseError(
                f"{label}: {exc}; refused, not parsed", evidence={"endpoint": label, "reason": str(exc)}
            ) from None
        except RETRYABLE_HTTPX as exc:
            if not last:
                time.sleep(policy.wait_s(attempt))
                attempt += 1
                continue
            raise map_httpx_error(exc, label, base_url, timeout_s, attempts=attempt + 1) from None
        except httpx.HTTPError as exc:
            raise map_httpx_error(exc, label, base_url, timeout_s) from None
        wait = pushback_wait_s(resp, policy.pushback_default_wait_s)
        if wait is not None:  # the server did not act: the same request again, whatever its method
            if pushbacks < policy.pushback_retries and _now() + wait < until:
                pushbacks += 1
                time.sleep(wait)
                continue
            return resp
        if resp.status_code in policy.statuses and not last:
            time.sleep(policy.wait_s(attempt, resp))
            attempt += 1
            continue
        if 300 <= resp.status_code < 400 and redirects == "refuse":  # never followed: a server never
            raise redirect_error(label, resp)  # picks where the token goes
        return resp


def _size(n: int) -> str:
    """``16 MiB``, ``64 KiB``: a cap as a person reads it."""
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n / 1024:g} KiB"


def location_host(resp: httpx.Response) -> str | None:
    """The host a 3xx's Location names (never its path or query: they may hold a token), or None."""
    location = resp.headers.get("location", "")
    try:
        return urlsplit(location).hostname if location else None
    except ValueError:
        return None


def redirect_error(label: str, resp: httpx.Response) -> BadResponseError:
    """A 3xx: an unexpected redirect, naming only its Location's host (a query may hold a token)."""
    location = resp.headers.get("location", "")
    host = location_host(resp)
    where = f"to host {host}" if host else ("to the same host" if location else "without a Location")
    return BadResponseError(
        f"{label}: unexpected redirect {resp.status_code} {where}; redirects are not followed "
        "(check the configured URL: scheme, host and path prefix)",
        evidence={"endpoint": label, "status": resp.status_code, "location_host": host},
    )  # pragma: no cover - the loop always returns or raises
