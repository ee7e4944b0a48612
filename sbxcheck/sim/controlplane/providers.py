"""Providers/catalog resource of the simulated control plane: backends, the agent library,
backends' agents, configured providers and the static catalog, derived from the double's backends."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from sbxcheck.sim.controlplane.double import ControlPlaneDouble


def routes(double: ControlPlaneDouble) -> list[Route]:
    """``GET /api/backends``, ``/api/library/agent``, ``/api/backends/{id}/agents``, ``/api/ai/providers``,
    ``/api/providers``, each behind the double's bearer guard."""
    guard = double._guard

    async def backends(request: Request, user: str) -> Response:
        return JSONResponse([{"id": b.id, "name": b.name} for b in double.backends.values()])

    async def library_agents(request: Request, user: str) -> Response:
        return JSONResponse([{"name": a, "description": f"{a} agent"} for a in double.agents])

    async def backend_agents(request: Request, user: str) -> Response:
        backend = request.path_params["id"]
        if backend not in double.backends:
            return JSONResponse({"error": f"unknown backend {backend}"}, status_code=404)
        if backend == "codex":  # codex answers a single default agent
            return JSONResponse([{"id": "default", "name": "Codex Agent"}])
        return JSONResponse([{"id": a, "name": a} for a in double.agents])

    async def ai_providers(request: Request, user: str) -> Response:
        return JSONResponse(provider_rows(double))

    async def catalog(request: Request, user: str) -> Response:
        return JSONResponse({"providers": catalog_rows(double)})

    return [
        Route("/api/library/agent", guard(library_agents), methods=["GET"]),
        Route("/api/backends/{id}/agents", guard(backend_agents), methods=["GET"]),
        Route("/api/ai/providers", guard(ai_providers), methods=["GET"]),
        Route("/api/providers", guard(catalog), methods=["GET"]),
        Route("/api/backends", guard(backends), methods=["GET"]),
    ]


def _provider_models(double: ControlPlaneDouble) -> dict[str, tuple[list[str], list[str]]]:
    """provider -> (model ids, backends that reach it), from the double's backend catalogs.

    opencode's ids are ``provider/model`` (the providers it routes to); every other backend is
    locked to its own provider (opencode is the superset router).
    """
    out: dict[str, tuple[list[str], list[str]]] = {}
    for spec in double.backends.values():
        for model in spec.models:
            provider, _, bare = (
                model.partition("/") if spec.provider_qualified else (spec.provider, "", model)
            )
            models, backends = out.setdefault(provider, ([], []))
            if bare not in models:
                models.append(bare)
            if spec.id not in backends:
                backends.append(spec.id)
    return out


def provider_rows(double: ControlPlaneDouble) -> list[dict[str, Any]]:
    """``GET /api/ai/providers``: one configured provider per catalog provider, with its backends."""
    rows = []
    for provider, (_, backends) in sorted(_provider_models(double).items()):
        rows.append(
            {
                "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"sbxcheck-sim-provider:{provider}")),
                "provider_type": provider,
                "provider_type_name": provider.title(),
                "name": provider.title(),
                "has_api_key": True,
                "has_oauth": False,
                "enabled": True,
                "is_default": False,
                "uses_oauth": False,
                "auth_methods": ["api_key"],
                "status": {"type": "connected"},
                "use_for_backends": backends,
                "created_at": "2026-06-01T00:00:00Z",
                "updated_at": "2026-06-01T00:00:00Z",
            }
        )
    return rows


def catalog_rows(double: ControlPlaneDouble) -> list[dict[str, Any]]:
    """``GET /api/providers``: the static catalog (every provider, ``include_all`` or not)."""
    return [
        {
            "id": provider,
            "name": provider.title(),
            "billing": "pay-per-token",
            "models": [{"id": m, "name": m} for m in models],
        }
        for provider, (models, _) in sorted(_provider_models(double).items())
    ]
