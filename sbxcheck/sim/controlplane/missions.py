"""Missions resource of the simulated control plane: create (leases, idempotency, faults), read, list,
digest, cancel, and the running view."""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sbxcheck.sim.controlplane import lies, ops
from sbxcheck.sim.controlplane.model import (
    BUSY_HOLDER_ID,
    BUSY_HOLDER_TAG,
    CANCEL_SLOW_S,
    DEFAULT_DISK_ESTIMATE_GIB,
    GOAL_LIMIT,
    HARNESS_PREFIXES,
    KNOWN_CREATE_FIELDS,
    NATIVE_AGENTS,
    NIL_UUID,
    PATH_SHAPED_ID,
    STATUSES,
    STR_FIELDS,
    TERMINAL,
    TITLE_COALESCE_S,
    MissionState,
    WorkspaceState,
    idle_for,
    iso_time,
    json_text,
    plain_text,
    uuid_or_none,
)
from sbxcheck.sim.controlplane.parallel import ParallelSlots
from sbxcheck.sim.controlplane.releases import create_body, trim_record
from sbxcheck.sim.faults import HOSTILE_TEXT, LINE_FORGERY


def _type_error(body: Mapping[str, Any], github_pr_int: bool = False) -> str | None:
    """serde-style type errors for the create body (→ 422), or None (``github_pr_int``: the release
    types ``github_pr`` as an integer)."""
    for name in STR_FIELDS:
        if github_pr_int and name == "github_pr":
            continue
        if body.get(name) is not None and not isinstance(body[name], str):
            return f"{name}: invalid type, expected a string"
    pr = body.get("github_pr")
    if github_pr_int and pr is not None and (isinstance(pr, bool) or not isinstance(pr, int)):
        return "github_pr: invalid type, expected i64"
    for name in ("fast_mode", "writer", "remote_async"):
        if body.get(name) is not None and not isinstance(body[name], bool):
            return f"{name}: invalid type, expected a boolean"
    for name in ("priority", "estimated_disk_gib"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return f"{name}: invalid type, expected an integer"
    for name in ("tags", "remote_requirements"):
        value = body.get(name)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{name}: invalid type, expected a sequence of strings"
    for name in ("attachments", "acceptance_criteria"):
        if body.get(name) is not None and not isinstance(body[name], list):
            return f"{name}: invalid type, expected a sequence"
    return None


class MissionRoutes(ParallelSlots):
    """``/api/control/missions[/{id}[/digest|/cancel]]`` and ``/api/control/running``."""

    async def _missions_root(self, request: Request, user: str) -> Response:
        if request.method == "POST":
            return await self._create(request, user)
        return self._list(request, user)

    async def _create(self, request: Request, user: str) -> Response:
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        bad = _type_error(create_body(self.release, body), self.release.github_pr_int)
        if bad is not None:
            return plain_text(422, f"Failed to deserialize the JSON body into the target type: {bad}")
        with self._lock:
            return self._create_locked(body, user)

    def _create_locked(self, body: dict[str, Any], user: str) -> Response:
        """The real create's processing order, numbered as in specs/sandboxed-sh.md 3.4 (the subset modelled);
        an older release first drops the fields it does not know, and has no leases, coalescing or occupancy."""
        body = create_body(self.release, body)
        current = self.release.admission  # an older release has no leases, coalescing, occupancy or disk admission

        def opt(name: str) -> str | None:
            value = body.get(name)
            return value.strip() if isinstance(value, str) and value.strip() else None

        prompt = body.get("prompt")
        # 1. prompt validation [U: the real validator's text]
        if isinstance(prompt, str) and not prompt.strip():
            return plain_text(400, "prompt must not be empty")
        # 2. attachments
        if body.get("attachments") and not opt("project"):
            return plain_text(400, "attachments require a project")
        # 4. unknown keys
        ignored = [k for k in body if k not in KNOWN_CREATE_FIELDS]
        headers = {"x-ignored-fields": ",".join(ignored)} if ignored and current else {}
        foreign = lies.foreign_for_create(self, opt("backend") or opt("agent"))
        if foreign is not None:  # a person's mission answered as if this create had joined it
            return self._coalesced(foreign, headers)
        # 5. idempotency coalescing (cp.idempotency-ignored skips only this step)
        key = opt("idempotency_key")
        if (
            current
            and key
            and "cp.idempotency-ignored" not in self.faults
            and not ops.ignores_key(self, body)
        ):
            held = self._missions.get(self._leases.get(f"lease:{key}", ""))
            if held is not None and held.owner == user and held.status != "failed":
                return self._coalesced(held, headers)
        # 6. retry-shaped duplicate coalescing: always on, as upstream (it masks an ignored key for a
        # retry identical in every field)
        title = opt("title")
        if title and current:
            now = time.monotonic()
            for m in reversed(self._missions.values()):
                if (
                    m.owner == user
                    and m.record.get("title") == title
                    and m.record.get("origin_session_id") == opt("origin_session_id")
                    and m.status in ("pending", "active", "waiting_background")
                    and now - m.created_mono < TITLE_COALESCE_S
                ):
                    return self._coalesced(m, headers)
        # workspace [U: the real text for an unknown id]
        ws_id = NIL_UUID
        if opt("workspace_id"):
            parsed = uuid_or_none(str(opt("workspace_id")))
            if parsed is None:
                return plain_text(
                    422, "Failed to deserialize the JSON body into the target type: workspace_id: UUID"
                )
            if parsed not in self._workspaces:
                return plain_text(400, f"Workspace {parsed} not found")
            ws_id = parsed
        workspace = self._workspaces[ws_id]
        # 11. workspace occupied
        if self._fault_on("cp.workspace-busy", workspace.name, ws_id):  # another session holds it
            return json_text(
                409,
                {
                    "error": "workspace_occupied",
                    "mission_id": BUSY_HOLDER_ID,
                    "title": f"sbxcheck {BUSY_HOLDER_TAG} canary codex-{workspace.name}",
                    "message": f"Workspace {workspace.name} already has a live mission {BUSY_HOLDER_ID}",
                },
            )
        if ws_id not in self.occupancy_exempt and current:
            for m in self._missions.values():
                if m.record["workspace_id"] == ws_id and m.status not in TERMINAL:
                    return json_text(
                        409,
                        {
                            "error": "workspace_occupied",
                            "mission_id": m.id,
                            "title": m.record.get("title"),
                            "message": f"Workspace {workspace.name} already has a live mission {m.id}",
                        },
                    )
        # 13-16. backend selection
        agent, backend, requested_model = opt("agent"), opt("backend"), opt("model_override")
        if agent in NATIVE_AGENTS:
            if backend is None:
                backend = agent
            elif backend != agent:
                return plain_text(
                    400, f"Agent '{agent}' selects backend '{agent}', but mission backend is '{backend}'"
                )
        model = requested_model
        if model and "/" in model:
            prefix, rest = model.split("/", 1)
            if prefix in HARNESS_PREFIXES and prefix != "opencode":
                if backend is None:
                    backend, model = prefix, rest
                elif backend == prefix:
                    model = rest
                elif backend != "opencode":
                    return plain_text(
                        400, f"Model '{model}' selects backend '{prefix}', but mission backend is '{backend}'"
                    )
        backend = backend or "claudecode"
        spec = self.backends.get(backend)
        # 17. codex /goal
        goal_objective: str | None = None
        if backend == "codex" and isinstance(prompt, str) and prompt.lstrip().startswith("/goal "):
            goal_objective = prompt.lstrip()[len("/goal ") :].strip()
            if self.goal_limit_at_create and len(goal_objective) > GOAL_LIMIT:
                return plain_text(400, f"goal objective must be at most {GOAL_LIMIT} characters")
        if self._fault_on("cp.control-chars", backend):  # hostile text in the refusal
            return plain_text(400, f"backend {backend} refused the mission: {HOSTILE_TEXT}{LINE_FORGERY}")
        # 18. effort: kept and validated only where the backend takes it; silently dropped elsewhere
        effort = opt("model_effort")
        efforts = self.release.codex_efforts if spec is not None and spec.id == "codex" else None
        if spec is None or spec.efforts is None:
            effort = None
        elif effort is not None:
            effort = effort.lower()
            supported = [
                e
                for e in efforts or spec.efforts
                if not (e == "max" and self._fault_on("cp.effort-reject-max", backend))
            ]
            if effort not in supported:
                return plain_text(
                    400,
                    f"Invalid model_effort for backend '{backend}'. Supported values: {', '.join(supported)}",
                )
        # 19. model normalisation
        if model and spec is not None:
            if spec.provider_qualified:
                if "/" not in model:
                    model = next((m for m in spec.models if m.split("/", 1)[1] == model), model)
            else:
                model = model.split("/", 1)[1] if "/" in model else model
                model = spec.aliases.get(model, model)
        # 21. agent validation (library agents; native harnesses skip it)
        if agent and spec is not None and spec.validates_agent and agent not in self.agents:
            return plain_text(
                400, f"Agent '{agent}' not found in library. Available agents: {', '.join(self.agents)}"
            )
        # 22. unregistered backend
        if spec is None:
            return plain_text(400, f"Unknown backend: {backend}")
        # 23. catalog check; the list of valid ids follows the seed's observed sentence [S]
        if model and model not in spec.models:
            return plain_text(
                400,
                f"Model '{requested_model}' not found in {spec.provider} catalog. "
                f"Valid models: {', '.join(spec.models)}",
            )
        # 25. claudecode fills the profile's default model
        if model is None and spec.default_model:
            model = spec.default_model
        # 27. disk admission (the parts that are pure validation)
        estimate = body.get("estimated_disk_gib")
        if estimate is not None and not 1 <= int(estimate) <= 512:
            return plain_text(400, "estimated_disk_gib must be between 1 and 512")
        tags = [str(t).strip() for t in body.get("tags") or [] if str(t).strip()]
        if current:  # disk admission came after 1.3.0
            if any(t.startswith("disk-reservation-v1") for t in tags):
                return plain_text(400, "tags starting with 'disk-reservation-v1' are reserved")
            tags.append(f"disk-estimate-gib:{estimate or DEFAULT_DISK_ESTIMATE_GIB}")
        # 30. persist pending and bind the lease
        return self._persist(
            body,
            user,
            workspace,
            backend,
            agent,
            model,
            requested_model,
            effort,
            goal_objective,
            tags,
            headers,
        )

    def _coalesced(self, m: MissionState, headers: dict[str, str]) -> Response:
        return JSONResponse(self._render(m), headers={**headers, "x-coalesced-with": m.id})

    def _persist(
        self,
        body: dict[str, Any],
        user: str,
        workspace: WorkspaceState,
        backend: str,
        agent: str | None,
        model: str | None,
        requested_model: str | None,
        effort: str | None,
        goal_objective: str | None,
        tags: list[str],
        headers: dict[str, str],
    ) -> Response:
        now = self.clock()
        mid = str(uuid.uuid4())
        prompt = body.get("prompt") if isinstance(body.get("prompt"), str) else None
        title = body.get("title") if isinstance(body.get("title"), str) and body["title"].strip() else None
        if title is None:
            title = (prompt or "New mission").strip().splitlines()[0][:60] or "New mission"
        record: dict[str, Any] = {
            "id": mid,
            "status": "pending",
            "title": title,
            "workspace_id": workspace.id,
            "workspace_name": workspace.name,
            "backend": backend,
            "fast_mode": bool(body.get("fast_mode", False)),
            "history": [],
            "created_at": iso_time(now),
            "updated_at": iso_time(now),
            "resumable": False,
            "requires_local_disk": True,
            "mission_mode": "task",
            "goal_mode": goal_objective is not None,
            "priority": int(body.get("priority") or 0),
            "tags": tags,
        }
        if agent:
            record["agent"] = agent
        if model and not self._fault_on("cp.record-drops-model", backend):
            record["model_override"] = model
        if effort:
            record["model_effort"] = effort
        if goal_objective is not None:
            record["goal_objective"] = goal_objective
        for name in (
            "config_profile", "parent_mission_id", "working_directory", "not_before", "deadline", "project",
            "track", "intent", "github_pr", "desired_state", "next_check_at", "origin", "origin_session_id",
        ):  # fmt: skip
            value = body.get(name)
            if isinstance(value, str) and value.strip():
                record[name] = value.strip()
        if self.release.github_pr_int and isinstance(body.get("github_pr"), int):
            record["github_pr"] = body["github_pr"]  # 1.3.0 stores the PR number as an integer
        m = MissionState(
            record=record,
            owner=user,
            prompt=prompt,
            requested_model=requested_model,
            created_mono=time.monotonic(),
            updated_epoch=now,
            last_status_change_at=iso_time(now),
        )
        self._missions[mid] = m
        lies.flood_after_create(self, m)
        key = body.get("idempotency_key")
        lease = key.strip() if isinstance(key, str) and key.strip() else f"auto:{mid}"
        self._leases[f"lease:{lease}"] = mid
        if not self.release.first_message:  # an older release waits for the first message
            self._start_agent(m)
        if self._fault_on("cp.create-500", backend):  # stored and running; the client never learns its id
            return plain_text(500, "Internal Server Error")
        return JSONResponse(self._render(m), headers=headers)

    async def _message(self, request: Request, user: str) -> Response:
        """``POST /api/control/message {content, mission_id?}``: a pending mission's first message starts it."""
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        content = body.get("content")
        if not isinstance(content, str) or not content.strip():
            return plain_text(400, "content is required")
        with self._lock:
            mid, m = self._lookup(str(body.get("mission_id") or ""))
            if m is None or m.owner != user:
                return plain_text(409, f"mission {mid or body.get('mission_id')} is not available")
            queued, _ = self._route_first_message(user, m, content)
        message_id = str(uuid.uuid4())
        if self.release.first_message:
            return JSONResponse({"id": message_id, "queued": queued})
        return JSONResponse(
            {"id": message_id, "queued": queued, "message_accepted": True, "mission_id": mid, "warnings": []}
        )

    def _render(self, m: MissionState, *, with_agent: bool = True, decorate: bool = False) -> dict[str, Any]:
        now = self.clock()
        rec = copy.deepcopy(m.record)
        if not with_agent:
            rec.pop("agent", None)
        last_activity = max(m.updated_epoch, m.last_event_epoch or 0.0)
        idle = max(0.0, now - last_activity)
        rec["last_status_change_at"] = m.last_status_change_at
        if m.last_agent_event_at:
            rec["last_agent_event_at"] = m.last_agent_event_at
        if m.last_output_at:
            rec["last_output_at"] = m.last_output_at
        rec["last_activity_at"] = iso_time(last_activity)
        rec["idle_seconds"] = int(idle)
        rec["idle_for"] = idle_for(idle)
        verdict = self._verdict(m.status, idle)
        if verdict is not None:
            rec["health_verdict"] = verdict
        rec["execution"] = copy.deepcopy(m.execution)
        if self._fault_on("cp.path-shaped-id", str(rec.get("backend"))):
            rec["id"] = PATH_SHAPED_ID
        if decorate:
            rec["remote_job"] = None
            rec["spark_offload"] = {"enabled": False, "env_injected": False, "host_configured": False}
        return trim_record(self.release, rec)

    def _verdict(self, status: str, idle: float) -> str | None:
        t = self.verdict_thresholds
        if status in TERMINAL:
            return None
        if status == "active":
            return "working" if idle < t["quiet"] else "quiet" if idle < t["stalled"] else "stalled"
        if status == "pending":
            return "queued" if idle < t["stuck_queued"] else "stuck_queued"
        if status in ("awaiting_user", "acknowledged"):
            return "parked" if idle < t["stalled_parked"] else "stalled_parked"
        if status == "waiting_background":
            return "waiting_background" if idle < t["stalled_background"] else "stalled_background"
        return "paused" if status == "paused" else None

    async def _mission_item(self, request: Request, user: str) -> Response:
        raw = request.path_params["id"]
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return plain_text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            if m is None:
                return plain_text(404, f"Mission {mid} not found")
            if request.method == "DELETE":
                if m.owner != user:
                    return plain_text(404, f"Mission {mid} not found")
                self._interrupt(m, "deleted")
                del self._missions[mid]
                return JSONResponse({"ok": True, "deleted": mid})
            if m.owner != user:
                return JSONResponse(
                    {
                        **{k: m.record.get(k) for k in ("id", "status", "title", "workspace_id", "backend")},
                        "created_at": m.record["created_at"],
                        "updated_at": m.record["updated_at"],
                        "cross_tenant": True,
                        "read_only": True,
                        "note": "mission belongs to another user",
                    }
                )
            return JSONResponse(lies.other_record(self, m) or self._render(m, decorate=True))

    async def _digest(self, request: Request, user: str) -> Response:
        """``GET /missions/:id/digest``: the compact view behind MCP ``get_mission``; no ``agent``."""
        raw = request.path_params["id"]
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return plain_text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            if m is None or m.owner != user:
                return plain_text(404, f"Mission {mid} not found")
            full = self._render(m, decorate=True)
        keys = (
            "id",
            "title",
            "status",
            "awaiting_kind",
            "terminal_reason",
            "terminal_evidence",
            "short_description",
            "backend",
            "model_override",
            "model_effort",
            "workspace_id",
            "workspace_name",
            "created_at",
            "updated_at",
            "execution",
            "mission_mode",
            "goal_mode",
            "goal_objective",
        )
        digest: dict[str, Any] = {k: full.get(k) for k in keys}
        history = full.get("history") or []
        digest["needs_operator"] = full.get("status") == "awaiting_user"
        digest["history_len"] = len(history)
        digest["project"] = {k: full.get(k) for k in ("project", "track", "intent", "github_pr", "tags")}
        return JSONResponse(digest)

    def _list(self, request: Request, user: str) -> Response:
        if self.release.list_mode == "none":  # no query at all: the most recently updated missions
            with self._lock:
                rows = [m for m in self._missions.values() if m.owner == user]
                rows.sort(key=lambda m: m.record["updated_at"], reverse=True)
                return JSONResponse(
                    [self._render(m, with_agent=False) for m in rows[: self.release.list_rows]]
                )
        q = request.query_params
        limit, offset = self._query_int(request, "limit"), self._query_int(request, "offset")
        if isinstance(limit, Response):
            return limit
        if isinstance(offset, Response):
            return offset
        limit = min(200, max(1, 50 if limit is None else limit))
        offset = max(0, offset or 0)
        exact = self.release.list_mode == "exact"  # 1.3.0: one exact status, no `all`, no horizon
        raw_status = q.get("status", "")
        statuses = {raw_status} if exact and raw_status else {s.strip() for s in raw_status.split(",") if s.strip()}
        show_all = exact or q.get("all", "").lower() in ("true", "1")
        workspace, tag, project, track = q.get("workspace"), q.get("tag"), q.get("project"), q.get("track")
        with self._lock:
            rows = [m for m in self._missions.values() if m.owner == user]
            order = "updated_at" if exact else "created_at"
            rows.sort(key=lambda m: m.record[order], reverse=True)
            out = []
            for m in rows:
                rec = m.record
                if statuses:
                    if m.status not in statuses:
                        continue
                elif not show_all and (
                    m.status in ("completed", "acknowledged") or "superseded" in rec.get("tags", [])
                ):
                    continue
                if workspace and workspace.lower() not in (
                    rec["workspace_id"],
                    str(rec["workspace_name"]).lower(),
                ):
                    continue
                if tag and tag not in rec.get("tags", []):
                    continue
                if project and rec.get("project") != project:
                    continue
                if track and rec.get("track") != track:
                    continue
                out.append(self._render(m, with_agent=False))
        return JSONResponse(out[offset : offset + limit])

    async def _cancel(self, request: Request, user: str) -> Response:
        raw = request.path_params["id"]
        with self._lock:
            self.cancels_started += 1
        if "cp.cancel-slow" in self.faults:
            await asyncio.sleep(CANCEL_SLOW_S)
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return plain_text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            if m is None or m.owner != user:
                return plain_text(404, f"Mission {mid} not found")
            if self.release.cancel_running_only and not self._executing(m):
                # the control actor cancels only what it runs; any other mission (pending, awaiting_user,
                # finished) is "not found" and stays exactly as it is (v0.7.0 control.rs:3729, 1.3.0 :11262)
                return plain_text(404, f"Mission {mid} not found")
            self._interrupt(m, "cancelled")  # a terminal mission stays as it is [U]
        return JSONResponse({"ok": True, "cancelled": mid})

    def _executing(self, m: MissionState) -> bool:
        """Whether the control actor runs ``m`` now: its agent task is alive and it is not parked."""
        return m.task is not None and not m.task.done() and m.status not in TERMINAL | {"awaiting_user"}

    async def _set_status_route(self, request: Request, user: str) -> Response:
        """``POST /missions/:id/status {status}``: stores the status as given (how a finished turn is
        acknowledged); the ok envelope."""
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        status = body.get("status")
        if status not in STATUSES:
            return plain_text(
                422, f"Failed to deserialize the JSON body into the target type: status: unknown variant `{status}`"
            )
        raw = request.path_params["id"]
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return plain_text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            if m is None or m.owner != user:
                return plain_text(500, f"Mission {mid} not found")
            if m.task is not None and not m.task.done() and status in TERMINAL:
                m.task.cancel()
            self._set_status(m, str(status))
        return JSONResponse({"ok": True})

    def _interrupt(self, m: MissionState, reason: str) -> None:
        if m.status in TERMINAL:
            return
        self._set_status(m, "interrupted", reason=reason)
        if m.task is not None and not m.task.done():
            m.task.cancel()

    async def _running(self, request: Request, user: str) -> Response:
        now = self.clock()
        out: list[dict[str, Any]] = []
        with self._lock:
            for m in self._missions.values():
                if m.owner != user or m.status != "active" or m.evidence_free or m.execution is None:
                    continue
                state = m.execution.get("execution_state")
                since = now - max(m.updated_epoch, m.last_event_epoch or 0.0)
                out.append(
                    {
                        "mission_id": m.id,
                        "state": "waiting_for_tool" if state == "waiting_tool" else "running",
                        "queue_len": 0,
                        "history_len": len(m.record["history"]),
                        "seconds_since_activity": int(since),
                        "health": self.running_health.get(m.id, {"status": "healthy"}),
                        "expected_deliverables": [],
                        "subtask_total": 0,
                        "subtask_completed": 0,
                    }
                )
        return JSONResponse(out)

    def mission(self, mission_id: str) -> dict[str, Any]:
        """The mission as ``GET /api/control/missions/:id`` renders it."""
        with self._lock:
            return self._render(self._missions[mission_id], decorate=True)

    def set_mission_status(self, mission_id: str, status: str) -> None:
        """Set a mission's status as the store would (tests and faults bend the world with it)."""
        with self._lock:
            m = self._missions[mission_id]
            if m.task is not None and not m.task.done() and self._loop is not None:
                self._loop.call_soon_threadsafe(m.task.cancel)  # the agent runs on the server's loop
            self._set_status(m, status)
