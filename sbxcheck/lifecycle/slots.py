"""Waiting for a mission slot on a control plane that runs a few missions at once (v0.7.0: one).

An older release's mission is started by its first message. When every slot is taken, sbxcheck does
not send that message where the server would queue it on the running mission (someone else's work);
it asks for a slot of the mission's own (``POST .../missions/:id/parallel``) and, refused, waits and
asks again. Its missions then run one at a time, each with its whole deadline from when it started.

The wait is bounded by progress, not by a clock of its own: as long as one of this session's
missions gets a slot or settles within ``stall_s``, the queue is moving and the others wait on. A
slot that no mission of the session frees (held by another's mission) ends every wait ``stall_s``
after the last progress, with :class:`NoSlot`: could not tell, nothing sent.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from sbxcheck.clients.missionruns import RouteRun
from sbxcheck.clients.sandboxed_errors import SlotsFull
from sbxcheck.errors import SbxError
from sbxcheck.results import Classification

FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 5.0


class NoSlot(SbxError):
    """No slot came free for a created mission: it was never started, and no verdict about it is possible."""

    classification = Classification.INFRASTRUCTURE
    cause = "control-plane-mission-slots"


def started(run: RouteRun) -> bool:
    """Whether ``run``'s mission ever started (so its end may free a slot): created, and not left waiting."""
    if run.created is None:
        return False
    waited = run.created.awaiting_slot is not None or run.slot_refusal is not None
    return not waited or run.slot_waited_s is not None


class SlotQueue:
    """This session's missions waiting for a slot, in arrival order, and when the queue last moved.

    When one of the session's missions settles (a slot may be free) only the first in line asks at
    once; every waiter also asks again after its own pause (0.5 s doubling to 5 s), for a slot that
    another's mission frees without the session seeing it. So a refused start is not asked again by
    every waiter each time one mission ends, nor by each one on its own clock while nothing moved.
    """

    def __init__(self, stall_s: float, stop: threading.Event) -> None:
        self.stall_s = stall_s
        self.stop = stop
        self._cond = threading.Condition()
        self._moved_at = time.monotonic()
        self._maybe_free = 0  # the session's missions that settled since a start was last refused
        self._line: list[int] = []  # tickets of the missions waiting, first come first
        self._tickets = 0
        self.waiting = 0  # missions waiting for a slot right now
        self.attempts = 0  # starts asked for while waiting (each refused one is a request for nothing)

    def moved(self) -> None:
        """One of the session's missions settled: a slot may be free, and the others' wait goes on."""
        with self._cond:
            self._moved_at = time.monotonic()
            self._maybe_free += 1
            self._cond.notify_all()

    def wake(self) -> None:
        """The session is stopping: every waiter looks up now."""
        with self._cond:
            self._cond.notify_all()

    def stalled_for(self) -> float:
        with self._cond:
            return time.monotonic() - self._moved_at

    def wait_for_slot(self, mission_id: str, start: Callable[[], None], refused: SlotsFull) -> float:
        """Call ``start`` (which raises :class:`SlotsFull` while every slot is taken) until it starts the
        mission; the seconds waited. :class:`NoSlot` when the queue stood still for ``stall_s``."""
        began = time.monotonic()
        pause = FIRST_PAUSE_S
        with self._cond:
            ticket = self._tickets
            self._tickets += 1
            self._line.append(ticket)
            self.waiting += 1
            self._moved_at = max(self._moved_at, began)  # a wait starts the clock, never an old one
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(
                        lambda: self.stop.is_set() or (self._line[0] == ticket and self._maybe_free > 0),
                        timeout=pause * random.uniform(0.8, 1.2),
                    )
                    self.attempts += 1
                if self.stop.is_set():
                    raise SbxError(f"mission {mission_id}: the session ended while it waited for a slot")
                try:
                    start()
                except SlotsFull as exc:
                    refused = exc
                    with self._cond:
                        self._maybe_free = 0  # every slot is taken: nobody asks again before one settles
                    if self.stalled_for() >= self.stall_s:
                        raise self._no_slot(mission_id, refused, time.monotonic() - began) from None
                    pause = min(pause * 2, MAX_PAUSE_S)
                    continue
                with self._cond:  # progress (the stall clock); the slot it took is no longer free
                    self._moved_at = time.monotonic()
                    self._maybe_free = max(0, self._maybe_free - 1)
                return round(time.monotonic() - began, 1)
        finally:
            with self._cond:
                self.waiting -= 1
                self._line.remove(ticket)
                self._cond.notify_all()  # the next in line may be first now

    def _no_slot(self, mission_id: str, refused: SlotsFull, waited_s: float) -> NoSlot:
        limit = f"at most {refused.max_parallel}" if refused.max_parallel is not None else "a limited number of"
        return NoSlot(
            f"could not tell: this control plane runs {limit} mission(s) at once and no slot came free for "
            f"{waited_s:.0f}s (none of this session's missions got one or ended for {self.stall_s:g}s): the "
            f"mission {mission_id} was created, never started, and nothing was sent to another mission",
            evidence={
                "mission_id": mission_id,
                "slot_refusal": refused.reason,
                "max_parallel": refused.max_parallel,
                "running": refused.running,
                "waited_s": round(waited_s, 1),
            },
            recommendation=(
                "see which missions hold the slots (GET /api/control/running); re-run when they have ended, "
                "or raise MAX_PARALLEL_MISSIONS on the control plane; nothing was changed"
            ),
        )
