"""Mission hygiene on a sandboxed.sh control plane: the runbook's read-only looks at what is stuck.

Four checks, each a pure function of what the control plane answered (specs/sandboxed-sh.md, 3.3, 3.6 and 7):

* :func:`check_missions_integrity` — ``GET /missions/integrity``: orphaned_pending or stale_active
  fail; scheduled_waiting and stale_awaiting_user are reported as evidence.
* :func:`check_running_health` — ``GET /running``: stalled *severe*, missing_deliverables and
  unexpected_end fail; stalled *warning* is a warning in the evidence.
* :func:`check_mission_verdicts` — every listed non-terminal mission judged by its ``idle_seconds``
  against the inventory's thresholds (the server's ``health_verdict`` when idle is absent).
* :func:`check_mission_signal` — one ``get_mission_health`` signal across the in-flight missions:
  every mission sharing it is one finding with one next step (one incident by signal).

Nothing here changes a mission: the next steps say what an operator does, and that it is theirs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from sbxcheck.checks.base import run_check
from sbxcheck.clients.sandboxed_models import (
    TERMINAL_STATUSES,
    IntegrityGroup,
    Mission,
    MissionsIntegrity,
    RunningEntry,
)
from sbxcheck.errors import BadResponseError, NotServed, SbxError
from sbxcheck.inventory import HygieneSection
from sbxcheck.results import CheckResult, Classification

CHECK_INTEGRITY: Final = "missions_integrity"
CHECK_RUNNING: Final = "running_health"
CHECK_VERDICTS: Final = "mission_verdicts"
CHECK_SIGNAL: Final = "mission_signals"

STALLED_VERDICTS: Final = frozenset({"stalled", "stuck_queued", "stalled_parked", "stalled_background"})
#: The ``signals`` of the assistant MCP's ``get_mission_health``, in report order.
SIGNALS: Final = (
    "auth_error",
    "rate_limited",
    "capacity_limited",
    "context_limit",
    "network_error",
    "suspected_loop",
)
_SHOWN: Final = 10  # missions named in a message / kept in evidence per group
_NOTHING_CHANGED: Final = "sbxcheck changed nothing"


class HygieneApi(Protocol):
    """The REST calls these checks use (:class:`~sbxcheck.clients.sandboxed.SandboxedClient`)."""

    def missions_integrity(self) -> MissionsIntegrity: ...

    def running(self) -> list[RunningEntry]: ...

    def list_missions_paged(
        self, *, page_size: int = 200, max_missions: int = 1000
    ) -> tuple[list[Mission], bool]: ...


def _brief(m: Mapping[str, Any]) -> str:
    title = str(m.get("title") or "untitled")[:60]
    return f"{title} ({str(m.get('id', '?'))[:8]})"


def _group(group: IntegrityGroup | None) -> dict[str, Any]:
    if group is None:
        return {"count": None, "missions": []}
    return {
        "count": group.count,
        "missions": [
            {k: m.get(k) for k in ("id", "title", "status", "updated_age_minutes")}
            for m in group.missions[:_SHOWN]
        ],
    }


# ------------------------------------------------------------------ integrity


def check_missions_integrity(client: HygieneApi, *, target: str = "control-plane") -> CheckResult:
    """``GET /api/control/missions/integrity``: no orphaned pending, no stale active mission."""

    def body() -> CheckResult:
        return judge_integrity(client.missions_integrity(), target=target)

    return run_check(CHECK_INTEGRITY, target, body)


def judge_integrity(report: MissionsIntegrity, *, target: str = "control-plane") -> CheckResult:
    """The verdict on one integrity report (see :func:`check_missions_integrity`)."""
    groups = {
        "orphaned_pending": report.orphaned_pending,
        "stale_active": report.stale_active,
        "scheduled_waiting": report.scheduled_waiting,
        "stale_awaiting_user": report.stale_awaiting_user,
    }
    evidence: dict[str, Any] = {
        "endpoint": "GET /api/control/missions/integrity",
        "generated_at": report.generated_at,
        "scanned": report.scanned,
        "healthy": report.healthy,
        **{name: _group(g) for name, g in groups.items()},
    }
    notes = [
        f"{g.count} {name.replace('_', ' ')}"
        for name, g in (
            ("scheduled_waiting", report.scheduled_waiting),
            ("stale_awaiting_user", report.stale_awaiting_user),
        )
        if g is not None and g.count
    ]
    bad = {
        name: g
        for name, g in (("orphaned_pending", report.orphaned_pending), ("stale_active", report.stale_active))
        if g.count
    }
    scanned = "?" if report.scanned is None else str(report.scanned)
    if bad:
        parts = []
        for name, g in bad.items():
            shown = ", ".join(_brief(m) for m in g.missions[:3])
            parts.append(f"{g.count} {name.replace('_', ' ')}" + (f": {shown}" if shown else ""))
        steps = []
        if "orphaned_pending" in bad:
            steps.append(
                "orphaned pending missions have no deferred goal and will never be dispatched: read each "
                "one (GET /api/control/missions/<id>) and either resume it with a prompt or cancel it"
            )
        if "stale_active" in bad:
            steps.append(
                "stale active missions have not been updated for over 24 h: check their events and "
                "get_mission_health before cancelling or resuming"
            )
        return CheckResult.failed(
            CHECK_INTEGRITY,
            target,
            f"mission integrity: {'; '.join(parts)} (of {scanned} scanned)"
            + (f"; also {', '.join(notes)}" if notes else ""),
            evidence,
            recommendation="; ".join(steps) + f" — that is the operator's decision; {_NOTHING_CHANGED}",
        )
    if report.healthy is False:
        return CheckResult.failed(
            CHECK_INTEGRITY,
            target,
            f"the control plane says its missions are not healthy (healthy=false) although no orphaned "
            f"or stale active mission is listed (of {scanned} scanned)",
            evidence,
        )
    message = f"mission integrity healthy: {scanned} scanned, 0 orphaned pending, 0 stale active"
    if notes:
        message += f"; WARNING: {', '.join(notes)} (reported, not failed)"
    return CheckResult.passed(CHECK_INTEGRITY, target, message, evidence)


# ------------------------------------------------------------------ /running health


def check_running_health(client: HygieneApi, *, target: str = "control-plane") -> CheckResult:
    """``GET /api/control/running``: no severe stall, no missing deliverables, no unexpected end."""

    def body() -> CheckResult:
        return judge_running(client.running(), target=target)

    return run_check(CHECK_RUNNING, target, body)


def judge_running(rows: Sequence[RunningEntry], *, target: str = "control-plane") -> CheckResult:
    """The verdict on the live runner list (see :func:`check_running_health`)."""
    failing: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []
    states: Counter[str] = Counter()
    for row in rows:
        health = row.health or {}
        status = str(health.get("status") or "unreported")
        states[status] += 1
        entry: dict[str, Any] = {
            "mission_id": row.mission_id,
            "state": row.state,
            "health": status,
            "seconds_since_activity": row.seconds_since_activity,
        }
        if status == "stalled":
            severity = str(health.get("severity") or "unknown")
            entry["severity"] = severity
            (failing if severity == "severe" else warnings).append(entry)
        elif status == "missing_deliverables":
            entry["missing"] = health.get("missing")
            failing.append(entry)
        elif status == "unexpected_end":
            entry["reason"] = health.get("reason")
            failing.append(entry)
        elif status not in ("healthy",):
            warnings.append(entry)
    evidence: dict[str, Any] = {
        "endpoint": "GET /api/control/running",
        "live_missions": len(rows),
        "health": dict(sorted(states.items())),
        "failing": failing[:_SHOWN],
        "warnings": warnings[:_SHOWN],
    }
    if failing:
        kinds = Counter(
            "stalled severe" if f["health"] == "stalled" else str(f["health"]).replace("_", " ")
            for f in failing
        )
        shown = ", ".join(f"{f['mission_id'][:8]} ({f['health']})" for f in failing[:3])
        return CheckResult.failed(
            CHECK_RUNNING,
            target,
            f"{len(failing)} of {len(rows)} live missions unhealthy: "
            + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
            + f" — {shown}",
            evidence,
            recommendation=(
                "read each mission's get_mission_health and latest events: a severe stall or an "
                "unexpected end needs the operator to cancel and resume it, missing deliverables a "
                f"follow-up message naming them; {_NOTHING_CHANGED}"
            ),
        )
    message = f"{len(rows)} live missions, none severely stalled, missing deliverables or ended unexpectedly"
    if warnings:
        message += f"; WARNING: {len(warnings)} " + ", ".join(
            f"{w['mission_id'][:8]} ({w['health']}{' ' + w['severity'] if 'severity' in w else ''})"
            for w in warnings[:3]
        )
    return CheckResult.passed(CHECK_RUNNING, target, message, evidence)


# ------------------------------------------------------------------ health_verdict


def verdict_for(status: str, idle_s: float, t: HygieneSection) -> str | None:
    """The staleness label for ``status`` after ``idle_s`` idle seconds, with ``t``'s thresholds."""
    if status in TERMINAL_STATUSES:
        return None
    if status == "active":
        return "working" if idle_s < t.quiet_s else "quiet" if idle_s < t.stalled_s else "stalled"
    if status == "pending":
        return "queued" if idle_s < t.stuck_queued_s else "stuck_queued"
    if status in ("awaiting_user", "acknowledged"):
        return "parked" if idle_s < t.stalled_parked_s else "stalled_parked"
    if status == "waiting_background":
        return "waiting_background" if idle_s < t.stalled_background_s else "stalled_background"
    return "paused" if status == "paused" else None


def check_mission_verdicts(
    client: HygieneApi, thresholds: HygieneSection, *, target: str = "control-plane"
) -> CheckResult:
    """Every listed non-terminal mission by staleness verdict; any stalled kind fails."""

    def body() -> CheckResult:
        missions, truncated = client.list_missions_paged(max_missions=thresholds.max_missions)
        result = judge_verdicts(missions, thresholds, truncated=truncated, target=target)
        notes = getattr(missions, "notes", None)  # rows read leniently (a field of another type): named
        if notes:
            result.evidence["rows_read_leniently"] = list(notes[:20])
        return result

    return run_check(CHECK_VERDICTS, target, body)


def judge_verdicts(
    missions: Iterable[Mission], t: HygieneSection, *, truncated: bool = False, target: str = "control-plane"
) -> CheckResult:
    """The verdict on a mission list (see :func:`check_mission_verdicts`)."""
    counts: Counter[str] = Counter()
    stalled: list[dict[str, Any]] = []
    disagree = 0
    judged = 0
    for m in missions:
        if m.status in TERMINAL_STATUSES:
            continue
        judged += 1
        mine = verdict_for(m.status, m.idle_seconds, t) if m.idle_seconds is not None else None
        verdict = mine or m.health_verdict or "unknown"
        if mine is not None and m.health_verdict is not None and mine != m.health_verdict:
            disagree += 1
        counts[verdict] += 1
        if verdict in STALLED_VERDICTS:
            stalled.append(
                {
                    "id": m.id,
                    "title": m.title,
                    "status": m.status,
                    "verdict": verdict,
                    "server_verdict": m.health_verdict,
                    "idle_for": m.idle_for,
                    "idle_seconds": m.idle_seconds,
                    "backend": m.backend,
                }
            )
    evidence: dict[str, Any] = {
        "endpoint": "GET /api/control/missions (paged)",
        "non_terminal": judged,
        "by_verdict": dict(sorted(counts.items())),
        "thresholds_s": t.model_dump(exclude={"max_missions", "signal_scan_limit"}),
        "stalled": stalled[:_SHOWN],
        "server_verdict_differs": disagree,
        "truncated": truncated,
    }
    summary = ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "none"
    cut = f" (first {t.max_missions} only)" if truncated else ""
    if stalled:
        shown = ", ".join(f"{_brief(s)} {s['verdict']} after {s['idle_for'] or '?'}" for s in stalled[:3])
        return CheckResult.failed(
            CHECK_VERDICTS,
            target,
            f"{len(stalled)} of {judged} non-terminal missions stuck or drifting{cut}: {shown}",
            evidence,
            recommendation=(
                "for each stalled mission read get_mission_health and its newest events; a stuck_queued "
                "one points at the scheduler or capacity (GET /api/health/fleet queue_depth), a stalled "
                f"parked one at an unanswered question — act on each deliberately; {_NOTHING_CHANGED}"
            ),
        )
    return CheckResult.passed(
        CHECK_VERDICTS, target, f"{judged} non-terminal missions{cut}, none stalled: {summary}", evidence
    )


# ------------------------------------------------------------------ get_mission_health signals


@dataclass(frozen=True)
class MissionHealth:
    """One ``get_mission_health`` answer, reduced to what the signal checks use."""

    mission_id: str
    title: str
    status: str
    backend: str | None
    signals: frozenset[str]
    loop_tool: str | None = None
    loop_repeats: int = 0
    recent_error: str = ""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> MissionHealth:
        signals = doc.get("signals")
        if not isinstance(signals, Mapping):
            raise BadResponseError("get_mission_health: the answer has no signals object")
        loop = doc.get("suspected_loop")
        errors = doc.get("recent_errors")
        last = errors[-1] if isinstance(errors, list) and errors else {}
        return cls(
            mission_id=str(doc.get("mission_id") or "?"),
            title=str(doc.get("title") or "untitled"),
            status=str(doc.get("status") or "?"),
            backend=doc.get("backend") if isinstance(doc.get("backend"), str) else None,
            signals=frozenset(k for k, v in signals.items() if v is True),
            loop_tool=str(loop.get("tool")) if isinstance(loop, Mapping) and loop.get("tool") else None,
            loop_repeats=int(loop.get("repeats") or 0) if isinstance(loop, Mapping) else 0,
            recent_error=str(last.get("snippet") or "")[:200] if isinstance(last, Mapping) else "",
        )


@dataclass
class SignalScan:
    """What ``get_mission_health`` said about each in-flight mission, read once for every signal item."""

    scanned: list[MissionHealth] = field(default_factory=list)
    in_flight: int = 0
    truncated: bool = False
    errors: list[str] = field(default_factory=list)


def scan_signals(
    in_flight: Callable[[], Sequence[str]],
    health: Callable[[str], Mapping[str, Any]],
    *,
    limit: int,
) -> SignalScan:
    """Ask ``health(mission_id)`` for at most ``limit`` in-flight missions; a failed ask is kept, not fatal."""
    ids = list(in_flight())
    scan = SignalScan(in_flight=len(ids), truncated=len(ids) > limit)
    for mission_id in ids[:limit]:
        try:
            scan.scanned.append(MissionHealth.from_json(health(mission_id)))
        except SbxError as exc:
            if exc.classification is Classification.AUTH_FAILED or isinstance(exc, NotServed):
                raise  # every further ask would be refused alike: one error (or skip), not N
            scan.errors.append(f"{mission_id[:8]}: {exc.message[:160]}")
    return scan


#: signal -> (classification, what it is, the next step)
_SIGNAL_RULES: Final[dict[str, tuple[Classification, str, str]]] = {
    "auth_error": (
        Classification.AUTH_FAILED,
        "credentials refused (401/403, invalid api key)",
        "one credentials incident: renew the refused provider credential for {backends} (its status "
        "is in GET /api/ai/providers), then resume the affected missions with resume_mission",
    ),
    "rate_limited": (
        Classification.INFRASTRUCTURE,
        "rate-limited by the provider (429/529, overloaded)",
        "one provider rate-limit incident on {backends}: stagger or pause new launches there, then "
        "resume the affected missions when the limit clears",
    ),
    "capacity_limited": (
        Classification.INFRASTRUCTURE,
        "capacity-limited (503, concurrent mission limit)",
        "one capacity incident on {backends}: check GET /api/health/fleet and the parallel cap before "
        "launching more, then resume the affected missions",
    ),
    "context_limit": (
        Classification.CONFIG_DEFECT,
        "hit the model's context limit",
        "move the affected missions to a larger-context model with update_mission_settings, then "
        "resume_mission",
    ),
    "network_error": (
        Classification.INFRASTRUCTURE,
        "network or edge errors (502/520-522, connection reset)",
        "one network incident on {backends}: usually transient — check the provider's edge and the "
        "host's egress, then resume the affected missions",
    ),
    "suspected_loop": (
        Classification.CHECK_FAILED,
        "repeating the same tool call with the same arguments",
        "send each looping mission a concrete hint with send_message_to_mission (naming the repeated "
        "tool), or switch its model",
    ),
}


def check_mission_signal(
    scan: SignalScan | SbxError, signal: str, *, target: str | None = None
) -> CheckResult:
    """One signal across the scanned missions: every mission showing it is one finding (one incident)."""
    target = target or signal

    def body() -> CheckResult:
        if isinstance(scan, SbxError):
            raise scan
        if signal not in _SIGNAL_RULES:
            raise BadResponseError(f"unknown get_mission_health signal {signal!r}")
        classification, what, step = _SIGNAL_RULES[signal]
        hits = [h for h in scan.scanned if signal in h.signals]
        evidence: dict[str, Any] = {
            "tool": "get_mission_health",
            "in_flight": scan.in_flight,
            "scanned": len(scan.scanned),
            "truncated": scan.truncated,
            "ask_errors": scan.errors[:_SHOWN],
            "missions": [
                {
                    "id": h.mission_id,
                    "title": h.title,
                    "status": h.status,
                    "backend": h.backend,
                    **({"loop_tool": h.loop_tool, "repeats": h.loop_repeats} if h.loop_tool else {}),
                    **({"recent_error": h.recent_error} if h.recent_error else {}),
                }
                for h in hits[:_SHOWN]
            ],
        }
        if scan.in_flight and not scan.scanned:
            raise BadResponseError(
                f"get_mission_health answered for none of {scan.in_flight} in-flight missions "
                f"({'; '.join(scan.errors[:2])})",
                evidence=evidence,
            )
        if not hits:
            return CheckResult.passed(
                CHECK_SIGNAL,
                target,
                f"no in-flight mission shows {signal} ({len(scan.scanned)} of {scan.in_flight} asked)",
                evidence,
            )
        backends = sorted({h.backend or "?" for h in hits})
        names = ", ".join(_brief({"title": h.title, "id": h.mission_id}) for h in hits[:3])
        if signal == "suspected_loop":
            loops: dict[str, int] = {}
            for h in hits:
                loops[h.loop_tool or "?"] = max(loops.get(h.loop_tool or "?", 0), h.loop_repeats)
            tools = ", ".join(f"`{t}` ({n}x)" for t, n in sorted(loops.items()))
            message = f"suspected loop in {len(hits)} mission(s): {tools} repeated with the same arguments — {names}"
            step = step + f" ({tools})"
        else:
            message = f"{signal}: {len(hits)} in-flight mission(s) {what} on {', '.join(backends)} — {names}"
        return CheckResult.failed(
            CHECK_SIGNAL,
            target,
            message,
            evidence,
            classification,
            cause=f"mission-signal:{signal}",
            recommendation=step.format(backends=", ".join(backends)) + f"; {_NOTHING_CHANGED}",
        )

    return run_check(CHECK_SIGNAL, target, body)
