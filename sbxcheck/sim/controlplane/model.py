"""The simulated control plane's model: constants, specs (backends, workspaces, nodes), faults, records,
helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import string
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from sbxcheck.errors import SimError
from sbxcheck.sim.faults import FAULTS as ALL_FAULTS
from sbxcheck.sim.pushback import EVERY_NTH, PUSHBACK_FAULT
from sbxcheck.sim.stream import STREAM_FAULTS

NIL_UUID: Final = "00000000-0000-0000-0000-000000000000"
EFFORTS: Final = ("low", "medium", "high", "xhigh", "max")
TERMINAL: Final = frozenset({"completed", "failed", "blocked", "not_feasible", "interrupted"})
STATUSES: Final = TERMINAL | {"pending", "active", "awaiting_user", "acknowledged", "paused", "waiting_background"}
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

# Base latencies in seconds, multiplied by ``latency_scale``: 1 by default, or what
# $SBXCHECK_SIM_LATENCY_SCALE says for the embedded fleet (0 to 10; 0.2 makes a canary run ~2x faster).
LATENCY_SCALE_ENV: Final = "SBXCHECK_SIM_LATENCY_SCALE"
MAX_LATENCY_SCALE: Final = 10.0
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
STR_FIELDS: Final = (
    "title", "prompt", "workspace_id", "agent", "backend", "model_override", "model_effort",
    "config_profile", "parent_mission_id", "supersedes_mission_id", "working_directory", "not_before",
    "deadline", "project", "track", "intent", "github_pr", "desired_state", "next_check_at",
    "idempotency_key", "remote_node_id", "remote_command", "origin", "origin_session_id", "placement",
)  # fmt: skip
STEP_RE: Final = re.compile(r"^[ \t]*STEP:[ \t]*(.+?)[ \t]*$", re.MULTILINE)


# ---- catalog ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackendSpec:
    """One registered backend and its model catalog (specs/sandboxed-sh.md, 3.4 steps 18 to 25)."""

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
    """A remote node as its heartbeat describes it."""

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
CLOCK_BEHIND_S: Final = 900.0  # cp.clock-behind: how far the control plane's clock is behind this machine's
PATH_SHAPED_ID: Final = "../../../admin/wipe-everything?confirm=yes#"  # a server id that tries to be a path
BUSY_HOLDER_ID: Final = "0b5e55ed-0000-4000-8000-000000000020"  # the other session's mission
BUSY_HOLDER_TAG: Final = "0ther5e5"

TOKEN_EXPIRES_FAULT: Final = "cp.token-expires"
# an SSO proxy in front: an expired or refused token meets its login page (a redirect, or the page itself)
EXPIRY_REDIRECT_FAULT: Final = "cp.expiry-redirect"
EXPIRY_HTML_FAULT: Final = "cp.expiry-html"
LOGIN_EMPTY_FAULT: Final = "cp.login-empty"
SSO_LOGIN_URL: Final = "https://sso.example.invalid/oauth2/login"
TOKEN_REQUESTS: Final = 12  # requests a token authorizes under cp.token-expires: fewer than any run makes

CONTROLPLANE_FAULTS: Final[dict[str, str]] = {
    "cp.backend-crash": "target backend's missions run the DB migration, then fail `fn3 is not a function` "
    "before any tool call (a shared adapter crash)",
    "cp.model-not-found": "target backend's missions with a model_override park in awaiting_user after a "
    "ProviderModelNotFoundError error event",
    "cp.effort-reject-max": "target backend rejects model_effort 'max' at create (400 Invalid model_effort)",
    "cp.record-drops-model": "the stored record of target backend's missions omits model_override",
    "cp.stuck-pending": "target backend's missions are never dispatched: they stay pending",
    "cp.no-evidence": "target backend's missions go active with null execution and no agent events, "
    "then complete with no tool events",
    "cp.server-shutdown": "target backend's missions are interrupted right after they start, before any tool "
    "call, with terminal_reason server_shutdown (the control plane restarted for a deploy)",
    "cp.mount-missing": "target backend's missions run in an empty ephemeral directory instead of the "
    "workspace; MCP lookups answer project/file not found",
    "cp.mount-missing-exitcode": "as cp.mount-missing, and tool results carry only metadata.exit_code "
    "(no is_error): a failing step's error text is all that names the path",
    "cp.idempotency-ignored": "create ignores idempotency_key (title coalescing stays on, as upstream): a "
    "retry with the same key and a new title is a new mission",
    "cp.auth-expired": "every bearer token is refused: 401 `Invalid or expired token`",
    EXPIRY_REDIRECT_FAULT: f"a token is spent after {TOKEN_REQUESTS} requests; a spent or refused token is "
    f"answered 302 to {SSO_LOGIN_URL} (an SSO proxy's login page), not 401",
    EXPIRY_HTML_FAULT: f"a token is spent after {TOKEN_REQUESTS} requests; a spent or refused token is "
    "answered 200 text/html with an SSO proxy's login page, not 401",
    LOGIN_EMPTY_FAULT: "POST /api/auth/login answers 200 with an empty body",
    TOKEN_EXPIRES_FAULT: f"every token login issues expires after it has authorized {TOKEN_REQUESTS} requests "
    "(later ones with it: 401 `Invalid or expired token`); a new login issues a new one",
    "cp.cancel-slow": f"every cancel waits {CANCEL_SLOW_S:g}s before it acts (for interrupt tests)",
    "cp.create-500": "target backend's creates are stored and started, then answered 500 (the client never "
    "learns the id)",
    "cp.env-values-exposed": "target workspace's env also holds credential-shaped values (ghp_…, sk-ant-…)",
    "fleet.node-offline": "target node missed 3+ heartbeats: status offline, stale last_seen, error set",
    "fleet.node-degraded": "target node missed 1-2 heartbeats: status degraded",
    "fleet.node-cordoned": "target node is cordoned",
    "fleet.degraded-disk": "control-plane disk at 96%: disk_level critical, free space below required",
    "fleet.control-unresponsive": "/api/health/fleet answers 200 with status degraded, control_responsive false",
    # pushback and the live event stream
    PUSHBACK_FAULT: f"every {EVERY_NTH}th request (any method) is refused unserved: 429 / 503 with Retry-After",
    **STREAM_FAULTS,
    # hostile answers
    "cp.path-shaped-id": f"target backend's mission records carry the id {PATH_SHAPED_ID!r}, not a UUID",
    "cp.control-chars": "target backend's creates are refused 400 with terminal escapes, C0 control "
    "characters and line-feed forged lines in the error text, and every workspace's status carries the escapes",
    "cp.workspace-busy": "target workspace already has another session's live mission: creates into it "
    "are refused 409 workspace_occupied",
    "cp.clock-behind": f"the control plane's clock runs {CLOCK_BEHIND_S / 60:g} minutes behind this machine's: "
    "its Date header and every stamp it keeps (missions' created_at/updated_at, events, nodes' last_seen) "
    "are written on it",
    "cp.slot-held": "a long mission of the operator's own runs all session; where a release runs one "
    "mission at a time (v0.7) it holds the only slot",
}
# the ``ops.*`` faults: hygiene, readiness, catalog (described in sbxcheck.sim.faults.FAULTS; sim/controlplane/ops.py)
OPS_FAULTS: Final[dict[str, str]] = {n: f.summary for n, f in ALL_FAULTS.items() if n.startswith("ops.")}
CONTROLPLANE_FAULTS.update(OPS_FAULTS)
# a control plane that lies in well-formed answers (sim/controlplane/lies.py); named in sim/faults.py
LIES_FAULTS: Final = (
    "cp.coalesce-foreign",
    "cp.stream-lies",
    "cp.stream-endless-line",
    "cp.list-flood",
    "cp.record-id-mismatch",
)
CONTROLPLANE_FAULTS.update({n: ALL_FAULTS[n].summary for n in LIES_FAULTS})
COST_FAULTS: Final = ("cp.cost-nonfinite", "cp.cost-negative")  # the costs the agent reports
CONTROLPLANE_FAULTS.update({n: ALL_FAULTS[n].summary for n in COST_FAULTS})
DEEP_JSON_FAULT: Final = "cp.deep-json"  # what the agent says: JSON nested past any parser's stack
CONTROLPLANE_FAULTS[DEEP_JSON_FAULT] = ALL_FAULTS[DEEP_JSON_FAULT].summary
DEFAULT_FAULT_TARGETS: Final[dict[str, str]] = {
    "cp.path-shaped-id": "gemini",
    "cp.control-chars": "opencode",
    "cp.workspace-busy": "verity",
    "cp.backend-crash": "opencode",
    "cp.model-not-found": "opencode",
    "cp.effort-reject-max": "codex",
    "cp.create-500": "gemini",
    "cp.server-shutdown": "gemini",
    "cp.mount-missing": "opencode",
    "cp.mount-missing-exitcode": "opencode",
    "cp.env-values-exposed": "verity",
    "fleet.node-offline": "dgx-spark",
    "fleet.node-degraded": "nippur",
    "fleet.node-cordoned": "babylon",
    "cp.coalesce-foreign": "claudecode",
    "cp.stream-lies": "gemini",
    "cp.list-flood": "gemini",
    "cp.record-id-mismatch": "opencode",
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
class WorkspaceState:
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
class NodeState:
    spec: NodeSpec
    cordoned: bool = False


@dataclass
class MissionState:
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


def iso_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def idle_for(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        hours, minutes = divmod(s // 60, 60)
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    return f"{s // 86400}d"


def plain_text(status: int, body: str) -> PlainTextResponse:
    return PlainTextResponse(body, status_code=status)


def json_text(status: int, doc: Mapping[str, Any]) -> PlainTextResponse:
    """A JSON error document in a plain-text body, as axum's ``(StatusCode, String)`` sends it."""
    return PlainTextResponse(json.dumps(doc), status_code=status)


def uuid_or_none(raw: str) -> str | None:
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


def make_checkout(path: Path, spec: WorkspaceSpec) -> str:
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


def sim_secret() -> str:
    return f"sim-secret-{secrets.token_hex(12)}"


def credential_values() -> dict[str, str]:
    alphabet = string.ascii_letters + string.digits
    return {
        "GH_TOKEN": "ghp_" + "".join(secrets.choice(alphabet) for _ in range(36)),
        "ANTHROPIC_API_KEY": "sk-ant-api03-" + secrets.token_urlsafe(30),
    }


Handler = Callable[[Request, str], Awaitable[Response]]


def latency_scale_from_env() -> float:
    """``$SBXCHECK_SIM_LATENCY_SCALE`` as a number from 0 to 10 (1 when unset); SimError when it is not one."""
    raw = os.environ.get(LATENCY_SCALE_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= MAX_LATENCY_SCALE:  # NaN fails this too
        raise SimError(
            f"${LATENCY_SCALE_ENV}: expected a number from 0 to {MAX_LATENCY_SCALE:g}, got {raw[:40]!r}"
        )
    return value
