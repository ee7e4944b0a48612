"""The assembled control plane double: every resource's mixin on the shared state, and the route table."""

from __future__ import annotations

from starlette.routing import Route

from sbxcheck.sim.controlplane import ops, providers
from sbxcheck.sim.controlplane.fleet import FleetRoutes
from sbxcheck.sim.controlplane.missions import MissionRoutes
from sbxcheck.sim.controlplane.workspaces import WorkspaceRoutes


class ControlPlaneDouble(MissionRoutes, WorkspaceRoutes, FleetRoutes):
    """State and Starlette app of a simulated sandboxed.sh control plane. Thread-safe.

    ``root`` receives ``workspaces/<name>/<repo>`` (real git checkouts), ``host/`` (the nil-UUID
    host workspace) and ``missions/<id>/`` (ephemeral scopes under ``cp.mount-missing``).
    ``password`` defaults to a random one (read it from :attr:`password`); ``users`` switches to
    multi-user mode; ``dev_mode`` accepts every request as user ``dev``.
    """

    def _routes(self) -> list[Route]:
        guard = self._guard
        return [
            *ops.routes(self),  # before /api/control/missions/{id}, which would match them
            *providers.routes(self),  # the catalog, and /api/backends
            Route("/api/auth/login", self._login, methods=["POST"]),
            Route("/api/auth/status", self._auth_status, methods=["GET"]),
            Route("/api/health", self._health, methods=["GET"]),
            Route("/api/health/fleet", guard(self._fleet_health), methods=["GET"]),
            Route("/api/remote-nodes", guard(self._remote_nodes), methods=["GET"]),
            Route("/api/nodes/{name}/cordon", guard(self._cordon), methods=["POST"]),
            Route("/api/nodes/{name}/uncordon", guard(self._cordon), methods=["POST"]),
            Route("/api/control/missions", guard(self._missions_root), methods=["GET", "POST"]),
            Route("/api/control/running", guard(self._running), methods=["GET"]),
            Route("/api/control/message", guard(self._message), methods=["POST"]),
            Route("/api/control/parallel/config", guard(self._parallel_config), methods=["GET"]),
            Route("/api/control/missions/{id}/parallel", guard(self._parallel_start), methods=["POST"]),
            Route("/api/system/components", guard(self._components), methods=["GET"]),
            Route("/api/control/stream", guard(self.stream.endpoint), methods=["GET"]),
            Route("/api/control/missions/{id}", guard(self._mission_item), methods=["GET", "DELETE"]),
            Route("/api/control/missions/{id}/events", guard(self._events), methods=["GET"]),
            Route("/api/control/missions/{id}/digest", guard(self._digest), methods=["GET"]),
            Route("/api/control/missions/{id}/cancel", guard(self._cancel), methods=["POST"]),
            Route("/api/control/missions/{id}/status", guard(self._set_status_route), methods=["POST"]),
            Route("/api/workspaces", guard(self._list_workspaces), methods=["GET"]),
            Route("/api/workspaces/{id}", guard(self._get_workspace), methods=["GET"]),
            Route("/api/workspaces/{id}/exec", guard(self._exec), methods=["POST"]),
        ]
