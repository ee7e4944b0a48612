"""Events resource of the simulated control plane: a mission's events (cursor reads) and how they are emitted
(each emitted event also goes to the live stream, :mod:`sbxcheck.sim.stream`)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sbxcheck.sim.controlplane.base import DoubleBase
from sbxcheck.sim.controlplane.model import (
    AGENT_EVENTS,
    EXPOSE_HEADERS,
    OUTPUT_EVENTS,
    TERMINAL,
    VIEWS,
    MissionState,
    iso_time,
    plain_text,
)
from sbxcheck.sim.controlplane.releases import page_events


class EventRoutes(DoubleBase):
    """``GET .../missions/{id}/events``, and emitting events and status changes (stored and streamed)."""

    async def _events(self, request: Request, user: str) -> Response:
        raw = request.path_params["id"]
        ints = {n: self._query_int(request, n) for n in ("since_seq", "before_seq", "limit", "offset")}
        for value in ints.values():
            if isinstance(value, Response):
                return value
        since, before, limit, offset = (v if isinstance(v, int) else None for v in ints.values())
        release = self.release
        q = request.query_params
        view = q.get("view") or "all"
        if view not in VIEWS:
            return plain_text(400, f"Invalid view '{view}'; expected one of: {', '.join(VIEWS)}")
        types = {t.strip() for t in q.get("types", "").split(",") if t.strip()}
        include_counts = q.get("include_counts", "true").lower() not in ("false", "0")
        if release.event_cursors:
            limit = min(1000, max(1, 100 if limit is None else limit))  # [U] default page size
        else:  # an older release: limit (default 50000) and offset, no cursor
            limit = max(0, 50000 if limit is None else limit)
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return plain_text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            if m is None or m.owner != user:
                return plain_text(404, "Mission not found")
            everything = copy.deepcopy(m.events)
        allowed = VIEWS[view]
        rows = [e for e in everything if (allowed is None or e["event_type"] in allowed)]
        if types:
            rows = [e for e in rows if e["event_type"] in types]
        if not release.event_cursors:
            rows = page_events(release, rows[max(0, offset or 0) :], since, before, limit)
            return JSONResponse(rows)
        rows = page_events(release, rows, since, before, limit)
        headers = {
            "X-Max-Sequence": str(everything[-1]["sequence"] if everything else 0),
            "Access-Control-Expose-Headers": EXPOSE_HEADERS,
        }
        if include_counts:
            headers["X-Total-Events"] = str(len(everything))
        return JSONResponse(rows, headers=headers)

    def _emit(
        self,
        m: MissionState,
        event_type: str,
        content: str = "",
        *,
        tool_name: str | None = None,
        tool_call_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        now = self.clock()
        stamp = iso_time(now)
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
        m: MissionState,
        status: str,
        *,
        reason: str | None = None,
        evidence: str | None = None,
        awaiting_kind: str | None = None,
    ) -> bool:
        if m.status in TERMINAL:
            return False
        now = self.clock()
        stamp = iso_time(now)
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
