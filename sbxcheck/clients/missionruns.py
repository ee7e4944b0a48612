"""What a session saw of each mission (RouteRun, CanaryRun), and readings of a mission's events.

The records the mission dispatcher (lifecycle/missions.py) fills and the mission checks
(checks/missions.py, checks/workspace.py, checks/contract.py) judge: kept at the clients layer, so
checks never import the lifecycle layer.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sbxcheck.clients.channels import Created
from sbxcheck.clients.sandboxed import MissionRejected
from sbxcheck.clients.stream import MissionSignal
from sbxcheck.errors import SbxError
from sbxcheck.inventory import RouteSpec, WorkspaceCanarySpec
from sbxcheck.redact import clip
from sbxcheck.results import CheckResult

TERMINAL = frozenset({"completed", "failed", "blocked", "not_feasible", "interrupted"})
RETRY_TITLE_SUFFIX = " (idempotency retry)"  # the keyed retry's title is its create's and this


def _event_key(event: dict[str, Any]) -> object:
    seq = event.get("sequence")
    if isinstance(seq, int) and not isinstance(seq, bool):
        return ("sequence", seq)
    return ("id", event.get("event_id") or event.get("id"), event.get("event_type"), event.get("content"))


def new_events(known: list[dict[str, Any]], page: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``page`` not already in ``known`` (nor repeated within it), by ``sequence`` (by
    event id where a row has none): a reread, or a server that ignores the cursor, counts nothing twice."""
    seen = {_event_key(e) for e in known}
    out: list[dict[str, Any]] = []
    for event in page:
        key = _event_key(event)
        if key not in seen:
            seen.add(key)
            out.append(event)
    return out


def crash_signature(events: list[dict[str, Any]]) -> str | None:
    """The error text of a mission that ended before any tool call, normalised (ids and numbers removed)."""
    if any(e.get("event_type") in ("tool_call", "tool_result") for e in events):
        return None
    errors = [str(e.get("content") or "") for e in events if e.get("event_type") == "error"]
    if not errors:
        return None
    lines = errors[-1].strip().splitlines()
    if not lines:  # an error event with no text has no signature to share
        return None
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27,}|\b\d+\b", "#", lines[0])
    return clip(text, 120, "")


@dataclass
class RouteRun:
    """Everything the session saw of one route's mission."""

    route: RouteSpec
    title: str
    idempotency_key: str
    requested: dict[str, str | None]
    effort_attempts: list[dict[str, Any]] = field(default_factory=list)
    created: Created | None = None
    rejection: MissionRejected | None = None
    error: SbxError | None = None
    record: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    waited_s: float = 0.0  # seconds from dispatch (the first create sent) until following stopped
    deadline_s: float = 0.0  # the one budget of this mission, counted from dispatch
    dispatched_at: float | None = None  # monotonic clock when the first create was sent (or it got a slot)
    awaiting_slot: bool = False  # created; waiting for a slot of its own to start in (an older release)
    slot_waited_s: float | None = None  # how long it waited for that slot, once it had one
    slot_refusal: str | None = None  # the plane's words when no slot was free (a 409, a dropped message)
    skipped_incident: str | None = None
    settled_s: float | None = None  # seconds from the session's first dispatch until this run settled
    retry: Created | None = None
    retry_rejection: MissionRejected | None = None
    first_status_at_retry: str | None = None  # the first mission's status when the retry made a second
    retry_joined: str | None = None  # the keyed retry was answered with this mission of someone else's
    check_idempotency: bool = True
    not_dispatched: CheckResult | None = None  # the readiness failure that kept it back: nothing spent
    output_retry: RouteRun | None = None  # the one direct-output retry of a model that ended silent
    stream_generation: int = -1  # the live stream's generation when the create was sent (-1: not live)
    followed_by: str | None = None  # "stream" or "polling (why)"
    reads: int = 0  # record and event reads made to follow it
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def mission_id(self) -> str | None:
        return str(self.created.mission["id"]) if self.created is not None else None

    @property
    def accepted_effort(self) -> str | None:
        accepted = [a["effort"] for a in self.effort_attempts if a["accepted"]]
        return accepted[-1] if accepted else None

    @property
    def deadline_at(self) -> float:
        """The one deadline of this mission: dispatch + ``deadline_s`` (never restarted by a later phase;
        a mission that waited for a slot to start in counts from when it got one)."""
        start = self.dispatched_at if self.dispatched_at is not None else time.monotonic()
        return start + self.deadline_s

    def elapsed_s(self) -> float:
        """Seconds since dispatch (0 before it)."""
        return 0.0 if self.dispatched_at is None else time.monotonic() - self.dispatched_at

    @property
    def status(self) -> str | None:
        source = self.last or (self.created.mission if self.created else None)
        return str(source.get("status")) if source and source.get("status") else None


@dataclass
class CanaryRun:
    """A workspace-visibility canary mission and what it showed."""

    spec: WorkspaceCanarySpec
    workspace_id: str | None = None
    run: RouteRun | None = None
    exec_sha256: str | None = None
    exec_error: str | None = None
    skipped_incident: str | None = None
    error: SbxError | None = None
    not_dispatched: CheckResult | None = None  # the readiness failure that kept it back: nothing spent
    done: threading.Event = field(default_factory=threading.Event)


_NO_OUTPUT_RE = re.compile(
    r"idle timeout|stopped producing output|produced no (?:output|content)|no output|empty (?:response|completion)",
    re.IGNORECASE,
)


def assistant_content(events: list[dict[str, Any]]) -> bool:
    """True when any assistant message carries non-blank content."""
    return any(
        e.get("event_type") in ("assistant_message", "assistant_message_canonical")
        and str(e.get("content") or "").strip()
        for e in events
    )


def silent_end(events: list[dict[str, Any]]) -> bool:
    """True when the mission ended on a no-output error (idle timeout, stall) without assistant content."""
    if assistant_content(events):
        return False
    return any(
        e.get("event_type") == "error" and _NO_OUTPUT_RE.search(str(e.get("content") or "")) for e in events
    )


def adapter_crash_cause(backend: str, signature: str) -> str:
    """The shared cause string of a shared adapter crash (items with it form one incident)."""
    return f"adapter-crash:{backend}:{signature}"


def settles(status: str | None, has_evidence: bool, to_end: bool) -> bool:
    """A route settles at evidence while active, a terminal state or awaiting_user; a canary
    (``to_end``) only at a terminal state or awaiting_user."""
    if status in TERMINAL or status == "awaiting_user":
        return True
    return status == "active" and has_evidence and not to_end


def stream_says_settle(sig: MissionSignal | None, to_end: bool) -> bool:
    """Whether the stream's word says the stored rows may now settle the mission. A stream that
    carries no status changes still triggers a read at evidence (routes) or a reply (canaries)."""
    if sig is None:
        return False
    if settles(sig.status, sig.evidence, to_end):
        return True
    if sig.last_kind == "error" and sig.status in (None, "pending") and not sig.evidence:
        return True  # an error before the mission started (a dropped first message): the stored rows say why
    if sig.status is None:
        return (sig.evidence and not to_end) or sig.last_kind == "assistant_message"
    return False
