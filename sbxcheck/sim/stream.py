"""The control plane's live event stream, ``GET /api/control/stream``, for the double.

One :class:`StreamHub` per control plane fans every stored event out to its subscribers as SSE:
first a ``status`` snapshot, then ``event: <type>`` + ``data: <json with "type">`` per event, a
``: keepalive`` comment every ``keepalive_s`` seconds of silence. Each subscriber has a bounded
buffer; a subscriber that falls behind loses events and receives an ``error`` event
``event stream lagged; some events were dropped`` (as upstream's broadcast channel does).

Faults: ``cp.stream-lags`` drops every third event of each subscriber (each drop followed by the lag
error), ``cp.stream-absent`` answers 404 as builds without the stream do, ``cp.stream-endless-line``
sends one line that never ends.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

STREAM_LAGS: Final = "cp.stream-lags"
STREAM_ABSENT: Final = "cp.stream-absent"
ENDLESS_LINE: Final = "cp.stream-endless-line"
STREAM_FAULTS: Final[dict[str, str]] = {
    STREAM_LAGS: "the live stream drops every third event of each subscriber and sends the lag error",
    STREAM_ABSENT: "GET /api/control/stream answers 404 (a build without the live stream)",
}
LAG_MESSAGE: Final = "event stream lagged; some events were dropped"
BUFFER: Final = 512


def sse_payload(row: dict[str, Any]) -> dict[str, Any]:
    """A stored event row as the live stream carries it (the payload fields of each event type)."""
    kind = str(row.get("event_type"))
    meta = row.get("metadata") or {}
    payload: dict[str, Any] = {"type": kind, "mission_id": row.get("mission_id")}
    content = row.get("content")
    if kind == "tool_call":
        payload.update(tool_call_id=row.get("tool_call_id"), name=row.get("tool_name"), args=content)
    elif kind == "tool_result":
        payload.update(tool_call_id=row.get("tool_call_id"), name=row.get("tool_name"), result=content)
    elif kind == "error":
        payload.update(message=content, resumable=meta.get("resumable", False))
    elif kind == "mission_status_changed":
        payload.update(status=meta.get("status"), summary=meta.get("summary"))
    else:
        payload["content"] = content
        payload.update({k: v for k, v in meta.items() if k not in payload})
    return payload


@dataclass
class _Subscriber:
    user: str
    loop: asyncio.AbstractEventLoop
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    queue: deque[dict[str, Any]] = field(default_factory=deque)
    lagged: bool = False
    seen: int = 0


class StreamHub:
    """Subscribers of the live stream and the fan-out of each stored event to them. Thread-safe."""

    def __init__(
        self,
        faults: set[str],
        owner_of: Callable[[str], str | None],
        snapshot: Callable[[], dict[str, Any]],
        *,
        keepalive_s: float = 15.0,
    ) -> None:
        self._faults = faults
        self._owner_of = owner_of
        self._snapshot = snapshot
        self.keepalive_s = keepalive_s
        self._lock = threading.Lock()
        self._subscribers: list[_Subscriber] = []
        self._closed = False
        self.subscriptions = 0  # connections accepted, for tests and benchmarks

    def publish(self, row: dict[str, Any]) -> None:
        """Hand one stored event to every subscriber of its mission's owner (from any thread).

        The stream is per user: another user's subscriber never sees it.
        """
        mission_id = row.get("mission_id")
        owner = self._owner_of(str(mission_id)) if mission_id else None
        payload = sse_payload(row)
        with self._lock:
            targets = [s for s in self._subscribers if owner is not None and s.user == owner]
            for sub in targets:
                sub.seen += 1
                if (STREAM_LAGS in self._faults and sub.seen % 3 == 0) or len(sub.queue) >= BUFFER:
                    sub.lagged = True
                    continue
                sub.queue.append(payload)
        for sub in targets:
            sub.loop.call_soon_threadsafe(sub.wake.set)

    def close(self) -> None:
        """End every open stream (the double is stopping)."""
        with self._lock:
            self._closed = True
            subs = list(self._subscribers)
        for sub in subs:
            sub.loop.call_soon_threadsafe(sub.wake.set)

    async def endpoint(self, request: Request, user: str) -> Response:
        if STREAM_ABSENT in self._faults:
            return PlainTextResponse("Not Found", status_code=404)
        if ENDLESS_LINE in self._faults:
            return StreamingResponse(self._endless_line(), media_type="text/event-stream")
        sub = _Subscriber(user, asyncio.get_running_loop())
        with self._lock:
            self._subscribers.append(sub)
            self.subscriptions += 1
        return StreamingResponse(
            self._events(sub),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    async def _events(self, sub: _Subscriber) -> AsyncIterator[bytes]:
        try:
            yield _frame("status", {"type": "status", **self._snapshot()})
            while not self._closed:
                try:
                    await asyncio.wait_for(sub.wake.wait(), timeout=self.keepalive_s)
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                sub.wake.clear()
                with self._lock:
                    batch, lagged = list(sub.queue), sub.lagged
                    sub.queue.clear()
                    sub.lagged = False
                for payload in batch:
                    yield _frame(str(payload["type"]), payload)
                if lagged:
                    yield _frame("error", {"type": "error", "message": LAG_MESSAGE, "mission_id": None})
        finally:
            with self._lock:
                if sub in self._subscribers:
                    self._subscribers.remove(sub)

    async def _endless_line(self) -> AsyncIterator[bytes]:
        """``cp.stream-endless-line``: the status snapshot, then one line that never ends (no newline)."""
        yield _frame("status", {"type": "status", "state": "idle", "queue_len": 0})
        yield b"data: "
        chunk = b"x" * 65536
        while not self._closed:  # until the subscriber goes away or the double stops
            yield chunk
            await asyncio.sleep(0)


def _frame(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
