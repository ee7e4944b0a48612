"""Typed REST client for a sandboxed.sh control plane (its REST API: auth, missions, workspaces, fleet).

One :class:`SandboxedClient` wraps an ``httpx.Client``. Every call has a timeout; only idempotent
GETs are retried on errors by the shared :class:`~sbxcheck.transports.http.RetryPolicy` (``retries``
extra attempts, bounded backoff, ``Retry-After`` honoured); pushback (429, 503 + Retry-After) is
waited out for every method (the server did not act; creates carry their idempotency key) until
the caller's deadline, then it is :class:`RateLimited`. Every attempt has a whole-request deadline
and a 16 MiB body cap (:func:`~sbxcheck.transports.http.send`).
HTTP failures are mapped to the sbxcheck error tree in one place
(:meth:`~sbxcheck.clients.sandboxed_wire.SandboxedWire._send`):

==========================  ============================================================
connect refused / timeout   :class:`~sbxcheck.errors.HostUnreachable`
read/write timeout          :class:`~sbxcheck.errors.CommandTimeout`
401 / 403                   :class:`~sbxcheck.errors.AuthFailed` (message = server's text)
a login page (3xx or HTML)  an expired session: logged in again once, else ``AuthFailed`` naming it
other 3xx                   :class:`~sbxcheck.errors.BadResponseError` (never followed)
404                         :class:`NotFound`
429 / 503 + Retry-After     :class:`RateLimited` (a ``ServerError``), once the deadline is spent
5xx                         :class:`ServerError` (a ``TransportError``; carries ``status``)
other 4xx                   :class:`ApiRejected`; on create :class:`MissionRejected`
non-JSON / schema mismatch  :class:`~sbxcheck.errors.BadResponseError` (redacted excerpt)
==========================  ============================================================

Secrets: the password and token are registered with the default redactor, never appear in a
message or repr, and workspace records are reduced at the source: env-var *names* are kept,
values are dropped while parsing.

The client is the wire core (:mod:`.sandboxed_wire`: connection, status mapping, parsing) and its
endpoint groups: missions and events (:mod:`.sandboxed_missions`), workspaces
(:mod:`.sandboxed_workspaces`), fleet and catalog (:mod:`.sandboxed_fleet`).
"""

from __future__ import annotations

from typing import Final

from sbxcheck.clients.sandboxed_errors import ApiRejected as ApiRejected
from sbxcheck.clients.sandboxed_errors import MissionRejected as MissionRejected
from sbxcheck.clients.sandboxed_errors import NotFound as NotFound
from sbxcheck.clients.sandboxed_errors import RateLimited as RateLimited
from sbxcheck.clients.sandboxed_errors import ServerError as ServerError
from sbxcheck.clients.sandboxed_errors import SlotsFull as SlotsFull
from sbxcheck.clients.sandboxed_errors import excerpt as excerpt
from sbxcheck.clients.sandboxed_errors import parse_error_text as parse_error_text
from sbxcheck.clients.sandboxed_errors import parse_supported_efforts as parse_supported_efforts
from sbxcheck.clients.sandboxed_errors import parse_valid_models as parse_valid_models
from sbxcheck.clients.sandboxed_fleet import FleetCalls
from sbxcheck.clients.sandboxed_missions import MissionCalls
from sbxcheck.clients.sandboxed_workspaces import WorkspaceCalls

EFFORT_LADDER: Final = ("max", "xhigh", "high", "medium", "low")
MAX_SEQUENCE: Final = 9223372036854775807


class SandboxedClient(MissionCalls, WorkspaceCalls, FleetCalls):
    """Typed client for the sandboxed.sh REST API. Usable as a context manager.

    With ``token`` the JWT is used as given; otherwise the first authenticated call logs in with
    ``password`` (and ``username`` in multi-user mode). With neither, no Authorization header is
    sent (dev mode). With a password, a request answered as an expired session (a 401, or a proxy's
    or SSO's login page: a redirect to it, or the page where JSON was asked) logs in again once —
    one login for every thread that met it — and is sent once more: a refused request did nothing,
    so repeating it, a create too, makes nothing twice; the second answer stands. Without one, it
    is reported as it is. A password is never sent over ``http://`` to a host that is not loopback
    unless ``allow_cleartext_password``.
    """

    def __repr__(self) -> str:
        return f"SandboxedClient({self.base_url!r}, authenticated={self._token is not None})"
