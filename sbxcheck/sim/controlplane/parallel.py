"""How many missions run at once: ``/api/control/parallel/config``, ``/missions/{id}/parallel``, and where a
first message goes when every slot is taken.

Upstream's control session (src/api/control.rs) runs one "main" mission and up to
``MAX_PARALLEL_MISSIONS - 1`` parallel ones (v0.7.0's default is 1: sequential). A message for a mission
that is not running starts it in parallel when a slot is free; when none is, upstream queues the message
on the main mission instead: the target stays ``pending`` and the text runs as a turn of another
mission. 1.3.0 drops it instead (an error event on the target, ``queued: false``). ``POST
/missions/{id}/parallel`` refuses with 409. Only a release with ``max_parallel`` set enforces this;
today's profile starts a mission at create.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sbxcheck.sim.controlplane.agent import AgentRunner
from sbxcheck.sim.controlplane.model import TERMINAL, MissionState, plain_text
from sbxcheck.sim.controlplane.ops import seed_mission

SLOT_HELD_FAULT = "cp.slot-held"
SLOT_HOLDER_TITLE = "operator: long refactor (holds a slot)"


class ParallelSlots(AgentRunner):
    """The running-mission count, the two parallel routes, and the first message's routing."""

    def _occupies_slot(self, m: MissionState) -> bool:
        """A mission its runner still runs (a parked one, awaiting_user, holds no slot: 1.3.0 counts only
        running runners, control/mod.rs:11011-11014), or the operator's slot holder."""
        if m.status in TERMINAL or m.status == "awaiting_user":
            return False
        return (m.task is not None and not m.task.done()) or m.record.get("title") == SLOT_HOLDER_TITLE

    def _slot_holders(self, user: str) -> list[MissionState]:
        """The user's running missions, oldest first (the first is upstream's "main" mission)."""
        self._hold_slot_if_faulted(user)
        running = [m for m in self._missions.values() if m.owner == user and self._occupies_slot(m)]
        return sorted(running, key=lambda m: m.created_mono)

    def _hold_slot_if_faulted(self, user: str) -> None:
        """Under ``cp.slot-held``: one long mission of the user's own, running since before this session."""
        held: set[str] = self.__dict__.setdefault("_slot_held_for", set())
        if SLOT_HELD_FAULT not in self.faults or user in held:
            return
        held.add(user)
        holder = seed_mission(self, title=SLOT_HOLDER_TITLE, status="active", age_s=30, prompt="refactor", live=True)
        holder.owner = user

    def _capacity(self) -> int | None:
        return self.release.max_parallel

    async def _parallel_config(self, request: Request, user: str) -> Response:
        """``GET /api/control/parallel/config``: ``{max_parallel_missions, running_count}``."""
        with self._lock:
            running = len(self._slot_holders(user))
        return JSONResponse({"max_parallel_missions": self._capacity() or 0, "running_count": running})

    async def _parallel_start(self, request: Request, user: str) -> Response:
        """``POST /api/control/missions/{id}/parallel {content}``: start it beside the others, or 409."""
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        content = body.get("content")
        if not isinstance(content, str):
            return plain_text(422, "Failed to deserialize the JSON body into the target type: content")
        raw = request.path_params["id"]
        with self._lock:
            mid, m = self._lookup(raw)
            if mid is None:
                return plain_text(400, f"Invalid URL: Cannot parse `{raw}` to a UUID")
            cap = self._capacity()
            running = self._slot_holders(user)
            if cap is not None and len(running) >= cap:
                return plain_text(409, f"Maximum parallel missions ({cap}) reached. {len(running)} running.")
            if m is None or m.owner != user:
                return plain_text(409, f"Failed to load mission: Mission {mid} not found")
            if m.task is not None:
                return plain_text(409, f"Mission {mid} is already running in parallel")
            if m.prompt is None:
                m.prompt = content.strip()
            self._start_agent(m)
        return JSONResponse({"ok": True, "mission_id": mid})

    def _route_first_message(self, user: str, m: MissionState, content: str) -> tuple[bool, bool]:
        """Where a message for ``m`` goes (the lock held): ``(queued, started)``.

        Started when ``m`` is not running and a slot is free; queued on ``m`` when it runs; otherwise, on a
        release that caps parallel missions, queued on the main mission: ``m`` stays pending and the text
        becomes a turn of another mission, as upstream's fallback does.
        """
        if m.task is not None or m.status in TERMINAL:
            return m.task is not None, False
        cap = self._capacity()
        running = [r for r in self._slot_holders(user) if r is not m]
        if cap is not None and running and len(running) >= cap and self.release.full_slots == "drop":
            # 1.3.0 drops a targeted message it cannot start (control/mod.rs:10232-10252): an error
            # event on the target, `queued: false`, and the mission stays pending
            self._emit(
                m,
                "error",
                f"Cannot start mission {m.id}: max parallel missions ({cap}) reached",
                metadata={"mission_id": m.id, "resumable": True},
            )
            return False, False
        if cap is not None and running and len(running) >= cap:
            main = running[0]
            self._emit(
                main,
                "user_message",
                content,
                metadata={"id": str(uuid.uuid4()), "queued": True, "source": f"api:{user}"},
            )
            main.record.setdefault("history", []).append({"role": "user", "content": content})
            return True, False
        if m.prompt is None and m.status == "pending":
            m.prompt = content.strip()
        self._start_agent(m)
        return False, True

    def parallel_state(self) -> dict[str, Any]:
        """For tests: every mission's title and the user turns its history holds."""
        with self._lock:
            return {
                m.id: {
                    "title": m.record.get("title"),
                    "user_turns": [h["content"] for h in m.record.get("history", []) if h.get("role") == "user"],
                }
                for m in self._missions.values()
            }
