"""A control plane that lies in well-formed answers: the faults, and the worlds they make.

- ``cp.coalesce-foreign``: the target backend's creates are answered with a person's live mission
  (created earlier, not by the caller) and ``x-coalesced-with: <its id>``: the create made nothing.
- ``cp.stream-lies``: the target backend's missions are never dispatched (they stay ``pending``), but
  the live stream announces an expensive ``assistant_message`` and ``mission_status_changed:
  completed`` for each, neither of which is stored.
- ``cp.stream-endless-line`` (in :mod:`sbxcheck.sim.stream`): one stream line that never ends.
- ``cp.list-flood``: right after the target backend's first create is stored, 250 finished missions
  of the same user are stored after it: the newest page of the mission list no longer reaches it.
- ``cp.record-id-mismatch``: ``GET /missions/{id}`` of the target backend's missions answers the
  record of another mission (another backend and model, its own id).
- ``cp.cost-nonfinite`` / ``cp.cost-negative``: the target backend's missions report two assistant
  messages, each of ``cost_cents`` 1.7e308 (a sum past any float: inf) or -1e9.
- ``cp.deep-json``: the target backend's missions first say, as an assistant message without a
  cost, a JSON object nested :data:`DEEP` levels (past any recursive parser's stack).
"""

from __future__ import annotations

import copy
import time
import uuid
from typing import TYPE_CHECKING, Any, Final

from sbxcheck.sim.controlplane.model import (
    COST_FAULTS,
    DEEP_JSON_FAULT,
    LIES_FAULTS,
    NIL_UUID,
    MissionState,
    iso_time,
)

if TYPE_CHECKING:
    from sbxcheck.sim.controlplane.base import DoubleBase

COALESCE_FOREIGN, STREAM_LIES, ENDLESS_LINE, LIST_FLOOD, RECORD_ID_MISMATCH = LIES_FAULTS
COST_NONFINITE, COST_NEGATIVE = COST_FAULTS
HUGE_CENTS: Final = 1.7e308  # finite alone; two of them sum to inf
NEGATIVE_CENTS: Final = -1e9
FOREIGN_ID: Final = "f0e1a2b3-0000-4000-8000-00000000c0a1"  # a person's live mission
OTHER_RECORD_ID: Final = "0a0b0c0d-0000-4000-8000-0000000001d0"  # the record answered for another id
FLOOD: Final = 250
LIED_COST_CENTS: Final = 5000
DEEP: Final = 5000


def _planted(double: DoubleBase, mid: str, title: str, backend: str, model: str, status: str) -> MissionState:
    """A mission that is not the caller's work (created two minutes ago, no agent runs it)."""
    now = double.clock()
    m = double._missions.get(mid)
    if m is not None:
        return m
    record: dict[str, Any] = {
        "id": mid,
        "status": status,
        "title": title,
        "workspace_id": NIL_UUID,
        "workspace_name": "host",
        "backend": backend,
        "model_override": model,
        "fast_mode": False,
        "history": [],
        "created_at": iso_time(now - 120),
        "updated_at": iso_time(now - 5),
        "resumable": False,
        "requires_local_disk": True,
        "mission_mode": "task",
        "goal_mode": False,
        "priority": 0,
        "tags": [],
    }
    m = MissionState(
        record=record,
        owner=double.single_tenant_user_id,
        prompt=title,
        requested_model=model,
        created_mono=time.monotonic() - 120,
        updated_epoch=now - 5,
        last_status_change_at=iso_time(now - 110),
    )
    double._missions[mid] = m
    return m


def foreign_for_create(double: DoubleBase, backend: str | None) -> MissionState | None:
    """``cp.coalesce-foreign``: the live mission a create of ``backend`` is joined to (lock held)."""
    if backend is None or not double._fault_on(COALESCE_FOREIGN, backend):
        return None
    return _planted(double, FOREIGN_ID, "refactor the billing module (Dana)", "claudecode", "opus", "active")


def other_record(double: DoubleBase, m: MissionState) -> dict[str, Any] | None:
    """``cp.record-id-mismatch``: the record answered for ``m`` instead of its own (lock held)."""
    if not double._fault_on(RECORD_ID_MISMATCH, str(m.record.get("backend"))):
        return None
    other = _planted(double, OTHER_RECORD_ID, "someone else's mission", "claudecode", "sonnet", "completed")
    return copy.deepcopy(other.record)


def stays_pending(double: DoubleBase, m: MissionState) -> bool:
    """``cp.stream-lies``: the mission is never dispatched; the stream says otherwise (lock held)."""
    if not double._fault_on(STREAM_LIES, str(m.record.get("backend"))):
        return False
    for kind, meta in (
        ("assistant_message", {"cost_cents": LIED_COST_CENTS}),
        ("mission_status_changed", {"mission_id": m.id, "status": "completed", "summary": "done"}),
    ):
        double.stream.publish(  # streamed only: the stored events never hold them
            {
                "mission_id": m.id,
                "sequence": len(m.events) + 1,
                "event_type": kind,
                "timestamp": iso_time(double.clock()),
                "content": "all done" if kind == "assistant_message" else "",
                "metadata": meta,
            }
        )
    return True


def flood_after_create(double: DoubleBase, m: MissionState) -> None:
    """``cp.list-flood``: store :data:`FLOOD` finished missions after ``m`` (once; lock held)."""
    if not double._fault_on(LIST_FLOOD, str(m.record.get("backend"))) or double.flooded:
        return
    double.flooded = True
    base = double.clock() + 0.01
    for i in range(FLOOD):
        mid = str(uuid.uuid4())
        stamp = iso_time(base + i * 0.001)
        planted = _planted(double, mid, f"nightly batch item {i + 1}", "codex", "gpt-5", "completed")
        planted.record.update(created_at=stamp, updated_at=stamp)


def reported_costs(double: DoubleBase, m: MissionState, cents: float) -> list[float]:
    """The ``cost_cents`` of each assistant message ``m`` reports (its last is the final reply):
    ``[cents]``, or two unusable costs under ``cp.cost-nonfinite`` / ``cp.cost-negative``."""
    backend = str(m.record.get("backend"))
    if double._fault_on(COST_NONFINITE, backend):
        return [HUGE_CENTS, HUGE_CENTS]
    if double._fault_on(COST_NEGATIVE, backend):
        return [NEGATIVE_CENTS, NEGATIVE_CENTS]
    return [cents]


def deep_content(double: DoubleBase, m: MissionState) -> str | None:
    """``cp.deep-json``: the content of an assistant message ``m`` says first, JSON nested :data:`DEEP` deep."""
    if not double._fault_on(DEEP_JSON_FAULT, str(m.record.get("backend"))):
        return None
    return '{"a": ' * DEEP + "1" + "}" * DEEP
