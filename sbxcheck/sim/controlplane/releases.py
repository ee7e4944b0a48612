"""Release profiles of the simulated control plane, each read from its own source.

``current`` (the default) is the API of specs/sandboxed-sh.md. The others are releases people run,
and every fact that makes one differ from ``current`` is cited below (file, commit, approximate
line); what the source does not establish is left as ``current`` has it.

**v0.7** — Th0rgal/sandboxed.sh tag ``v0.7.0`` (e3ef5f6, 2026-02-07)

============================================  =====================================================
fact                                          source
============================================  =====================================================
``/api/health`` ``version`` 0.7.0             Cargo.toml:3
create body: title, workspace_id, agent,      src/api/control.rs:1290 (``CreateMissionRequest``;
model_override, config_profile, backend       serde drops every other field: no prompt, no effort)
first message: ``POST /api/control/message``  src/api/routes.rs:403; answer ``{id, queued}``
record keys                                   src/api/mission_store/mod.rs:26 (``Mission``)
events: types/limit/offset, no cursor         src/api/control.rs:1597 (``get_mission_events``)
list: no query, 50 most recently updated      src/api/control.rs:1242-1249 (``list_missions(50, 0)``)
no fleet/nodes/cordon/tracks/integrity/       src/api/routes.rs:367-600 (route table)
digest/auth-status routes
``/api/control/parallel/config`` served       src/api/routes.rs:503
one mission at a time                         src/config.rs:366 (``MAX_PARALLEL_MISSIONS`` "1")
a first message while slots are full runs     src/api/control.rs:3117, 3194 ("queue on main")
on the main mission
cancel of a mission not running: 404          src/api/control.rs:1769 (``NOT_FOUND``), 3729
``Mission <id> not found``, status kept       (``Err(format!("Mission {} not found"))``)
a finished turn: ``completed``                src/api/control.rs:4252
terminal reasons: completed, cancelled,       src/api/control.rs:4259
llm_error, stalled, infinite_loop,
max_iterations
no assistant MCP                              src/bin/ (no assistant_mcp.rs)
============================================  =====================================================

**1.3** — karypid/sandboxed.sh master ``71b28a33`` (upstream's own commit, 2026-06-27, Cargo 1.3.0)

============================================  =====================================================
fact                                          source
============================================  =====================================================
``version`` 1.3.0                             Cargo.toml:3
create body: title, workspace_id, agent,      src/api/control/mod.rs:4428 (``CreateMissionRequest``;
model_override, model_effort, config_profile, no prompt, idempotency_key, origin*, fast_mode:
backend, parent_mission_id, working_directory, dropped by serde); github_pr ``Option<i64>``
priority, not_before, deadline, project,      (mod.rs:4463)
track, intent, github_pr (integer), tags
no idempotency lease, title coalescing,       src/api/control/mod.rs:4556-4760 (``create_mission``)
occupancy 409, disk admission, x-ignored-fields
agent validation skipped for claudecode,      src/api/control/mod.rs:4652-4667
codex, gemini, grok
codex efforts low/medium/high                 src/api/control/mod.rs:4513-4527
record keys; ``github_pr`` an integer         src/api/mission_store/mod.rs:52-68, 158-258
list: limit/offset/status (one, exact)/       src/api/control/mod.rs:3826-3933 (no ``all``, no
project/tag/workspace, newest updated first   attention-only horizon); sqlite.rs:2476
``/api/health/fleet``: no ``disk_*``;         src/api/control/mod.rs:3941-3992;
missions {total, active, completed, failed}   src/api/mission_store/mod.rs:262
no remote-nodes/cordon/tracks/integrity/      src/api/routes.rs:602-1160 (route table)
digest/parallel-config routes
``/missions/:id/parallel`` served             src/api/routes.rs:790
one mission at a time                         src/config.rs:453
a targeted first message while slots are      src/api/control/mod.rs:10232-10252 (error event
full is dropped (``queued: false``)           ``Cannot start mission <id>: max parallel …``)
cancel of a mission not running: 404          src/api/control/mod.rs:6034, 11262
a finished turn: ``awaiting_user`` (ack),     src/api/control/mod.rs:8816-8841, 9305-9320
terminal_reason ``turn_complete``
terminal reasons: turn_complete, completed,   src/api/control/mod.rs:8830-8841
cancelled, server_shutdown, max_iterations,
llm_error, stalled, infinite_loop,
rate_limited, capacity_limited, auth_error
``POST /missions/:id/status`` any status      src/api/control/mod.rs:10849
stream ``?mission=<id>`` filter               src/api/control/mod.rs:6581
assistant MCP: 15 tools; start_mission =      src/bin/assistant_mcp.rs:421-610 (tools),
create (no prompt) + ``/api/control/message`` 793-822 (start_mission), 672 (get_mission: REST
                                              record), 881 (cancel_mission)
============================================  =====================================================

**cba9502** — the newest the search index shows: Th0rgal/sandboxed.sh ``src/api/routes.rs`` and
``src/api/mission_store/mod.rs`` @ ``cba9502`` (Cargo.toml is not stored at that commit, so the
profile is named by commit), ``src/bin/assistant_mcp.rs`` @ ``4d62797``,
``src/remote_node/monitor.rs`` @ ``cba9502``. It is ``current`` except:

============================================  =====================================================
fact                                          source
============================================  =====================================================
no ``/api/control/parallel/config``           src/api/routes.rs @cba9502 (route table, ~offset 33k)
remote nodes carry ``cordoned`` and           src/api/routes.rs @cba9502 (``list_remote_nodes``);
``lean_runtime_ready``                        src/remote_node/monitor.rs @cba9502 (RemoteNodeView)
``github_pr`` a string                        src/api/mission_store/mod.rs @cba9502 (MissionProject)
MCP ``start_mission`` args                    src/bin/assistant_mcp.rs @4d62797 (tools())
============================================  =====================================================

Not established from source for ``cba9502``: its Cargo version, ``MAX_PARALLEL_MISSIONS``' default
and the cancel of a mission that is not running; those stay as ``current`` has them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from starlette.routing import Route

from sbxcheck.errors import SimError

DEFAULT_PROFILE: Final = "current"

#: Every component a current server lists (name, version); v0.7.0 lists the same less the assistant MCP.
_COMPONENTS: Final = (
    ("sandboxed_sh", None),
    ("opencode", "1.2.0"),
    ("claude_code", "2.1.0"),
    ("codex", "0.98.0"),
    ("assistant_mcp", "0.1.0"),
)
EFFORTS: Final = ("low", "medium", "high", "xhigh", "max")

ListMode = Literal["full", "exact", "none"]


@dataclass(frozen=True)
class ReleaseProfile:
    """What one release of the control plane serves and how it behaves."""

    name: str
    version: str
    create_fields: frozenset[str] | None = None  # None: every field the current API knows
    first_message: bool = False  # a mission waits pending for its first message
    admission: bool = True  # idempotency lease, title coalescing, occupancy 409, disk admission, x-ignored-fields
    mission_keys: frozenset[str] | None = None  # None: the current record's keys
    github_pr_int: bool = False  # github_pr is an integer (create body and record)
    event_cursors: bool = True  # since_seq / before_seq honoured
    list_mode: ListMode = "full"  # full: today's query; exact: one exact status, no horizon; none: no query
    list_rows: int = 50  # rows answered when the query is ignored
    missing_paths: frozenset[str] = frozenset()  # route paths this release does not have
    max_parallel: int | None = None  # missions running at once (None: not capped here)
    full_slots: Literal["queue", "drop"] = "queue"  # a first message while every slot is taken
    cancel_running_only: bool = False  # cancel of a mission that is not running: 404, status kept
    turn_end: Literal["completed", "awaiting_user"] = "completed"  # a finished turn's status
    fleet_disk: bool = True  # /api/health/fleet carries disk_*
    fleet_counts: tuple[str, ...] = ("total", "active", "completed", "failed", "acknowledged")
    codex_efforts: tuple[str, ...] = EFFORTS
    mcp_tools: str | None = "current"  # the assistant MCP's tool table (None: the release has none)
    components: tuple[str, ...] = field(default=tuple(name for name, _ in _COMPONENTS))

    def serves(self, route: Route) -> bool:
        """Whether this release has ``route`` (an unmatched path answers an empty 404)."""
        return route.path not in self.missing_paths

    def component_rows(self) -> list[dict[str, Any]]:
        """``GET /api/system/components``'s rows."""
        versions = dict(_COMPONENTS)
        return [
            {
                "name": name,
                "version": versions[name] or self.version,
                "installed": True,
                "update_available": None,
                "path": f"/usr/local/bin/{name.replace('_', '-')}",
                "status": "ok",
            }
            for name in self.components
        ]


_V07_MISSION_KEYS: Final = frozenset(
    {
        "id", "status", "title", "workspace_id", "workspace_name", "agent", "model_override",
        "backend", "config_profile", "history", "created_at", "updated_at", "interrupted_at",
        "resumable", "session_id", "terminal_reason",
    }
)  # fmt: skip
_V13_MISSION_KEYS: Final = frozenset(
    {
        "id", "status", "title", "short_description", "workspace_id", "workspace_name", "agent",
        "model_override", "model_effort", "backend", "config_profile", "history", "created_at",
        "updated_at", "interrupted_at", "paused_at", "resumable", "session_id", "terminal_reason",
        "parent_mission_id", "working_directory", "mission_mode", "goal_mode", "goal_objective",
        "priority", "not_before", "deadline", "project", "track", "intent", "github_pr", "tags",
        "last_status_change_at", "last_agent_event_at", "last_output_at", "last_activity_at",
        "awaiting_kind", "spark_offload",
    }
)  # fmt: skip
_V13_CREATE_FIELDS: Final = frozenset(
    {
        "title", "workspace_id", "agent", "model_override", "model_effort", "config_profile", "backend",
        "parent_mission_id", "working_directory", "priority", "not_before", "deadline", "project",
        "track", "intent", "github_pr", "tags",
    }
)  # fmt: skip
_LATER_ROUTES: Final = frozenset(  # neither v0.7.0 nor 1.3.0 serves these
    {
        "/api/remote-nodes",
        "/api/nodes/{name}/cordon",
        "/api/nodes/{name}/uncordon",
        "/api/control/tracks",
        "/api/control/missions/integrity",
        "/api/control/missions/{id}/digest",
    }
)
CURRENT: Final = ReleaseProfile(DEFAULT_PROFILE, "0.9.0-sim")
V0_7: Final = ReleaseProfile(
    "v0.7",
    "0.7.0",
    create_fields=frozenset(
        {"title", "workspace_id", "agent", "model_override", "config_profile", "backend"}
    ),
    first_message=True,
    admission=False,
    mission_keys=_V07_MISSION_KEYS,
    event_cursors=False,
    list_mode="none",
    list_rows=50,
    max_parallel=1,  # MAX_PARALLEL_MISSIONS' default: one mission at a time
    cancel_running_only=True,
    missing_paths=_LATER_ROUTES | {"/api/health/fleet", "/api/auth/status"},
    mcp_tools=None,
    components=tuple(name for name, _ in _COMPONENTS if name != "assistant_mcp"),
)
V1_3: Final = ReleaseProfile(
    "1.3",
    "1.3.0",
    create_fields=_V13_CREATE_FIELDS,
    first_message=True,
    admission=False,
    mission_keys=_V13_MISSION_KEYS,
    github_pr_int=True,
    list_mode="exact",
    max_parallel=1,
    full_slots="drop",
    cancel_running_only=True,
    turn_end="awaiting_user",
    fleet_disk=False,
    fleet_counts=("total", "active", "completed", "failed"),
    codex_efforts=("low", "medium", "high"),
    missing_paths=_LATER_ROUTES | {"/api/control/parallel/config"},
    mcp_tools="1.3",
)
CBA9502: Final = ReleaseProfile(
    "cba9502",
    "cba9502",  # Cargo.toml is not stored at this commit: the profile is named by commit
    missing_paths=frozenset({"/api/control/parallel/config"}),
)
PROFILES: Final = {p.name: p for p in (CURRENT, V0_7, V1_3, CBA9502)}


def release_profile(name: str | None) -> ReleaseProfile:
    """The profile called ``name`` (``None``: today's); a usage error naming the known ones otherwise."""
    key = (name or DEFAULT_PROFILE).strip()
    bare = key.removeprefix("v")
    short = bare.removesuffix(".0") if bare.count(".") == 2 else bare  # 1.3.0 and 1.3, 0.7.0 and v0.7
    found = PROFILES.get(key) or PROFILES.get(short) or PROFILES.get(f"v{short}")
    if found is None:
        raise SimError(
            f"unknown control-plane version profile {name!r}; known: {', '.join(sorted(PROFILES))}"
        )
    return found


def served(profile: ReleaseProfile, routes: Sequence[Route]) -> list[Route]:
    """The routes ``profile`` has."""
    return [r for r in routes if profile.serves(r)]


def trim_record(profile: ReleaseProfile, record: dict[str, Any]) -> dict[str, Any]:
    """A rendered Mission as ``profile`` shapes it (only the keys its record has)."""
    if profile.mission_keys is None:
        return record
    return {k: v for k, v in record.items() if k in profile.mission_keys}


def create_body(profile: ReleaseProfile, body: dict[str, Any]) -> dict[str, Any]:
    """The create body as ``profile`` deserialises it (unknown fields dropped, as serde does)."""
    if profile.create_fields is None:
        return body
    return {k: v for k, v in body.items() if k in profile.create_fields}


def page_events(
    profile: ReleaseProfile, rows: list[dict[str, Any]], since: int | None, before: int | None, limit: int
) -> list[dict[str, Any]]:
    """One page of events: the cursor where ``profile`` honours it, else the first ``limit`` rows."""
    if not profile.event_cursors:
        return rows[:limit]
    if before is not None:  # before_seq beats since_seq
        return [e for e in rows if e["sequence"] < before][-limit:]
    if since is not None:
        return [e for e in rows if e["sequence"] > since][:limit]
    return rows[:limit]
