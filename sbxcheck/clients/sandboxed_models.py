"""Wire shapes of the sandboxed.sh control plane's REST API, parsed by :mod:`.sandboxed`.

Pydantic models of what the REST API answers, and :class:`MissionSpec` (what a create sends).
Workspace records are reduced at the source: env-var *names* are kept, values are dropped while
parsing, so no secret value is ever held. Section numbers below point into specs/sandboxed-sh.md.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PrivateAttr, field_validator, model_validator

from sbxcheck.errors import BadResponseError
from sbxcheck.secrets import classify

NIL_UUID: Final = "00000000-0000-0000-0000-000000000000"
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "blocked", "not_feasible", "interrupted"})
IN_FLIGHT_STATUSES: Final = frozenset({"active", "pending", "awaiting_user", "blocked"})
_CREDENTIAL_MARKERS: Final = ("BEGIN OPENSSH PRIVATE KEY", "BEGIN PGP PRIVATE KEY", "<encrypted")


class _Wire(BaseModel):
    """Base of every response model: unknown fields are kept (the API grows)."""

    model_config = ConfigDict(extra="allow")


class HistoryEntry(_Wire):
    role: str
    content: str = ""


class MissionExecution(_Wire):
    """The latest-run projection on a mission (spec 3.1); key set varies between versions."""

    run_id: str | None = None
    mission_id: str | None = None
    generation: int | None = None
    execution_state: str | None = None
    owner_actor_id: str | None = None
    started_at: str | None = None
    heartbeat_at: str | None = None
    stopping_at: str | None = None
    ended_at: str | None = None
    terminal_reason: str | None = None


class Mission(_Wire):
    """A mission record (spec 3.1). Optional fields are usually omitted by the server."""

    id: str
    status: str
    title: str | None = None
    short_description: str | None = None
    workspace_id: str = NIL_UUID
    workspace_name: str | None = None
    agent: str | None = None
    backend: str = "claudecode"
    model_override: str | None = None
    model_effort: str | None = None
    fast_mode: bool = False
    config_profile: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    created_at: str | None = None
    updated_at: str | None = None
    interrupted_at: str | None = None
    paused_at: str | None = None
    resumable: bool = False
    session_id: str | None = None
    terminal_reason: str | None = None
    terminal_evidence: JsonValue = None
    parent_mission_id: str | None = None
    working_directory: str | None = None
    requires_local_disk: bool = True
    mission_mode: str | None = None
    goal_mode: bool = False
    goal_objective: str | None = None
    priority: int = 0
    not_before: str | None = None
    deadline: str | None = None
    project: str | None = None
    track: str | None = None
    intent: str | None = None
    github_pr: str | None = None
    desired_state: str | None = None
    next_check_at: str | None = None
    tags: list[str] = Field(default_factory=list)
    last_status_change_at: str | None = None
    last_agent_event_at: str | None = None
    last_output_at: str | None = None
    last_activity_at: str | None = None
    idle_seconds: float | None = None
    idle_for: str | None = None
    health_verdict: str | None = None
    awaiting_kind: str | None = None
    origin: str | None = None
    origin_session_id: str | None = None
    execution: MissionExecution | None = None
    cross_tenant: bool = False
    read_only: bool = False

    @property
    def is_terminal(self) -> bool:
        """True for completed, failed, blocked, not_feasible and interrupted."""
        return self.status in TERMINAL_STATUSES

    def asked_for(self, asked: str, source: str) -> Mission:
        """This record, when it is the mission asked for; else a bad response naming both ids."""
        check_record_id(asked, self.id, source)
        return self


class StoredEvent(_Wire):
    """One stored mission event (spec 3.7); payloads are folded into ``content`` and ``metadata``."""

    id: int | str | None = None
    mission_id: str | None = None
    sequence: int
    event_type: str
    timestamp: str | None = None
    event_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    content: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("content", mode="before")
    @classmethod
    def _content_text(cls, value: object) -> object:
        if value is None:
            return ""
        if isinstance(value, dict | list | int | float | bool):
            return json.dumps(value)
        return value

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_map(cls, value: object) -> object:
        return {} if value is None else value


def credential_class(value: str, name: str | None = None) -> str | None:
    """The credential class of ``value`` held by variable ``name`` (the redactor's table), or None."""
    if any(m in value for m in _CREDENTIAL_MARKERS):
        return "private-key" if "PRIVATE KEY" in value else "encrypted-value"
    return classify(value, name)


def is_credential_like(value: str, name: str | None = None) -> bool:
    """True when ``value`` has the shape of a credential (see :mod:`sbxcheck.secrets`)."""
    return credential_class(value, name) is not None


MAX_VALUE_DEPTH: Final = 16  # nesting read inside one env value; deeper parts count as a value, unread
MAX_VALUE_LEAVES: Final = 256  # items read inside one env value (the rest count as one value, unread)


def env_pairs(env: object) -> Iterator[tuple[str | None, object]]:
    """(name, value) of each variable ``env_vars`` holds: an object of names, or a list of
    ``{name|key, value}`` rows; anything else is one unnamed value."""
    if isinstance(env, dict):
        for name, value in env.items():
            yield str(name), value
    elif isinstance(env, list):
        for row in env:
            named = isinstance(row, dict) and isinstance(row.get("name", row.get("key")), str)
            if named and isinstance(row, dict):
                yield str(row.get("name", row.get("key"))), row.get("value")
            else:
                yield None, row
    elif env is not None:
        yield None, env


def value_leaves(value: object) -> Iterator[str]:
    """Every value a server sent under one env var, as text: strings, numbers and booleans at any depth
    of an object or a list, never an empty or ``[redacted]`` string, nor null. Bounded: past
    ``MAX_VALUE_DEPTH`` levels or ``MAX_VALUE_LEAVES`` leaves, what is left is one unread value."""
    stack: list[tuple[object, int]] = [(value, 0)]
    count = 0
    while stack:
        item, depth = stack.pop()
        if item is None or item == "" or (isinstance(item, str) and item.lower() == "[redacted]"):
            continue
        count += 1
        if count > MAX_VALUE_LEAVES:
            yield "<more values, unread>"
            return
        if isinstance(item, str):
            yield item
        elif isinstance(item, bool | int | float):
            yield json.dumps(item)
        elif not isinstance(item, dict | list):
            yield str(item)
        elif depth >= MAX_VALUE_DEPTH:
            yield "<nested too deep, unread>"
        else:
            inner = list(item.values()) if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in reversed(inner[:MAX_VALUE_LEAVES]))


class Workspace(BaseModel):
    """A workspace reduced at the source: env-var names only, never their values.

    Unknown fields are ignored, not kept: a workspace record is secret-bearing, and the free-form
    ``init_script`` body and ``config`` are dropped for the same reason. ``env_values_present``
    says whether the server sent any non-empty, unredacted value; ``credential_like_env_names``
    names the variables whose value looked like a credential (the exposure class, not the value).
    """

    model_config = ConfigDict(extra="ignore")

    id: str
    name: str
    status: str | None = None
    workspace_type: str | None = None
    path: str | None = None
    error_message: str | None = None
    created_at: str | None = None
    distro: str | None = None
    template: str | None = None
    config_profile: str | None = None
    skills: list[str] = Field(default_factory=list)
    plugins: list[str] = Field(default_factory=list)
    init_scripts: list[str] = Field(default_factory=list)
    mcps: list[str] = Field(default_factory=list)
    shared_network: bool | None = None
    tailscale_mode: str | None = None
    env_var_names: list[str] = Field(default_factory=list)
    env_values_present: bool = False
    credential_like_env_names: list[str] = Field(default_factory=list)
    credential_classes: dict[str, str] = Field(
        default_factory=dict, description="env-var name -> credential class of its dropped value"
    )

    @model_validator(mode="before")
    @classmethod
    def _reduce_at_source(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        reduced = {k: v for k, v in data.items() if not (isinstance(k, str) and k.lower() == "env_vars")}
        reduced.pop("init_script", None)
        reduced.pop("config", None)
        envs = [v for k, v in data.items() if isinstance(k, str) and k.lower() == "env_vars"]
        names: list[str] = []
        classes: dict[str, str] = {}
        present = False
        for env in envs:
            for name, value in env_pairs(env):
                if name is not None:
                    names.append(name)
                leaves = list(value_leaves(value))
                present = present or bool(leaves)
                found = next(filter(None, (credential_class(leaf, name) for leaf in leaves)), None)
                if found is not None and name is not None:
                    classes[name] = found
        reduced["env_var_names"] = sorted(set(names))
        reduced["env_values_present"] = present
        reduced["credential_like_env_names"] = sorted(classes)
        reduced["credential_classes"] = dict(sorted(classes.items()))
        return reduced


@dataclass(frozen=True)
class ExecResult:
    """What ``POST /api/workspaces/:id/exec`` returned. The repr shows sizes, not output."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """Exit code 0 and not timed out."""
        return self.exit_code == 0 and not self.timed_out

    def __repr__(self) -> str:
        return (
            f"ExecResult(exit_code={self.exit_code}, timed_out={self.timed_out}, "
            f"stdout={len(self.stdout)} chars, stderr={len(self.stderr)} chars)"
        )


class HealthInfo(_Wire):
    """``GET /api/health`` (public: no token needed)."""

    status: str
    version: str | None = None
    dev_mode: bool = False
    auth_required: bool | None = None
    auth_mode: str | None = None
    max_iterations: int | None = None
    library_remote: str | None = None
    github_enabled: bool | None = None
    dashboard_github_login_enabled: bool | None = None


class AuthStatus(_Wire):
    """``GET /api/auth/status``: whether the server wants a login."""

    auth_mode: str | None = None
    password_source: str | None = None
    password_changed_at: str | None = None
    dev_mode: bool = False


class MissionCounts(_Wire):
    total: int = 0
    active: int = 0
    completed: int = 0
    failed: int = 0
    acknowledged: int = 0


class FleetHealth(_Wire):
    """``GET /api/health/fleet``. HTTP 200 even when ``status`` is ``degraded``."""

    status: str
    version: str | None = None
    control_responsive: bool | None = None
    running: int | None = None
    queue_depth: int | None = None
    missions: MissionCounts | None = None
    webhook_forwarder_configured: bool | None = None
    offload_configured: bool | None = None
    disk_used: int | None = None
    disk_total: int | None = None
    disk_percent: float | None = None
    disk_level: str | None = None
    disk_path: str | None = None
    disk_filesystem: str | None = None
    disk_free_gib: float | None = None
    disk_required_gib: float | None = None


class RemoteNode(_Wire):
    """One node of ``GET /api/remote-nodes``. ``token_env`` is an env-var *name*."""

    id: str
    status: str
    base_url: str | None = None
    token_env: str | None = None
    labels: list[str] = Field(default_factory=list)
    version: str | None = None
    protocol_version: int | str | None = None
    capacity_total: int | None = None
    capacity_available: int | None = None
    active_leases: int | None = None
    active_jobs: int | None = None
    queued_jobs: int | None = None
    cpu_total: int | None = None
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    disk_total_bytes: int | None = None
    disk_available_bytes: int | None = None
    cached_toolchains: list[str] = Field(default_factory=list)
    lean_runtime_ready: bool | None = None
    last_seen: str | None = None
    error: str | None = None
    cordoned: bool = False


class RemoteFleet(_Wire):
    """``GET /api/remote-nodes``: ``{enabled, nodes, recent_jobs, ...}``.

    :attr:`answered_at` is not read from the body: it is the answer's HTTP ``Date``, the control
    plane's own clock, which wrote every ``last_seen`` (None when it sent no usable one).
    """

    enabled: bool
    nodes: list[RemoteNode] = Field(default_factory=list)
    recent_jobs: list[JsonValue] = Field(default_factory=list)
    spark_offload: dict[str, JsonValue] | None = None
    remote_launch: dict[str, JsonValue] | None = None
    _answered_at: dt.datetime | None = PrivateAttr(default=None)

    @property
    def answered_at(self) -> dt.datetime | None:
        return self._answered_at

    def answered(self, at: dt.datetime | None) -> RemoteFleet:
        """This answer, stamped with the time its server said it was sent."""
        self._answered_at = at
        return self


class CordonResult(_Wire):
    """``POST /api/nodes/:name/(un)cordon``."""

    node: str
    cordoned: bool
    changed: bool


class RunningEntry(_Wire):
    """One row of ``GET /api/control/running`` (spec 3.6)."""

    mission_id: str
    state: str
    queue_len: int | None = None
    history_len: int | None = None
    seconds_since_activity: float | None = None
    health: dict[str, JsonValue] | None = None


class ParallelConfig(_Wire):
    """``GET /api/control/parallel/config``: how many missions the control plane runs at once."""

    max_parallel_missions: int = Field(ge=0)
    running_count: int | None = Field(default=None, ge=0)


@dataclass(frozen=True)
class EventPage:
    """A page of events plus the cursor headers (``X-Max-Sequence``, ``X-Total-Events``)."""

    events: list[StoredEvent]
    max_sequence: int | None
    total_events: int | None


@dataclass(frozen=True)
class CreateOutcome:
    """A create's mission plus its headers: ``x-coalesced-with`` and ``x-ignored-fields`` (``None``: the
    answer carried no such header, so it says nothing about what was ignored)."""

    mission: Mission
    coalesced_with: str | None = None
    ignored_fields: tuple[str, ...] | None = None


@dataclass(frozen=True)
class MissionSpec:
    """The body of ``POST /api/control/missions`` (spec 3.4); ``None`` fields are not sent."""

    title: str | None = None
    prompt: str | None = None
    workspace_id: str | None = None
    agent: str | None = None
    backend: str | None = None
    model_override: str | None = None
    model_effort: str | None = None
    fast_mode: bool | None = None
    config_profile: str | None = None
    idempotency_key: str | None = None
    project: str | None = None
    track: str | None = None
    tags: Sequence[str] | None = None
    priority: int | None = None
    deadline: str | None = None
    origin: str | None = None
    origin_session_id: str | None = None
    estimated_disk_gib: int | None = None
    remote_node_id: str | None = None
    remote_requirements: Sequence[str] | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=dict)

    def body(self) -> dict[str, JsonValue]:
        """The JSON body: set fields plus ``extra`` (which cannot override a named field)."""
        out: dict[str, JsonValue] = dict(self.extra)
        for name in self.__dataclass_fields__:
            if name == "extra":
                continue
            value = getattr(self, name)
            if value is None:
                continue
            out[name] = list(value) if isinstance(value, list | tuple) else value
        return out


class IntegrityGroup(_Wire):
    """One group of ``/missions/integrity``: a count and up to 20 missions."""

    count: int
    missions: list[dict[str, JsonValue]] = Field(default_factory=list)


class MissionsIntegrity(_Wire):
    """``GET /api/control/missions/integrity`` (spec 3.6); the two groups ``healthy`` rests on are required."""

    generated_at: str | None = None
    scanned: int | None = None
    healthy: bool | None = None
    orphaned_pending: IntegrityGroup
    stale_active: IntegrityGroup
    scheduled_waiting: IntegrityGroup | None = None
    stale_awaiting_user: IntegrityGroup | None = None


class TrackRow(_Wire):
    """One row of ``GET /api/control/tracks``."""

    project: str
    track: str
    total: int = 0
    active: int = 0
    pending: int = 0
    awaiting_user: int = 0
    last_activity_at: str | None = None


class BackendInfo(_Wire):
    """One row of ``GET /api/backends``."""

    id: str
    name: str | None = None


class AiProvider(_Wire):
    """One configured provider of ``GET /api/ai/providers``; no key material is modelled."""

    id: str
    provider_type: str
    name: str | None = None
    enabled: bool = True
    status: dict[str, JsonValue] | None = None
    use_for_backends: list[str] = Field(default_factory=list)


class CatalogModel(_Wire):
    id: str
    name: str | None = None


class CatalogProvider(_Wire):
    """One provider of the static catalog and its model ids."""

    id: str
    name: str | None = None
    models: list[CatalogModel] = Field(default_factory=list)


class ProviderCatalog(_Wire):
    providers: list[CatalogProvider]


class RecordMismatch(BadResponseError):
    """A record read for one mission carried another mission's id."""


def check_record_id(asked: str, answered: object, source: str) -> None:
    """A record read for mission ``asked`` must carry that id: else :class:`RecordMismatch` naming
    both, so nothing of another mission's record is judged as the one asked for."""
    if answered == asked:
        return
    shown = repr(answered)[:80]
    raise RecordMismatch(
        f"{source}: asked for mission {asked}, the record answered is mission {shown}; "
        "nothing of that record is judged",
        evidence={"asked_id": asked, "answered_id": shown},
    )
