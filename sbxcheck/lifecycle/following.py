"""Following a dispatched mission to the moment its verdict can be taken.

The session's one live-stream subscription (``clients.stream``) says when to read; the stored record
and events (read with the ``since_seq`` cursor) are the evidence. Without the stream, missions are
polled with backoff. Either way the verdict rests on the stored rows, never on the stream's word.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from sbxcheck.clients.channels import MissionChannel
from sbxcheck.clients.missionruns import (
    TERMINAL,
    CanaryRun,
    RouteRun,
    new_events,
    settles,
    stream_says_settle,
)
from sbxcheck.clients.sandboxed_errors import message_dropped
from sbxcheck.clients.stream import ControlStream, MissionSignal
from sbxcheck.errors import CommandTimeout, SbxError
from sbxcheck.inventory import SandboxedSection
from sbxcheck.lifecycle.listwatch import ListWatch
from sbxcheck.transports.http import pushback_until

EVIDENCE_EVENTS = frozenset({"tool_call", "tool_result", "assistant_message"})


class FirstMessageDropped(SbxError):
    """The control plane dropped the mission's first message: no slot was free (1.3.0 says so in an error
    event and leaves the mission pending). The dispatcher waits for a slot and sends it again."""

    def __init__(self, mission_id: str, text: str) -> None:
        super().__init__(f"mission {mission_id}: its first message was dropped: {text}")
        self.mission_id = mission_id
        self.text = text
EVENT_PAGE = 100  # the events endpoint's default page: a full page means more may follow
MAX_POLL_S = 10.0  # polling backoff ceiling (without the live stream)
RECHECK_S = 1.0  # the stream said "settled" but the stored rows did not yet: read again after this
STREAM_SILENCE_S = 15.0  # the stream showed nothing of a mission this long after dispatch: read (doubling)
MAX_EVENT_PAGES = 50


@dataclass(frozen=True)
class WaitingState:
    """What a session is still waiting for (a read-only snapshot, e.g. for a progress line)."""

    open: int  # routes and canaries not settled yet
    by_status: dict[str, int]  # their missions' last known status ("not dispatched" before a create)
    elapsed_s: float  # the longest wait since dispatch among them
    deadline_s: float  # that run's deadline, counted from its dispatch
    followed_by: str  # "stream" or "polling"


class Signals(Protocol):
    """What wakes a follower's reads: the live stream, or the shared list watch standing in for it."""

    live: bool
    absent: bool
    generation: int
    why_absent: str | None

    def signal(self, mission_id: str) -> MissionSignal | None: ...

    def wait(self, mission_id: str, version: int, generation: int, timeout_s: float) -> None: ...


class MissionFollower:
    """Follows a session's missions: the live stream (when there is one) wakes the reads, else the shared
    list watch (one list read a tick for every mission), else each mission is polled; ``stop`` ends them."""

    def __init__(
        self,
        section: SandboxedSection,
        stream: ControlStream | None,
        stop: threading.Event,
        watch: ListWatch | None = None,
    ) -> None:
        self.section = section
        self.stream = stream
        self.stop = stop
        self.watch = watch
        self._watch_lock = threading.Lock()

    def _signals(self) -> Signals | None:
        """The live stream while it serves; else the list watch (started on first need); else None."""
        if self.stream is not None and not self.stream.absent:
            return self.stream
        watch = self.watch
        if watch is None or watch.absent or self.stop.is_set():
            return None
        with self._watch_lock:
            watch.start(wait_s=self.section.request_timeout_s)
        return watch if not watch.absent else None

    def start(self) -> None:
        """Subscribe to the live stream (before the first create, so no event is missed)."""
        if self.stream is not None:
            self.stream.start(wait_s=self.section.request_timeout_s)

    def close(self) -> None:
        """Close the stream and the list watch: every follower wakes; the stream's signals stay readable."""
        if self.stream is not None:
            self.stream.close()
        if self.watch is not None:
            self.watch.close()

    def dispatched(self, run: RouteRun) -> None:
        """``run``'s create is being sent: its deadline counts from now, a catch-up from the stream's generation."""
        run.dispatched_at = time.monotonic()
        if self.stream is not None and self.stream.live:
            run.stream_generation = self.stream.generation

    def follow(self, run: RouteRun, channel: MissionChannel, *, to_end: bool = False) -> None:
        """Follow the mission until it settles or its one deadline passes.

        Routes settle at execution evidence, a terminal state or ``awaiting_user``; with ``to_end``
        (canaries: every step must have run) only a terminal state or ``awaiting_user`` settles it.
        With the live stream the stored record and events are read when the stream says the verdict
        can be taken, once after a lag or reconnect (a catch-up with the cursor; lags in a row are
        caught up at the polling pace, never one read per lag), and at the deadline; without it
        they are polled with backoff (``poll_interval_s`` doubling to 10 s, jittered; pushback is
        waited out by the transport). The deadline is the run's own, counted from dispatch;
        ``waited_s`` is the true time since dispatch.
        """
        mission_id = run.mission_id
        assert mission_id is not None
        stream = self._signals()
        watching: ListWatch | None = None  # the list watch follows this mission while it is the source
        cursor = 0
        synced = run.stream_generation if stream is self.stream else 0
        poll_s = self.section.poll_interval_s
        next_poll = 0.0
        recheck_at = 0.0
        recheck_s = RECHECK_S  # doubles while the stored rows keep disagreeing with the stream
        silence_s = STREAM_SILENCE_S
        silence_at = (run.dispatched_at or time.monotonic()) + silence_s
        statuses_seen = 0
        polled = False
        try:
            while True:
                if stream is None or stream.absent:  # the stream gave up (or never served): the list watch
                    switched = self._signals()
                    if switched is not stream:
                        stream, statuses_seen = switched, 0
                        synced = stream.generation if stream is not None else 0
                if isinstance(stream, ListWatch) and watching is None:
                    watching = stream
                    watching.watch(mission_id)
                now = time.monotonic()
                live = stream is not None and stream.live
                sig = stream.signal(mission_id) if stream is not None else None
                if sig is not None:
                    for at, seen in sig.statuses[statuses_seen:]:
                        _note_status(run, seen, at)
                    statuses_seen = len(sig.statuses)
                stopped = self.stop.is_set()
                at_deadline = stopped or now >= run.deadline_at
                generation = stream.generation if stream is not None else 0
                if not live:
                    read, polled = now >= next_poll, True
                else:
                    read = (
                        # a lag or reconnect since the last read: catch up, at most at the polling pace
                        (generation != synced and now >= next_poll)
                        or (stream_says_settle(sig, to_end) and now >= recheck_at)
                        or (sig is None and now >= silence_at)  # a stream that never names it
                    )
                if read or at_deadline:
                    if live:
                        assert stream is not None
                        synced = stream.generation
                    cursor, status, has_evidence = self._read(run, channel, mission_id, cursor)
                    if settles(status, has_evidence, to_end):
                        return
                    if at_deadline:
                        if to_end:
                            why = (
                                f"when the session stopped ({run.elapsed_s():.0f}s after dispatch)"
                                if stopped
                                else f"after {run.elapsed_s():.0f}s (deadline {run.deadline_s:.0f}s from dispatch)"
                            )
                            raise CommandTimeout(
                                f"canary mission {mission_id} still {status} {why}",
                                evidence={"mission_id": mission_id, "status": status},
                            )
                        return
                    now = time.monotonic()
                    next_poll = now + poll_s * random.uniform(0.8, 1.2)
                    poll_s = min(poll_s * 2, MAX_POLL_S)
                    recheck_at = now + recheck_s
                    if live and stream_says_settle(sig, to_end):  # the stream's word, not confirmed
                        recheck_s = min(recheck_s * 2, MAX_POLL_S)
                    if sig is None and now >= silence_at:
                        silence_s *= 2
                        silence_at = now + silence_s
                wake = run.deadline_at
                if not live or generation != synced:
                    wake = min(wake, next_poll)
                if live and stream_says_settle(sig, to_end):
                    wake = min(wake, recheck_at)
                elif live and sig is None:
                    wake = min(wake, silence_at)
                timeout = max(0.0, wake - time.monotonic())
                if stream is not None and not stream.absent:  # a signal, a lag or the stream going up wakes it
                    stream.wait(mission_id, sig.version if sig is not None else 0, generation, timeout)
                else:
                    self.stop.wait(timeout)
        finally:
            run.waited_s = round(run.elapsed_s(), 2)
            if watching is not None:
                watching.unwatch(mission_id)
            gone = self.stream.why_absent if self.stream is not None else None
            if stream is None or stream.absent:
                reason = gone or (stream.why_absent if stream is not None else None) or "no live stream"
                run.followed_by = f"polling ({reason})"
            elif isinstance(stream, ListWatch):
                run.followed_by = f"polling the mission list (no live stream{': ' + gone if gone else ''})"
            else:
                run.followed_by = "stream (and polling while it reconnected)" if polled else "stream"

    def wait_for_end(self, mission_id: str, deadline_at: float, channel: MissionChannel) -> None:
        """Poll the stored record until the mission ends, a read fails, the deadline passes or the session stops."""
        while not self.stop.is_set() and time.monotonic() < deadline_at:
            try:
                if str(channel.get(mission_id).get("status")) in TERMINAL:
                    break
            except SbxError:
                break
            time.sleep(self.section.poll_interval_s)

    def _read(
        self, run: RouteRun, channel: MissionChannel, mission_id: str, cursor: int
    ) -> tuple[int, str, bool]:
        """One read of the stored record and the events after ``cursor``: (cursor, status, evidence).

        The verdict needs this read even at the deadline: pushback on it is waited out for at least
        ``request_timeout_s`` more (the item waits longer than the mission's deadline).
        """
        with pushback_until(max(run.deadline_at, time.monotonic() + self.section.request_timeout_s)):
            return _read_now(run, channel, mission_id, cursor)

    def waiting(self, routes: Iterable[RouteRun], canaries: Iterable[CanaryRun]) -> WaitingState:
        """A read-only snapshot of the unsettled routes and canaries (no request is made)."""
        route_runs, canary_runs = list(routes), list(canaries)  # copies: the dispatcher may still be filling them
        runs = [r for r in route_runs if not r.done.is_set()]
        runs += [c.run for c in canary_runs if c.run is not None and not c.done.is_set()]
        waiting_canaries = sum(1 for c in canary_runs if c.run is None and not c.done.is_set())
        by_status: dict[str, int] = {}
        for run in runs:
            seen = self.stream.signal(run.mission_id) if self.stream and run.mission_id else None
            status = (seen.status if seen is not None else None) or run.status or "not dispatched"
            by_status[status] = by_status.get(status, 0) + 1
        if waiting_canaries:
            by_status["not dispatched"] = by_status.get("not dispatched", 0) + waiting_canaries
        longest = max(runs, key=lambda r: r.elapsed_s(), default=None)
        live = self.stream is not None and self.stream.live
        return WaitingState(
            open=len(runs) + waiting_canaries,
            by_status=by_status,
            elapsed_s=round(longest.elapsed_s(), 1) if longest else 0.0,
            deadline_s=longest.deadline_s if longest else 0.0,
            followed_by="stream" if live else "polling",
        )


def wait_telling(
    done: threading.Event,
    timeout_s: float,
    on_wait: Callable[[WaitingState | None, float], None] | None,
    waiting: Callable[[], WaitingState],
) -> None:
    """Wait (bounded) for ``done``, telling ``on_wait`` what is still waited on (``waiting()``) about once
    a second, and ``None`` when the wait is over."""
    if on_wait is None:
        done.wait(timeout_s)
        return
    start = time.monotonic()
    end = start + timeout_s
    told = False
    while not done.wait(max(0.0, min(1.0, end - time.monotonic()))):
        if time.monotonic() >= end:
            break
        state = waiting()
        if state.open:
            on_wait(state, time.monotonic() - start)
            told = True
    if told:
        on_wait(None, time.monotonic() - start)  # the wait is over: the line goes


def _read_now(run: RouteRun, channel: MissionChannel, mission_id: str, cursor: int) -> tuple[int, str, bool]:
    current = channel.get(mission_id)
    run.reads += 1
    if run.record is None:
        run.record = current
    run.last = current
    status = str(current.get("status"))
    _note_status(run, status)
    for _ in range(MAX_EVENT_PAGES):
        page = channel.events(mission_id, cursor)
        run.reads += 1
        fresh = new_events(run.events, page)  # each sequence once, whatever the server did with the cursor
        for event in fresh:
            seq = event.get("sequence")
            if isinstance(seq, int) and seq > cursor:
                cursor = seq
        run.events.extend(fresh)
        if len(page) < EVENT_PAGE or not fresh:
            break
    has_evidence = any(e.get("event_type") in EVIDENCE_EVENTS for e in run.events)
    if status == "pending" and not has_evidence:
        drops = [str(e.get("content") or "") for e in run.events if e.get("event_type") == "error"]
        dropped = [t for t in drops if message_dropped(t)]
        if dropped and run.slot_waited_s is None:  # not yet started in a slot of its own
            raise FirstMessageDropped(mission_id, dropped[-1])
    return cursor, status, has_evidence


def _note_status(run: RouteRun, status: str, at: float | None = None) -> None:
    """Add ``status`` to the timeline (seconds after dispatch) when it differs from the last one."""
    if not run.timeline or run.timeline[-1][1] != status:
        start = run.dispatched_at if run.dispatched_at is not None else time.monotonic()
        when = (time.monotonic() if at is None else at) - start
        run.timeline.append((round(max(when, 0.0), 2), status))
