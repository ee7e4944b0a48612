"""Mission and event calls of the sandboxed.sh REST client: create, read, list, follow, cancel."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence

import httpx
from pydantic import JsonValue, ValidationError

from sbxcheck.clients.mission_rows import MissionRows, read_mission, read_rows
from sbxcheck.clients.sandboxed_errors import ApiRejected, MissionRejected, NotFound, SlotsFull, slots_full
from sbxcheck.clients.sandboxed_models import (
    CreateOutcome,
    EventPage,
    Mission,
    MissionsIntegrity,
    MissionSpec,
    ParallelConfig,
    RunningEntry,
    StoredEvent,
)
from sbxcheck.clients.sandboxed_wire import SandboxedWire
from sbxcheck.clients.served import LIST_DEFAULT_PAGE, within_cursor, within_filter
from sbxcheck.clients.validation import validation_summary
from sbxcheck.errors import BadResponseError, CommandTimeout
from sbxcheck.ids import check_id, path_segment


def _int_header(resp: httpx.Response, name: str) -> int | None:
    value = resp.headers.get(name)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _mission_segment(mission_id: str) -> str:
    """A mission id (a UUID, from a server, the ledger or a caller) as one encoded path segment."""
    return path_segment(mission_id, field="mission_id", source="mission path")


def _maybe_capped(answered: int, asked: int) -> bool:
    """A page of exactly the list's default size when more were asked: the server may have ignored
    ``limit`` (and ``offset``), so the next page decides whether the list ended."""
    return answered == LIST_DEFAULT_PAGE and asked > LIST_DEFAULT_PAGE


class MissionCalls(SandboxedWire):
    """Missions and their events, and the calls that compose them: polling a mission until a
    condition holds, reading every page of the list, the missions' integrity report. Section numbers
    point into specs/sandboxed-sh.md."""

    def submit_mission(self, spec: MissionSpec) -> CreateOutcome:
        """``POST /api/control/missions`` with the coalescing and ignored-field headers."""
        path = "/api/control/missions"
        endpoint = f"POST {path}"
        resp = self._send("POST", path, json_body=spec.body(), rejection=MissionRejected)
        try:
            mission, _ = read_mission(self._json(endpoint, resp, False))
        except ValidationError as exc:
            raise BadResponseError(
                f"{endpoint}: response is not a Mission ({validation_summary(exc)}){self._shown(resp, False)}",
                evidence={"endpoint": endpoint},
            ) from None
        check_id(mission.id, field="id", source=endpoint)  # a server's id is data, never a path
        ignored = resp.headers.get("x-ignored-fields")
        return CreateOutcome(
            mission=mission,
            coalesced_with=resp.headers.get("x-coalesced-with") or None,
            ignored_fields=None if ignored is None else tuple(f.strip() for f in ignored.split(",") if f.strip()),
        )

    def create_mission(
        self,
        *,
        title: str | None = None,
        prompt: str | None = None,
        workspace_id: str | None = None,
        agent: str | None = None,
        backend: str | None = None,
        model_override: str | None = None,
        model_effort: str | None = None,
        fast_mode: bool | None = None,
        config_profile: str | None = None,
        idempotency_key: str | None = None,
        project: str | None = None,
        track: str | None = None,
        tags: Sequence[str] | None = None,
        priority: int | None = None,
        deadline: str | None = None,
        origin: str | None = None,
        origin_session_id: str | None = None,
        estimated_disk_gib: int | None = None,
        remote_node_id: str | None = None,
        remote_requirements: Sequence[str] | None = None,
        extra: Mapping[str, JsonValue] | None = None,
    ) -> Mission:
        """Create a mission (spec 3.4); a 4xx refusal raises :class:`MissionRejected`."""
        spec = MissionSpec(
            title=title,
            prompt=prompt,
            workspace_id=workspace_id,
            agent=agent,
            backend=backend,
            model_override=model_override,
            model_effort=model_effort,
            fast_mode=fast_mode,
            config_profile=config_profile,
            idempotency_key=idempotency_key,
            project=project,
            track=track,
            tags=tags,
            priority=priority,
            deadline=deadline,
            origin=origin,
            origin_session_id=origin_session_id,
            estimated_disk_gib=estimated_disk_gib,
            remote_node_id=remote_node_id,
            remote_requirements=remote_requirements,
            extra=dict(extra or {}),
        )
        return self.submit_mission(spec).mission

    def get_mission(self, mission_id: str) -> Mission:
        """``GET /api/control/missions/:id``; unknown id → :class:`NotFound`, another's record → bad response.
        An optional field of another type (1.3.0's integer ``github_pr``) is fixed or left out, never fatal."""
        path = f"/api/control/missions/{_mission_segment(mission_id)}"
        endpoint = f"GET {path}"
        resp = self._send("GET", path)
        try:
            mission, _ = read_mission(self._json(endpoint, resp, False))
        except ValidationError as exc:
            raise BadResponseError(
                f"{endpoint}: response is not a Mission ({validation_summary(exc)}){self._shown(resp, False)}",
                evidence={"endpoint": endpoint},
            ) from None
        return mission.asked_for(mission_id, endpoint)

    def list_missions(
        self,
        *,
        status: str | Collection[str] | None = None,
        all: bool = False,
        workspace: str | None = None,
        project: str | None = None,
        track: str | None = None,
        tag: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[Mission]:
        """``GET /api/control/missions``: attention-only unless ``status`` or ``all`` is given (spec 3.6)."""
        params: dict[str, str | int] = {}
        if status is not None:
            params["status"] = status if isinstance(status, str) else ",".join(status)
        if all:
            params["all"] = "true"
        for key, value in (("workspace", workspace), ("project", project), ("track", track), ("tag", tag)):
            if value is not None:
                params[key] = value
        if limit is not None:
            params["limit"] = limit
        if offset is not None:
            params["offset"] = offset
        return self._listed(params, all)[0]

    def _listed(self, params: dict[str, str | int], show_all: bool) -> tuple[list[Mission], int]:
        """The rows the list's query asks for, and how many the server answered (a release whose list
        takes no query answers others: its status filter and default horizon are applied here)."""
        path = "/api/control/missions"
        resp = self._send("GET", path, params=params)
        data = self._json(f"GET {path}", resp, False)
        if not isinstance(data, list):
            raise BadResponseError(
                f"GET {path}: expected a JSON array, got {type(data).__name__}{self._shown(resp, False)}",
                evidence={"endpoint": f"GET {path}"},
            )
        raw = read_rows(data)  # a row of another shape is named in .notes, never failing the list
        statuses = params.get("status")
        wanted = frozenset(statuses.split(",")) if isinstance(statuses, str) else None
        rows, ignored = within_filter(raw, wanted, show_all)
        if ignored:
            self.served.list_query_ignored = True
        return MissionRows(rows, raw.notes), len(data)

    def mission_events_page(
        self,
        mission_id: str,
        since_seq: int | None = None,
        *,
        before_seq: int | None = None,
        limit: int | None = None,
        types: Collection[str] | None = None,
        view: str | None = None,
        counts: bool = False,
    ) -> EventPage:
        """``GET .../missions/:id/events`` with an explicit cursor (``since_seq=0`` when none given). Only
        rows the cursor asks for are returned, once each, whatever the server did with it. ``counts``:
        ask for ``X-Total-Events`` (an extra scan on the server; a cursor read needs only ``X-Max-Sequence``)."""
        params: dict[str, str | int] = {} if counts else {"include_counts": "false"}
        if before_seq is not None:
            params["before_seq"] = before_seq
        else:
            params["since_seq"] = 0 if since_seq is None else since_seq
        if limit is not None:
            params["limit"] = limit
        if types:
            params["types"] = ",".join(types)
        if view is not None:
            params["view"] = view
        path = f"/api/control/missions/{_mission_segment(mission_id)}/events"
        resp = self._send("GET", path, params=params)
        events, ignored = within_cursor(
            self._parse_list(f"GET {path}", resp, StoredEvent),
            None if before_seq is not None else (since_seq or 0),
            before_seq,
        )
        if ignored:  # a release without cursors answers from the oldest row: kept to what was asked
            self.served.event_cursor_ignored = True
        return EventPage(
            events=events,
            max_sequence=_int_header(resp, "x-max-sequence"),
            total_events=_int_header(resp, "x-total-events"),
        )

    def mission_events(
        self,
        mission_id: str,
        since_seq: int | None = None,
        limit: int | None = None,
        *,
        before_seq: int | None = None,
        types: Collection[str] | None = None,
        view: str | None = None,
    ) -> list[StoredEvent]:
        """Events in ascending order after ``since_seq`` (or below ``before_seq``)."""
        return self.mission_events_page(
            mission_id, since_seq, before_seq=before_seq, limit=limit, types=types, view=view
        ).events

    def send_message(self, mission_id: str, content: str) -> str:
        """``POST /api/control/message {content, mission_id}`` (how a February release's mission gets its
        first message); the message id. Not retried: a second send would be a second message."""
        path = "/api/control/message"
        body: dict[str, JsonValue] = {"content": content, "mission_id": mission_id}
        doc = self._json(f"POST {path}", self._send("POST", path, json_body=body), False)
        message_id = doc.get("id") if isinstance(doc, dict) else None
        if not isinstance(message_id, str):
            raise BadResponseError(f"POST {path}: the answer has no message id", evidence={"endpoint": path})
        return message_id

    def start_mission_parallel(self, mission_id: str, content: str) -> None:
        """``POST .../missions/:id/parallel {content}``: start the mission with ``content`` as its first
        message beside the running ones. :class:`SlotsFull` when every slot is taken (nothing started,
        and unlike ``POST /api/control/message`` the text is never queued on another mission); a mission
        already running is started. Not retried here: the caller waits for a slot."""
        path = f"/api/control/missions/{_mission_segment(mission_id)}/parallel"
        try:
            self._send("POST", path, json_body={"content": content})
        except ApiRejected as exc:
            if exc.status == 409 and slots_full(exc.reason):
                raise SlotsFull(exc.endpoint, exc.status, exc.reason, error_code=exc.error_code) from None
            if exc.status == 409 and "already running" in exc.reason:
                return
            raise

    def set_mission_status(self, mission_id: str, status: str) -> None:
        """``POST .../missions/:id/status {status}`` (how a finished turn is acknowledged); the answer is
        only an envelope: read the mission back to know what it is now."""
        path = f"/api/control/missions/{_mission_segment(mission_id)}/status"
        self._send("POST", path, json_body={"status": status})

    def cancel_mission(self, mission_id: str) -> bool:
        """``POST .../missions/:id/cancel``; False when the mission is unknown or gone (404)."""
        try:
            self._send("POST", f"/api/control/missions/{_mission_segment(mission_id)}/cancel", json_body={})
        except NotFound:
            return False
        return True

    def running(self) -> list[RunningEntry]:
        """``GET /api/control/running``: the control actor's live missions."""
        path = "/api/control/running"
        resp = self._send("GET", path)
        return self._parse_list(f"GET {path}", resp, RunningEntry)

    def parallel_config(self) -> ParallelConfig:
        """``GET /api/control/parallel/config``: missions run at once (``MAX_PARALLEL_MISSIONS``), running now."""
        path = "/api/control/parallel/config"
        return self._parse(f"GET {path}", self._send("GET", path), ParallelConfig)

    def wait_for_mission(
        self,
        mission_id: str,
        until: Collection[str] | Callable[[Mission], bool],
        *,
        timeout_s: float,
        interval_s: float = 1.0,
    ) -> Mission:
        """Poll ``get_mission`` until ``until`` holds; :class:`CommandTimeout` at the deadline."""
        done: Callable[[Mission], bool]
        if callable(until):
            done = until
        else:
            wanted = frozenset(until)

            def done(m: Mission) -> bool:
                return m.status in wanted

        deadline = time.monotonic() + timeout_s
        polls = 0
        while True:
            mission = self.get_mission(mission_id)
            polls += 1
            if done(mission):
                return mission
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CommandTimeout(
                    f"mission {mission_id}: condition not met within {timeout_s:g}s "
                    f"(last status {mission.status!r} after {polls} polls)",
                    evidence={"mission_id": mission_id, "status": mission.status, "polls": polls},
                )
            time.sleep(min(interval_s, remaining))

    # ---- mission hygiene: read-only, what the runbook checks ----------------------------------

    def missions_integrity(self) -> MissionsIntegrity:
        """``GET /api/control/missions/integrity``: orphaned/stale groups."""
        return self._get("/api/control/missions/integrity", MissionsIntegrity)

    def list_missions_paged(
        self, *, page_size: int = 200, max_missions: int = 1000
    ) -> tuple[list[Mission], bool]:
        """Every mission of the default (attention-only) list, page by page; True when cut at ``max_missions``."""
        size = max(1, min(200, page_size))
        out = MissionRows()
        seen: set[str] = set()
        offset = 0
        while len(out) < max_missions:
            page, answered = self._listed({"limit": size, "offset": offset}, False)
            fresh = [m for m in page if m.id not in seen]  # a page shifting under us repeats rows
            seen.update(m.id for m in fresh)
            out.extend(fresh)
            if isinstance(page, MissionRows):
                out.notes.extend(n for n in page.notes if n not in out.notes)
            if offset and answered and not fresh:  # the page after the first repeated it: offset ignored
                self.served.list_offset_ignored = True
                return out, True
            offset += answered
            if answered == 0 or (answered < size and not _maybe_capped(answered, size)):
                return out, False
            size = min(size, answered)  # a server that pages by its own size is read at that size
        return MissionRows(out[:max_missions], out.notes), True
