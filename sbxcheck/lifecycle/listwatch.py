"""Polling without a live stream, shared: one mission-list read per tick tells every follower what changed.

Where the control plane has no live stream (or it gave up), followers used to poll each mission (its
record and its events, two reads a tick). :class:`ListWatch` reads the mission list instead, once per
tick for all of the session's missions, and folds each row into the same :class:`MissionSignal` the
stream gives: the status, and execution evidence where the release reports ``last_output_at`` (a tool
result or a reply was stored). A follower then reads its mission (record and events, the evidence) only
when the row says the verdict may be taken, as it does with the stream. The tick starts at the poll
interval and doubles to :data:`MAX_TICK_S` while no row changes; it stops while no mission is followed.

A row is only a trigger: the verdict rests on the mission's own record and events. A mission the list
does not show (pushed off the page by newer ones) is read when its follower's silence runs out.
Bounded: a row count per read, a tick ceiling, and a count of failed reads after which the watch
gives up (``absent``) and followers read their missions directly.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from sbxcheck.clients.stream import MissionSignal
from sbxcheck.errors import SbxError

MAX_TICK_S: Final = 10.0
MAX_FAILURES: Final = 3  # list reads failing in a row before followers read their missions directly
MAX_STATUSES: Final = 64
ROWS: Final = 100  # rows a tick asks for: this session's missions are the newest

#: Row fields that change when a mission does something (a status, a stored event, an output).
CHANGES: Final = ("status", "updated_at", "last_activity_at", "last_agent_event_at", "last_output_at", "awaiting_kind")


class ListWatch:
    """The mission list, read once a tick for every followed mission, as per-mission signals. Thread-safe."""

    def __init__(self, list_rows: Callable[[int], Iterable[dict[str, Any]]], tick_s: float) -> None:
        self._list_rows = list_rows
        self._tick_s = max(0.05, tick_s)
        self._cond = threading.Condition()
        self._signals: dict[str, MissionSignal] = {}
        self._seen: dict[str, tuple[Any, ...]] = {}
        self._watched: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.generation = 0
        self.live = False
        self.absent = False
        self.why_absent: str | None = None
        self.reads = 0

    def start(self, wait_s: float) -> bool:
        """Start the reader (its first read makes the watch live); wait up to ``wait_s`` for it."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sbx-list-watch", daemon=True)
            self._thread.start()
        with self._cond:
            self._cond.wait_for(lambda: self.live or self.absent, timeout=wait_s)
            return self.live

    def watch(self, mission_id: str) -> None:
        """A follower starts following ``mission_id``: the list is read while any mission is followed."""
        with self._cond:
            self._watched[mission_id] = self._watched.get(mission_id, 0) + 1
            self._cond.notify_all()

    def unwatch(self, mission_id: str) -> None:
        with self._cond:
            left = self._watched.get(mission_id, 0) - 1
            if left > 0:
                self._watched[mission_id] = left
            else:
                self._watched.pop(mission_id, None)

    def signal(self, mission_id: str) -> MissionSignal | None:
        """A copy of what the list said about ``mission_id`` (None: no row for it yet)."""
        with self._cond:
            sig = self._signals.get(mission_id)
            if sig is None:
                return None
            return MissionSignal(sig.status, sig.evidence, sig.events, sig.version, list(sig.statuses), sig.last_kind)

    def wait(self, mission_id: str, version: int, generation: int, timeout_s: float) -> None:
        """Block until the mission's row changes past ``version``, the watch gives up, it is closed, or
        ``timeout_s`` passes."""
        if timeout_s <= 0:
            return
        with self._cond:

            def changed() -> bool:
                sig = self._signals.get(mission_id)
                return (
                    (sig is not None and sig.version > version)
                    or self.generation != generation
                    or self.absent
                    or self._stop.is_set()
                )

            self._cond.wait_for(changed, timeout=timeout_s)

    def close(self) -> None:
        """Stop reading; every waiter wakes."""
        self._stop.set()
        with self._cond:
            self.live = False
            self._cond.notify_all()

    # ---- the reader thread -------------------------------------------------------------------

    def _run(self) -> None:
        tick = self._tick_s
        failures = 0
        first = True
        try:
            while not self._stop.is_set():
                with self._cond:  # idle while nothing is followed (the first read makes the watch live)
                    if not first:
                        self._cond.wait_for(lambda: bool(self._watched) or self._stop.is_set(), timeout=1.0)
                    if self._stop.is_set():
                        return
                    if not first and not self._watched:
                        continue
                first = False
                try:
                    rows = list(self._list_rows(ROWS))
                except SbxError as exc:
                    failures += 1
                    if failures >= MAX_FAILURES:
                        self._give_up(f"the mission list failed {failures} times in a row ({exc.message[:120]})")
                        return
                    self._stop.wait(tick)
                    continue
                failures = 0
                self.reads += 1
                moved = self._fold(rows)
                tick = self._tick_s if moved else min(tick * 2, MAX_TICK_S)
                self._stop.wait(tick)
        except Exception as exc:  # a reader bug degrades to direct polling, never hangs a follower
            self._give_up(f"the list watch failed: {type(exc).__name__}")

    def _fold(self, rows: list[dict[str, Any]]) -> bool:
        """Fold a list answer into the signals; whether a followed mission's row changed."""
        now = time.monotonic()
        moved = False
        with self._cond:
            self.live = True
            for row in rows:
                mission_id = row.get("id")
                if not isinstance(mission_id, str) or mission_id not in self._watched:
                    continue  # other missions of the list are nobody's concern here
                key = tuple(row.get(name) for name in CHANGES)
                if self._seen.get(mission_id) == key:
                    continue
                self._seen[mission_id] = key
                sig = self._signals.setdefault(mission_id, MissionSignal())
                sig.version += 1
                sig.events += 1
                status = row.get("status")
                if isinstance(status, str) and status != sig.status:
                    sig.status = status
                    if len(sig.statuses) < MAX_STATUSES:
                        sig.statuses.append((now, status))
                if row.get("last_output_at"):  # a tool result or a reply was stored: evidence to read
                    sig.evidence = True
                elif status == "pending" and row.get("last_agent_event_at"):
                    sig.last_kind = "error"  # an event before it started: most likely why it did not (read it)
                moved = True
            self._cond.notify_all()
        return moved

    def _give_up(self, why: str) -> None:
        with self._cond:
            self.absent = True
            self.live = False
            self.why_absent = why
            self._cond.notify_all()
        with contextlib.suppress(Exception):
            self._stop.set()
