"""Fleet and catalog calls of the sandboxed.sh REST client: nodes, components, agents, providers."""

from __future__ import annotations

from typing import Any

from sbxcheck.clients.sandboxed_models import (
    AiProvider,
    AuthStatus,
    BackendInfo,
    CatalogProvider,
    CordonResult,
    FleetHealth,
    ProviderCatalog,
    RemoteFleet,
    TrackRow,
)
from sbxcheck.clients.sandboxed_wire import SandboxedWire
from sbxcheck.errors import BadResponseError
from sbxcheck.ids import path_segment
from sbxcheck.transports.http import http_date


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


class FleetCalls(SandboxedWire):
    """The control plane's fleet (its auth mode, health, nodes and a node's cordon) and what the install
    offers a mission (components, library agents, backends, providers, tracks, the model catalog)."""

    def auth_status(self) -> AuthStatus:
        """``GET /api/auth/status``."""
        return self._get("/api/auth/status", AuthStatus, auth=False)

    def fleet_health(self) -> FleetHealth:
        """``GET /api/health/fleet``."""
        return self._get("/api/health/fleet", FleetHealth)

    def remote_nodes(self) -> RemoteFleet:
        """``GET /api/remote-nodes``, stamped with the answer's ``Date`` (the clock ``last_seen`` is on)."""
        resp = self._send("GET", "/api/remote-nodes")
        fleet = self._parse("GET /api/remote-nodes", resp, RemoteFleet)
        return fleet.answered(http_date(resp.headers.get("date")))

    def cordon_node(self, name: str, *, cordoned: bool = True) -> CordonResult:
        """``POST /api/nodes/:name/cordon`` (or ``uncordon``); unknown node → :class:`NotFound`."""
        node = path_segment(name, shape="name", field="name", source="cordon_node")
        path = f"/api/nodes/{node}/{'cordon' if cordoned else 'uncordon'}"
        resp = self._send("POST", path, json_body={})
        return self._parse(f"POST {path}", resp, CordonResult)

    # ---- what the install offers: read-only, what the readiness checks read -------------------

    def components(self) -> list[str]:
        """``GET /api/system/components``: the names of what this install ships (``assistant_mcp``, ...)."""
        path = "/api/system/components"
        doc = self._json(f"GET {path}", self._send("GET", path), False)
        if not isinstance(doc, dict):  # upstream answers {"components": [...]}: anything else says nothing
            raise BadResponseError(f"GET {path}: expected {{components: [...]}}", evidence={"endpoint": path})
        return _names(doc, "components", f"GET {path}")

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
