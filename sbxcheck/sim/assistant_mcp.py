"""A stand-in for sandboxed.sh's assistant MCP (``assistant-mcp``): stdio MCP over the REST API.

Run it as ``python -m sbxcheck.sim.assistant_mcp`` (``--version`` prints ``assistant-mcp 0.1.0``).
It serves the real server's 28 tools, unprefixed, with the same argument names, required arguments,
defaults, clamps, REST calls and result shapes, built on the SDK's low-level ``Server``. Like the
real one, a tool failure is a JSON-RPC error ``-32000`` whose message is the tool's reason (REST
failures carry the server's status and body), and a success is one ``text`` item of pretty JSON.

Environment (read once at start):

* API URL: first set of ``HERMES_SANDBOXED_API_URL``, ``SANDBOXED_API_URL``, ``OPEN_AGENT_API_URL``,
  default ``http://127.0.0.1:3000``, trailing slashes trimmed; token: first set of
  ``HERMES_SANDBOXED_API_TOKEN``, ``SANDBOXED_API_TOKEN``, ``OPEN_AGENT_API_TOKEN`` (blank = none).
  The real server mints a JWT from ``JWT_SECRET`` when no token is set; this one does not, and
  fails every REST-backed call with a clear error instead.
* ``HERMES_DEFAULT_WORKSPACE_ID`` / ``ASSISTANT_DEFAULT_WORKSPACE_ID``: default workspace for
  ``start_mission`` and ``workspace_bash``; ``HERMES_ASSISTANT_ARTIFACT_DIR``: download directory.
* ``SBXCHECK_SIM_MCP_SCRUB=1``: scrub results the way the real server does (env_vars values,
  secret-named keys, token-shaped strings). Off by default, so secret exposure passes through to
  the harness, whose own reduction is what is under test.
* ``SBXCHECK_SIM_MCP_START_EXTRAS=1``: ``start_mission`` also accepts and forwards ``origin``,
  ``origin_session_id``, ``idempotency_key`` and ``acceptance_criteria`` (as newer builds do).
* ``SBXCHECK_SIM_MCP_HTTP_TIMEOUT_S``: per-request REST timeout, default 30.
* ``SBXCHECK_SIM_MCP_RELEASE``: the release whose assistant MCP to serve: ``current`` (default, the
  28 tools of ``src/bin/assistant_mcp.rs`` @4d62797) or ``1.3`` (karypid/sandboxed.sh 71b28a33: its
  15 tools, lines 421-610; ``start_mission`` creates without the prompt, then sends it with
  ``POST /api/control/message`` (793-822); ``get_mission`` reads the full REST record (672);
  ``get_mission_events`` without a cursor sends none (684-708)).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final
from urllib.parse import parse_qs, quote, urlsplit

import anyio
import httpx
import mcp_types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

SERVER_NAME: Final = "sandboxed-hermes-assistant"
SERVER_VERSION: Final = "0.1.0"
URL_ENV_VARS: Final = ("HERMES_SANDBOXED_API_URL", "SANDBOXED_API_URL", "OPEN_AGENT_API_URL")
TOKEN_ENV_VARS: Final = ("HERMES_SANDBOXED_API_TOKEN", "SANDBOXED_API_TOKEN", "OPEN_AGENT_API_TOKEN")
DEFAULT_WORKSPACE_ENV_VARS: Final = ("HERMES_DEFAULT_WORKSPACE_ID", "ASSISTANT_DEFAULT_WORKSPACE_ID")
DEFAULT_API_URL: Final = "http://127.0.0.1:3000"
ARTIFACT_DIR_ENV: Final = "HERMES_ASSISTANT_ARTIFACT_DIR"
DEFAULT_ARTIFACT_DIR: Final = "/tmp/hermes-assistant-artifacts"
SCRUB_ENV: Final = "SBXCHECK_SIM_MCP_SCRUB"
START_EXTRAS_ENV: Final = "SBXCHECK_SIM_MCP_START_EXTRAS"
HTTP_TIMEOUT_ENV: Final = "SBXCHECK_SIM_MCP_HTTP_TIMEOUT_S"
RELEASE_ENV: Final = "SBXCHECK_SIM_MCP_RELEASE"
TOOL_ERROR_CODE: Final = -32000
INFLIGHT_STATUSES: Final = frozenset({"active", "pending", "awaiting_user", "blocked"})
EVENT_VIEWS: Final = ("transcript", "trace", "history", "all")
NEWEST_PAGE: Final = 2**63 - 1  # before_seq that selects the newest page (i64::MAX)
NO_TOKEN_MESSAGE: Final = (
    "No API token configured: set HERMES_SANDBOXED_API_TOKEN, SANDBOXED_API_TOKEN or "
    "OPEN_AGENT_API_TOKEN (this simulator does not mint JWTs from JWT_SECRET)"
)
REDACTED: Final = "[redacted]"

log = logging.getLogger("sbxcheck.sim.assistant_mcp")


class ToolFailure(Exception):
    """A tool's failure; served as a JSON-RPC error -32000 carrying ``message``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _first_set(env: Mapping[str, str], names: Sequence[str]) -> str | None:
    for name in names:
        if name in env:
            return env[name]
    return None


@dataclass(frozen=True)
class AssistantConfig:
    """Where the REST API is and how the simulated server behaves; the token stays out of the repr."""

    api_url: str = DEFAULT_API_URL
    token: str | None = field(default=None, repr=False)
    default_workspace_id: str | None = None
    artifact_dir: str = DEFAULT_ARTIFACT_DIR
    scrub: bool = False
    start_extras: bool = False
    http_timeout_s: float = 30.0
    release: str = "current"  # whose tool table: "current" (4d62797) or "1.3"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AssistantConfig:
        """Read the same variables as the real server plus the simulator's switches."""
        url = _first_set(env, URL_ENV_VARS)
        token = _first_set(env, TOKEN_ENV_VARS)
        workspace = _first_set(env, DEFAULT_WORKSPACE_ENV_VARS)
        artifact_dir = env.get(ARTIFACT_DIR_ENV, "").strip() or DEFAULT_ARTIFACT_DIR
        try:
            timeout = float(env.get(HTTP_TIMEOUT_ENV, "30"))
        except ValueError:
            timeout = 30.0
        return cls(
            api_url=(DEFAULT_API_URL if url is None else url).rstrip("/"),
            token=token if token and token.strip() else None,
            default_workspace_id=workspace,
            artifact_dir=artifact_dir,
            scrub=env.get(SCRUB_ENV, "") in {"1", "true", "yes"},
            start_extras=env.get(START_EXTRAS_ENV, "") in {"1", "true", "yes"},
            release=env.get(RELEASE_ENV, "").strip() or "current",
            http_timeout_s=timeout if timeout > 0 else 30.0,
        )


# -- tool table ------------------------------------------------------------------------------

_STR: Final[dict[str, Any]] = {"type": "string"}
_INT: Final[dict[str, Any]] = {"type": "integer"}
_BOOL: Final[dict[str, Any]] = {"type": "boolean"}
_STRS: Final[dict[str, Any]] = {"type": "array", "items": {"type": "string"}}
_ENV_MAP: Final[dict[str, Any]] = {"type": "object", "additionalProperties": {"type": "string"}}
_OBJ: Final[dict[str, Any]] = {"type": "object"}
_BACKENDS: Final[dict[str, Any]] = {
    "type": "string",
    "enum": ["opencode", "claudecode", "codex", "gemini", "grok"],
}
_EFFORTS: Final[dict[str, Any]] = {"type": "string", "enum": ["low", "medium", "high", "xhigh", "max"]}
_TAILSCALE: Final[dict[str, Any]] = {"type": "string", "enum": ["exit_node", "tailnet_only"]}
_SIGNED_INTS: Final = frozenset({"since_seq", "before_seq"})
_START_EXTRAS: Final[dict[str, dict[str, Any]]] = {
    "origin": _STR,
    "origin_session_id": _STR,
    "idempotency_key": _STR,
    "acceptance_criteria": {"type": "array"},
}


@dataclass(frozen=True)
class ToolSpec:
    """One tool: advertised schema, and the arguments deserialisation insists on.

    ``needed`` can be narrower than the schema's ``required``: the real server lists ``confirm``
    as required but defaults it to false, then refuses with its own message.
    """

    name: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...] = ()
    needed: tuple[str, ...] | None = None

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema served in ``tools/list``."""
        schema: dict[str, Any] = {"type": "object"}
        if self.required:
            schema["required"] = list(self.required)
        schema["properties"] = self.properties
        return schema

    @property
    def enforced(self) -> tuple[str, ...]:
        """Arguments whose absence is an ``Invalid params`` error."""
        return self.required if self.needed is None else self.needed


_MID: Final = {"mission_id": _STR}
_WORKSPACE_FIELDS: Final[dict[str, dict[str, Any]]] = {
    "skills": _STRS,
    "plugins": _STRS,
    "template": _STR,
    "distro": _STR,
    "env_vars": _ENV_MAP,
    "init_script": _STR,
}
_WORKSPACE_NET: Final[dict[str, dict[str, Any]]] = {
    "shared_network": _BOOL,
    "tailscale_mode": _TAILSCALE,
    "mcps": _STRS,
    "mcps_replace_defaults": _BOOL,
    "config_profile": _STR,
}

TOOLS: Final[tuple[ToolSpec, ...]] = (
    ToolSpec(
        "list_active_missions",
        "List missions that are active, pending, blocked or awaiting the user.",
        {"limit": _INT, "project": _STR, "tag": _STR},
    ),
    ToolSpec(
        "list_missions",
        "List recent missions; optional status, project and tag filters.",
        {"status": _STR, "limit": _INT, "project": _STR, "tag": _STR},
    ),
    ToolSpec(
        "get_mission", "Alias of get_mission_digest: the compact mission digest.", _MID, ("mission_id",)
    ),
    ToolSpec(
        "get_mission_digest",
        "Compact mission status: state, awaiting_kind, last messages, PR links, project metadata.",
        _MID,
        ("mission_id",),
    ),
    ToolSpec(
        "get_mission_events",
        "Stored mission events, ascending; newest page unless since_seq or before_seq is given.",
        {
            "mission_id": _STR,
            "limit": _INT,
            "view": {"type": "string", "enum": list(EVENT_VIEWS)},
            "since_seq": _INT,
            "before_seq": _INT,
        },
        ("mission_id",),
    ),
    ToolSpec(
        "list_mission_shared_files",
        "Files shared by assistant messages in the newest transcript events.",
        {"mission_id": _STR, "limit": _INT},
        ("mission_id",),
    ),
    ToolSpec(
        "download_shared_file",
        "Download a shared file URL (/api/fs/download only) into a directory under /tmp.",
        {"mission_id": _STR, "url": _STR, "filename": _STR, "output_dir": _STR},
        ("mission_id", "url"),
    ),
    ToolSpec(
        "start_mission",
        "Create a mission with its initial prompt (atomic create+start).",
        {
            "title": _STR,
            "prompt": _STR,
            "workspace_id": _STR,
            "backend": _BACKENDS,
            "model_override": _STR,
            "model_effort": _EFFORTS,
            "config_profile": _STR,
            "agent": _STR,
            "project": _STR,
            "track": _STR,
            "intent": _STR,
            "github_pr": _STR,
            "writer": _BOOL,
            "tags": _STRS,
            "desired_state": _STR,
            "next_check_at": _STR,
            "estimated_disk_gib": {"type": "integer", "minimum": 1, "maximum": 512},
        },
        ("title", "prompt"),
    ),
    ToolSpec(
        "send_message_to_mission",
        "Send a follow-up message to a mission.",
        {"mission_id": _STR, "content": _STR},
        ("mission_id", "content"),
    ),
    ToolSpec(
        "ask_mission",
        "Ask a mission's read-only Ask copilot a question without waking the mission.",
        {"mission_id": _STR, "content": _STR, "thread_id": _STR, "sandbox": _BOOL},
        ("mission_id", "content"),
    ),
    ToolSpec("cancel_mission", "Cancel a running or pending mission.", _MID, ("mission_id",)),
    ToolSpec(
        "acknowledge_mission",
        "Acknowledge a mission waiting for an ack (awaiting_user + ack only).",
        _MID,
        ("mission_id",),
    ),
    ToolSpec("get_compute_fleet", "Compact view of remote compute nodes and recent jobs.", {}),
    ToolSpec("list_workspaces", "List workspaces.", {}),
    ToolSpec(
        "get_workspace",
        "One workspace's configuration and status.",
        {"workspace_id": _STR},
        ("workspace_id",),
    ),
    ToolSpec(
        "create_workspace",
        "Create a workspace.",
        {
            "name": _STR,
            "workspace_type": {"type": "string", "enum": ["host", "container"]},
            "path": _STR,
            **_WORKSPACE_FIELDS,
            **_WORKSPACE_NET,
        },
        ("name",),
    ),
    ToolSpec(
        "update_workspace",
        "Update the supplied fields of a workspace.",
        {
            "workspace_id": _STR,
            "name": _STR,
            **_WORKSPACE_FIELDS,
            "init_scripts": _STRS,
            **_WORKSPACE_NET,
            "config": _OBJ,
        },
        ("workspace_id",),
    ),
    ToolSpec(
        "delete_workspace",
        "Delete a workspace; requires confirm=true.",
        {"workspace_id": _STR, "confirm": _BOOL},
        ("workspace_id", "confirm"),
        ("workspace_id",),
    ),
    ToolSpec("list_workspace_templates", "List workspace templates.", {}),
    ToolSpec("get_workspace_template", "One workspace template.", {"name": _STR}, ("name",)),
    ToolSpec(
        "save_workspace_template",
        "Create or patch-update a workspace template.",
        {
            "name": _STR,
            "description": _STR,
            "distro": _STR,
            "skills": _STRS,
            "env_vars": _ENV_MAP,
            "encrypted_keys": _STRS,
            "init_scripts": _STRS,
            "init_script": _STR,
            **_WORKSPACE_NET,
        },
        ("name",),
    ),
    ToolSpec(
        "delete_workspace_template",
        "Delete a workspace template; requires confirm=true.",
        {"name": _STR, "confirm": _BOOL},
        ("name", "confirm"),
        ("name",),
    ),
    ToolSpec(
        "rebuild_workspace_from_template",
        "Reapply a template to a container workspace and force a rebuild; requires confirm=true.",
        {"workspace_id": _STR, "template": _STR, "confirm": _BOOL},
        ("workspace_id", "confirm"),
        ("workspace_id",),
    ),
    ToolSpec(
        "workspace_bash",
        "Run a shell command inside a workspace.",
        {"command": _STR, "workspace_id": _STR, "cwd": _STR, "timeout_secs": _INT},
        ("command",),
    ),
    ToolSpec(
        "get_mission_health",
        "Where a mission stands: live state, error signals, loops, last reply, a recommendation.",
        _MID,
        ("mission_id",),
    ),
    ToolSpec(
        "get_mission_diagnostics",
        "Recent tool timeline, per-tool counts, repeated calls and error events of a mission.",
        {"mission_id": _STR, "limit": _INT},
        ("mission_id",),
    ),
    ToolSpec(
        "update_mission_settings",
        "Change backend, model, effort, agent or config profile for the next turn.",
        {
            "mission_id": _STR,
            "backend": _BACKENDS,
            "model_override": _STR,
            "model_effort": _EFFORTS,
            "agent": _STR,
            "config_profile": _STR,
        },
        ("mission_id",),
    ),
    ToolSpec(
        "resume_mission",
        "Resume an interrupted, blocked or failed mission, optionally steering it with content.",
        {"mission_id": _STR, "content": _STR, "clean_workspace": _BOOL},
        ("mission_id",),
    ),
)
TOOL_NAMES: Final = tuple(spec.name for spec in TOOLS)
#: 1.3.0's assistant MCP (karypid/sandboxed.sh 71b28a33, src/bin/assistant_mcp.rs:421-610): 15 tools;
#: start_mission takes no project/track/tags or any other tagging field.
_V13_START: Final = ToolSpec(
    "start_mission",
    "Create a new sandboxed.sh mission and send its initial prompt.",
    {
        "title": _STR,
        "prompt": _STR,
        "workspace_id": _STR,
        "backend": _BACKENDS,
        "model_override": _STR,
        "model_effort": _EFFORTS,
        "config_profile": _STR,
        "agent": _STR,
    },
    ("title", "prompt"),
)
_V13_NAMES: Final = (
    "list_active_missions", "list_missions", "get_mission", "get_mission_events",
    "list_mission_shared_files", "download_shared_file", "start_mission", "send_message_to_mission",
    "cancel_mission", "list_workspaces", "workspace_bash", "get_mission_health", "get_mission_diagnostics",
    "update_mission_settings", "resume_mission",
)  # fmt: skip
TOOLS_1_3: Final[tuple[ToolSpec, ...]] = tuple(
    _V13_START if name == "start_mission" else next(s for s in TOOLS if s.name == name) for name in _V13_NAMES
)


def tool_specs(config: AssistantConfig) -> dict[str, ToolSpec]:
    """The tool table for this configuration (``start_mission`` grows with the extras switch)."""
    if config.release == "1.3":
        return {spec.name: spec for spec in TOOLS_1_3}
    specs = {spec.name: spec for spec in TOOLS}
    if config.start_extras:
        start = specs["start_mission"]
        specs["start_mission"] = ToolSpec(
            start.name, start.description, {**start.properties, **_START_EXTRAS}, start.required
        )
    return specs


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "floating point"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "sequence"
    return "map" if isinstance(value, dict) else "null"


def _check_type(key: str, value: Any, schema: Mapping[str, Any]) -> None:
    kind = schema.get("type")
    ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }.get(str(kind), True)
    if ok and kind == "array" and schema.get("items", {}).get("type") == "string":
        ok = all(isinstance(item, str) for item in value)
    if ok and kind == "object" and "additionalProperties" in schema:
        ok = all(isinstance(item, str) for item in value.values())
    if not ok:
        raise ToolFailure(f"Invalid params: invalid type: {_json_type(value)}, expected {kind} for `{key}`")
    if kind == "integer" and value < 0 and key not in _SIGNED_INTS:
        raise ToolFailure(f"Invalid params: invalid value: integer `{value}`, expected usize for `{key}`")


def parse_arguments(spec: ToolSpec, raw: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``raw`` like the real server's deserialisation; unknown keys are ignored, null = absent."""
    for key in spec.enforced:
        if raw.get(key) is None:
            raise ToolFailure(f"Invalid params: missing field `{key}`")
    args: dict[str, Any] = {}
    for key, schema in spec.properties.items():
        value = raw.get(key)
        if value is not None:
            _check_type(key, value, schema)
            args[key] = value
    return args


# -- pure helpers shared with the real server's behaviour ------------------------------------


def parse_uuid(raw: str) -> str:
    """Canonical hyphenated form, or ToolFailure ``Invalid UUID: <raw>``."""
    try:
        return str(uuid.UUID(raw.strip()))
    except ValueError:
        raise ToolFailure(f"Invalid UUID: {raw}") from None


def _text(event: Mapping[str, Any], key: str, default: str = "") -> str:
    value = event.get(key)
    return value if isinstance(value, str) else default


def truncate_snippet(text: str, limit: int) -> str:
    """Trimmed text cut to ``limit`` characters, with ``…`` when cut."""
    trimmed = text.strip()
    return trimmed[:limit] + ("…" if len(trimmed) > limit else "")


# fmt: off
_COMPACT_KEYS: Final = (
    "id", "title", "status", "mission_mode", "backend", "model_override", "workspace_id",
    "workspace_name", "short_description", "updated_at", "project", "track", "intent", "github_pr",
    "tags", "desired_state", "next_check_at", "awaiting_kind", "last_activity_at",
    "last_status_change_at",
)
# fmt: on


def compact_mission(mission: Any) -> dict[str, Any]:
    """The compact summary of list/settings/resume results (no ``agent``, no ``model_effort``)."""
    source = mission if isinstance(mission, dict) else {}
    out = {key: source.get(key) for key in _COMPACT_KEYS}
    if out["tags"] is None:
        out["tags"] = []
    return out


# fmt: off
_NODE_KEYS: Final = (
    "id", "status", "labels", "capacity_total", "capacity_available", "active_jobs", "queued_jobs",
    "cpu_total", "mem_available_bytes", "disk_available_bytes", "cached_toolchains",
    "lean_runtime_ready", "error",
)
# fmt: on


def _uint(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def compact_fleet(fleet: Any) -> dict[str, Any]:
    """The ``get_compute_fleet`` summary of ``GET /api/remote-nodes``."""
    source = fleet if isinstance(fleet, dict) else {}
    nodes = [n for n in source.get("nodes") or [] if isinstance(n, dict)]
    compact = []
    for node in nodes:
        item = {key: node.get(key) for key in _NODE_KEYS}
        for key in ("labels", "cached_toolchains"):
            if item[key] is None:
                item[key] = []
        compact.append(item)
    online = [n for n in nodes if n.get("status") == "online"]
    lean = [
        n for n in online if n.get("lean_runtime_ready") is not False and "lean" in (n.get("labels") or [])
    ]
    return {
        "enabled": source.get("enabled", False),
        "summary": {
            "nodes_total": len(nodes),
            "nodes_online": len(online),
            "lean_nodes_online": len(lean),
            "lean_slots_total": sum(_uint(n.get("capacity_total")) for n in lean),
            "lean_slots_available": sum(_uint(n.get("capacity_available")) for n in lean),
            "active_remote_jobs": sum(_uint(n.get("active_jobs")) for n in nodes),
            "queued_remote_jobs": sum(_uint(n.get("queued_jobs")) for n in nodes),
        },
        "placement_policy": {
            "ordinary_cpu_work": "online non-GPU nodes with free capacity first, then least loaded",
            "gpu_work": "ask for the gpu label explicitly",
            "parallel_clean_builds": "separate missions; check that node, job and head receipts differ",
        },
        "nodes": compact,
        "recent_jobs": source.get("recent_jobs") if source.get("recent_jobs") is not None else [],
    }


# fmt: off
_RATE_WORDS: Final = (
    "429", "529", "rate limit", "rate-limit", "rate_limit", "too many requests", "overloaded",
    "resource_exhausted", "hit your limit", "hit your usage limit", "out of extra usage",
    "out of regular usage", "purchase more credits", "settings/usage",
)
# fmt: on
# fmt: off
_AUTH_WORDS: Final = (
    " 401", " 403", "unauthorized", "forbidden", "invalid api key", "invalid_api_key", "authentication",
    "credential", "refresh token was already used", "refresh_token was already used",
)
# fmt: on
# fmt: off
_CAPACITY_WORDS: Final = (
    "capacity", "503", "service unavailable", "already have five missions running",
    "already have 5 missions running", "concurrent mission limit",
)
# fmt: on
# fmt: off
_CONTEXT_WORDS: Final = (
    "context length", "context window", "maximum context", "context_length_exceeded", "token limit",
    "prompt is too long",
)
# fmt: on
_TRANSPORT_TIMEOUT_RE: Final = re.compile(
    r"connection timed out|request timed out|read timeout|write timeout"
)


def error_signals(text: str) -> list[str]:
    """Classify error text as the real server does.

    Signals: rate_limited, auth_error, capacity_limited, context_limit, network_error.

    A harness idle timeout ("OpenCode idle timeout: ...") is deliberately not a network error.
    """
    lower = text.lower()
    signals = []
    if any(word in lower for word in _RATE_WORDS):
        signals.append("rate_limited")
    if any(word in lower for word in _AUTH_WORDS):
        signals.append("auth_error")
    if any(word in lower for word in _CAPACITY_WORDS):
        signals.append("capacity_limited")
    if any(word in lower for word in _CONTEXT_WORDS):
        signals.append("context_limit")
    edge = any(code in lower for code in ("502", "520", "521", "522"))
    transport_timeout = (
        bool(_TRANSPORT_TIMEOUT_RE.search(lower))
        or (
            "timed out" in lower
            and any(w in lower for w in ("connection", "reset", "cloudflare", "peer", "dns"))
        )
        or ("timeout" in lower and any(w in lower for w in ("cloudflare", "econn", "reset by peer", "dns")))
    )
    if (
        any(w in lower for w in ("cloudflare", "connection reset", "econnreset", "reset by peer", "dns"))
        or transport_timeout
        or edge
    ):
        signals.append("network_error")
    return signals


@dataclass
class TraceAnalysis:
    """What a window of trace events says: error signals, recent errors, the worst repeated call."""

    signals: set[str] = field(default_factory=set)
    recent_errors: list[dict[str, Any]] = field(default_factory=list)
    loop_tool: str | None = None
    loop_repeats: int = 0
    loop_args: str = ""
    tool_calls: int = 0

    def signals_json(self) -> dict[str, bool]:
        """The ``signals`` object of ``get_mission_health``."""
        names = ("rate_limited", "auth_error", "capacity_limited", "context_limit", "network_error")
        out = {name: name in self.signals for name in names}
        out["suspected_loop"] = self.loop_tool is not None
        return out

    def loop_json(self) -> dict[str, Any] | None:
        """The ``suspected_loop`` object, or None."""
        if self.loop_tool is None:
            return None
        return {"tool": self.loop_tool, "repeats": self.loop_repeats, "args": self.loop_args}


def analyze_trace(events: Sequence[Any]) -> TraceAnalysis:
    """Scan ascending trace events for error signals and a tool called 3+ times with the same args."""
    analysis = TraceAnalysis()
    repeats: dict[tuple[str, str], int] = {}
    for event in events:
        if not isinstance(event, dict):
            continue
        kind = event.get("event_type")
        content = _text(event, "content")
        if kind == "error":
            analysis.signals.update(error_signals(content))
            analysis.recent_errors = analysis.recent_errors[-4:]
            analysis.recent_errors.append(
                {
                    "sequence": event.get("sequence"),
                    "timestamp": event.get("timestamp"),
                    "snippet": truncate_snippet(content, 400),
                }
            )
        elif kind == "tool_call":
            analysis.tool_calls += 1
            tool = _text(event, "tool_name", "(unknown)")
            key = (tool, content.strip())
            repeats[key] = repeats.get(key, 0) + 1
            if repeats[key] >= 3 and repeats[key] > analysis.loop_repeats:
                analysis.loop_tool, analysis.loop_repeats = tool, repeats[key]
                analysis.loop_args = truncate_snippet(key[1], 160)
    return analysis


def recommendation(status: str, live: Any, analysis: TraceAnalysis) -> str:
    """One next step for whoever babysits the mission (wording is the simulator's own)."""
    if analysis.signals & {"rate_limited", "capacity_limited"}:
        return (
            "The provider is rate-limiting or at capacity: switch backend with update_mission_settings, "
            "or wait and resume_mission."
        )
    if "auth_error" in analysis.signals:
        return "Credential failure for this backend: check its auth, or switch with update_mission_settings."
    if "context_limit" in analysis.signals:
        return (
            "The model context limit was hit: move to a larger-context model with "
            "update_mission_settings, then resume_mission."
        )
    if "network_error" in analysis.signals:
        return "Network or edge errors, usually transient: resume_mission; switch backend if they recur."
    if analysis.loop_tool is not None:
        return (
            f"The agent repeats `{analysis.loop_tool}` ({analysis.loop_repeats}x, same arguments): "
            "send a concrete hint with send_message_to_mission or switch model."
        )
    health = live.get("health") if isinstance(live, dict) else None
    if isinstance(health, dict) and health.get("status") == "stalled":
        seconds = _uint(live.get("seconds_since_activity")) if isinstance(live, dict) else 0
        if health.get("severity") == "severe":
            return (
                f"Severely stalled ({seconds}s without activity): cancel_mission then resume_mission, "
                "or send a concrete next step."
            )
        return f"Quiet for {seconds}s, but a tool may still be running: watch before intervening."
    if status in {"interrupted", "blocked", "failed"}:
        return f"Idle in status '{status}': if the goal is not done, resume_mission with a hint to continue."
    if status == "not_feasible":
        return (
            "The mission judged the goal not feasible; this status is not resumable. "
            "Reframe the task in a new mission."
        )
    if status in {"awaiting_user", "acknowledged"}:
        return (
            "The turn finished and the mission waits: nudge it with send_message_to_mission if work remains."
        )
    return "No problems detected; the mission appears healthy."


# fmt: off
_SENSITIVE_KEY_WORDS: Final = (
    "token", "secret", "password", "api_key", "apikey", "authkey", "private_key", "credential",
)
# fmt: on
_SENSITIVE_PREFIXES: Final = ("ghp_", "github_pat_", "sk-", "tskey-")
_SENSITIVE_MARKERS: Final = ("BEGIN OPENSSH PRIVATE KEY", "BEGIN PGP PRIVATE KEY", "<encrypted")


def scrub(value: Any) -> Any:
    """The real server's result scrubbing: env_vars values, secret-named keys, token shapes."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, child in value.items():
            lower = str(key).lower()
            if lower == "env_vars":
                out[key] = {k: REDACTED for k in child} if isinstance(child, dict) else REDACTED
            elif any(word in lower for word in _SENSITIVE_KEY_WORDS):
                out[key] = REDACTED
            else:
                out[key] = scrub(child)
        return out
    if isinstance(value, list):
        return [scrub(item) for item in value]
    if isinstance(value, str):
        trimmed = value.strip()
        if trimmed.startswith(_SENSITIVE_PREFIXES) or any(m in trimmed for m in _SENSITIVE_MARKERS):
            return REDACTED
    return value


def render(value: Any) -> str:
    """Pretty JSON, two-space indent, like ``serde_json::to_string_pretty``."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def sanitize_filename(name: str) -> str:
    """ASCII alphanumerics, ``.``, ``-`` and ``_`` only; no leading dots; at most 180 characters."""
    clean = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in ".-_" else "_" for ch in name)
    clean = clean.strip("_").lstrip(".")
    return clean[:180] if clean else "artifact"


def shared_file_download_path(url: str) -> str:
    """The request path of a shared-file URL; only ``/api/fs/download`` is allowed."""
    if url.startswith("/api/fs/download?"):
        return url
    parts = urlsplit(url)
    if not parts.scheme:
        raise ToolFailure("Invalid shared file URL: relative URL without a base")
    if parts.path != "/api/fs/download":
        raise ToolFailure("Only /api/fs/download shared file URLs can be downloaded")
    return parts.path + (f"?{parts.query}" if parts.query else "")


def shared_file_name(url: str) -> str | None:
    """The basename of the ``path=`` query parameter, if any."""
    if "path=" not in url:
        return None
    values = parse_qs(url.split("?", 1)[-1]).get("path")
    return PurePosixPath(values[0]).name or None if values else None


# -- REST-backed tools -----------------------------------------------------------------------


def _status(response: httpx.Response) -> str:
    return f"{response.status_code} {response.reason_phrase}".strip()


def _parse(response: httpx.Response, what: str) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise ToolFailure(f"Failed to parse {what}: {exc}") from None


def _envelope(response: httpx.Response, operation: str) -> Any:
    """The real ``response_value``: error on non-2xx, ``{"success": true}`` on empty, text on non-JSON."""
    if not response.is_success:
        raise ToolFailure(f"{operation} failed ({_status(response)}): {response.text}")
    if not response.content:
        return {"success": True}
    try:
        return response.json()
    except ValueError:
        return {"success": True, "message": response.text.strip()}


def _q(value: str) -> str:
    return quote(value, safe="")


def _pick(args: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    return {key: args[key] for key in keys if key in args}


class AssistantTools:
    """The tool implementations, calling the REST API with one bounded httpx client."""

    def __init__(self, config: AssistantConfig, http: httpx.AsyncClient) -> None:
        self.config = config
        self.specs = tool_specs(config)
        self._http = http
        suffix = "_1_3" if config.release == "1.3" else ""
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            name: getattr(self, f"_tool_{name}{suffix}", None) or getattr(self, f"_tool_{name}")
            for name in self.specs
        }

    async def call(self, name: str, raw: Mapping[str, Any]) -> Any:
        """Validate and run one tool; ToolFailure carries the message the real server would send."""
        spec = self.specs.get(name)
        if spec is None:
            raise ToolFailure(f"Unknown tool: {name}")
        return await self._handlers[name](parse_arguments(spec, raw))

    # -- HTTP

    async def _request(
        self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None
    ) -> httpx.Response:
        token = self.config.token
        if token is None:
            raise ToolFailure(NO_TOKEN_MESSAGE)
        try:
            return await self._http.request(
                method,
                self.config.api_url + path,
                json=body,
                headers={"Authorization": f"Bearer {token}"},
                timeout=timeout_s if timeout_s is not None else self.config.http_timeout_s,
            )
        except httpx.HTTPError as exc:
            raise ToolFailure(f"HTTP request failed: {type(exc).__name__}: {exc}") from None

    def _default_workspace(self, explicit: str | None) -> str | None:
        value = explicit if explicit is not None else self.config.default_workspace_id
        return value if value is not None and value.strip() else None

    # -- missions

    async def _list_missions(
        self, status: str | None, limit: int, project: str | None, tag: str | None
    ) -> dict[str, Any]:
        path = f"/api/control/missions?limit={max(1, min(limit, 100))}&offset=0"
        for key, value in (("status", status), ("project", project), ("tag", tag)):
            if value is not None:
                path += f"&{key}={_q(value)}"
        response = await self._request("GET", path)
        if not response.is_success:
            raise ToolFailure(f"Failed to list missions: {_status(response)}")
        missions = _parse(response, "missions")
        if not isinstance(missions, list):
            raise ToolFailure("Failed to parse missions: expected a JSON array")
        return {"missions": [compact_mission(m) for m in missions]}

    async def _tool_list_missions(self, a: dict[str, Any]) -> Any:
        return await self._list_missions(a.get("status"), a.get("limit", 50), a.get("project"), a.get("tag"))

    async def _tool_list_active_missions(self, a: dict[str, Any]) -> Any:
        requested = max(1, min(a.get("limit", 50), 100))
        result = await self._list_missions(
            None, max(50, min(requested * 4, 100)), a.get("project"), a.get("tag")
        )
        active = [m for m in result["missions"] if m.get("status") in INFLIGHT_STATUSES]
        return {"missions": active[:requested]}

    async def _digest(self, mission_id: str) -> Any:
        mid = parse_uuid(mission_id)
        response = await self._request("GET", f"/api/control/missions/{mid}/digest")
        if not response.is_success:
            raise ToolFailure(f"Mission not found: {_status(response)}")
        return _parse(response, "mission digest")

    async def _record(self, mission_id: str) -> Any:
        """1.3.0's ``get_mission``: the full REST record (assistant_mcp.rs:672)."""
        mid = parse_uuid(mission_id)
        response = await self._request("GET", f"/api/control/missions/{mid}")
        if not response.is_success:
            raise ToolFailure(f"Mission not found: {_status(response)}")
        return _parse(response, "mission")

    async def _tool_get_mission_1_3(self, a: dict[str, Any]) -> Any:
        return await self._record(a["mission_id"])

    async def _tool_get_mission_events_1_3(self, a: dict[str, Any]) -> Any:
        """Without a cursor 1.3.0 sends none: the oldest rows (assistant_mcp.rs:701-708)."""
        mid = parse_uuid(a["mission_id"])
        view = a.get("view") or "transcript"
        if view not in EVENT_VIEWS:
            raise ToolFailure(f"Invalid view '{view}'; expected one of: {', '.join(EVENT_VIEWS)}")
        path = (
            f"/api/control/missions/{mid}/events?limit={max(1, min(a.get('limit', 40), 200))}"
            f"&view={view}&include_counts=false"
        )
        if a.get("before_seq") is not None:
            path += f"&before_seq={a['before_seq']}"
        elif a.get("since_seq") is not None:
            path += f"&since_seq={a['since_seq']}"
        response = await self._request("GET", path)
        if not response.is_success:
            raise ToolFailure(f"Failed to fetch mission events: {_status(response)}")
        return _parse(response, "mission events")

    async def _tool_start_mission_1_3(self, a: dict[str, Any]) -> Any:
        """1.3.0: create (its body has no prompt), then the prompt as a message (assistant_mcp.rs:793-822)."""
        body = {
            "title": a["title"],
            "workspace_id": self._default_workspace(a.get("workspace_id")),
            "backend": a.get("backend"),
            "model_override": a.get("model_override"),
            "model_effort": a.get("model_effort"),
            "config_profile": a.get("config_profile"),
            "agent": a.get("agent"),
        }
        response = await self._request("POST", "/api/control/missions", body)
        if not response.is_success:
            raise ToolFailure(f"Failed to create mission: {response.text}")
        mission = _parse(response, "created mission")
        if not isinstance(mission, dict) or not isinstance(mission.get("id"), str):
            raise ToolFailure("Created mission response did not include an id")
        await self._send_message(mission["id"], a["prompt"])
        return {"mission": mission}

    async def _tool_get_mission_health_1_3(self, a: dict[str, Any]) -> Any:
        """1.3.0 reads the full record where later releases read the digest (assistant_mcp.rs:1080)."""
        record = await self._record(a["mission_id"])
        return await self._mission_health(parse_uuid(a["mission_id"]), record)

    async def _tool_get_mission(self, a: dict[str, Any]) -> Any:
        return await self._digest(a["mission_id"])

    async def _tool_get_mission_digest(self, a: dict[str, Any]) -> Any:
        return await self._digest(a["mission_id"])

    async def _events(
        self,
        mission_id: str,
        limit: int,
        view: str | None,
        since_seq: int | None = None,
        before_seq: int | None = None,
    ) -> Any:
        mid = parse_uuid(mission_id)
        view = view or "transcript"
        if view not in EVENT_VIEWS:
            raise ToolFailure(f"Invalid view '{view}'; expected one of: {', '.join(EVENT_VIEWS)}")
        path = (
            f"/api/control/missions/{mid}/events?limit={max(1, min(limit, 200))}"
            f"&view={view}&include_counts=false"
        )
        if before_seq is not None:
            path += f"&before_seq={before_seq}"
        elif since_seq is not None:
            path += f"&since_seq={since_seq}"
        else:
            path += f"&before_seq={NEWEST_PAGE}"
        response = await self._request("GET", path)
        if not response.is_success:
            raise ToolFailure(f"Failed to fetch mission events: {_status(response)}")
        return _parse(response, "mission events")

    async def _tool_get_mission_events(self, a: dict[str, Any]) -> Any:
        return await self._events(
            a["mission_id"], a.get("limit", 40), a.get("view"), a.get("since_seq"), a.get("before_seq")
        )

    async def _tool_list_mission_shared_files(self, a: dict[str, Any]) -> Any:
        mid = parse_uuid(a["mission_id"])
        events = await self._events(mid, a.get("limit", 40), "transcript", before_seq=NEWEST_PAGE)
        files: list[Any] = []
        for event in events if isinstance(events, list) else []:
            metadata = event.get("metadata") if isinstance(event, dict) else None
            shared = metadata.get("shared_files") if isinstance(metadata, dict) else None
            for item in shared if isinstance(shared, list) else []:
                if isinstance(item, dict):
                    item = {**item, "mission_id": mid}
                    for src, dst in (("sequence", "event_sequence"), ("timestamp", "event_timestamp")):
                        if src in event:
                            item[dst] = event[src]
                files.append(item)
        return {"mission_id": mid, "shared_files": files}

    async def _tool_download_shared_file(self, a: dict[str, Any]) -> Any:
        mid = parse_uuid(a["mission_id"])
        path = shared_file_download_path(a["url"])
        filename = sanitize_filename(a.get("filename") or shared_file_name(a["url"]) or "artifact")
        requested = a.get("output_dir")
        base = PurePosixPath(requested if requested and requested.strip() else self.config.artifact_dir)
        if not base.is_absolute():
            raise ToolFailure("output_dir must be an absolute path")
        if ".." in base.parts:
            raise ToolFailure("output_dir must not contain '..' components")
        if base.parts[:2] != ("/", "tmp"):
            raise ToolFailure("output_dir must be under /tmp")
        response = await self._request("GET", path)
        if not response.is_success:
            raise ToolFailure(f"Failed to download shared file: {_status(response)}")
        target = Path(str(base)) / mid
        try:
            target.mkdir(parents=True, exist_ok=True)
            (target / filename).write_bytes(response.content)
        except OSError as exc:
            raise ToolFailure(f"Failed to write shared file: {exc.strerror or exc}") from None
        return {"mission_id": mid, "path": str(target / filename), "bytes": len(response.content)}

    async def _tool_start_mission(self, a: dict[str, Any]) -> Any:
        backend = a.get("backend")
        agent = a.get("agent")
        if (
            backend is None
            and isinstance(agent, str)
            and agent.strip().lower()
            in {
                "codex",
                "claudecode",
                "gemini",
                "grok",
            }
        ):
            backend = agent.strip().lower()
        body: dict[str, Any] = {
            "title": a["title"],
            "workspace_id": self._default_workspace(a.get("workspace_id")),
            "backend": backend,
            "model_override": a.get("model_override"),
            "model_effort": a.get("model_effort"),
            "config_profile": a.get("config_profile"),
            "agent": agent,
            "prompt": a["prompt"],
        }
        tagging = "project track intent github_pr writer tags desired_state next_check_at estimated_disk_gib"
        for key in tagging.split():
            body[key] = a.get(key)
        body.update(_pick(a, tuple(_START_EXTRAS)) if self.config.start_extras else {})
        response = await self._request("POST", "/api/control/missions", body)
        if not response.is_success:
            raise ToolFailure(f"Failed to create mission: {response.text}")
        mission = _parse(response, "created mission")
        if not isinstance(mission, dict) or not isinstance(mission.get("id"), str):
            raise ToolFailure("Created mission response did not include an id")
        return {"mission": mission}

    async def _send_message(self, mission_id: str, content: str) -> Any:
        mid = parse_uuid(mission_id)
        response = await self._request(
            "POST", "/api/control/message", {"mission_id": mid, "content": content}
        )
        if not response.is_success:
            raise ToolFailure(f"Failed to send message: {response.text}")
        return _parse(response, "send result")

    async def _tool_send_message_to_mission(self, a: dict[str, Any]) -> Any:
        return await self._send_message(a["mission_id"], a["content"])

    async def _tool_ask_mission(self, a: dict[str, Any]) -> Any:
        mid = parse_uuid(a["mission_id"])
        body: dict[str, Any] = {"content": a["content"], "sandbox": a.get("sandbox", False)}
        if "thread_id" in a:
            body["thread_id"] = parse_uuid(a["thread_id"])
        response = await self._request("POST", f"/api/control/missions/{mid}/ask", body)
        if not response.is_success:
            raise ToolFailure(f"Failed to ask mission ({_status(response)}): {response.text}")
        result = _parse(response, "ask result")
        source = result if isinstance(result, dict) else {}
        return {"thread_id": source.get("thread_id"), "answer": source.get("answer")}

    async def _tool_cancel_mission(self, a: dict[str, Any]) -> Any:
        mid = parse_uuid(a["mission_id"])
        response = await self._request("POST", f"/api/control/missions/{mid}/cancel", {})
        if not response.is_success:
            raise ToolFailure(f"Failed to cancel mission: {response.text}")
        return {"success": True, "cancelled": mid}

    async def _tool_acknowledge_mission(self, a: dict[str, Any]) -> Any:
        mid = parse_uuid(a["mission_id"])
        digest_path = f"/api/control/missions/{mid}/digest"
        digest = _envelope(await self._request("GET", digest_path), "Read mission before ACK")
        mission = digest.get("mission", digest) if isinstance(digest, dict) else {}
        status = mission.get("status") if isinstance(mission, dict) else None
        if not isinstance(status, str):
            raise ToolFailure("Mission digest did not include a status")
        if status == "acknowledged":
            return {"success": True, "acknowledged": mid, "already_acknowledged": True}
        kind = mission.get("awaiting_kind")
        if not (status == "awaiting_user" and kind == "ack"):
            shown = kind if isinstance(kind, str) else "none"
            raise ToolFailure(f"Mission cannot be ACKed from status={status}, awaiting_kind={shown}")
        path = f"/api/control/missions/{mid}/status"
        _envelope(await self._request("POST", path, {"status": "acknowledged"}), "Acknowledge mission")
        after = _envelope(await self._request("GET", digest_path), "Verify mission ACK")
        after_mission = after.get("mission", after) if isinstance(after, dict) else {}
        if not isinstance(after_mission, dict) or after_mission.get("status") != "acknowledged":
            raise ToolFailure("Mission ACK mutation succeeded but readback is not acknowledged")
        return {"success": True, "acknowledged": mid, "already_acknowledged": False}

    async def _tool_get_compute_fleet(self, a: dict[str, Any]) -> Any:
        response = await self._request("GET", "/api/remote-nodes")
        if not response.is_success:
            raise ToolFailure(f"Failed to get compute fleet ({_status(response)}): {response.text}")
        return compact_fleet(_parse(response, "compute fleet"))

    # -- workspaces

    async def _tool_list_workspaces(self, a: dict[str, Any]) -> Any:
        response = await self._request("GET", "/api/workspaces")
        if not response.is_success:
            raise ToolFailure(f"Failed to list workspaces: {_status(response)}")
        return {"workspaces": _parse(response, "workspaces")}

    async def _tool_get_workspace(self, a: dict[str, Any]) -> Any:
        wid = parse_uuid(a["workspace_id"])
        return {"workspace": _envelope(await self._request("GET", f"/api/workspaces/{wid}"), "Get workspace")}

    async def _tool_create_workspace(self, a: dict[str, Any]) -> Any:
        name = a["name"].strip()
        if not name:
            raise ToolFailure("Workspace name cannot be empty")
        body = {
            "name": name,
            **_pick(a, [k for k in self.specs["create_workspace"].properties if k != "name"]),
        }
        return {
            "workspace": _envelope(await self._request("POST", "/api/workspaces", body), "Create workspace")
        }

    async def _tool_update_workspace(self, a: dict[str, Any]) -> Any:
        wid = parse_uuid(a["workspace_id"])
        keys = [k for k in self.specs["update_workspace"].properties if k != "workspace_id"]
        body = _pick(a, keys)
        if not body:
            raise ToolFailure("No workspace fields supplied to update")
        response = await self._request("PUT", f"/api/workspaces/{wid}", body)
        return {"workspace": _envelope(response, "Update workspace")}

    async def _tool_delete_workspace(self, a: dict[str, Any]) -> Any:
        if not a.get("confirm", False):
            raise ToolFailure("Workspace deletion requires confirm=true")
        wid = parse_uuid(a["workspace_id"])
        _envelope(await self._request("DELETE", f"/api/workspaces/{wid}"), "Delete workspace")
        return {"deleted": True, "workspace_id": wid}

    @staticmethod
    def _template_path(name: str) -> tuple[str, str]:
        clean = name.strip()
        if not clean:
            raise ToolFailure("Workspace template name cannot be empty")
        return clean, f"/api/library/workspace-template/{_q(clean)}"

    async def _tool_list_workspace_templates(self, a: dict[str, Any]) -> Any:
        response = await self._request("GET", "/api/library/workspace-template")
        return {"templates": _envelope(response, "List workspace templates")}

    async def _tool_get_workspace_template(self, a: dict[str, Any]) -> Any:
        _, path = self._template_path(a["name"])
        return {"template": _envelope(await self._request("GET", path), "Get workspace template")}

    async def _tool_save_workspace_template(self, a: dict[str, Any]) -> Any:
        _, path = self._template_path(a["name"])
        response = await self._request("GET", path)
        if response.is_success:
            current = _envelope(response, "Get workspace template")
            env = current.get("env_vars") if isinstance(current, dict) else None
            undecryptable = isinstance(env, dict) and any(
                isinstance(v, str) and v.startswith("[DECRYPTION_FAILED]") for v in env.values()
            )
            if "env_vars" not in a and undecryptable:
                raise ToolFailure(
                    "Template contains env vars that could not be decrypted; "
                    "supply a complete env_vars replacement before saving"
                )
            if not isinstance(current, dict):
                raise ToolFailure("Existing workspace template response was not an object")
            template = dict(current)
        elif response.status_code == 404:
            template = {}
        else:
            _envelope(response, "Get workspace template")
            raise ToolFailure("Unexpected successful template response")
        template.pop("name", None)
        template.pop("path", None)
        template.update(
            _pick(a, [k for k in self.specs["save_workspace_template"].properties if k != "name"])
        )
        _envelope(await self._request("PUT", path, template), "Save workspace template")
        saved = _envelope(await self._request("GET", path), "Read saved workspace template")
        return {"saved": True, "template": saved}

    async def _tool_delete_workspace_template(self, a: dict[str, Any]) -> Any:
        if not a.get("confirm", False):
            raise ToolFailure("Template deletion requires confirm=true")
        name, path = self._template_path(a["name"])
        _envelope(await self._request("DELETE", path), "Delete workspace template")
        return {"deleted": True, "name": name}

    async def _tool_rebuild_workspace_from_template(self, a: dict[str, Any]) -> Any:
        if not a.get("confirm", False):
            raise ToolFailure("Forced workspace rebuild requires confirm=true")
        wid = parse_uuid(a["workspace_id"])
        apply_path = f"/api/workspaces/{wid}/apply-template"
        applied = _envelope(
            await self._request("POST", apply_path, {"template": a.get("template")}),
            "Apply workspace template",
        )
        build_path = f"/api/workspaces/{wid}/build"
        build = _envelope(await self._request("POST", build_path, {"rebuild": True}), "Rebuild workspace")
        return {
            "workspace_id": wid,
            "template_applied": applied.get("template") if isinstance(applied, dict) else None,
            "status": build.get("status") if isinstance(build, dict) else None,
            "rebuild_started": True,
        }

    async def _tool_workspace_bash(self, a: dict[str, Any]) -> Any:
        if not a["command"].strip():
            raise ToolFailure("Command is empty")
        workspace = self._default_workspace(a.get("workspace_id"))
        if workspace is None:
            raise ToolFailure(
                "No workspace_id given and no default workspace configured "
                "(HERMES_DEFAULT_WORKSPACE_ID / ASSISTANT_DEFAULT_WORKSPACE_ID)"
            )
        wid = parse_uuid(workspace)
        body = {"command": a["command"], "cwd": a.get("cwd"), "timeout_secs": a.get("timeout_secs")}
        # The exec itself may run up to timeout_secs (REST default 300, max 600): wait a bit longer.
        wait_s = max(self.config.http_timeout_s, min(a.get("timeout_secs") or 300, 600) + 30.0)
        response = await self._request("POST", f"/api/workspaces/{wid}/exec", body, timeout_s=wait_s)
        if not response.is_success:
            raise ToolFailure(f"Workspace exec failed ({_status(response)}): {response.text}")
        return _parse(response, "exec result")

    # -- babysitting

    async def _running_entry(self, mid: str) -> Any:
        response = await self._request("GET", "/api/control/running")
        if not response.is_success:
            raise ToolFailure(f"Failed to fetch live runner state ({_status(response)}): {response.text}")
        running = _parse(response, "running missions")
        for entry in running if isinstance(running, list) else []:
            if isinstance(entry, dict) and entry.get("mission_id") == mid:
                return entry
        return None

    async def _last_assistant_message(self, mid: str) -> str | None:
        try:
            events = await self._events(mid, 12, "transcript", before_seq=NEWEST_PAGE)
        except ToolFailure:
            return None
        for event in reversed(events if isinstance(events, list) else []):
            if (
                isinstance(event, dict)
                and event.get("event_type") in {"assistant_message", "assistant_message_canonical"}
                and isinstance(event.get("content"), str)
            ):
                return truncate_snippet(event["content"], 600)
        return None

    async def _tool_get_mission_health(self, a: dict[str, Any]) -> Any:
        mid = parse_uuid(a["mission_id"])
        return await self._mission_health(mid, await self._digest(mid))

    async def _mission_health(self, mid: str, digest: Any) -> Any:
        mission = digest if isinstance(digest, dict) else {}
        status = _text(mission, "status", "unknown")
        live: Any = None
        live_warning: str | None = None
        try:
            live = await self._running_entry(mid)
        except ToolFailure as exc:
            live_warning = exc.message
        events = await self._events(mid, 60, "trace", before_seq=NEWEST_PAGE)
        analysis = analyze_trace(events if isinstance(events, list) else [])
        advice = recommendation(status, live, analysis)
        if live_warning is not None:
            advice += f" (Note: live runner state unavailable: {live_warning})"
        return {
            "mission_id": mid,
            "title": mission.get("title"),
            "status": status,
            "backend": mission.get("backend"),
            "model_override": mission.get("model_override"),
            "model_effort": mission.get("model_effort"),
            "live": live,
            "live_warning": live_warning,
            "signals": analysis.signals_json(),
            "recent_errors": analysis.recent_errors,
            "suspected_loop": analysis.loop_json(),
            "trace_tool_calls": analysis.tool_calls,
            "last_assistant_message": await self._last_assistant_message(mid),
            "recommendation": advice,
        }

    async def _tool_get_mission_diagnostics(self, a: dict[str, Any]) -> Any:
        mid = parse_uuid(a["mission_id"])
        events = await self._events(
            mid, max(10, min(a.get("limit", 80), 300)), "trace", before_seq=NEWEST_PAGE
        )
        rows = [e for e in (events if isinstance(events, list) else []) if isinstance(e, dict)]
        timeline: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        repeats: dict[tuple[str, str], int] = {}
        errors: list[dict[str, Any]] = []
        for event in rows:
            content = _text(event, "content")
            if event.get("event_type") == "tool_call":
                tool = _text(event, "tool_name", "(unknown)")
                counts[tool] = counts.get(tool, 0) + 1
                repeats[(tool, content.strip())] = repeats.get((tool, content.strip()), 0) + 1
                timeline.append(
                    {"sequence": event.get("sequence"), "tool": tool, "args": truncate_snippet(content, 200)}
                )
            elif event.get("event_type") == "error":
                errors.append(
                    {
                        "sequence": event.get("sequence"),
                        "timestamp": event.get("timestamp"),
                        "content": truncate_snippet(content, 800),
                        "signals": error_signals(content),
                    }
                )
        return {
            "mission_id": mid,
            "events_scanned": len(events) if isinstance(events, list) else 0,
            "tool_timeline": timeline[-30:],
            "tool_counts": [{"tool": t, "count": n} for t, n in sorted(counts.items())],
            "repeated_calls": [
                {"tool": t, "repeats": n, "args": truncate_snippet(args, 160)}
                for (t, args), n in sorted(repeats.items())
                if n >= 2
            ],
            "errors": errors,
        }

    async def _tool_update_mission_settings(self, a: dict[str, Any]) -> Any:
        mid = parse_uuid(a["mission_id"])
        body: dict[str, Any] = {}
        backend = a.get("backend", "").strip()
        if backend:
            body["backend"] = backend
        body.update(_pick(a, ("model_override", "model_effort", "agent", "config_profile")))
        if not body:
            raise ToolFailure(
                "No settings provided. Set at least one of: backend, model_override, model_effort, "
                "agent, config_profile."
            )
        response = await self._request("PATCH", f"/api/control/missions/{mid}/settings", body)
        if response.status_code == 409:
            raise ToolFailure(
                f"Mission is running, so settings cannot change mid-turn ({response.text}). Cancel it with "
                "cancel_mission (or wait for awaiting_user), update settings, then resume_mission or "
                "send_message_to_mission to start the next turn."
            )
        if not response.is_success:
            raise ToolFailure(f"Failed to update mission settings ({_status(response)}): {response.text}")
        return {"mission": compact_mission(_parse(response, "updated mission"))}

    async def _tool_resume_mission(self, a: dict[str, Any]) -> Any:
        mid = parse_uuid(a["mission_id"])
        hint = (a.get("content") or "").strip() or None
        body = {"clean_workspace": a.get("clean_workspace", False), "skip_message": hint is not None}
        response = await self._request("POST", f"/api/control/missions/{mid}/resume", body)
        if not response.is_success:
            raise ToolFailure(
                f"Failed to resume mission ({_status(response)}): {response.text}. "
                "Only interrupted, blocked, or failed missions can be resumed."
            )
        mission = _parse(response, "resumed mission")
        warning: str | None = None
        if hint is not None:
            try:
                await self._send_message(mid, hint)
            except ToolFailure as exc:
                warning = (
                    f"Mission resumed, but steering hint could not be delivered: {exc.message}. "
                    "The mission is already active; retry send_message_to_mission to land the hint."
                )
        return {
            "mission": compact_mission(mission),
            "steered": hint is not None and warning is None,
            "steer_warning": warning,
        }


# -- MCP server ------------------------------------------------------------------------------


def build_server(tools: AssistantTools) -> Server[Any]:
    """The low-level SDK server exposing ``tools``; failures become JSON-RPC errors -32000."""
    listing = [
        mcp_types.Tool(name=spec.name, description=spec.description, input_schema=spec.input_schema())
        for spec in tools.specs.values()
    ]

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=listing)

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        try:
            value = await tools.call(params.name, params.arguments or {})
        except ToolFailure as exc:
            raise MCPError(code=TOOL_ERROR_CODE, message=exc.message) from None
        except Exception as exc:  # a simulator bug: report its type, log the traceback to stderr
            log.exception("tool %s raised", params.name)
            raise MCPError(code=TOOL_ERROR_CODE, message=f"Internal error: {type(exc).__name__}") from None
        if tools.config.scrub:
            value = scrub(value)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=render(value))])

    return Server(SERVER_NAME, version=SERVER_VERSION, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_stdio(config: AssistantConfig) -> None:
    """Serve one MCP session over this process's stdin/stdout until stdin closes."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(config.http_timeout_s)) as http:
        server = build_server(AssistantTools(config, http))
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``--version``/``-V`` prints the version, otherwise serve over stdio."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--version" in args or "-V" in args:
        print(f"assistant-mcp {SERVER_VERSION}")
        return 0
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    anyio.run(serve_stdio, AssistantConfig.from_env(os.environ))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
