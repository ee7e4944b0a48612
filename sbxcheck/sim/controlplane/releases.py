"""Release profiles of the simulated control plane: today's API (the default) and sandboxed.sh v0.7.0.

The v0.7.0 release (February 2026, Th0rgal/sandboxed.sh tag ``v0.7.0``) differs from the API the
spec describes in what it serves, not in how it is shaped:

* ``GET /api/health`` reports ``version`` ``0.7.0``;
* ``POST /api/control/missions`` deserialises only ``title``, ``workspace_id``, ``agent``,
  ``model_override``, ``config_profile`` and ``backend``: every other field (``prompt`` included) is
  dropped without a word, and the mission stays ``pending`` until its first message arrives on
  ``POST /api/control/message {content, mission_id}`` (answered ``{id, queued}``);
* its Mission record has none of the later fields (``tags``, ``priority``, ``execution``, ...);
* ``GET .../missions/:id/events`` takes ``types``, ``limit`` (default 50000) and ``offset`` and no
  cursor: ``since_seq`` and ``before_seq`` are ignored, and no ``X-Max-Sequence`` is sent;
* ``GET /api/control/missions`` takes no query at all: always the 50 most recently updated missions;
* ``/api/health/fleet``, ``/api/remote-nodes``, cordon, ``/api/control/tracks``, ``/api/auth/status``
  and ``.../missions/:id/digest`` do not exist (axum answers an unmatched route 404 with an empty
  body); ``/api/control/missions/integrity`` reaches ``/missions/:id`` and is refused 400 (the path
  does not parse as a mission id);
* ``GET /api/system/components`` lists no ``assistant_mcp``: the assistant MCP came later;
* one mission runs at a time (``MAX_PARALLEL_MISSIONS`` defaults to 1): a first message for another
  mission while one runs is queued on the running one, and ``POST .../missions/:id/parallel`` answers
  409 (see :mod:`sbxcheck.sim.controlplane.parallel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

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


@dataclass(frozen=True)
class ReleaseProfile:
    """What one release of the control plane serves."""

    name: str
    version: str
    create_fields: frozenset[str] | None = None  # None: every field the current API knows
    first_message: bool = False  # a mission waits pending for POST /api/control/message
    mission_keys: frozenset[str] | None = None  # None: the current record's keys
    event_cursors: bool = True  # since_seq / before_seq honoured
    list_query: bool = True  # filters, limit and offset honoured
    list_rows: int = 50  # rows answered when the query is ignored
    missing_paths: frozenset[str] = frozenset()  # route paths this release does not have
    max_parallel: int | None = None  # missions running at once (None: not capped here)
    components: tuple[str, ...] = tuple(name for name, _ in _COMPONENTS)

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
CURRENT: Final = ReleaseProfile(DEFAULT_PROFILE, "0.9.0-sim")
V0_7: Final = ReleaseProfile(
    "v0.7",
    "0.7.0",
    create_fields=frozenset(
        {"title", "workspace_id", "agent", "model_override", "config_profile", "backend"}
    ),
    first_message=True,
    mission_keys=_V07_MISSION_KEYS,
    event_cursors=False,
    list_query=False,
    list_rows=50,
    max_parallel=1,  # MAX_PARALLEL_MISSIONS' default: one mission at a time
    missing_paths=frozenset(
        {
            "/api/health/fleet",
            "/api/remote-nodes",
            "/api/nodes/{name}/cordon",
            "/api/nodes/{name}/uncordon",
            "/api/control/tracks",
            "/api/control/missions/integrity",
            "/api/control/missions/{id}/digest",
            "/api/auth/status",
        }
    ),
    components=tuple(name for name, _ in _COMPONENTS if name != "assistant_mcp"),
)
PROFILES: Final = {p.name: p for p in (CURRENT, V0_7)}


def release_profile(name: str | None) -> ReleaseProfile:
    """The profile called ``name`` (``None``: today's); a usage error naming the known ones otherwise."""
    key = (name or DEFAULT_PROFILE).strip()
    short = key.removeprefix("v").removesuffix(".0")  # 0.7.0, v0.7.0, 0.7 and v0.7 are one release
    found = PROFILES.get(key) or PROFILES.get(f"v{short}")
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
