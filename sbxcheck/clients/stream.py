"""The control plane's live event stream, ``GET /api/control/stream`` (server-sent events), as signals.

One :class:`ControlStream` per session and control plane: a daemon thread holds the subscription
and folds every event into a small per-mission :class:`MissionSignal` (last status, whether
execution evidence was seen, a version). Followers wait on it instead of polling; the stored events
stay the evidence (they are read once, when the signal says the verdict can be taken).

``generation`` counts the moments a follower cannot trust what it has seen: each (re)connect and
each ``error`` lag event. A follower whose last read predates the current generation makes one
catch-up read with its sequence cursor. When the stream is unavailable (404/405, not
``text/event-stream``, auth refused, or ``max_failures`` connects in a row failed), ``absent`` is
set and followers poll. Bounded: a read timeout well above the 15 s keepalive, a cap on an event's
size and on a line while it is still being read, a count of reconnects; a secret never leaves the request headers.
"""

from __future__ import annotations

import contextlib
import random
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from sbxcheck.safeio import loads_bounded
from sbxcheck.spend import check_cents
from sbxcheck.transports.http import new_client, retry_after_s
from sbxcheck.transports.http_body import BodyEncodingError, decoded, raw_body

STREAM_PATH: Final = "/api/control/stream"
EVIDENCE_TYPES: Final = frozenset({"tool_call", "tool_result", "assistant_message"})
LAG_TEXT: Final = "lagged"
MAX_EVENT_BYTES: Final = 1024 * 1024
MAX_MISSIONS: Final = 10_000  # the stream is per user: other missions of the user are tracked, boundedly
MAX_STATUSES: Final = 64
_LINE_END: Final = re.compile(rb"\r\n|\r|\n")


@dataclass
class MissionSignal:
    """What the stream said about one mission so far."""

    status: str | None = None
    evidence: bool = False
    events: int = 0
    version: int = 0
    statuses: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, status) as seen
    last_kind: str | None = None
    cost_cents: float | None = None  # summed over the assistant messages the stream carried
    gaps: bool = False  # the stream dropped or lagged since this mission's first event: it may have missed some


class ControlStream:
    """A bounded, reconnecting SSE subscription; thread-safe signals for the followers."""

    def __init__(
        self,
        base_url: str,
        headers: Callable[[], Mapping[str, str]],
        *,
        connect_timeout_s: float = 15.0,
        read_timeout_s: float = 45.0,
        max_failures: int = 5,
        max_connects: int = 50,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = headers
        self._timeout = httpx.Timeout(connect_timeout_s, read=read_timeout_s)
        self._transport = transport
        self.max_failures = max_failures
        self.max_connects = max_connects
        self._cond = threading.Condition()
        self._signals: OrderedDict[str, MissionSignal] = OrderedDict()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._http: httpx.Client | None = None
        self.generation = 0
        self.live = False
        self.absent = False
        self.why_absent: str | None = None
        self.connects = 0
        self.lags = 0
        self.drops = 0

    # ---- public ------------------------------------------------------------------------------

    def start(self, wait_s: float) -> bool:
        """Subscribe in the background; wait up to ``wait_s`` for the first event. True when live."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sbx-control-stream", daemon=True)
            self._thread.start()
        with self._cond:
            self._cond.wait_for(lambda: self.live or self.absent, timeout=wait_s)
            return self.live

    def signal(self, mission_id: str) -> MissionSignal | None:
        """A copy of what the stream said about ``mission_id`` (None: nothing yet)."""
        with self._cond:
            sig = self._signals.get(mission_id)
            if sig is None:
                return None
            return MissionSignal(
                sig.status,
                sig.evidence,
                sig.events,
                sig.version,
                list(sig.statuses),
                sig.last_kind,
                sig.cost_cents,
                sig.gaps,
            )

    def wait(self, mission_id: str, version: int, generation: int, timeout_s: float) -> None:
        """Block until the mission's signal passes ``version``, the generation moves, the stream
        goes up or down, :meth:`wake_all` is called, or ``timeout_s`` passes."""
        if timeout_s <= 0:
            return
        with self._cond:
            live = self.live

            def changed() -> bool:
                sig = self._signals.get(mission_id)
                return (
                    (sig is not None and sig.version > version)
                    or self.generation != generation
                    or self.live != live
                    or self._stop.is_set()
                )

            self._cond.wait_for(changed, timeout=timeout_s)

    def wake_all(self) -> None:
        """Wake every waiter (the session is stopping)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the subscription (its thread ends at its next read or when the connection closes)."""
        self._stop.set()
        http = self._http
        if http is not None:
            with contextlib.suppress(Exception):  # closing from another thread may race the reader
                http.close()
        with self._cond:
            self.live = False
            self._cond.notify_all()

    # ---- the reader thread -------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        self._http = new_client(base_url=self.base_url, timeout=self._timeout, transport=self._transport)
        try:
            while not self._stop.is_set() and self.connects < self.max_connects:
                wait = self._subscribe_once()
                if self.absent or self._stop.is_set():
                    return
                failures = 0 if wait is None else failures + 1
                if failures >= self.max_failures:
                    self._give_up(f"{failures} connects in a row failed")
                    return
                step = min(10.0, 2.0 ** max(failures - 1, 0)) if wait is None or wait <= 0 else wait
                self._stop.wait(min(step * random.uniform(0.8, 1.2), 30.0))
        except Exception as exc:  # a reader bug must degrade to polling, never hang
            self._give_up(f"stream reader failed: {type(exc).__name__}")
        finally:
            if self.connects >= self.max_connects and not self.absent:
                self._give_up(f"{self.connects} connects: the stream keeps dropping")
            self._http.close()

    def _subscribe_once(self) -> float | None:
        """One connection, read until it ends. None: it was live and dropped; else seconds to wait."""
        assert self._http is not None
        try:
            headers = {**self._headers(), "Accept": "text/event-stream", "Cache-Control": "no-cache"}
            headers["Accept-Encoding"] = "identity"  # raw chunks as they arrive: no inflating of a small one
        except Exception as exc:  # a login failure is reported by the followers' reads
            self._give_up(f"no credentials for the stream ({type(exc).__name__})")
            return 0.0
        self.connects += 1
        try:
            with self._http.stream("GET", STREAM_PATH, headers=headers) as resp:
                if resp.status_code in (404, 405, 501) or resp.status_code in (401, 403):
                    self._give_up(f"{STREAM_PATH} -> {resp.status_code}")
                    return 0.0
                if resp.status_code in (429, 503) or resp.status_code >= 500:
                    return retry_after_s(resp) or 1.0
                ctype = resp.headers.get("content-type", "")
                if resp.status_code != 200 or not ctype.startswith("text/event-stream"):
                    self._give_up(f"{STREAM_PATH} -> {resp.status_code} {ctype or 'no content-type'}")
                    return 0.0
                self._read(resp)
        except httpx.HTTPError:
            pass
        except BodyEncodingError as exc:  # an encoding not read, or bytes that are not it: never guessed
            self._give_up(f"{STREAM_PATH}: {exc}")
            return 0.0
        was_live = self.live
        with self._cond:
            if self.live:
                self.drops += 1
            self.live = False
            self._cond.notify_all()
        return None if was_live else 1.0

    def _read(self, resp: httpx.Response) -> None:
        kind: str | None = None
        data: list[str] = []
        size = 0
        # raw bytes, decoded piece by piece where a server compressed anyway: a line is capped decoded
        chunks, layers = raw_body(resp)
        for line in bounded_lines(decoded(chunks, layers), MAX_EVENT_BYTES):
            if line is None:
                return  # a line over the cap, still unfinished: drop the connection (a catch-up read follows)
            if self._stop.is_set():
                return
            if line == "":
                if data:
                    self._dispatch(kind, "\n".join(data))
                kind, data, size = None, [], 0
                continue
            if line.startswith(":"):  # keepalive comment
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "data":
                size += len(value)
                if size > MAX_EVENT_BYTES:
                    return  # an oversized event: drop the connection (a catch-up read follows)
                data.append(value)

    def _dispatch(self, kind: str | None, raw: str) -> None:
        try:
            payload = loads_bounded(raw, max_bytes=MAX_EVENT_BYTES)
        except ValueError:  # not JSON, or nested past the bound (UnsafeInput): not an event
            return
        if not isinstance(payload, dict):
            return
        kind = kind or str(payload.get("type") or "")
        mission_id = payload.get("mission_id")
        now = time.monotonic()
        with self._cond:
            if not self.live:  # the first event (the status snapshot) proves the subscription
                self.live = True
                self.generation += 1
                self._mark_gaps()  # a reconnect: what happened while down was not seen
            if kind == "error" and not mission_id and LAG_TEXT in str(payload.get("message", "")):
                self.lags += 1
                self.generation += 1  # some events were dropped: every follower catches up once
                self._mark_gaps()
            elif isinstance(mission_id, str) and mission_id:
                sig = self._signals.get(mission_id)
                if sig is None:
                    sig = self._signals[mission_id] = MissionSignal()
                    if len(self._signals) > MAX_MISSIONS:
                        self._signals.popitem(last=False)
                sig.events += 1
                sig.version += 1
                sig.last_kind = kind
                if kind in EVIDENCE_TYPES:
                    sig.evidence = True
                if kind == "assistant_message":
                    cents, _unusable = check_cents(payload.get("cost_cents"))
                    if cents is not None:  # an unusable cost is never summed (spend reads stored events)
                        sig.cost_cents = (sig.cost_cents or 0.0) + cents
                if kind == "mission_status_changed" and isinstance(payload.get("status"), str):
                    sig.status = payload["status"]
                    if len(sig.statuses) < MAX_STATUSES:
                        sig.statuses.append((now, sig.status))
            self._cond.notify_all()

    def _mark_gaps(self) -> None:
        """Every mission seen so far may have missed events (called with the lock held)."""
        for sig in self._signals.values():
            sig.gaps = True

    def _give_up(self, why: str) -> None:
        with self._cond:
            self.absent = True
            self.live = False
            self.why_absent = why
            self._cond.notify_all()


def bounded_lines(chunks: Iterable[bytes], max_line: int) -> Iterator[str | None]:
    """SSE lines (``\\n``, ``\\r\\n`` or ``\\r`` ends them) from raw chunks; ``None`` once a line grows
    past ``max_line`` bytes before it ends, and then nothing more: a line is never buffered beyond
    the cap, however long the server keeps it open."""
    buffer = bytearray()
    after_cr = False  # the last chunk ended in \r: a \n starting the next one belongs to it
    for chunk in chunks:
        start = 1 if after_cr and chunk[:1] == b"\n" else 0
        after_cr = False
        for end in _LINE_END.finditer(chunk, start):
            buffer += chunk[start : end.start()]
            if len(buffer) > max_line:
                yield None
                return
            yield buffer.decode("utf-8", errors="replace")
            buffer.clear()
            start = end.end()
            after_cr = end.group() == b"\r" and start == len(chunk)
        buffer += chunk[start:]
        if len(buffer) > max_line:
            yield None
            return
    if buffer:
        yield buffer.decode("utf-8", errors="replace")


def describe(stream: ControlStream | None) -> dict[str, Any]:
    """How the session followed its missions, for evidence."""
    if stream is None:
        return {"mode": "polling", "why": "no stream for this channel"}
    if stream.absent:
        return {"mode": "polling", "why": stream.why_absent}
    return {"mode": "stream", "connects": stream.connects, "lags": stream.lags, "drops": stream.drops}
