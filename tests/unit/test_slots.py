"""Waiting for a mission slot: the queue waits while the session's missions move, and says so when it stops."""

from __future__ import annotations

import threading
import time

import pytest

from sbxcheck.clients.sandboxed_errors import SlotsFull
from sbxcheck.lifecycle import slots
from sbxcheck.lifecycle.slots import NoSlot, SlotQueue

FULL = SlotsFull("POST /api/control/missions/:id/parallel", 409, "Maximum parallel missions (1) reached. 1 running.")


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slots, "FIRST_PAUSE_S", 0.01)
    monkeypatch.setattr(slots, "MAX_PAUSE_S", 0.01)


def _refusing(times: int) -> tuple[list[int], object]:
    calls = [0]

    def start() -> None:
        calls[0] += 1
        if calls[0] <= times:
            raise FULL

    return calls, start


def test_a_slot_that_comes_free_starts_the_mission() -> None:
    queue = SlotQueue(stall_s=5.0, stop=threading.Event())
    calls, start = _refusing(3)
    waited = queue.wait_for_slot("m1", start, FULL)  # type: ignore[arg-type]
    assert calls == [4] and waited >= 0 and queue.waiting == 0


def test_a_queue_that_stands_still_is_no_slot_naming_the_limit() -> None:
    queue = SlotQueue(stall_s=0.2, stop=threading.Event())
    _, start = _refusing(10_000)
    with pytest.raises(NoSlot) as no_slot:
        queue.wait_for_slot("m1", start, FULL)  # type: ignore[arg-type]
    assert "at most 1 mission(s) at once" in no_slot.value.message and "m1" in no_slot.value.message
    assert no_slot.value.evidence["max_parallel"] == 1 and no_slot.value.cause == "control-plane-mission-slots"
    assert "MAX_PARALLEL_MISSIONS" in (no_slot.value.recommendation or "")


def test_the_sessions_own_progress_keeps_the_wait_going() -> None:
    queue = SlotQueue(stall_s=0.75, stop=threading.Event())
    calls, start = _refusing(150)  # refused for about 1.5 s: twice the stall bound
    moving = threading.Event()

    def progress() -> None:
        while not moving.is_set():
            queue.moved()  # another of this session's missions got a slot or ended
            time.sleep(0.05)

    mover = threading.Thread(target=progress)
    mover.start()
    try:
        queue.wait_for_slot("m1", start, FULL)  # type: ignore[arg-type]
    finally:
        moving.set()
        mover.join()
    assert calls == [151]


def test_the_session_ending_stops_the_wait() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(Exception, match="the session ended while it waited for a slot"):
        SlotQueue(stall_s=5.0, stop=stop).wait_for_slot("m1", _refusing(1)[1], FULL)  # type: ignore[arg-type]


def test_a_settled_mission_lets_the_first_in_line_ask_and_nobody_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """One slot frees: the first waiter starts at once; the second does not ask until another settles (it
    asked on its own clock, every pause, whatever happened: 40 waiters made hundreds of refused starts)."""
    monkeypatch.setattr(slots, "FIRST_PAUSE_S", 60.0)  # only a settled mission makes them ask here
    monkeypatch.setattr(slots, "MAX_PAUSE_S", 60.0)
    queue = SlotQueue(stall_s=120.0, stop=threading.Event())
    asked: list[str] = []
    done = {name: threading.Event() for name in ("first", "second")}

    def waiter(name: str) -> None:
        queue.wait_for_slot(name, lambda: asked.append(name), FULL)  # type: ignore[arg-type]
        done[name].set()

    first = threading.Thread(target=waiter, args=("first",), daemon=True)
    first.start()
    deadline = time.monotonic() + 30
    while queue.waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    second = threading.Thread(target=waiter, args=("second",), daemon=True)
    second.start()
    while queue.waiting < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    queue.moved()  # one of the session's missions settled: one slot
    assert done["first"].wait(30)
    assert not done["second"].wait(0.5) and asked == ["first"]
    queue.moved()  # another settled
    assert done["second"].wait(30) and asked == ["first", "second"] and queue.attempts == 2
    queue.wake()
