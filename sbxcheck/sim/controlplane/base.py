"""The control plane double's state and its state API (tests and the simulator read and bend it here)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import email.utils
import itertools
import json
import random
import secrets
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sbxcheck.errors import SimError
from sbxcheck.sim.controlplane import ops  # integrity, catalog and their faults
from sbxcheck.sim.controlplane.model import (
    CLOCK_BEHIND_S,
    CONTROLPLANE_FAULTS,
    DEFAULT_AGENTS,
    DEFAULT_BACKENDS,
    DEFAULT_FAULT_TARGETS,
    DEFAULT_NODES,
    DEFAULT_WORKSPACES,
    GIB,
    NIL_UUID,
    OPS_FAULTS,
    TERMINAL,
    TOKEN_REQUESTS,
    BackendSpec,
    MissionState,
    NodeSpec,
    NodeState,
    RequestRecord,
    WorkspaceSpec,
    WorkspaceState,
    credential_values,
    make_checkout,
    plain_text,
    sim_secret,
    uuid_or_none,
)
from sbxcheck.sim.controlplane.releases import ReleaseProfile, release_profile, served
from sbxcheck.sim.pushback import PushbackMiddleware
from sbxcheck.sim.stream import StreamHub


class _Recorder:
    """ASGI middleware: remembers the server loop, logs method, path, query and status, and dates every
    answer on the control plane's own clock (:meth:`DoubleBase.clock`), as hyper sends ``Date``; the
    server under it sends none of its own."""

    def __init__(self, app: ASGIApp, double: DoubleBase) -> None:
        self.app = app
        self.double = double

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.double._loop = asyncio.get_running_loop()
        status = 500

        async def _send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"date"]
                date = email.utils.formatdate(self.double.clock(), usegmt=True)
                message = {**message, "headers": [*headers, (b"date", date.encode("latin-1"))]}
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            query = scope.get("query_string", b"").decode("latin-1")
            self.double._record(RequestRecord(scope["method"], scope["path"], query, status))


async def _unmatched(request: Request, exc: Exception) -> Response:
    """A path no route matches: axum's answer, 404 with an empty body."""
    return Response(status_code=404)


class DoubleBase:
    """The state of the double and its state API; the resources (auth, fleet, events, agent, missions,
    workspaces) are mixins on top of it, assembled in :class:`~sbxcheck.sim.controlplane.double.ControlPlaneDouble`."""

    def __init__(
        self,
        root: Path,
        *,
        password: str | None = None,
        users: Mapping[str, str] | None = None,
        dev_mode: bool = False,
        latency_scale: float = 1.0,
        backends: Sequence[BackendSpec] = DEFAULT_BACKENDS,
        workspaces: Sequence[WorkspaceSpec] = DEFAULT_WORKSPACES,
        nodes: Sequence[NodeSpec] = DEFAULT_NODES,
        agents: Sequence[str] = DEFAULT_AGENTS,
        finish_status: str = "completed",
        goal_limit_at_create: bool = False,
        step_timeout_s: float = 10.0,
        jwt_ttl_days: int = 30,
        jwt_secret_configured: bool = True,
        seed: int | None = None,
        release: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.release: ReleaseProfile = release_profile(release)  # what this release serves
        self.password: str = password if password is not None else f"sim-pass-{secrets.token_hex(12)}"
        self.users: dict[str, str] = dict(users or {})
        self.dev_mode = dev_mode
        self.latency_scale = latency_scale
        self.backends: dict[str, BackendSpec] = {b.id: b for b in backends}
        self.agents: tuple[str, ...] = tuple(agents)
        self.finish_status = finish_status
        self.goal_limit_at_create = goal_limit_at_create
        self.step_timeout_s = step_timeout_s
        self.jwt_ttl_days = max(1, jwt_ttl_days)
        self.token_requests = TOKEN_REQUESTS  # cp.token-expires: requests one token authorizes
        self.token_uses: dict[str, int] = {}  # token id (jti) -> requests it authorized
        self.jwt_secret_configured = jwt_secret_configured
        self.single_tenant_user_id = "default"
        self.version = self.release.version
        self.remote_nodes_enabled = True
        self.disk_total_bytes = 2048 * GIB
        self.disk_used_fraction = 0.42
        self.occupancy_exempt: set[str] = {NIL_UUID}
        self.exec_path_prefix: list[str] = []  # directories put first on PATH inside workspaces (tool shims)
        self.verdict_thresholds: dict[str, float] = {
            "quiet": 300,
            "stalled": 1800,
            "stuck_queued": 900,
            "stalled_parked": 1800,
            "stalled_background": 21600,
        }
        self.faults: set[str] = set()
        self.running_health: dict[str, dict[str, Any]] = {}  # /running health by mission id
        self.mission_cost_cents = 2  # what each simulated mission's assistant_message costs
        self.flooded = False  # cp.list-flood made its missions
        self.cancels_started = 0  # cancel requests received (tests interrupt a slow cancel under way)
        self.fault_targets: dict[str, str] = {}
        self._jwt_secret = secrets.token_hex(32)
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._missions: dict[str, MissionState] = {}
        self._leases: dict[str, str] = {}
        self._event_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._log: list[RequestRecord] = []
        self._heads: dict[str, str] = {}
        self._workspaces: dict[str, WorkspaceState] = {}
        self._nodes: dict[str, NodeState] = {n.id: NodeState(n) for n in nodes}
        self._build_workspaces(list(workspaces))
        self.stream = StreamHub(self.faults, self._owner_of, self._stream_snapshot)  # the live event stream
        self.app = Starlette(
            routes=served(self.release, self._routes()),
            middleware=[
                Middleware(_Recorder, double=self),
                Middleware(PushbackMiddleware, double=self),
            ],
            exception_handlers={404: _unmatched},
        )

    def __repr__(self) -> str:
        with self._lock:
            count = len(self._missions)
        return f"ControlPlaneDouble(root={str(self.root)!r}, missions={count}, faults={sorted(self.faults)})"

    def clock(self) -> float:
        """The control plane's clock (epoch seconds): this machine's, or 15 minutes behind under
        ``cp.clock-behind``. It writes the ``Date`` header and every stamp it keeps: missions, events,
        tokens, nodes."""
        return time.time() - (CLOCK_BEHIND_S if "cp.clock-behind" in self.faults else 0.0)

    def _routes(self) -> list[Route]:
        """The app's routes (the assembled double names every resource's handlers)."""
        raise NotImplementedError

    # ---- setup ------------------------------------------------------------------------------

    def _build_workspaces(self, specs: list[WorkspaceSpec]) -> None:
        host = self.root / "host"
        host.mkdir(parents=True, exist_ok=True)
        (self.root / "missions").mkdir(parents=True, exist_ok=True)
        created = "2026-06-01T00:00:00.000Z"
        self._workspaces[NIL_UUID] = WorkspaceState(NIL_UUID, "host", host, None, {}, {}, created)
        for spec in specs:
            ws_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"sbxcheck-sim-workspace:{spec.name}"))
            path = self.root / "workspaces" / spec.name
            self._heads[ws_id] = make_checkout(path / spec.repo, spec)
            env = {name: sim_secret() for name in spec.env_names}
            self._workspaces[ws_id] = WorkspaceState(
                ws_id, spec.name, path, spec, env, credential_values(), created
            )

    # ---- state API for tests and the simulator ----------------------------------------------

    def inject(self, name: str, target: str | None = None) -> None:
        """Turn a fault on, for ``target`` (default from :data:`DEFAULT_FAULT_TARGETS`, else ``*``)."""
        if name not in CONTROLPLANE_FAULTS:
            known = ", ".join(sorted(CONTROLPLANE_FAULTS))
            raise SimError(f"unknown control-plane fault {name!r}; known faults: {known}")
        with self._lock:
            self.faults.add(name)
            self.fault_targets[name] = target or DEFAULT_FAULT_TARGETS.get(name, "*")
        if name in OPS_FAULTS:  # they change the double's state, not one answer
            ops.apply_fault(self, name)

    def clear_faults(self, name: str | None = None) -> None:
        """Turn one fault (or all) off."""
        with self._lock:
            if name is None:
                self.faults.clear()
            else:
                self.faults.discard(name)

    def fault_target(self, name: str) -> str:
        """The target a fault applies to (``*`` = every backend/workspace/node)."""
        return self.fault_targets.get(name) or DEFAULT_FAULT_TARGETS.get(name, "*")

    def _fault_on(self, name: str, *candidates: str) -> bool:
        if name not in self.faults:
            return False
        target = self.fault_target(name)
        return target == "*" or target in candidates

    def workspace_id(self, name: str) -> str:
        """Id of the workspace called ``name`` (``host`` is the nil UUID)."""
        for ws in self._workspaces.values():
            if ws.name == name:
                return ws.id
        raise KeyError(name)

    def workspace_path(self, name_or_id: str) -> Path:
        """The workspace's directory (its ``path`` field)."""
        return self._ws(name_or_id).path

    def checkout_path(self, name_or_id: str) -> Path:
        """The project checkout inside the workspace (holds ``lean-toolchain``)."""
        ws = self._ws(name_or_id)
        if ws.spec is None:
            raise KeyError(f"{ws.name} has no checkout")
        return ws.path / ws.spec.repo

    def head_sha(self, name_or_id: str) -> str:
        """The checkout's HEAD commit (deterministic)."""
        return self._heads[self._ws(name_or_id).id]

    def set_workspace_status(self, name_or_id: str, status: str, error_message: str | None = None) -> None:
        """Set a workspace's ``status`` (pending, building, ready, error) and ``error_message``."""
        with self._lock:
            ws = self._ws(name_or_id)
            ws.status, ws.error_message = status, error_message

    def _ws(self, name_or_id: str) -> WorkspaceState:
        ws = self._workspaces.get(name_or_id)
        if ws is None:
            ws = self._workspaces.get(self.workspace_id(name_or_id))
        assert ws is not None
        return ws

    def secret_values(self) -> list[str]:
        """Every secret the simulator holds (env values, exposed credentials, password, JWT key)."""
        out = [self.password, self._jwt_secret]
        for ws in self._workspaces.values():
            out.extend(ws.env.values())
            out.extend(ws.exposed_env.values())
        return out

    def mission_ids(self) -> list[str]:
        """Every mission id, oldest first."""
        with self._lock:
            return list(self._missions)

    def missions_nonterminal(self) -> list[str]:
        """Ids of missions not in a terminal status (what a canary left behind)."""
        with self._lock:
            return [mid for mid, m in self._missions.items() if m.status not in TERMINAL]

    def events(self, mission_id: str) -> list[dict[str, Any]]:
        """A copy of the mission's stored events."""
        with self._lock:
            return copy.deepcopy(self._missions[mission_id].events)

    @property
    def requests(self) -> list[RequestRecord]:
        """A copy of the request log."""
        with self._lock:
            return list(self._log)

    def clear_requests(self) -> None:
        """Forget the request log."""
        with self._lock:
            self._log.clear()

    def _record(self, rec: RequestRecord) -> None:
        with self._lock:
            self._log.append(rec)

    def _owner_of(self, mission_id: str) -> str | None:
        m = self._missions.get(mission_id)
        return m.owner if m is not None else None

    def _stream_snapshot(self) -> dict[str, Any]:
        """The live stream's first event: the control actor's state."""
        with self._lock:
            statuses = [m.status for m in self._missions.values()]
        running = any(s == "active" for s in statuses)
        return {"state": "running" if running else "idle", "queue_len": statuses.count("pending")}

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel every simulated-agent task (statuses are left as they are)."""
        self.stream.close()
        with self._lock:
            tasks = [t for t in self._tasks if not t.done()]
            loop = self._loop
        if not tasks or loop is None or loop.is_closed() or not loop.is_running():
            return

        async def _cancel_all() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=timeout_s)

        fut = asyncio.run_coroutine_threadsafe(_cancel_all(), loop)
        with contextlib.suppress(Exception):
            fut.result(timeout=timeout_s + 1.0)

    # ---- auth -------------------------------------------------------------------------------

    # ---- health and fleet -------------------------------------------------------------------

    # ---- request helpers --------------------------------------------------------------------

    @staticmethod
    async def _body(request: Request) -> dict[str, Any] | Response:
        """The JSON object body, or axum's Json-extractor rejection (415/400/422)."""
        if not request.headers.get("content-type", "").startswith("application/json"):
            return plain_text(415, "Expected request with `Content-Type: application/json`")
        try:
            doc = json.loads(await request.body())
        except ValueError as exc:
            return plain_text(400, f"Failed to parse the request body as JSON: {exc}")
        if not isinstance(doc, dict):
            return plain_text(422, "Failed to deserialize the JSON body into the target type: expected a map")
        return doc

    @staticmethod
    def _query_int(request: Request, name: str) -> int | Response | None:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return None
        try:
            return int(raw)
        except ValueError:
            return plain_text(400, f"Failed to deserialize query string: {name}: invalid digit found in string")

    # ---- missions: create -------------------------------------------------------------------

    # ---- missions: read, list, cancel ---------------------------------------------------------

    def _lookup(self, raw: str) -> tuple[str | None, MissionState | None]:
        mid = uuid_or_none(raw)
        return mid, None if mid is None else self._missions.get(mid)

    # ---- the simulated agent ----------------------------------------------------------------

    # ---- workspaces -------------------------------------------------------------------------
