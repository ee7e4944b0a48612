"""A simulated sandboxed.sh control plane (spec ``sandboxed-sh.md`` §2–§6, §8, §9) on Starlette.

:class:`ControlPlaneDouble` holds the state; ``.app`` is the Starlette app to serve with
:class:`sbxcheck.sim.httpserver.BackgroundServer`. Routes, bodies, status codes and the plain-text
401/4xx bodies follow the spec; items the spec marks [U] are chosen once and noted inline.

Public: ``POST /api/auth/login``, ``GET /api/auth/status``, ``GET /api/health``. Bearer JWT
(HS256, random secret) on: ``GET /api/health/fleet``, ``GET /api/remote-nodes``,
``POST /api/nodes/{name}/cordon|uncordon``, ``GET /api/backends``, ``GET|POST
/api/control/missions``, ``GET|DELETE /api/control/missions/{id}``, ``GET .../{id}/events``,
``POST .../{id}/cancel``, ``GET /api/control/running``, ``GET /api/workspaces[/{id}]``,
``POST /api/workspaces/{id}/exec``.

**Simulated agent.** Each mission gets an asyncio task on the server loop: ``pending`` for 1–2 s
(times ``latency_scale``), then ``active`` (``user_message``), then tool events, an
``assistant_message`` and ``completed`` (``finish_status``). A prompt without steps runs
``echo ok`` for real and answers ``ok``.

**Canary step grammar.** Every prompt line ``STEP: <step>`` (at most 32) is one step, run in
order with cwd = the mission's execution scope (the workspace directory; an empty ephemeral
directory under ``cp.mount-missing``). A path equal to or under the workspace's ``path`` is mapped
into the scope, so absolute and relative forms behave alike.

- ``STEP: <argv>`` — shlex-split, run without a shell (timeout ``step_timeout_s``); programs
  limited to read-only ones (``test``, ``[``, ``cat``, ``ls``, ``head``, ``tail``, ``wc``, ``stat``,
  ``sha256sum``, ``pwd``, ``echo``, ``printf``, ``true``, ``false``, and ``git`` with a read-only
  subcommand). Events: ``tool_call`` (``tool_name`` ``bash``, content ``{"command": ...}``), then
  ``tool_result`` (content = stdout + stderr; metadata ``exit_code``, ``timed_out``, ``is_error``,
  ``step``).
- ``STEP: mcp read_file <path>`` / ``STEP: mcp list_dir <path>`` — the workspace MCP server:
  ``tool_call`` named ``mcp__workspace__read_file`` (content ``{"path": ...}``), ``tool_result``
  holding the file text (or listing), or ``project not found: <dir>`` / ``file not found: <path>``
  with ``metadata.is_error`` true.

**Faults** (:data:`CONTROLPLANE_FAULTS`, enabled with :meth:`ControlPlaneDouble.inject`) change
the world, never a verdict; each has a target (a backend, workspace or node; ``*`` = all).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hmac
import itertools
import json
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import string
import subprocess
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import jwt
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sbxcheck.errors import SimError
from sbxcheck.sim.controlplane import ops as cp_ops  # issue 21: integrity, catalog and their faults
from sbxcheck.sim.faults import HOSTILE_TEXT
from sbxcheck.sim.pushback import EVERY_NTH, PUSHBACK_FAULT, PushbackMiddleware
from sbxcheck.sim.stream import STREAM_FAULTS, StreamHub

NIL_UUID: Final = "00000000-0000-0000-0000-000000000000"
EFFORTS: Final = ("low", "medium", "high", "xhigh", "max")
TERMINAL: Final = frozenset({"completed", "failed", "blocked", "not_feasible", "interrupted"})
NATIVE_AGENTS: Final = frozenset({"codex", "claudecode", "gemini", "grok"})
HARNESS_PREFIXES: Final = frozenset({"codex", "claudecode", "gemini", "grok", "chatgpt_ui", "opencode"})
GOAL_LIMIT: Final = 4000
TITLE_COALESCE_S: Final = 600.0
DEFAULT_DISK_ESTIMATE_GIB: Final = 64
EMERGENCY_RESERVE_GIB: Final = 64  # [U] 64 or 150 depending on version
GIB: Final = 1 << 30
MAX_STEPS: Final = 32
MAX_OUTPUT_BYTES: Final = 256 * 1024
EXPOSE_HEADERS: Final = "X-Max-Sequence, X-Total-Events, X-Original-Event-Count, X-Summarized-Event-Count"

# Base latencies in seconds, multiplied by ``latency_scale``.
DISPATCH_S: Final = (1.0, 2.0)
THINK_S: Final = 0.3
STEP_S: Final = 0.15
FINISH_S: Final = 0.2
NO_EVIDENCE_ACTIVE_S: Final = 3.0

READ_ONLY_PROGRAMS: Final = frozenset(
    {"test", "[", "cat", "ls", "head", "tail", "wc", "stat", "sha256sum", "pwd", "echo", "printf", "true"}
    | {"false", "git"}
)
GIT_READ_ONLY: Final = frozenset(
    {"rev-parse", "log", "status", "show", "ls-files", "describe", "branch", "cat-file", "symbolic-ref"}
)
AGENT_EVENTS: Final = frozenset(
    {"tool_call", "tool_result", "assistant_message", "error", "thinking", "text_delta", "agent_phase"}
)
OUTPUT_EVENTS: Final = frozenset({"assistant_message", "tool_result", "text_delta"})
VIEWS: Final[dict[str, frozenset[str] | None]] = {
    "transcript": frozenset({"user_message", "assistant_message"}),
    "trace": frozenset({"tool_call", "tool_result", "error"}),
    "history": None,
    "all": None,
}
KNOWN_CREATE_FIELDS: Final = frozenset(
    {
        "title", "prompt", "workspace_id", "agent", "backend", "model_override", "model_effort",
        "fast_mode", "config_profile", "parent_mission_id", "supersedes_mission_id", "working_directory",
        "priority", "not_before", "deadline", "project", "track", "intent", "github_pr", "desired_state",
        "next_check_at", "idempotency_key", "acceptance_criteria", "writer", "tags", "remote_node_id",
        "remote_requirements", "remote_command", "remote_async", "estimated_disk_gib", "origin",
        "origin_session_id", "attachments", "placement",
    }
)  # fmt: skip
_STR_FIELDS: Final = (
    "title", "prompt", "workspace_id", "agent", "backend", "model_override", "model_effort",
    "config_profile", "parent_mission_id", "supersedes_mission_id", "working_directory", "not_before",
    "deadline", "project", "track", "intent", "github_pr", "desired_state", "next_check_at",
    "idempotency_key", "remote_node_id", "remote_command", "origin", "origin_session_id", "placement",
)  # fmt: skip
_STEP_RE: Final = re.compile(r"^[ \t]*STEP:[ \t]*(.+?)[ \t]*$", re.MULTILINE)


# ---- catalog ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackendSpec:
    """One registered backend and its model catalog (§3.4 steps 18–25, §5)."""

    id: str
    name: str
    provider: str  # named in ``Model '<X>' not found in <provider> catalog``
    models: tuple[str, ...]
    efforts: tuple[str, ...] | None = None  # None: model_effort is silently dropped
    default_model: str | None = None  # filled in when no override is given (claudecode)
    aliases: Mapping[str, str] = field(default_factory=dict)
    provider_qualified: bool = False  # opencode stores ``provider/model``
    validates_agent: bool = False  # only opencode checks the agent library


DEFAULT_BACKENDS: Final = (
    BackendSpec(
        "codex",
        "Codex",
        "openai",
        ("gpt-5.6-terra", "gpt-5.6-sol", "gpt-6-astra"),
        efforts=EFFORTS,
        aliases={"gpt-5.6": "gpt-5.6-sol", "gpt-6": "gpt-6-astra"},
    ),
    BackendSpec(
        "claudecode",
        "Claude Code",
        "anthropic",
        ("claude-opus-4-8", "claude-sonnet-5", "claude-fable-5-1", "claude-fable-5"),
        efforts=EFFORTS,
        default_model="claude-opus-4-8",
    ),
    BackendSpec(
        "opencode",
        "OpenCode",
        "opencode",
        ("zai/glm-5.2", "zai/glm-5.1", "minimax/MiniMax-M3", "kimi/moonshotai-kimi-k2-7-code"),
        provider_qualified=True,
        validates_agent=True,
    ),
    BackendSpec("gemini", "Gemini", "google", ("gemini-3.6-pro", "gemini-3.6-flash")),
)
DEFAULT_AGENTS: Final = ("build", "plan", "ana", "paloma")


@dataclass(frozen=True)
class WorkspaceSpec:
    """A project workspace: a real directory holding a git checkout ``repo`` with a lean-toolchain."""

    name: str
    repo: str
    toolchain: str
    env_names: tuple[str, ...]
    skills: tuple[str, ...] = ()
    init_scripts: tuple[str, ...] = ("base",)
    mcps: tuple[str, ...] = ()
    workspace_type: str = "container"
    distro: str = "ubuntu-noble"


DEFAULT_WORKSPACES: Final = (
    WorkspaceSpec(
        "verity",
        "verity",
        "leanprover/lean4:v4.21.0",
        ("VERITY_API_TOKEN", "LEAN_CACHE_URL", "DEPLOY_PASSWORD"),
        skills=("lean-proofs",),
        init_scripts=("base", "uv-python", "github-cli"),
        mcps=("workspace",),
    ),
    WorkspaceSpec(
        "lean-lab",
        "lean-lab",
        "leanprover/lean4:v4.19.0",
        ("LAB_DATABASE_URL", "OPENAI_API_KEY"),
        skills=("bitwarden-secrets",),
        init_scripts=("base", "uv-python", "bun-mcp"),
        mcps=("workspace", "google-calendar"),
    ),
)


@dataclass(frozen=True)
class NodeSpec:
    """A remote node as its heartbeat describes it (§6)."""

    id: str
    labels: tuple[str, ...]
    capacity: int
    cpu: int
    mem_gib: int
    disk_gib: int
    disk_free_gib: int
    toolchains: tuple[str, ...] = ()


DEFAULT_NODES: Final = (
    NodeSpec("babylon", ("lean",), 4, 32, 128, 2000, 1200, ("leanprover/lean4:v4.21.0",)),
    NodeSpec("nippur", ("cpu",), 4, 32, 128, 2000, 900),
    NodeSpec("ashur", ("lean",), 2, 16, 64, 1000, 420, ("leanprover/lean4:v4.19.0",)),
    NodeSpec(
        "dgx-spark",
        ("lean", "gpu"),
        2,
        20,
        128,
        4000,
        3100,
        ("leanprover/lean4:v4.19.0", "leanprover/lean4:v4.21.0"),
    ),
)


# ---- faults -------------------------------------------------------------------------------

CANCEL_SLOW_S: Final = 3.0
PATH_SHAPED_ID: Final = "../../../admin/wipe-everything?confirm=yes#"  # issue 20
BUSY_HOLDER_ID: Final = "0b5e55ed-0000-4000-8000-000000000020"  # issue 20: the other session's mission
BUSY_HOLDER_TAG: Final = "0ther5e5"

CONTROLPLANE_FAULTS: Final[dict[str, str]] = {
    "cp.backend-crash": "target backend's missions run the DB migration, then fail `fn3 is not a function` "
    "before any tool call (§8.8)",
    "cp.model-not-found": "target backend's missions with a model_override park in awaiting_user after a "
    "ProviderModelNotFoundError error event (§8.7)",
    "cp.effort-reject-max": "target backend rejects model_effort 'max' at create (400 Invalid model_effort)",
    "cp.record-drops-model": "the stored record of target backend's missions omits model_override",
    "cp.stuck-pending": "target backend's missions are never dispatched: they stay pending",
    "cp.no-evidence": "target backend's missions go active with null execution and no agent events, "
    "then complete with no tool events",
    "cp.mount-missing": "target backend's missions run in an empty ephemeral directory instead of the "
    "workspace; MCP lookups answer project/file not found",
    "cp.mount-missing-exitcode": "as cp.mount-missing, and tool results carry only metadata.exit_code "
    "(no is_error): a failing step's error text is all that names the path",
    "cp.idempotency-ignored": "create ignores idempotency_key (title coalescing stays on, as upstream): a "
    "retry with the same key and a new title is a new mission",
    "cp.auth-expired": "every bearer token is refused: 401 `Invalid or expired token`",
    "cp.cancel-slow": f"every cancel waits {CANCEL_SLOW_S:g}s before it acts (for interrupt tests)",
    "cp.create-500": "target backend's creates are stored and started, then answered 500 (the client never "
    "learns the id)",
    "cp.env-values-exposed": "target workspace's env also holds credential-shaped values (ghp_…, sk-ant-…)",
    "fleet.node-offline": "target node missed 3+ heartbeats: status offline, stale last_seen, error set",
    "fleet.node-degraded": "target node missed 1-2 heartbeats: status degraded",
    "fleet.node-cordoned": "target node is cordoned",
    "fleet.degraded-disk": "control-plane disk at 96%: disk_level critical, free space below required",
    "fleet.control-unresponsive": "/api/health/fleet answers 200 with status degraded, control_responsive false",
    # issue 23
    PUSHBACK_FAULT: f"every {EVERY_NTH}th request (any method) is refused unserved: 429 / 503 with Retry-After",
    **STREAM_FAULTS,
    # issue 20: hostile answers
    "cp.path-shaped-id": f"target backend's mission records carry the id {PATH_SHAPED_ID!r}, not a UUID",
    "cp.control-chars": "target backend's creates are refused 400 with terminal escapes and C0 control "
    "characters in the error text, and every workspace's status carries them",
    "cp.workspace-busy": "target workspace already has another session's live mission: creates into it "
    "are refused 409 workspace_occupied",
}
CONTROLPLANE_FAULTS.update(cp_ops.FAULTS)  # issue 21
DEFAULT_FAULT_TARGETS: Final[dict[str, str]] = {
    "cp.path-shaped-id": "gemini",  # issue 20
    "cp.control-chars": "opencode",  # issue 20
    "cp.workspace-busy": "verity",  # issue 20
    "cp.backend-crash": "opencode",
    "cp.model-not-found": "opencode",
    "cp.effort-reject-max": "codex",
    "cp.create-500": "gemini",
    "cp.mount-missing": "opencode",
    "cp.mount-missing-exitcode": "opencode",
    "cp.env-values-exposed": "verity",
    "fleet.node-offline": "dgx-spark",
    "fleet.node-degraded": "nippur",
    "fleet.node-cordoned": "babylon",
}


@dataclass(frozen=True)
class RequestRecord:
    """One request the double answered (no headers, so no token)."""

    method: str
    path: str
    query: str
    status: int


# ---- internal state -----------------------------------------------------------------------


@dataclass
class _Workspace:
    id: str
    name: str
    path: Path
    spec: WorkspaceSpec | None
    env: dict[str, str] = field(repr=False)
    exposed_env: dict[str, str] = field(repr=False)
    created_at: str
    status: str = "ready"
    error_message: str | None = None


@dataclass
class _Node:
    spec: NodeSpec
    cordoned: bool = False


@dataclass
class _Mission:
    record: dict[str, Any]
    owner: str
    prompt: str | None
    requested_model: str | None
    created_mono: float
    updated_epoch: float
    last_status_change_at: str
    events: list[dict[str, Any]] = field(default_factory=list)
    execution: dict[str, Any] | None = None
    last_event_epoch: float | None = None
    last_agent_event_at: str | None = None
    last_output_at: str | None = None
    evidence_free: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return str(self.record["id"])

    @property
    def status(self) -> str:
        return str(self.record["status"])


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _idle_for(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        hours, minutes = divmod(s // 60, 60)
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    return f"{s // 86400}d"


def _text(status: int, body: str) -> PlainTextResponse:
    return PlainTextResponse(body, status_code=status)


def _json_text(status: int, doc: Mapping[str, Any]) -> PlainTextResponse:
    """A JSON error document in a plain-text body, as axum's ``(StatusCode, String)`` sends it."""
    return PlainTextResponse(json.dumps(doc), status_code=status)


def _uuid_or_none(raw: str) -> str | None:
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        return None


def _decode(data: bytes) -> str:
    if len(data) > MAX_OUTPUT_BYTES:
        data = data[:MAX_OUTPUT_BYTES]
    return data.decode("utf-8", errors="replace")


def run_bounded(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout_s: float, stdin: str | None = None
) -> tuple[int, str, str, bool]:
    """Run ``argv`` in its own process group; kill the group at the deadline.

    Returns ``(exit_code, stdout, stderr, timed_out)``; exit code -1 when timed out [U], 127 when
    the program is missing.
    """
    if not cwd.is_dir():
        return 1, "", f"cannot change to {cwd}: No such file or directory\n", False
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found\n", False
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc.strerror}\n", False
    try:
        out, err = proc.communicate(stdin.encode() if stdin is not None else None, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=5)
        return -1, _decode(out), _decode(err), True
    return proc.returncode, _decode(out), _decode(err), False


def _git(args: Sequence[str], cwd: Path) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "sbxcheck sim",
        "GIT_AUTHOR_EMAIL": "sim@sbxcheck.invalid",
        "GIT_COMMITTER_NAME": "sbxcheck sim",
        "GIT_COMMITTER_EMAIL": "sim@sbxcheck.invalid",
        "GIT_AUTHOR_DATE": "2026-06-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-06-01T00:00:00Z",
    }
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SimError(f"git {args[0]} failed in {cwd}: {type(exc).__name__}") from None
    if proc.returncode != 0:
        raise SimError(f"git {args[0]} failed in {cwd}: {proc.stderr.strip()[:200]}")
    return proc.stdout.strip()


def _make_checkout(path: Path, spec: WorkspaceSpec) -> str:
    """A deterministic one-commit git checkout with README.md, lean-toolchain and a Lean file."""
    if not (path / ".git").is_dir():
        path.mkdir(parents=True, exist_ok=True)
        (path / "README.md").write_text(f"# {spec.repo}\n\nSimulated project checkout for sbxcheck.\n")
        (path / "lean-toolchain").write_text(spec.toolchain + "\n")
        (path / "lakefile.toml").write_text(f'name = "{spec.repo}"\ndefaultTargets = ["Main"]\n')
        (path / "Main.lean").write_text("theorem one_add_one : 1 + 1 = 2 := rfl\n")
        _git(["init", "-q", "-b", "main"], path)
        _git(["add", "-A"], path)
        _git(["commit", "-q", "-m", f"Initial {spec.repo} checkout"], path)
    return _git(["rev-parse", "HEAD"], path)


def _sim_secret() -> str:
    return f"sim-secret-{secrets.token_hex(12)}"


def _credential_values() -> dict[str, str]:
    alphabet = string.ascii_letters + string.digits
    return {
        "GH_TOKEN": "ghp_" + "".join(secrets.choice(alphabet) for _ in range(36)),
        "ANTHROPIC_API_KEY": "sk-ant-api03-" + secrets.token_urlsafe(30),
    }


class _Recorder:
    """ASGI middleware: remembers the server loop and logs method, path, query and status."""

    def __init__(self, app: ASGIApp, double: ControlPlaneDouble) -> None:
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
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            query = scope.get("query_string", b"").decode("latin-1")
            self.double._record(RequestRecord(scope["method"], scope["path"], query, status))


Handler = Callable[[Request, str], Awaitable[Response]]


# ---- the double ---------------------------------------------------------------------------


class ControlPlaneDouble:
    """State and Starlette app of a simulated sandboxed.sh control plane. Thread-safe.

    ``root`` receives ``workspaces/<name>/<repo>`` (real git checkouts), ``host/`` (the nil-UUID
    host workspace) and ``missions/<id>/`` (ephemeral scopes under ``cp.mount-missing``).
    ``password`` defaults to a random one (read it from :attr:`password`); ``users`` switches to
    multi-user mode; ``dev_mode`` accepts every request as user ``dev``.
    """

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
    ) -> None:
        self.root = Path(root)
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
        self.jwt_secret_configured = jwt_secret_configured
        self.single_tenant_user_id = "default"
        self.version = "0.9.0-sim"
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
        self.running_health: dict[str, dict[str, Any]] = {}  # issue 21: /running health by mission id
        self.mission_cost_cents = 2  # issue 21: what each simulated mission's assistant_message costs
        self.cancels_started = 0  # cancel requests received (tests interrupt a slow cancel under way)
        self.fault_targets: dict[str, str] = {}
        self._jwt_secret = secrets.token_hex(32)
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._missions: dict[str, _Mission] = {}
        self._leases: dict[str, str] = {}
        self._event_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._log: list[RequestRecord] = []
        self._heads: dict[str, str] = {}
        self._workspaces: dict[str, _Workspace] = {}
        self._nodes: dict[str, _Node] = {n.id: _Node(n) for n in nodes}
        self._build_workspaces(list(workspaces))
        self.stream = StreamHub(self.faults, self._owner_of, self._stream_snapshot)  # issue 23
        guard = self._guard
        self.app = Starlette(
            routes=[
                *cp_ops.routes(self),  # issue 21 (before /api/control/missions/{id})
                Route("/api/auth/login", self._login, methods=["POST"]),
                Route("/api/auth/status", self._auth_status, methods=["GET"]),
                Route("/api/health", self._health, methods=["GET"]),
                Route("/api/health/fleet", guard(self._fleet_health), methods=["GET"]),
                Route("/api/remote-nodes", guard(self._remote_nodes), methods=["GET"]),
                Route("/api/nodes/{name}/cordon", guard(self._cordon), methods=["POST"]),
                Route("/api/nodes/{name}/uncordon", guard(self._cordon), methods=["POST"]),
                Route("/api/backends", guard(self._backends), methods=["GET"]),
                Route("/api/control/missions", guard(self._missions_root), methods=["GET", "POST"]),
                Route("/api/control/running", guard(self._running), methods=["GET"]),
                Route("/api/control/stream", guard(self.stream.endpoint), methods=["GET"]),
                Route("/api/control/missions/{id}", guard(self._mission_item), methods=["GET", "DELETE"]),
                Route("/api/control/missions/{id}/events", guard(self._events), methods=["GET"]),
                Route("/api/control/missions/{id}/digest", guard(self._digest), methods=["GET"]),
                Route("/api/control/missions/{id}/cancel", guard(self._cancel), methods=["POST"]),
                Route("/api/workspaces", guard(self._list_workspaces), methods=["GET"]),
                Route("/api/workspaces/{id}", guard(self._get_workspace), methods=["GET"]),
                Route("/api/workspaces/{id}/exec", guard(self._exec), methods=["POST"]),
            ],
            middleware=[Middleware(_Recorder, double=self), Middleware(PushbackMiddleware, double=self)],
        )

    def __repr__(self) -> str:
        with self._lock:
            count = len(self._missions)
        return f"ControlPlaneDouble(root={str(self.root)!r}, missions={count}, faults={sorted(self.faults)})"

    # ---- setup ------------------------------------------------------------------------------

    def _build_workspaces(self, specs: list[WorkspaceSpec]) -> None:
        host = self.root / "host"
        host.mkdir(parents=True, exist_ok=True)
        (self.root / "missions").mkdir(parents=True, exist_ok=True)
        created = "2026-06-01T00:00:00.000Z"
        self._workspaces[NIL_UUID] = _Workspace(NIL_UUID, "host", host, None, {}, {}, created)
        for spec in specs:
            ws_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"sbxcheck-sim-workspace:{spec.name}"))
            path = self.root / "workspaces" / spec.name
            self._heads[ws_id] = _make_checkout(path / spec.repo, spec)
            env = {name: _sim_secret() for name in spec.env_names}
            self._workspaces[ws_id] = _Workspace(
                ws_id, spec.name, path, spec, env, _credential_values(), created
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
        if name in cp_ops.FAULTS:  # issue 21
            cp_ops.apply_fault(self, name)

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

    def _ws(self, name_or_id: str) -> _Workspace:
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

    def mission(self, mission_id: str) -> dict[str, Any]:
        """The mission as ``GET /api/control/missions/:id`` renders it."""
        with self._lock:
            return self._render(self._missions[mission_id], decorate=True)

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

    @property
    def auth_mode(self) -> str:
        """``multi_user`` when users are configured, else ``single_tenant``."""
        return "multi_user" if self.users else "single_tenant"

    def _authenticate(self, request: Request) -> str | Response:
        if self.dev_mode:
            return "dev"
        header = request.headers.get("authorization", "")
        token = header[7:] if header.startswith(("Bearer ", "bearer ")) else header
        if not token.strip():
            return _text(401, "Missing Authorization header")
        if "cp.auth-expired" in self.faults:
            return _text(401, "Invalid or expired token")
        try:
            claims = jwt.decode(token, self._jwt_secret, algorithms=["HS256"])
        except jwt.PyJWTError:
            return _text(401, "Invalid or expired token")
        sub = claims.get("sub")
        if not isinstance(sub, str) or (self.users and sub not in self.users):
            return _text(401, "Invalid user")
        return sub

    def _guard(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            who = self._authenticate(request)
            if isinstance(who, Response):
                return who
            return await handler(request, who)

        return endpoint

    async def _login(self, request: Request) -> Response:
        if not self.jwt_secret_configured:
            return _text(500, "JWT_SECRET not configured")
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        password, username = body.get("password"), body.get("username")
        if not isinstance(password, str):
            return _text(
                422, "Failed to deserialize the JSON body into the target type: missing field `password`"
            )
        if username is not None and not isinstance(username, str):
            return _text(
                422, "Failed to deserialize the JSON body into the target type: username: invalid type"
            )
        given = password.strip().encode()
        if self.users:
            name = (username or "").strip()
            if not name:
                return _text(401, "Username required")
            expected = self.users.get(name)
            if expected is None or not hmac.compare_digest(given, expected.encode()):
                return _text(401, "Invalid username or password")
            sub = name
        else:
            if not hmac.compare_digest(given, self.password.encode()):
                return _text(401, "Invalid password")
            sub = self.single_tenant_user_id
        now = int(time.time())
        exp = now + self.jwt_ttl_days * 86400
        token = jwt.encode(
            {"sub": sub, "usr": sub, "iat": now, "exp": exp}, self._jwt_secret, algorithm="HS256"
        )
        return JSONResponse({"token": token, "exp": exp})

    async def _auth_status(self, request: Request) -> Response:
        return JSONResponse(
            {
                "auth_mode": self.auth_mode,
                "password_source": "environment",
                "password_changed_at": None,
                "dev_mode": self.dev_mode,
            }
        )

    # ---- health and fleet -------------------------------------------------------------------

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

    async def _fleet_health(self, request: Request, user: str) -> Response:
        with self._lock:
            statuses = [m.status for m in self._missions.values()]
            unresponsive = "fleet.control-unresponsive" in self.faults
            used_fraction = 0.96 if "fleet.degraded-disk" in self.faults else self.disk_used_fraction
        total = self.disk_total_bytes
        used = int(total * used_fraction)
        percent = round(used * 100.0 / total, 1)
        level = "critical" if percent >= 95 else "warn" if percent >= 85 else "ok"  # [U] thresholds
        body = {
            "status": "degraded" if unresponsive else "ok",
            "version": self.version,
            "control_responsive": not unresponsive,
            "running": None if unresponsive else statuses.count("active"),
            "queue_depth": None if unresponsive else statuses.count("pending"),
            "missions": {
                "total": len(statuses),
                "active": statuses.count("active"),
                "completed": statuses.count("completed"),
                "failed": statuses.count("failed") + statuses.count("not_feasible"),
                "acknowledged": statuses.count("acknowledged"),
            },
            "webhook_forwarder_configured": False,
            "offload_configured": False,
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

    def _render_node(self, node: _Node, now: float) -> dict[str, Any]:
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
            "last_seen": None if last_seen is None else _iso(last_seen),
            "error": error,
            "cordoned": node.cordoned or self._fault_on("fleet.node-cordoned", spec.id),
        }

    async def _remote_nodes(self, request: Request, user: str) -> Response:
        now = time.time()
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
                return _text(404, "unknown remote node")
            changed = node.cordoned != want
            node.cordoned = want
        return JSONResponse({"node": name, "cordoned": want, "changed": changed})

    async def _backends(self, request: Request, user: str) -> Response:
        return JSONResponse([{"id": b.id, "name": b.name} for b in self.backends.values()])

    # ---- request helpers --------------------------------------------------------------------

    @staticmethod
    async def _body(request: Request) -> dict[str, Any] | Response:
        """The JSON object body, or axum's Json-extractor rejection (415/400/422)."""
        if not request.headers.get("content-type", "").startswith("application/json"):
            return _text(415, "Expected request with `Content-Type: application/json`")
        try:
            doc = json.loads(await request.body())
        except ValueError as exc:
            return _text(400, f"Failed to parse the request body as JSON: {exc}")
        if not isinstance(doc, dict):
            return _text(422, "Failed to deserialize the JSON body into the target type: expected a map")
        return doc

    @staticmethod
    def _query_int(request: Request, name: str) -> int | Response | None:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return None
        try:
            return int(raw)
        except ValueError:
            return _text(400, f"Failed to deserialize query string: {name}: invalid digit found in string")

    # ---- missions: create -------------------------------------------------------------------

    async def _missions_root(self, request: Request, user: str) -> Response:
        if request.method == "POST":
            return await self._create(request, user)
        return self._list(request, user)

    async def _create(self, request: Request, user: str) -> Response:
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        bad = _type_error(body)
        if bad is not None:
            return _text(422, f"Failed to deserialize the JSON body into the target type: {bad}")
        with self._lock:
            return self._create_locked(body, user)

    def _create_locked(self, body: dict[str, Any], user: str) -> Response:
        """§3.4's processing order (the subset the simulator models)."""

        def opt(name: str) -> str | None:
            value = body.get(name)
            return value.strip() if isinstance(value, str) and value.strip() else None

        prompt = body.get("prompt")
        # 1. prompt validation [U: the real validator's text]
        if isinstance(prompt, str) and not prompt.strip():
            return _text(400, "prompt must not be empty")
        # 2. attachments
        if body.get("attachments") and not opt("project"):
            return _text(400, "attachments require a project")
        # 4. unknown keys
        ignored = [k for k in body if k not in KNOWN_CREATE_FIELDS]
        headers = {"x-ignored-fields": ",".join(ignored)} if ignored else {}
        # 5. idempotency coalescing (cp.idempotency-ignored skips only this step)
        key = opt("idempotency_key")
        if key and "cp.idempotency-ignored" not in self.faults and not cp_ops.ignores_key(self, body):
            held = self._missions.get(self._leases.get(f"lease:{key}", ""))
            if held is not None and held.owner == user and held.status != "failed":
                return self._coalesced(held, headers)
        # 6. retry-shaped duplicate coalescing: always on, as upstream (it masks an ignored key for a
        # retry identical in every field)
        title = opt("title")
        if title:
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
            parsed = _uuid_or_none(str(opt("workspace_id")))
            if parsed is None:
                return _text(
                    422, "Failed to deserialize the JSON body into the target type: workspace_id: UUID"
                )
            if parsed not in self._workspaces:
                return _text(400, f"Workspace {parsed} not found")
            ws_id = parsed
        workspace = self._workspaces[ws_id]
        # 11. workspace occupied
        if self._fault_on("cp.workspace-busy", workspace.name, ws_id):  # issue 20: another session holds it
            return _json_text(
                409,
                {
                    "error": "workspace_occupied",
                    "mission_id": BUSY_HOLDER_ID,
                    "title": f"sbxcheck {BUSY_HOLDER_TAG} canary codex-{workspace.name}",
                    "message": f"Workspace {workspace.name} already has a live mission {BUSY_HOLDER_ID}",
                },
            )
        if ws_id not in self.occupancy_exempt:
            for m in self._missions.values():
                if m.record["workspace_id"] == ws_id and m.status not in TERMINAL:
                    return _json_text(
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
                return _text(
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
                    return _text(
                        400, f"Model '{model}' selects backend '{prefix}', but mission backend is '{backend}'"
                    )
        backend = backend or "claudecode"
        spec = self.backends.get(backend)
        # 17. codex /goal
        goal_objective: str | None = None
        if backend == "codex" and isinstance(prompt, str) and prompt.lstrip().startswith("/goal "):
            goal_objective = prompt.lstrip()[len("/goal ") :].strip()
            if self.goal_limit_at_create and len(goal_objective) > GOAL_LIMIT:
                return _text(400, f"goal objective must be at most {GOAL_LIMIT} characters")
        if self._fault_on("cp.control-chars", backend):  # issue 20
            return _text(400, f"backend {backend} refused the mission: {HOSTILE_TEXT}")
        # 18. effort: kept and validated only where the backend takes it; silently dropped elsewhere
        effort = opt("model_effort")
        if spec is None or spec.efforts is None:
            effort = None
        elif effort is not None:
            effort = effort.lower()
            supported = [
                e
                for e in spec.efforts
                if not (e == "max" and self._fault_on("cp.effort-reject-max", backend))
            ]
            if effort not in supported:
                return _text(
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
            return _text(
                400, f"Agent '{agent}' not found in library. Available agents: {', '.join(self.agents)}"
            )
        # 22. unregistered backend
        if spec is None:
            return _text(400, f"Unknown backend: {backend}")
        # 23. catalog check; the list of valid ids follows the seed's observed sentence [S]
        if model and model not in spec.models:
            return _text(
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
            return _text(400, "estimated_disk_gib must be between 1 and 512")
        tags = [str(t) for t in body.get("tags") or []]
        if any(t.startswith("disk-reservation-v1") for t in tags):
            return _text(400, "tags starting with 'disk-reservation-v1' are reserved")
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

    def _coalesced(self, m: _Mission, headers: dict[str, str]) -> Response:
        return JSONResponse(self._render(m), headers={**headers, "x-coalesced-with": m.id})

    def _persist(
        self,
        body: dict[str, Any],
        user: str,
        workspace: _Workspace,
        backend: str,
        agent: str | None,
        model: str | None,
        requested_model: str | None,
        effort: str | None,
        goal_objective: str | None,
        tags: list[str],
        headers: dict[str, str],
    ) -> Response:
        now = time.time()
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
            "created_at": _iso(now),
            "updated_at": _iso(now),
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
        m = _Mission(
            record=record,
            owner=user,
            prompt=prompt,
            requested_model=requested_model,
            created_mono=time.monotonic(),
            updated_epoch=now,
            last_status_change_at=_iso(now),
        )
        self._missions[mid] = m
        key = body.get("idempotency_key")
        lease = key.strip() if isinstance(key, str) and key.strip() else f"auto:{mid}"
        self._leases[f"lease:{lease}"] = mid
        loop = asyncio.get_running_loop()
        self._loop = loop
        task = loop.create_task(self._agent(mid), name=f"sim-agent-{mid[:8]}")
        m.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._fault_on("cp.create-500", backend):  # stored and running; the client never learns its id
            return _text(500, "Internal Server Error")
        return JSONResponse(self._render(m), headers=headers)

    # ---- missions: read, list, cancel ---------------------------------------------------------

    def _render(self, m: _Mission, *, with_agent: bool = True, decorate: bool = False) -> dict[str, Any]:
        now = time.time()
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
        rec["last_activity_at"] = _iso(last_activity)
        rec["idle_seconds"] = int(idle)
        rec["idle_for"] = _idle_for(idle)
        verdict = self._verdict(m.status, idle)
        if verdict is not None:
            rec["health_verdict"] = verdict
        rec["execution"] = copy.deepcopy(m.execution)
        if self._fault_on("cp.path-shaped-id", str(rec.get("backend"))):  # issue 20
            rec["id"] = PATH_SHAPED_ID
        if decorate:
            rec["remote_job"] = None
            rec["spark_offload"] = {"enabled": False, "env_injected": False, "host_configured": False}
        return rec

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

    def _lookup(self, raw: str) -> tuple[str | None, _Mission | None]:
        mid = _uuid_or_none(raw)
        return mid, None if mid is None else self._missions.get(mid)

    async def _mission_item(self, request: Request, user: str) -> Response:
        raw = request.path_params["id"]
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return _text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            if m is None:
                return _text(404, f"Mission {mid} not found")
            if request.method == "DELETE":
                if m.owner != user:
                    return _text(404, f"Mission {mid} not found")
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
            return JSONResponse(self._render(m, decorate=True))

    async def _digest(self, request: Request, user: str) -> Response:
        """``GET /missions/:id/digest``: the compact view behind MCP ``get_mission`` (§3.5); no ``agent``."""
        raw = request.path_params["id"]
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return _text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            if m is None or m.owner != user:
                return _text(404, f"Mission {mid} not found")
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
        q = request.query_params
        limit, offset = self._query_int(request, "limit"), self._query_int(request, "offset")
        if isinstance(limit, Response):
            return limit
        if isinstance(offset, Response):
            return offset
        limit = min(200, max(1, 50 if limit is None else limit))
        offset = max(0, offset or 0)
        statuses = {s.strip() for s in q.get("status", "").split(",") if s.strip()}
        show_all = q.get("all", "").lower() in ("true", "1")
        workspace, tag, project = q.get("workspace"), q.get("tag"), q.get("project")
        with self._lock:
            rows = [m for m in self._missions.values() if m.owner == user]
            rows.sort(key=lambda m: m.record["created_at"], reverse=True)
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
                out.append(self._render(m, with_agent=False))
        return JSONResponse(out[offset : offset + limit])

    async def _events(self, request: Request, user: str) -> Response:
        raw = request.path_params["id"]
        ints = {n: self._query_int(request, n) for n in ("since_seq", "before_seq", "limit")}
        for value in ints.values():
            if isinstance(value, Response):
                return value
        since, before, limit = (v if isinstance(v, int) else None for v in ints.values())
        q = request.query_params
        view = q.get("view") or "all"
        if view not in VIEWS:
            return _text(400, f"Invalid view '{view}'; expected one of: {', '.join(VIEWS)}")
        types = {t.strip() for t in q.get("types", "").split(",") if t.strip()}
        include_counts = q.get("include_counts", "true").lower() not in ("false", "0")
        limit = min(1000, max(1, 100 if limit is None else limit))  # [U] default page size
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return _text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            if m is None or m.owner != user:
                return _text(404, "Mission not found")
            everything = copy.deepcopy(m.events)
        allowed = VIEWS[view]
        rows = [e for e in everything if (allowed is None or e["event_type"] in allowed)]
        if types:
            rows = [e for e in rows if e["event_type"] in types]
        if before is not None:  # before_seq beats since_seq
            rows = [e for e in rows if e["sequence"] < before][-limit:]
        elif since is not None:
            rows = [e for e in rows if e["sequence"] > since][:limit]
        else:
            rows = rows[:limit]
        headers = {
            "X-Max-Sequence": str(everything[-1]["sequence"] if everything else 0),
            "Access-Control-Expose-Headers": EXPOSE_HEADERS,
        }
        if include_counts:
            headers["X-Total-Events"] = str(len(everything))
        return JSONResponse(rows, headers=headers)

    async def _cancel(self, request: Request, user: str) -> Response:
        raw = request.path_params["id"]
        with self._lock:
            self.cancels_started += 1
        if "cp.cancel-slow" in self.faults:
            await asyncio.sleep(CANCEL_SLOW_S)
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return _text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            if m is None or m.owner != user:
                return _text(404, f"Mission {mid} not found")
            self._interrupt(m, "cancelled")  # a terminal mission stays as it is [U]
        return JSONResponse({"ok": True, "cancelled": mid})

    def _interrupt(self, m: _Mission, reason: str) -> None:
        if m.status in TERMINAL:
            return
        self._set_status(m, "interrupted", reason=reason)
        if m.task is not None and not m.task.done():
            m.task.cancel()

    async def _running(self, request: Request, user: str) -> Response:
        now = time.time()
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

    # ---- the simulated agent ----------------------------------------------------------------

    def _emit(
        self,
        m: _Mission,
        event_type: str,
        content: str = "",
        *,
        tool_name: str | None = None,
        tool_call_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        now = time.time()
        stamp = _iso(now)
        m.events.append(
            {
                "id": next(self._event_ids),
                "mission_id": m.id,
                "sequence": len(m.events) + 1,
                "event_type": event_type,
                "timestamp": stamp,
                "event_id": str(uuid.uuid4()),
                "tool_call_id": tool_call_id,
                "tool_name": tool_name,
                "content": content,
                "metadata": metadata or {},
            }
        )
        m.last_event_epoch = now
        self.stream.publish(m.events[-1])
        if event_type in AGENT_EVENTS:
            m.last_agent_event_at = stamp
            if m.execution is not None:
                m.execution["heartbeat_at"] = stamp
        if event_type in OUTPUT_EVENTS:
            m.last_output_at = stamp

    def _set_status(
        self,
        m: _Mission,
        status: str,
        *,
        reason: str | None = None,
        evidence: str | None = None,
        awaiting_kind: str | None = None,
    ) -> bool:
        if m.status in TERMINAL:
            return False
        now = time.time()
        stamp = _iso(now)
        rec = m.record
        rec["status"] = status
        rec["updated_at"] = stamp
        m.updated_epoch = now
        m.last_status_change_at = stamp
        rec.pop("awaiting_kind", None)
        if status == "awaiting_user" and awaiting_kind:
            rec["awaiting_kind"] = awaiting_kind
        if status in TERMINAL:
            if reason:
                rec["terminal_reason"] = reason
            if evidence:
                rec["terminal_evidence"] = evidence
            if status == "interrupted":
                rec["interrupted_at"] = stamp
                rec["resumable"] = True
            if m.execution is not None:
                m.execution.update(execution_state="terminal", ended_at=stamp, terminal_reason=reason)
        elif status == "awaiting_user" and m.execution is not None:
            m.execution["execution_state"] = "waiting_user"
        self._emit(
            m, "mission_status_changed", metadata={"mission_id": m.id, "status": status, "summary": reason}
        )
        return True

    async def _sleep(self, base_s: float) -> None:
        await asyncio.sleep(max(0.0, base_s * self.latency_scale))

    def _scope_for(self, m: _Mission) -> tuple[Path, Path]:
        """``(workspace_path, scope)``: the scope is the workspace, or an empty ephemeral dir."""
        ws = self._workspaces[m.record["workspace_id"]]
        if self._fault_on("cp.mount-missing", m.record["backend"]) or self._fault_on(
            "cp.mount-missing-exitcode", m.record["backend"]
        ):
            scope = self.root / "missions" / m.id
            scope.mkdir(parents=True, exist_ok=True)
            return ws.path, scope
        return ws.path, ws.path

    def _env_for(self, ws: _Workspace, home: Path) -> dict[str, str]:
        path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        env = {
            "PATH": os.pathsep.join([*self.exec_path_prefix, path]),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CEILING_DIRECTORIES": str(home.parent),
        }
        env.update(ws.env)
        if self._fault_on("cp.env-values-exposed", ws.name, ws.id):
            env.update(ws.exposed_env)
        return env

    def _alive(self, mid: str) -> _Mission | None:
        m = self._missions.get(mid)
        return m if m is not None and m.status not in TERMINAL else None

    async def _agent(self, mid: str) -> None:
        try:
            await self._sleep(self._rng.uniform(*DISPATCH_S))
            with self._lock:
                m = self._missions.get(mid)
                if m is None or m.status != "pending":
                    return
                backend = m.record["backend"]
                if self._fault_on("cp.stuck-pending", backend):
                    return
                branch = self._branch(m)
                self._dispatch(m, evidence_free=branch == "no-evidence")
            await self._run_branch(mid, branch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a simulator bug must show up as a failed mission, not a hang
            with self._lock:
                m = self._alive(mid)
                if m is not None:
                    self._emit(m, "error", f"simulator error: {type(exc).__name__}")
                    self._set_status(m, "failed", reason="sim_internal_error")

    def _branch(self, m: _Mission) -> str:
        backend = m.record["backend"]
        if self._fault_on("cp.backend-crash", backend):
            return "crash"
        if self._fault_on("cp.model-not-found", backend) and m.requested_model:
            return "model-not-found"
        objective = m.record.get("goal_objective")
        if isinstance(objective, str) and len(objective) > GOAL_LIMIT:
            return "goal-too-long"
        if self._fault_on("cp.no-evidence", backend):
            return "no-evidence"
        if self._fault_on("ops.model-silent", backend):  # issue 21
            return "silent"
        return "run"

    def _dispatch(self, m: _Mission, *, evidence_free: bool) -> None:
        self._set_status(m, "active")
        stamp = _iso(time.time())
        if m.prompt:
            m.record["history"].append({"role": "user", "content": m.prompt})
        m.evidence_free = evidence_free
        if evidence_free:
            return
        m.execution = {
            "run_id": str(uuid.uuid4()),
            "mission_id": m.id,
            "generation": 1,
            "execution_state": "running",
            "owner_actor_id": "sim-control-actor",
            "scope_unit": None,
            "started_at": stamp,
            "heartbeat_at": stamp,
            "stopping_at": None,
            "ended_at": None,
            "terminal_reason": None,
        }
        if m.prompt:
            self._emit(
                m,
                "user_message",
                m.prompt,
                metadata={"id": str(uuid.uuid4()), "queued": False, "source": f"api:{m.owner}"},
            )

    async def _run_branch(self, mid: str, branch: str) -> None:
        await self._sleep(THINK_S)
        if branch == "no-evidence":
            await self._sleep(NO_EVIDENCE_ACTIVE_S)
            with self._lock:
                m = self._alive(mid)
                if m is not None:
                    self._set_status(m, self.finish_status, reason="completed")
            return
        if branch == "crash":
            with self._lock:
                m = self._alive(mid)
                if m is None:
                    return
                self._emit(
                    m,
                    "agent_phase",
                    "Performing one-time database migration... done",
                    metadata={"phase": "migration", "agent": "opencode"},
                )
            await self._sleep(FINISH_S)
            self._fail(mid, "fn3 is not a function", reason="agent_error")
            return
        if branch == "silent":  # issue 21: active, then an idle timeout without any output
            await self._sleep(FINISH_S)
            self._fail(mid, cp_ops.IDLE_TIMEOUT, reason="idle_timeout")
            return
        if branch == "goal-too-long":
            self._fail(
                mid,
                "codex thread/goal/set failed: goal objective must be at most 4000 characters",
                reason="agent_error",
            )
            return
        if branch == "model-not-found":
            with self._lock:
                m = self._alive(mid)
                if m is None:
                    return
                text = f"ProviderModelNotFoundError: provider '{m.requested_model}' not found"
                self._emit(m, "error", text, metadata={"mission_id": mid, "resumable": True})
                self._set_status(m, "awaiting_user", awaiting_kind="decision")
            return
        await self._run_steps(mid)

    def _fail(self, mid: str, message: str, *, reason: str) -> None:
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return
            self._emit(m, "error", message, metadata={"mission_id": mid, "resumable": False})
            self._set_status(m, "failed", reason=reason, evidence=message)

    async def _run_steps(self, mid: str) -> None:
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return
            ws = self._workspaces[m.record["workspace_id"]]
            ws_path, scope = self._scope_for(m)
            env = self._env_for(ws, scope)
            steps = _STEP_RE.findall(m.prompt or "")[:MAX_STEPS]
        failures = 0
        for index, step in enumerate(steps or ["echo ok"], start=1):
            ok = await self._run_step(mid, index, step, ws_path, scope, env)
            failures += 0 if ok else 1
            await self._sleep(STEP_S)
        await self._sleep(FINISH_S)
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return
            passed = len(steps) - failures
            reply = f"Workspace canary: ran {len(steps)} step(s), {passed} succeeded." if steps else "ok"
            m.record["history"].append({"role": "assistant", "content": reply})
            self._emit(
                m,
                "assistant_message",
                reply,
                metadata={
                    "id": str(uuid.uuid4()),
                    "success": True,
                    "cost_cents": self.mission_cost_cents,
                    "model": m.record.get("model_override") or m.requested_model,
                    "shared_files": [],
                    "resumable": False,
                },
            )
        await self._sleep(FINISH_S)
        with self._lock:
            m = self._alive(mid)
            if m is not None:
                calls = len(steps) or 1
                self._set_status(
                    m,
                    self.finish_status,
                    reason="completed",
                    evidence=f"assistant_message after {calls} tool call(s)",
                )

    async def _run_step(
        self, mid: str, index: int, step: str, ws_path: Path, scope: Path, env: dict[str, str]
    ) -> bool:
        """Run one canary step for real; emit its tool_call/tool_result pair. True on success."""
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        try:
            argv = shlex.split(step)
        except ValueError:
            argv = []
        is_mcp = len(argv) >= 2 and argv[0] == "mcp"
        if is_mcp:
            tool_name = f"mcp__workspace__{argv[1]}"
            args: dict[str, Any] = {"path": argv[2] if len(argv) > 2 else ""}
        else:
            tool_name, args = "bash", {"command": step}
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return False
            if m.execution is not None:
                m.execution["execution_state"] = "waiting_tool"
            self._emit(m, "tool_call", json.dumps(args), tool_name=tool_name, tool_call_id=call_id)
            exit_code_only = self._fault_on("cp.mount-missing-exitcode", m.record["backend"])
        meta: dict[str, Any] = {"step": index}
        if is_mcp:
            text, is_error = await asyncio.to_thread(_mcp_tool, argv[1], argv[2:], ws_path, scope)
            meta["is_error"] = is_error
        else:
            translated = [_translate(a, ws_path, scope) for a in argv]
            refusal = _refuse(translated)
            if refusal is not None:
                code, out, err, timed_out = 126, "", refusal + "\n", False
            else:
                code, out, err, timed_out = await asyncio.to_thread(
                    run_bounded, translated, scope, env, self.step_timeout_s
                )
            text = out + err
            if scope != ws_path:  # inside a container the missing path is named as the step asked for it
                text = text.replace(str(scope), str(ws_path))
            is_error = code != 0 or timed_out
            meta.update(exit_code=code, timed_out=timed_out, is_error=is_error)
        if exit_code_only:  # the upstream shape some harnesses store: an exit code and nothing else
            meta = {"step": index, "exit_code": meta.get("exit_code", int(is_error))}
        await self._sleep(STEP_S)
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return False
            if m.execution is not None:
                m.execution["execution_state"] = "running"
            self._emit(m, "tool_result", text, tool_name=tool_name, tool_call_id=call_id, metadata=meta)
        return not is_error

    # ---- workspaces -------------------------------------------------------------------------

    def _render_workspace(self, ws: _Workspace) -> dict[str, Any]:
        spec = ws.spec
        env = dict(ws.env)
        if self._fault_on("cp.env-values-exposed", ws.name, ws.id):
            env.update(ws.exposed_env)
        return {
            "id": ws.id,
            "name": ws.name,
            "path": str(ws.path),
            "workspace_type": spec.workspace_type if spec else "host",
            "status": f"{ws.status}{HOSTILE_TEXT}" if "cp.control-chars" in self.faults else ws.status,
            "error_message": ws.error_message,
            "created_at": ws.created_at,
            "skills": list(spec.skills) if spec else [],
            "plugins": [],
            "template": None,
            "config_profile": None,
            "distro": spec.distro if spec else None,
            "env_vars": env,  # REST is never scrubbed (§4, §7): names AND values
            "init_scripts": list(spec.init_scripts) if spec else [],
            "init_script": None,
            "shared_network": True,
            "tailscale_mode": "exit_node",
            "mcps": list(spec.mcps) if spec else [],
        }

    async def _list_workspaces(self, request: Request, user: str) -> Response:
        with self._lock:
            return JSONResponse([self._render_workspace(ws) for ws in self._workspaces.values()])

    async def _get_workspace(self, request: Request, user: str) -> Response:
        ws = self._workspaces.get(_uuid_or_none(request.path_params["id"]) or "")
        if ws is None:
            return _text(404, "Workspace not found")
        with self._lock:
            return JSONResponse(self._render_workspace(ws))

    async def _exec(self, request: Request, user: str) -> Response:
        ws = self._workspaces.get(_uuid_or_none(request.path_params["id"]) or "")
        if ws is None:
            return _text(404, "Workspace not found")
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        command, cwd, timeout, stdin = (
            body.get("command"),
            body.get("cwd"),
            body.get("timeout_secs"),
            body.get("stdin"),
        )
        extra_env = body.get("env") or {}
        if not isinstance(command, str):
            return _text(
                422, "Failed to deserialize the JSON body into the target type: missing field `command`"
            )
        if not command.strip():
            return _text(400, "command must not be empty")  # [U]
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)):
            return _text(
                422, "Failed to deserialize the JSON body into the target type: timeout_secs: invalid type"
            )
        if not isinstance(extra_env, dict) or (cwd is not None and not isinstance(cwd, str)):
            return _text(422, "Failed to deserialize the JSON body into the target type: invalid type")
        secs = min(600, max(1, 300 if timeout is None else timeout))
        workdir = ws.path / cwd if cwd else ws.path
        with self._lock:
            env = self._env_for(ws, ws.path)
        env.update({str(k): str(v) for k, v in extra_env.items()})
        shell = "/bin/bash" if shutil.which("bash") else "/bin/sh"
        code, out, err, timed_out = await asyncio.to_thread(
            run_bounded,
            [shell, "-c", command],
            workdir,
            env,
            float(secs),
            stdin if isinstance(stdin, str) else None,
        )
        return JSONResponse({"exit_code": code, "stdout": out, "stderr": err, "timed_out": timed_out})


# ---- helpers for the agent ------------------------------------------------------------------


def _type_error(body: Mapping[str, Any]) -> str | None:
    """serde-style type errors for the create body (→ 422), or None."""
    for name in _STR_FIELDS:
        if body.get(name) is not None and not isinstance(body[name], str):
            return f"{name}: invalid type, expected a string"
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


def _translate(token: str, ws_path: Path, scope: Path) -> str:
    """Map a path at or under the workspace into the mission's scope (identity when they agree)."""
    base = str(ws_path)
    if scope == ws_path or not (token == base or token.startswith(base + "/")):
        return token
    return str(scope) + token[len(base) :]


def _refuse(argv: Sequence[str]) -> str | None:
    """Why the simulator will not run this step (not a read-only program), or None."""
    if not argv:
        return "empty or unparsable step"
    program = argv[0]
    if program not in READ_ONLY_PROGRAMS:
        return f"{program}: not allowed in the simulated agent (read-only steps only)"
    if program == "git":
        rest = list(argv[1:])
        while rest and rest[0] in ("-C", "-c"):
            rest = rest[2:]
        if not rest or rest[0] not in GIT_READ_ONLY:
            return f"git {rest[0] if rest else ''}: not a read-only git subcommand".replace("  ", " ")
    return None


def _mcp_tool(tool: str, args: Sequence[str], ws_path: Path, scope: Path) -> tuple[str, bool]:
    """The workspace MCP server's ``read_file`` / ``list_dir``: ``(text, is_error)``."""
    if tool not in ("read_file", "list_dir"):
        return f"Unknown tool: {tool}", True
    if not args:
        return "Invalid params: missing field `path`", True
    requested = args[0]
    raw = Path(_translate(requested, ws_path, scope))
    target = (raw if raw.is_absolute() else scope / raw).resolve()
    root = scope.resolve()
    if target != root and root not in target.parents:
        return f"path outside workspace: {requested}", True
    rel = target.relative_to(root)
    if rel.parts and not (root / rel.parts[0]).exists():
        return f"project not found: {rel.parts[0]}", True
    if tool == "list_dir":
        if not target.is_dir():
            return f"directory not found: {requested}", True
        return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())), False
    if not target.is_file():
        return f"file not found: {requested}", True
    data = target.read_bytes()[:MAX_OUTPUT_BYTES]
    return data.decode("utf-8", errors="replace"), False
