"""The [sandboxed] section: a sandboxed.sh control plane and what to probe on it, table by table."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sbxcheck.inventory_base import StrictSection, check_env_name, no_userinfo


class RouteSpec(StrictSection):
    """One mission route to probe: how a mission is dispatched and what it must run on."""

    name: str = Field(
        default="",
        description="the route's label in item ids and idempotency keys (unique); default: "
        "<backend>-<model_override or default>, with -mcp for via = \"mcp\"",
    )
    agent: str | None = Field(
        default=None, description="the agent the mission runs (a library agent or the backend's own)"
    )
    backend: str = Field(description="the backend the mission is dispatched to (codex, claudecode, opencode, ...)")
    model_override: str | None = Field(
        default=None, description="the model: an exact GET /api/providers id; default: the backend's own"
    )
    model_effort: str | None = Field(
        default=None,
        description="the effort asked for (max, xhigh, high, ...); accepted only lower on the ladder is degraded",
    )
    workspace: str | None = Field(
        default=None, description="workspace name or id; default: the host workspace"
    )
    via: Literal["rest", "mcp"] = Field(
        default="rest",
        description="how the mission is created: the REST API, or the assistant MCP server ([sandboxed.mcp])",
    )
    prompt: str = Field(
        default="sbxcheck route probe: run `echo ok` once with your shell tool, then reply with the word ok.",
        description="the probe mission's prompt",
    )
    contract: Literal["none", "roadmap", "conversational"] = Field(
        default="none",
        description="an opt-in dispatch contract the mission is created under (test_dispatch_contract): "
        "roadmap needs project, track and acceptance_criteria; conversational needs origin_session_id",
    )
    project: str | None = Field(default=None, description="roadmap contract: the project")
    track: str | None = Field(default=None, description="roadmap contract: the track the mission reserves")
    acceptance_criteria: list[str] = Field(default_factory=list, description="roadmap contract: its criteria")
    origin_session_id: str | None = Field(
        default=None, description="conversational contract: the session the mission answers"
    )

    @model_validator(mode="after")
    def _contract_fields(self) -> RouteSpec:
        if self.contract == "roadmap" and not (self.project and self.track and self.acceptance_criteria):
            raise ValueError('contract = "roadmap" needs project, track and acceptance_criteria')
        if self.contract == "conversational" and not self.origin_session_id:
            raise ValueError('contract = "conversational" needs origin_session_id')
        return self

    @property
    def label(self) -> str:
        base = self.name or "-".join(p for p in (self.backend, self.model_override or "default") if p)
        return base if self.via == "rest" or self.name else f"{base}-mcp"


class WorkspaceCanarySpec(StrictSection):
    """A read-only workspace-visibility canary for one (backend, workspace)."""

    backend: str = Field(description="the backend the canary mission runs on")
    workspace: str = Field(description="the workspace (name or id) whose checkout the mission must see")
    checkout: str = Field(description="the checkout path the mission must see")
    ref: str | None = Field(default=None, description="expected `git rev-parse HEAD`; unset: any commit")
    pin_file: str | None = Field(
        default="lean-toolchain", description="a file of the checkout that pins a toolchain; \"\": no pin check"
    )
    pin: str | None = Field(default=None, description="the pin_file's expected content; unset: only readable")
    mcp_file: str = Field(
        default="README.md",
        description="a file read through a registered MCP tool, whose sha256 must equal a workspace exec's",
    )
    model_override: str | None = Field(default=None, description="the model; default: the backend's own")
    agent: str | None = Field(default=None, description="the agent; default: the backend's own")

    @property
    def label(self) -> str:
        return f"{self.backend}-{self.workspace}"


class McpSection(StrictSection):
    """How to start the assistant MCP server (stdio) for routes with via = "mcp"."""

    command: list[str] = Field(description="the server's argv (run without a shell)")
    env: dict[str, str] = Field(default_factory=dict, description="plain, non-secret values")
    env_from: dict[str, str] = Field(
        default_factory=dict,
        description="server env var -> name of the local env var holding its value",
        json_schema_extra={"secret": "env"},
    )
    timeout_s: float = Field(default=30.0, gt=0, le=600, description="seconds one MCP call may take")
    pass_session_token: bool = Field(
        default=True,
        description="hand the REST session's JWT to the server as SANDBOXED_API_TOKEN (env, never argv)",
    )

    @field_validator("env_from")
    @classmethod
    def _local_names(cls, value: dict[str, str]) -> dict[str, str]:
        for server_name, local in value.items():
            check_env_name(f"env_from.{server_name}", local)
        return value


GITHUB_HOST_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::\d{1,5})?$")
GIT_REMOTE_RE = re.compile(r"^(?:https|ssh)://(?P<auth>[^/@]*@)?[A-Za-z0-9.-]+(?::\d{1,5})?/\S+$")


def credential_free_remote(url: str) -> bool:
    """An https:// URL with no user info, or an ssh:// URL with at most a user name (``ssh://git@host/…``)."""
    found = GIT_REMOTE_RE.match(url)
    if not found:
        return False
    auth = found.group("auth")
    return not auth or (url.startswith("ssh://") and ":" not in auth)


class GithubProbeSpec(StrictSection):
    """A workspace that declares a GitHub repo: probe its stored gh/git credentials (booleans only)."""

    workspace: str = Field(description="the workspace whose stored credentials are probed")
    repo: str = Field(description="owner/name of the repository read")
    via: Literal["rest", "mcp"] = Field(
        default="rest", description="workspace discovery over the REST API or the assistant MCP server"
    )
    host: str = Field(default="github.com", description="the GitHub host (GitHub Enterprise: its host name)")
    remote_url: str | None = Field(
        default=None, description="the git remote to read instead of https://<host>/<repo>.git (a mirror)"
    )

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not GITHUB_HOST_RE.match(value):
            raise ValueError("expected a host name, optionally with :port (e.g. github.example.com)")
        return value

    @field_validator("remote_url")
    @classmethod
    def _remote(cls, value: str | None) -> str | None:
        if value is not None and not credential_free_remote(value):
            raise ValueError(
                "expected an https:// URL with no user name or token, or an ssh:// URL (ssh://git@host/...)"
            )
        return value


class HygieneSection(StrictSection):
    """Mission-hygiene thresholds, in seconds of a mission's ``idle_seconds`` (defaults: the server's own)."""

    quiet_s: float = Field(default=300.0, gt=0, description="an active mission idle this long is quiet (< stalled_s)")
    stalled_s: float = Field(default=1800.0, gt=0, description="an active mission idle this long is stalled")
    stuck_queued_s: float = Field(default=900.0, gt=0, description="a pending mission idle this long is stuck_queued")
    stalled_parked_s: float = Field(
        default=1800.0, gt=0, description="an awaiting-user or acknowledged mission idle this long is stalled_parked"
    )
    stalled_background_s: float = Field(
        default=21600.0, gt=0, description="a waiting_background mission idle this long is stalled_background"
    )
    max_missions: int = Field(default=1000, ge=1, le=20000, description="missions read (paged) at most")
    signal_scan_limit: int = Field(
        default=50, ge=1, le=500, description="in-flight missions asked for get_mission_health at most"
    )

    @model_validator(mode="after")
    def _ordered(self) -> HygieneSection:
        if self.quiet_s >= self.stalled_s:
            raise ValueError(f"quiet_s ({self.quiet_s:g}) must be below stalled_s ({self.stalled_s:g})")
        return self


class WorkspaceExpectation(StrictSection):
    """What a workspace is expected to carry (names only: init scripts, MCPs, env-var names)."""

    name: str = Field(description="the workspace's name")
    init_scripts: list[str] = Field(default_factory=list, description="init scripts it must carry")
    mcps: list[str] = Field(default_factory=list, description="MCP servers it must carry")
    env_names: list[str] = Field(default_factory=list, description="env-var NAMES, never values")
    skills: list[str] = Field(default_factory=list, description="skills it must carry")

    @field_validator("env_names")
    @classmethod
    def _names_only(cls, value: list[str]) -> list[str]:
        for name in value:
            check_env_name("env_names", name)
        return value


class SandboxedSection(StrictSection):
    """A sandboxed.sh control plane: where it is, how to authenticate, what to probe.

    It authenticates with a JWT (``token_env``) or logs in with the dashboard password
    (``password_env``, else ``password_file``); with none of them the canaries stop at one
    ``config_defect``. Route labels, canary labels and github probes must each be unique.
    """

    url: str = Field(description="the control plane's base URL (http:// or https://, no user:password@)")
    token_env: str | None = Field(
        default=None, description="env var holding a JWT", json_schema_extra={"secret": "env"}
    )
    password_env: str | None = Field(
        default=None, description="env var holding the dashboard password", json_schema_extra={"secret": "env"}
    )
    password_file: Path | None = Field(
        default=None,
        description="file holding the dashboard password (read when password_env is unset)",
        json_schema_extra={"secret": "file"},
    )
    username: str | None = Field(default=None, description="the login's user name (multi-user mode)")
    allow_cleartext_password: bool = Field(
        default=False,
        description="send the password to an http:// url on a host other than this machine's loopback, "
        "where it crosses the network in cleartext on every login (refused unless true)",
    )
    request_timeout_s: float = Field(default=15.0, gt=0, le=300, description="seconds one request may take")
    execution_deadline_s: float = Field(
        default=60.0, gt=0, le=3600, description="seconds from dispatch for a route to reach execution"
    )
    canary_deadline_s: float = Field(
        default=120.0, gt=0, le=3600, description="seconds a workspace canary mission has to settle"
    )
    poll_interval_s: float = Field(
        default=1.0, gt=0, le=60, description="first polling step where the live stream is missing (doubles to 10 s)"
    )
    max_concurrency: int = Field(default=8, ge=1, le=64, description="missions dispatched at once")
    alternative_backends: list[str] = Field(
        default_factory=lambda: ["opencode"],
        description="alternative-provider backends: two of their routes crashing alike are one infrastructure "
        "incident, and that backend gets nothing more",
    )
    routes: list[RouteSpec] = Field(default_factory=list, description="the mission routes to probe")
    canaries: list[WorkspaceCanarySpec] = Field(default_factory=list, description="workspace-visibility canaries")
    mcp: McpSection | None = Field(default=None, description="the assistant MCP server, for via = \"mcp\"")
    expected_nodes: list[str] = Field(default_factory=list, description="remote nodes that must be healthy")
    node_max_age_s: float = Field(
        default=120.0, gt=0, le=86400, description="a node's heartbeat older than this is stale"
    )
    github_probes: list[GithubProbeSpec] = Field(default_factory=list, description="stored GitHub auth to probe")
    hygiene: HygieneSection = Field(default_factory=HygieneSection, description="mission-hygiene thresholds")
    workspaces: list[WorkspaceExpectation] = Field(
        default_factory=list, description="what each workspace must carry (test_workspace_ready)"
    )
    removed_providers: list[str] = Field(
        default_factory=lambda: ["virtuals"], description="providers a route must not use (test_catalog)"
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        no_userinfo(value, "name the env var holding the password in password_env (or a JWT in token_env)")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _unique_names(self) -> SandboxedSection:
        """Route and canary names key idempotency keys and report items: two alike would coalesce."""
        problems = []
        for what, labels in (
            ("route", [r.label for r in self.routes]),
            ("canary", [c.label for c in self.canaries]),
            ("github probe", [f"{g.workspace}:{g.repo}:{g.via}" for g in self.github_probes]),
        ):
            dupes = sorted(label for label, n in Counter(labels).items() if n > 1)
            if dupes:
                problems.append(f"duplicate {what} name(s) {', '.join(repr(d) for d in dupes)}")
        if problems:
            raise ValueError("; ".join(problems) + " (each must be unique: give routes distinct `name`s)")
        return self
