"""What the control plane's release serves, learned once per session from its own answers.

Releases add routes and fields and rarely remove them, so an older control plane is met by what it
answers, never by a table of versions: a route answered 404 with an empty body (no route matched)
or 400 "Invalid URL" on a path that parsed as a mission id is not served; a create whose stored
record lacks a field it sent dropped it; an event read whose rows come from before its cursor
ignored the cursor; a list whose rows break its filter, or whose next page repeats it, ignored its
query. Each is learned once and kept for the session; :meth:`ServedApi.skips` says it in words
(``sbxcheck doctor``), and the version is read once from ``GET /api/health``.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

from sbxcheck.errors import NotServed, SbxError

#: A path segment under ``/missions/`` that is a word, not a mission id (a route the release lacks).
_MISSION_WORD_RE: Final = re.compile(r"/api/control/missions/(?![0-9a-fA-F-]{32,36}(?:/|$))[A-Za-z_-]+(?:/|$)")
NO_ROUTE: Final = "answered 404 with an empty body (no such route)"
PARSED_AS_ID: Final = "answered 400 (the path parsed as a mission id: no such route)"


def unmatched_route(endpoint: str, status: int, body: str) -> str | None:
    """How an error answer shows the route does not exist in this release, else None."""
    if status == 404 and not body.strip():
        return NO_ROUTE
    if status == 400 and body.lstrip().startswith("Invalid URL") and _MISSION_WORD_RE.search(endpoint):
        return PARSED_AS_ID
    return None


class _Sequenced(Protocol):
    @property
    def sequence(self) -> int: ...


E = TypeVar("E", bound=_Sequenced)


def within_cursor(events: list[E], since_seq: int | None, before_seq: int | None) -> tuple[list[E], bool]:
    """The rows a cursor asked for, each sequence once, and whether the server sent others (it ignored
    the cursor): after ``since_seq``, or below ``before_seq`` (which beats it)."""
    kept: list[E] = []
    seen: set[int] = set()
    ignored = False
    for event in events:
        outside = (before_seq is not None and event.sequence >= before_seq) or (
            before_seq is None and since_seq is not None and event.sequence <= since_seq
        )
        ignored = ignored or outside
        if not outside and event.sequence not in seen:
            seen.add(event.sequence)
            kept.append(event)
    return kept, ignored


#: The list's default page: asked for more and answered exactly this many, the server may have ignored
#: ``limit`` (and so perhaps ``offset``), and one more page says which.
LIST_DEFAULT_PAGE: Final = 50
HIDDEN_BY_DEFAULT: Final = frozenset({"completed", "acknowledged"})


class _Listed(Protocol):
    @property
    def status(self) -> str: ...

    @property
    def tags(self) -> list[str]: ...


L = TypeVar("L", bound=_Listed)


def within_filter(rows: list[L], statuses: frozenset[str] | None, show_all: bool) -> tuple[list[L], bool]:
    """The rows the list's query asked for, and whether the server sent others (it ignored the query):
    ``statuses`` when given, else (without ``all``) the attention-only horizon (no completed,
    acknowledged or superseded mission)."""
    if statuses:
        kept = [r for r in rows if r.status in statuses]
    elif not show_all:
        kept = [r for r in rows if r.status not in HIDDEN_BY_DEFAULT and "superseded" not in r.tags]
    else:
        kept = list(rows)
    return kept, len(kept) != len(rows)


class ServedApi:
    """The release's version and what it was seen not to serve. Thread-safe; facts only accumulate."""

    def __init__(self, read_version: Callable[[], str | None]) -> None:
        self._read_version = read_version
        self._lock = threading.Lock()
        self._version_lock = threading.RLock()  # re-entrant: the health read may itself meet a missing route
        self._version: str | None = None
        self._version_read = False
        self.routes_missing: dict[str, str] = {}  # "GET /api/health/fleet" -> how it answered
        self.create_drops: tuple[str, ...] = ()  # fields a create sent and its stored record lacked
        self.first_message: str | None = None  # how the prompt reaches a mission whose create dropped it
        self.event_cursor_ignored = False
        self.list_query_ignored = False
        self.list_offset_ignored = False
        self.assistant_mcp: bool | None = None  # None: not known (the release lists no components)

    @property
    def version(self) -> str | None:
        """``GET /api/health``'s ``version``, read once (None when it does not say)."""
        with self._version_lock:  # one read; a caller meanwhile waits for it (bounded by its timeout)
            if not self._version_read:
                self._version_read = True  # first: a health that answers an empty 404 is not asked again
                try:
                    self._version = self._read_version()
                except Exception:  # a health that cannot be read leaves the version unknown, never an error
                    self._version = None
            return self._version

    def route_missing(self, endpoint: str, how: str) -> NotServed:
        """Note that ``endpoint`` is not served; the error an item that needs it is skipped with."""
        route = _route_key(endpoint)
        with self._lock:
            self.routes_missing.setdefault(route, how)
        return NotServed(route, self.version, how)

    def not_served(self, what: str, how: str) -> NotServed:
        """The skip for something this release lacks that is not a route (the assistant MCP, a field)."""
        return NotServed(what, self.version, how)

    def note_create_drops(self, fields: tuple[str, ...]) -> None:
        with self._lock:
            self.create_drops = tuple(sorted({*self.create_drops, *fields}))

    def skips(self) -> list[str]:
        """What was learned, one line each (empty: the release served all that was asked of it)."""
        with self._lock:
            lines = [f"{route}: {how}" for route, how in sorted(self.routes_missing.items())]
            if self.create_drops:
                via = f"; the prompt goes as {self.first_message}" if self.first_message else ""
                lines.append(f"create drops {', '.join(self.create_drops)}{via} (no idempotent retry)")
            if self.event_cursor_ignored:
                lines.append("events ignore since_seq/before_seq: rows are de-duplicated by sequence")
            if self.list_query_ignored:
                lines.append("the mission list ignores its filters: rows are filtered here")
            if self.list_offset_ignored:
                lines.append("the mission list ignores offset: only its first page can be read")
            if self.assistant_mcp is False:
                lines.append("the assistant MCP is not one of its components: MCP items are skipped")
        return lines

    def evidence(self) -> dict[str, Any]:
        """The same, for an item's evidence or the doctor's line."""
        return {"version": self.version or "unknown", "not_served": self.skips()}


def _route_key(endpoint: str) -> str:
    """``POST /api/nodes/babylon/cordon`` → ``POST /api/nodes/{name}/cordon``: one fact per route."""
    method, _, path = endpoint.partition(" ")
    path = re.sub(r"/api/nodes/[^/]+/", "/api/nodes/{name}/", path)
    path = re.sub(r"/api/control/missions/[0-9a-fA-F-]{32,36}(?=/|$)", "/api/control/missions/{id}", path)
    return f"{method} {path}"


class _Probed(Protocol):
    served: ServedApi

    def fleet_health(self) -> object: ...

    def remote_nodes(self) -> object: ...

    def missions_integrity(self) -> object: ...

    def tracks(self, project: str) -> object: ...

    def components(self) -> list[str]: ...

    def list_missions(self, *, status: str | None = None, limit: int | None = None) -> list[Any]: ...


#: Items that need each probed route (what the doctor says will be skipped).
NEEDED_BY: Final = {
    "GET /api/health/fleet": "fleet_health",
    "GET /api/remote-nodes": "fleet_node",
    "GET /api/control/missions/integrity": "missions_integrity",
    "GET /api/control/tracks": "dispatch_contract",
}


def probe(client: _Probed) -> list[str]:
    """Read-only looks at what the release serves (the doctor's): the routes later releases added, its
    components and whether the list honours a query. Creates and event cursors are learned in a run."""
    looks: list[Callable[[], object]] = [
        client.fleet_health,
        client.remote_nodes,
        client.missions_integrity,
        lambda: client.tracks("sbxcheck-doctor"),
    ]
    for look in looks:  # a route not served is noted in client.served; one answering badly: the run says
        with contextlib.suppress(SbxError):
            look()
    with contextlib.suppress(SbxError):
        names = client.components()
        if names:
            client.served.assistant_mcp = "assistant_mcp" in names
    with contextlib.suppress(SbxError):  # a list that answers rows of no such status ignores its query
        client.list_missions(status="sbxcheck-doctor-no-such-status", limit=1)
    lines = client.served.skips()
    return [
        f"{line} → skips {NEEDED_BY[route]}" if (route := line.split(":", 1)[0]) in NEEDED_BY else line
        for line in lines
    ]
