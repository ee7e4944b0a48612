"""Fleet resource of the simulated control plane: health, fleet health, remote nodes, cordon."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sbxcheck.sim.controlplane.auth import AuthRoutes
from sbxcheck.sim.controlplane.model import (
    DEFAULT_DISK_ESTIMATE_GIB,
    EMERGENCY_RESERVE_GIB,
    GIB,
    NodeState,
    iso_time,
    plain_text,
)


class FleetRoutes(AuthRoutes):
    """``/api/health``, ``/api/health/fleet``, ``/api/remote-nodes``, ``/api/nodes/{name}/cordon|uncordon``."""

    async def _health(self, request: Request) -> Response:
        body = {
            "status": "ok",
            "version": self.version,
            "dev_mode": self.dev_mode,
            "auth_required": not self.dev_mode,
            "auth_mode": self.auth_mode,
            "max_iterations": 50,
            "library_remote": None,
            "github_enabled": False,
            "dashboard_github_login_enabled": False,
        }
        return JSONResponse(body, headers={"Cache-Control": "private, max-age=5"})

    async def _components(self, request: Request, user: str) -> Response:
        """``GET /api/system/components``: what this release installs (the assistant MCP came after v0.7)."""
        return JSONResponse({"components": self.release.component_rows()})

    async def _fleet_health(self, request: Request, user: str) -> Response:
        with self._lock:
            statuses = [m.status for m in self._missions.values()]
            unresponsive = "fleet.control-unresponsive" in self.faults
            used_fraction = 0.96 if "fleet.degraded-disk" in self.faults else self.disk_used_fraction
        total = self.disk_total_bytes
        used = int(total * used_fraction)
        percent = round(used * 100.0 / total, 1)
        level = "critical" if percent >= 95 else "warn" if percent >= 85 else "ok"  # [U] thresholds
        body: dict[str, Any] = {
            "status": "degraded" if unresponsive else "ok",
            "version": self.version,
            "control_responsive": not unresponsive,
            "running": None if unresponsive else statuses.count("active"),
            "queue_depth": None if unresponsive else statuses.count("pending"),
            "missions": {
                k: v
                for k, v in {
                    "total": len(statuses),
                    "active": statuses.count("active"),
                    "completed": statuses.count("completed"),
                    "failed": statuses.count("failed") + statuses.count("not_feasible"),
                    "acknowledged": statuses.count("acknowledged"),
                }.items()
                if k in self.release.fleet_counts
            },
            "webhook_forwarder_configured": False,
            "offload_configured": False,
        }
        if not self.release.fleet_disk:  # 1.3.0: disk_* came with #590
            if unresponsive:  # 1.3.0 answers 0, not null, when the probes fail (control/mod.rs:3986)
                body.update(running=0, queue_depth=0)
            return JSONResponse(body)
        body |= {
            "disk_used": used,
            "disk_total": total,
            "disk_percent": percent,
            "disk_level": level,
            "disk_path": str(self.root),
            "disk_filesystem": "ext4",
            "disk_free_gib": round((total - used) / GIB, 1),
            "disk_required_gib": float(DEFAULT_DISK_ESTIMATE_GIB + EMERGENCY_RESERVE_GIB),
        }
        return JSONResponse(body)

    def _render_node(self, node: NodeState, now: float) -> dict[str, Any]:
        spec = node.spec
        status, error = "online", None
        last_seen: float | None = now - 4.0
        if not self.remote_nodes_enabled:
            status, last_seen = "disabled", None  # never probed while the fleet is off
        elif self._fault_on("fleet.node-offline", spec.id):
            status, last_seen, error = "offline", now - 600.0, "heartbeat failed: connection timed out"
        elif self._fault_on("fleet.node-degraded", spec.id):
            status, last_seen, error = "degraded", now - 33.0, "heartbeat missed"
        up = status in ("online", "degraded")
        return {
            "id": spec.id,
            "base_url": f"http://{spec.id}.tailnet.invalid:7878",
            "token_env": f"SANDBOXED_REMOTE_NODE_{spec.id.upper().replace('-', '_')}_TOKEN",
            "status": status,
            "labels": list(spec.labels),
            "version": "0.9.0",
            "protocol_version": 2,
            "capacity_total": spec.capacity,
            "capacity_available": spec.capacity if up else 0,
            "active_leases": 0,
            "active_jobs": 0,
            "queued_jobs": 0,
            "cpu_total": spec.cpu,
            "mem_total_bytes": spec.mem_gib * GIB,
            "mem_available_bytes": spec.mem_gib * GIB // 2,
            "disk_total_bytes": spec.disk_gib * GIB,
            "disk_available_bytes": spec.disk_free_gib * GIB,
            "cached_toolchains": list(spec.toolchains),
            "lean_runtime_ready": "lean" in spec.labels and up,
            "last_seen": None if last_seen is None else iso_time(last_seen),
            "error": error,
            "cordoned": node.cordoned or self._fault_on("fleet.node-cordoned", spec.id),
        }

    async def _remote_nodes(self, request: Request, user: str) -> Response:
        now = self.clock()  # last_seen is written on the control plane's clock
        with self._lock:
            nodes = [self._render_node(n, now) for n in self._nodes.values()]
        return JSONResponse(
            {
                "enabled": self.remote_nodes_enabled,
                "nodes": nodes,
                "recent_jobs": [],
                "spark_offload": {"configured": False, "enabled_workspaces": []},
                "remote_launch": {
                    "typed": True,
                    "harnesses": ["codex", "claudecode"],
                    "proxy_url_configured": False,
                },
            }
        )

    async def _cordon(self, request: Request, user: str) -> Response:
        name = request.path_params["name"]
        want = request.url.path.endswith("/cordon")
        with self._lock:
            node = self._nodes.get(name)
            if node is None:
                return plain_text(404, "unknown remote node")
            changed = node.cordoned != want
            node.cordoned = want
        return JSONResponse({"node": name, "cordoned": want, "changed": changed})
