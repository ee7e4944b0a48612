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
404                         :class:`NotFound`
429 / 503 + Retry-After     :class:`RateLimited` (a ``ServerError``), once the deadline is spent
5xx                         :class:`ServerError` (a ``TransportError``; carries ``status``)
other 4xx                   :class:`ApiRejected`; on create :class:`MissionRejected`
non-JSON / schema mismatch  :class:`~sbxcheck.errors.BadResponseError` (redacted excerpt)
==========================  ============================================================

Secrets: the password and token are registered with the default redactor, never appear in a
message or repr, and workspace records are reduced at the source: env-var *names* are kept,
values are dropped while parsing.
"""

from __future__ import annotations

import math
from typing import Any, Final

from pydantic import BaseModel, JsonValue

from sbxcheck.clients.sandboxed_errors import ApiRejected as ApiRejected
from sbxcheck.clients.sandboxed_errors import MissionRejected as MissionRejected
from sbxcheck.clients.sandboxed_errors import NotFound as NotFound
from sbxcheck.clients.sandboxed_errors import RateLimited as RateLimited
from sbxcheck.clients.sandboxed_errors import ServerError as ServerError
from sbxcheck.clients.sandboxed_errors import excerpt as excerpt
from sbxcheck.clients.sandboxed_errors import parse_error_text as parse_error_text
from sbxcheck.clients.sandboxed_errors import parse_supported_efforts as parse_supported_efforts
from sbxcheck.clients.sandboxed_errors import parse_valid_models as parse_valid_models
from sbxcheck.clients.sandboxed_missions import MissionCalls
from sbxcheck.clients.sandboxed_models import (
    AiProvider,
    AuthStatus,
    BackendInfo,
    CatalogProvider,
    CordonResult,
    ExecResult,
    FleetHealth,
    ProviderCatalog,
    RemoteFleet,
    TrackRow,
    Workspace,
)
from sbxcheck.errors import BadResponseError
from sbxcheck.ids import path_segment

EFFORT_LADDER: Final = ("max", "xhigh", "high", "medium", "low")
MAX_SEQUENCE: Final = 9223372036854775807

_EXEC_GRACE_S: Final = 15.0


def _workspace_segment(workspace_id: str) -> str:
    """A workspace id (a UUID) as one encoded path segment."""
    return path_segment(workspace_id, field="workspace_id", source="workspace path")


class _ExecBody(BaseModel):
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


def _names(doc: Any, key: str, endpoint: str) -> list[str]:
    """Names from a bare array (or ``{key: [...]}``) of strings or objects with ``id``/``name``."""
    items = doc.get(key) if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise BadResponseError(f"{endpoint}: expected a JSON array of {key}", evidence={"endpoint": endpoint})
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            value = item.get("id") or item.get("name")
            if isinstance(value, str):
                out.append(value)
    return out


class SandboxedClient(MissionCalls):
    """Typed client for the sandboxed.sh REST API. Usable as a context manager.

    With ``token`` the JWT is used as given; otherwise the first authenticated call logs in with
    ``password`` (and ``username`` in multi-user mode). With neither, no Authorization header is
    sent (dev mode). With a password, a request answered 401 (the token expired) logs in again once
    and is sent once more — a refused request did nothing, so repeating it, a create too, makes
    nothing twice; the second answer stands. Without one, a 401 is reported as it is.
    """

    def __repr__(self) -> str:
        return f"SandboxedClient({self.base_url!r}, authenticated={self._token is not None})"

    # ---- auth, fleet --------------------------------------------------------------------------

    def auth_status(self) -> AuthStatus:
        """``GET /api/auth/status``."""
        return self._get("/api/auth/status", AuthStatus, auth=False)

    def fleet_health(self) -> FleetHealth:
        """``GET /api/health/fleet``."""
        return self._get("/api/health/fleet", FleetHealth)

    def remote_nodes(self) -> RemoteFleet:
        """``GET /api/remote-nodes``."""
        return self._get("/api/remote-nodes", RemoteFleet)

    def cordon_node(self, name: str, *, cordoned: bool = True) -> CordonResult:
        """``POST /api/nodes/:name/cordon`` (or ``uncordon``); unknown node → :class:`NotFound`."""
        node = path_segment(name, shape="name", field="name", source="cordon_node")
        path = f"/api/nodes/{node}/{'cordon' if cordoned else 'uncordon'}"
        resp = self._send("POST", path, json_body={})
        return self._parse(f"POST {path}", resp, CordonResult)

    def components(self) -> list[str]:
        """``GET /api/system/components``: the names of what this install ships (``assistant_mcp``, ...)."""
        path = "/api/system/components"
        doc = self._json(f"GET {path}", self._send("GET", path), False)
        if not isinstance(doc, dict):  # upstream answers {"components": [...]}: anything else says nothing
            raise BadResponseError(f"GET {path}: expected {{components: [...]}}", evidence={"endpoint": path})
        return _names(doc, "components", f"GET {path}")

    # ---- workspaces ---------------------------------------------------------------------------

    def list_workspaces(self) -> list[Workspace]:
        """``GET /api/workspaces``, reduced at the source: env values never leave this call."""
        path = "/api/workspaces"
        resp = self._send("GET", path)
        return self._parse_list(f"GET {path}", resp, Workspace, secret_bearing=True)

    def get_workspace(self, workspace_id: str) -> Workspace:
        """``GET /api/workspaces/:id``, reduced at the source."""
        path = f"/api/workspaces/{_workspace_segment(workspace_id)}"
        resp = self._send("GET", path)
        return self._parse(f"GET {path}", resp, Workspace, secret_bearing=True)

    def workspace_exec(
        self, workspace_id: str, command: str, timeout_s: float = 60.0, *, cwd: str | None = None
    ) -> ExecResult:
        """``POST /api/workspaces/:id/exec`` → exit code, output, ``timed_out``.

        The server enforces ``timeout_secs`` (rounded up, max 600); the HTTP call waits that long
        plus a grace period.
        """
        secs = max(1, min(600, math.ceil(timeout_s)))
        body: dict[str, JsonValue] = {"command": command, "timeout_secs": secs}
        if cwd is not None:
            body["cwd"] = cwd
        path = f"/api/workspaces/{_workspace_segment(workspace_id)}/exec"
        endpoint = f"POST {path}"
        resp = self._send("POST", path, json_body=body, timeout_s=secs + _EXEC_GRACE_S)
        parsed = self._parse(endpoint, resp, _ExecBody, secret_bearing=True)
        return ExecResult(
            exit_code=-1 if parsed.exit_code is None else parsed.exit_code,
            stdout=parsed.stdout,
            stderr=parsed.stderr,
            timed_out=parsed.timed_out,
        )

    # ---- workspace and catalog readiness: read-only, what the runbook checks ------------------

    def library_agents(self) -> list[str]:
        """``GET /api/library/agent``: the library agents' names (a bare array, or ``{"agents": [...]}``)."""
        path = "/api/library/agent"
        resp = self._send("GET", path)
        return _names(self._json(f"GET {path}", resp, False), "agents", f"GET {path}")

    def backends(self) -> list[BackendInfo]:
        """``GET /api/backends``: the registered backends."""
        path = "/api/backends"
        return self._parse_list(f"GET {path}", self._send("GET", path), BackendInfo)

    def backend_agents(self, backend: str) -> list[str]:
        """``GET /api/backends/:id/agents``: the agent ids a backend offers (codex: ``default``)."""
        path = f"/api/backends/{backend}/agents"
        resp = self._send("GET", path)
        return _names(self._json(f"GET {path}", resp, False), "agents", f"GET {path}")

    def ai_providers(self) -> list[AiProvider]:
        """``GET /api/ai/providers``: configured providers and the backends each serves."""
        path = "/api/ai/providers"
        return self._parse_list(f"GET {path}", self._send("GET", path), AiProvider, secret_bearing=True)

    def tracks(self, project: str) -> list[TrackRow]:
        """``GET /api/control/tracks?project=``: the project's track rows and their mission counts."""
        path = "/api/control/tracks"
        return self._parse_list(f"GET {path}", self._send("GET", path, params={"project": project}), TrackRow)

    def provider_catalog(self) -> list[CatalogProvider]:
        """``GET /api/providers?include_all=true``: the static model catalog."""
        path = "/api/providers"
        resp = self._send("GET", path, params={"include_all": "true"})
        return self._parse(f"GET {path}", resp, ProviderCatalog).providers
