"""The simulated control plane's operator surface: integrity, tracks, and the faults that bend them.

Routes registered on :class:`~sbxcheck.sim.controlplane.double.ControlPlaneDouble` through :func:`routes`
(before ``/api/control/missions/{id}``, which would otherwise swallow ``integrity``):

* ``GET /api/control/missions/integrity`` — computed from the double's missions: pending
  older than 15 min is ``scheduled_waiting`` with a deferred goal, else ``orphaned_pending``;
  active not updated for 24 h is ``stale_active``; awaiting_user older than 72 h ``stale_awaiting_user``.
* ``GET /api/control/tracks`` — one row per (project, track) of the user's missions.

The agent library, backends' agents, configured providers and the static catalog are in
:mod:`sbxcheck.sim.controlplane.providers`. Faults (``ops.*``) change the world the way a live
fleet drifts — missions left behind by earlier work, a refused provider credential, a workspace
still building — and never say what to conclude.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sbxcheck.sim.controlplane.model import NIL_UUID, MissionState, iso_time

if TYPE_CHECKING:
    from sbxcheck.sim.controlplane.base import DoubleBase
    from sbxcheck.sim.controlplane.double import ControlPlaneDouble

IDLE_TIMEOUT: Final = "OpenCode idle timeout: the model stopped producing output before finishing the turn."
ORPHAN_AGE_S: Final = 40 * 60
STALE_ACTIVE_AGE_S: Final = 30 * 3600
STALLED_SEVERE_AGE_S: Final = 700
PENDING_GRACE_S: Final = 15 * 60
STALE_ACTIVE_S: Final = 24 * 3600
STALE_AWAITING_S: Final = 72 * 3600
GROUP_LIMIT: Final = 20


def routes(double: ControlPlaneDouble) -> list[Route]:
    """The routes this module serves, each behind the double's bearer guard (the catalog's:
    :func:`sbxcheck.sim.controlplane.providers.routes`)."""
    guard = double._guard

    async def integrity(request: Request, user: str) -> Response:
        return JSONResponse(integrity_report(double, user))

    async def tracks(request: Request, user: str) -> Response:
        return JSONResponse(track_rows(double, user, request.query_params.get("project")))

    return [
        Route("/api/control/missions/integrity", guard(integrity), methods=["GET"]),
        Route("/api/control/tracks", guard(tracks), methods=["GET"]),
    ]


# ---- tracks ----------------------------------------------------------------------------------


def track_rows(double: DoubleBase, user: str, project: str | None) -> list[dict[str, Any]]:
    """``GET /tracks?project``: one row per (project, track) the user's missions are bound to."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    with double._lock:
        for m in double._missions.values():
            p, t = m.record.get("project"), m.record.get("track")
            if m.owner != user or not p or not t or (project and p != project):
                continue
            row = rows.setdefault(
                (p, t), {"project": p, "track": t, "total": 0, "active": 0, "pending": 0, "awaiting_user": 0}
            )
            row["total"] += 1
            if m.status in ("active", "pending", "awaiting_user"):
                row[m.status] += 1
            row["last_activity_at"] = iso_time(max(m.updated_epoch, m.last_event_epoch or 0.0))
    return [rows[k] for k in sorted(rows)]


def ignores_key(double: DoubleBase, body: dict[str, Any]) -> bool:
    """``ops.track-key-ignored``: a create bound to a track ignores its idempotency_key (lease not consulted)."""
    return "ops.track-key-ignored" in double.faults and bool(str(body.get("track") or "").strip())


# ---- integrity -------------------------------------------------------------------------------


def integrity_report(double: DoubleBase, user: str) -> dict[str, Any]:
    """``GET /missions/integrity`` for ``user``'s missions, now."""
    now = double.clock()
    groups: dict[str, list[dict[str, Any]]] = {
        "orphaned_pending": [],
        "scheduled_waiting": [],
        "stale_active": [],
        "stale_awaiting_user": [],
    }
    with double._lock:
        missions = [m for m in double._missions.values() if m.owner == user]
        for m in missions:
            age = now - m.updated_epoch
            row = {
                "id": m.id,
                "title": m.record.get("title"),
                "status": m.status,
                "updated_age_minutes": int(age // 60),
            }
            if m.status == "pending" and age > PENDING_GRACE_S:
                groups["scheduled_waiting" if m.prompt else "orphaned_pending"].append(row)
            elif m.status == "active" and age > STALE_ACTIVE_S:
                groups["stale_active"].append(row)
            elif m.status == "awaiting_user" and age > STALE_AWAITING_S:
                groups["stale_awaiting_user"].append(row)
    return {
        "generated_at": iso_time(now),
        "scanned": len(missions),
        "healthy": not groups["orphaned_pending"] and not groups["stale_active"],
        **{name: {"count": len(rows), "missions": rows[:GROUP_LIMIT]} for name, rows in groups.items()},
    }


# ---- faults ----------------------------------------------------------------------------------


def apply_fault(double: DoubleBase, name: str) -> None:
    """Bend the world for an ``ops.*`` fault (called by :meth:`ControlPlaneDouble.inject`)."""
    _apply_readiness_fault(double, name)
    if name == "ops.orphaned-pending":
        seed_mission(
            double, title="nightly docs refresh (left pending)", status="pending", age_s=ORPHAN_AGE_S
        )
    elif name == "ops.stale-active":
        seed_mission(
            double,
            title="lean cache warm-up (abandoned)",
            status="active",
            age_s=STALE_ACTIVE_AGE_S,
            prompt="warm the lean cache",
        )
    elif name == "ops.stalled-severe":
        m = seed_mission(
            double,
            title="proof search worker",
            status="active",
            age_s=STALLED_SEVERE_AGE_S,
            prompt="search for a proof",
            live=True,
        )
        double.running_health[m.id] = {
            "status": "stalled",
            "seconds_since_activity": STALLED_SEVERE_AGE_S,
            "last_state": "running",
            "severity": "severe",
        }
    elif name == "ops.auth-error-storm":
        for i in range(5):
            m = seed_mission(
                double,
                title=f"research lane {i + 1}",
                status="active",
                age_s=45,
                prompt="research",
                backend="claudecode",
                live=True,
            )
            _event(double, m, "user_message", "research", age_s=50)
            _event(
                double,
                m,
                "error",
                "Provider returned 401 Unauthorized: invalid api key (anthropic)",
                age_s=45,
            )
    elif name == "ops.tool-loop":
        m = seed_mission(
            double, title="build fixer", status="active", age_s=20, prompt="fix the build", live=True
        )
        args = json.dumps({"command": "lake build Verity.Core"})
        for i in range(4):
            call = f"call-{i}"
            _event(double, m, "tool_call", args, age_s=60 - 10 * i, tool_name="bash", tool_call_id=call)
            _event(
                double,
                m,
                "tool_result",
                "error: build failed",
                age_s=58 - 10 * i,
                tool_name="bash",
                tool_call_id=call,
                metadata={"exit_code": 1, "is_error": True},
            )


REMOVED_PROVIDER: Final = "minimax"
UNREGISTERED_AGENT: Final = "build"
PENDING_WORKSPACE: Final = "verity"
INIT_SCRIPT_WORKSPACE: Final = ("lean-lab", "bun-mcp")


def _apply_readiness_fault(double: DoubleBase, name: str) -> None:
    if name == "ops.workspace-pending":
        double.set_workspace_status(PENDING_WORKSPACE, "pending")
    elif name == "ops.missing-init-script":
        ws_name, script = INIT_SCRIPT_WORKSPACE
        ws = double._ws(ws_name)
        if ws.spec is not None:
            ws.spec = replace(ws.spec, init_scripts=tuple(s for s in ws.spec.init_scripts if s != script))
    elif name == "ops.agent-unregistered":
        double.agents = tuple(a for a in double.agents if a != UNREGISTERED_AGENT)
    elif name == "ops.removed-provider":  # gone from the catalog, as Virtuals was: creates refuse it too
        for backend_id, spec in list(double.backends.items()):
            kept = tuple(m for m in spec.models if not m.startswith(f"{REMOVED_PROVIDER}/"))
            if kept != spec.models:
                double.backends[backend_id] = replace(spec, models=kept)


def seed_mission(
    double: DoubleBase,
    *,
    title: str,
    status: str,
    age_s: float,
    prompt: str | None = None,
    backend: str = "opencode",
    live: bool = False,
) -> MissionState:
    """A mission some earlier work left on the host workspace, last updated ``age_s`` ago (no agent runs it)."""
    now = double.clock()
    then = now - age_s
    mid = str(uuid.uuid4())
    record: dict[str, Any] = {
        "id": mid,
        "status": status,
        "title": title,
        "workspace_id": NIL_UUID,
        "workspace_name": "host",
        "backend": backend,
        "agent": "build",
        "fast_mode": False,
        "history": [],
        "created_at": iso_time(then - 60),
        "updated_at": iso_time(then),
        "resumable": False,
        "requires_local_disk": True,
        "mission_mode": "task",
        "goal_mode": False,
        "priority": 0,
        "tags": ["seeded-by-fault"],
    }
    m = MissionState(
        record=record,
        owner=double.single_tenant_user_id,
        prompt=prompt,
        requested_model=None,
        created_mono=time.monotonic() - age_s - 60,
        updated_epoch=then,
        last_status_change_at=iso_time(then),
    )
    if live:
        m.execution = {
            "run_id": str(uuid.uuid4()),
            "mission_id": mid,
            "generation": 1,
            "execution_state": "running",
            "started_at": iso_time(then - 30),
            "heartbeat_at": iso_time(then),
        }
    with double._lock:
        double._missions[mid] = m
    return m


def _event(
    double: DoubleBase,
    m: MissionState,
    event_type: str,
    content: str,
    *,
    age_s: float,
    tool_name: str | None = None,
    tool_call_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> None:
    """Append a stored event dated ``age_s`` ago (the mission's idle clock follows it, as upstream)."""
    stamp_epoch = double.clock() - age_s
    with double._lock:
        m.events.append(
            {
                "id": next(double._event_ids),
                "mission_id": m.id,
                "sequence": len(m.events) + 1,
                "event_type": event_type,
                "timestamp": iso_time(stamp_epoch),
                "event_id": str(uuid.uuid4()),
                "tool_call_id": tool_call_id,
                "tool_name": tool_name,
                "content": content,
                "metadata": metadata or {},
            }
        )
        m.last_event_epoch = max(m.last_event_epoch or 0.0, stamp_epoch)
        m.last_agent_event_at = iso_time(m.last_event_epoch)
