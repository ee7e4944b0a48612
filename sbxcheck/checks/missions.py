"""Mission route-health verdicts and the /goal prompt limit (specs/sandboxed-sh.md, 8.3 to 8.10).

Pure functions over what the dispatcher saw (``RouteRun``). A mission reaching ``pending`` proves
nothing: the record must echo the request and there must be execution evidence (a tool_call,
tool_result or assistant_message). The agent's own summary is never evidence. The workspace
canary's verdict (``checks/workspace.py``) starts from the same non-verdicts (``skip_or_error``,
``not_dispatched``).
"""

from __future__ import annotations

from typing import Any

from sbxcheck.checks.base import not_served, trim
from sbxcheck.clients.missionruns import TERMINAL, RouteRun, adapter_crash_cause, crash_signature
from sbxcheck.errors import NotServed, SbxError, service_cause
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.spend import mission_cost

#: terminal_reason values that say the control plane, not the route, ended a mission (v0.7.0 control.rs:4259,
#: 1.3.0 control/mod.rs:8830-8841, cba9502's webhook table in control/mod.rs, upstream #417 and #797), with
#: the classification an operator expects: a deploy or a lost node is infrastructure, never a route failure.
ENDED_BY: dict[str, tuple[Classification, str]] = {
    "server_shutdown": (Classification.INFRASTRUCTURE, "the control plane shut down (a deploy or restart) mid-run"),
    "orphan_no_runner": (Classification.INFRASTRUCTURE, "the control plane found it without a runner (a restart)"),
    "remote_node_lost": (Classification.INFRASTRUCTURE, "its remote node stopped answering"),
    "force_killed_after_cancel_timeout": (
        Classification.INFRASTRUCTURE,
        "the watchdog force-killed it after a cancel did not finish in time",
    ),
    "capacity_limited": (Classification.INFRASTRUCTURE, "the provider refused it for capacity"),
    "deadline_exceeded": (Classification.TIMEOUT, "its deadline passed before the control plane dispatched it"),
    "watchdog_stalled": (Classification.TIMEOUT, "the watchdog ended it as stalled"),
    "stalled": (Classification.TIMEOUT, "the control plane ended it as stalled (no progress)"),
    "rate_limited": (Classification.RATE_LIMITED, "the provider rate-limited every retry"),
    "auth_error": (Classification.AUTH_FAILED, "the provider refused its credentials"),
}
GOAL_LIMIT = 4000
GOAL_WARN = 3500
EFFORT_BACKENDS = frozenset({"codex", "claudecode"})
IDEMPOTENCY_CAUSE = "control-plane-idempotency-ignored"  # one server-wide defect: one incident


def route_evidence(run: RouteRun) -> dict[str, Any]:
    """The evidence every route verdict starts from: the channel, what was requested, the mission id."""
    ev: dict[str, Any] = {"via": run.route.via, "requested": dict(run.requested)}
    if run.mission_id:
        ev["mission_id"] = run.mission_id
    return ev


def control_plane_error(check: str, target: str, error: SbxError, evidence: dict[str, Any]) -> CheckResult:
    """A transport-level failure: every item that met the same one shares a cause, so it is one incident.

    The cause names the service when the error knows it, as every other item's error does (one
    refused control plane, or one dead token, is one incident across routes, canaries and discovery).
    """
    if isinstance(error, NotServed):  # the release lacks what the item needs: a skip, never an outage
        return not_served(check, target, error, evidence)
    return CheckResult.errored(
        check,
        target,
        error.message,
        error.classification,
        {**evidence, **error.evidence},
        cause=service_cause(error) or error.cause or f"control-plane-{error.classification.value}",
        recommendation=error.recommendation,
    )


def skip_or_error(check: str, target: str, run: RouteRun) -> CheckResult | None:
    """The common non-verdicts: blocked by an incident, a transport error, or nothing dispatched."""
    if run.skipped_incident:
        return CheckResult(
            check=check,
            target=target,
            outcome=Outcome.SKIPPED,
            message=f"not dispatched: its backend is blocked by incident {run.skipped_incident}",
            evidence={"incident": run.skipped_incident},
        )
    if run.error is not None:
        return control_plane_error(check, target, run.error, route_evidence(run))
    if run.created is None:
        return CheckResult(
            check=check,
            target=target,
            outcome=Outcome.SKIPPED,
            message="no mission was created (see the route's dispatched item)",
            evidence=route_evidence(run),
        )
    return None


def ended_by_control_plane(check: str, target: str, run: RouteRun, ev: dict[str, Any]) -> CheckResult | None:
    """The verdict on a mission the control plane ended for a reason of its own (its ``terminal_reason``,
    :data:`ENDED_BY`): what ended it, never "failed dispatch" or "no execution evidence". Infrastructure
    (a deploy, a lost node) is "could not tell", one incident per reason; None for any other end."""
    record = run.last or run.record or {}
    reason = record.get("terminal_reason")
    status = run.status
    if status not in TERMINAL or status == "completed" or not isinstance(reason, str) or reason not in ENDED_BY:
        return None
    classification, meaning = ENDED_BY[reason]
    ev.update(terminal_reason=reason, terminal_evidence=record.get("terminal_evidence"))
    message = f"{status}: terminal_reason {reason} — {meaning}; the route itself was not judged"
    if classification is Classification.INFRASTRUCTURE:
        return CheckResult.errored(
            check,
            target,
            message,
            classification,
            ev,
            cause=f"control-plane-ended:{reason}",
            recommendation=f"the control plane ended the mission ({reason}): once it is steady again, re-run; "
            "nothing was changed",
        )
    return CheckResult.failed(check, target, message, ev, classification, cause=f"control-plane-ended:{reason}")


# ------------------------------------------------------------------ dispatched


def not_dispatched(check: str, target: str, doomed: CheckResult) -> CheckResult:
    """The verdict of a route kept back by a failed readiness item (same classification and cause: one incident), or
    by the spend cap (an ``error``: not checked, says why)."""
    if doomed.outcome is Outcome.ERROR:
        return CheckResult.errored(
            check,
            target,
            doomed.message,
            doomed.classification or Classification.INTERNAL_ERROR,
            {"not_run": doomed.check, **doomed.evidence},
            recommendation=doomed.recommendation,
        )
    return CheckResult.failed(
        check,
        target,
        f"not dispatched: {doomed.check}[{doomed.target}] failed — {doomed.message}",
        {"readiness": {"check": doomed.check, "target": doomed.target, **doomed.evidence}},
        doomed.classification or Classification.CONFIG_DEFECT,
        cause=doomed.cause,
        recommendation=doomed.recommendation,
    )


def check_dispatched(run: RouteRun) -> CheckResult:
    """The create was accepted, once, at the requested effort (or the ladder says where it landed)."""
    check, target = "dispatched", run.route.label
    if run.not_dispatched is not None:
        return not_dispatched(check, target, run.not_dispatched)
    if run.skipped_incident or run.error is not None:
        return skip_or_error(check, target, run) or CheckResult.errored(
            check, target, "?", Classification.INTERNAL_ERROR
        )
    ev = route_evidence(run)
    ev["idempotency_key"] = (
        run.idempotency_key if run.created is None or run.created.idempotency_supported else None
    )
    ev["effort_attempts"] = run.effort_attempts
    if run.rejection is not None:
        rej = run.rejection
        ev.update(status=rej.status, reason=trim(rej.reason, 400))
        if rej.valid_models:
            ev["valid_models"] = rej.valid_models
            return CheckResult.failed(
                check,
                target,
                f"model {run.requested['model_override']!r} is not a catalog id for {run.route.backend}; "
                f"valid ids: {', '.join(rej.valid_models[:8])}",
                ev,
                Classification.CONFIG_DEFECT,
                recommendation="copy an exact id from the valid list into the inventory (never guess variants)",
            )
        tried = [a["effort"] for a in run.effort_attempts if a.get("effort")]
        if tried and (rej.supported_efforts or "model_effort" in rej.reason):
            # only a route that asked for an effort walked a ladder; a 400 that merely echoes the
            # field name on a route without one is an ordinary refusal (below)
            ev["supported_efforts"] = rej.supported_efforts
            return CheckResult.failed(
                check,
                target,
                f"no effort on the ladder was accepted (tried {', '.join(map(str, tried))}): "
                f"{trim(rej.reason, 200)}",
                ev,
                Classification.CONFIG_DEFECT,
            )
        return CheckResult.failed(
            check, target, f"create refused (HTTP {rej.status}): {trim(rej.reason, 200)}", ev
        )
    assert run.created is not None
    mission = run.created.mission
    ev.update(
        status_at_create=mission.get("status"),
        coalesced_with=run.created.coalesced_with,
        idempotency_supported=run.created.idempotency_supported,
    )
    if run.created.older_create:  # an older release: the prompt went as the first message, no key retry
        ev.update(older_create=run.created.older_create, first_message=run.created.first_message)
    if run.slot_waited_s is not None:  # every slot was taken: it waited its turn, then started in its own
        ev.update(slot_waited_s=run.slot_waited_s, slot_refusal=run.slot_refusal)
    ignored = _idempotency_ignored(run, ev)
    if ignored is not None:
        return CheckResult.failed(
            check,
            target,
            ignored,
            ev,
            cause=IDEMPOTENCY_CAUSE,
            recommendation="the control plane does not honour idempotency_key: retried dispatches duplicate "
            "work; fix the lease before relying on retries",
        )
    requested, accepted = run.requested["model_effort"], run.accepted_effort
    if requested and accepted != requested:
        ev["accepted_effort"] = accepted
        return CheckResult.failed(
            check,
            target,
            f"route degraded: model_effort {requested!r} rejected, {accepted!r} accepted "
            f"(ladder {' → '.join(str(a['effort']) for a in run.effort_attempts)})",
            ev,
            Classification.DEGRADED,
        )
    return CheckResult.passed(
        check, target, f"mission {run.mission_id} created ({mission.get('status')})", ev
    )


def _idempotency_ignored(run: RouteRun, ev: dict[str, Any]) -> str | None:
    """Why the key retry shows the key was ignored, or None (honoured, not probed, or inconclusive).

    The retry differs from the first create in title and prompt, so title coalescing cannot match it:
    only ``idempotency_key`` can return the first mission.
    """
    if run.retry_rejection is not None:
        rej = run.retry_rejection
        ev.update(retry_status=rej.status, retry_reason=trim(rej.reason, 300))
        return (
            f"idempotency ignored: a retried create with the same key was refused (HTTP {rej.status}: "
            f"{trim(rej.reason, 120)}) instead of returning mission {run.mission_id}"
        )
    if run.retry_joined is not None:  # the key's lease names another's mission: not this session's key
        ev["retry_joined"] = run.retry_joined
        return f"a retried create with the same key was answered with {run.retry_joined}, not this session's"
    if run.retry is None:
        return None
    retry_id = run.retry.mission.get("id")
    ev.update(
        retry_mission_id=retry_id,
        retry_coalesced_with=run.retry.coalesced_with,
        retry_differs_in="title and prompt (only the key can match)",
    )
    if retry_id == run.mission_id:
        ev["idempotency"] = "honoured: the retry returned the first mission"
        return None
    if run.first_status_at_retry == "failed":  # a failed holder does not coalesce (spec 3.4 step 5)
        ev["idempotency"] = "inconclusive: the first mission had failed before the retry"
        return None
    return (
        f"idempotency ignored: a retried create with the same key made a second mission {retry_id} "
        f"(both are cancelled at teardown)"
    )


# ------------------------------------------------------------------ record echoes request


def model_match(requested: str | None, stored: object) -> str:
    """``exact``, ``normalised`` (provider prefix added/stripped, alias expanded), ``missing`` or ``different``."""
    if requested is None:
        return "not_requested"
    if not stored:
        return "missing"
    if not isinstance(stored, str):  # a record that is not what the API documents is never a match
        return "different"
    if stored == requested:
        return "exact"
    if (
        stored.endswith("/" + requested)
        or requested.endswith("/" + stored)
        or stored.startswith(requested + "-")
        or stored.split("/")[-1] == requested.split("/")[-1]
    ):
        return "normalised"
    return "different"


def check_record_echoes_request(run: RouteRun) -> CheckResult:
    """The stored record shows the requested agent, backend, model (modulo normalisation) and effort."""
    check, target = "record_echoes_request", run.route.label
    early = skip_or_error(check, target, run)
    if early is not None:
        return early
    assert run.created is not None
    record = run.record or run.created.mission
    created = run.created.mission
    ev = route_evidence(run)
    stored = {k: record.get(k) for k in ("backend", "model_override", "model_effort")}
    stored["agent"] = created.get("agent", record.get("agent"))  # only a full read of a mission carries agent
    ev["stored"] = stored
    problems: list[str] = []
    notes: list[str] = []
    if stored["backend"] != run.requested["backend"]:
        problems.append(f"backend is {stored['backend']!r}, requested {run.requested['backend']!r}")
    if run.requested["agent"] and stored["agent"] != run.requested["agent"]:
        problems.append(f"agent is {stored['agent']!r}, requested {run.requested['agent']!r}")
    match = model_match(run.requested["model_override"], stored["model_override"])
    ev["model_match"] = match
    if match == "normalised":
        notes.append(
            f"model normalised by the server: {run.requested['model_override']!r} → {stored['model_override']!r}"
        )
    elif match in ("missing", "different"):
        problems.append(
            f"model_override is {stored['model_override']!r}, requested {run.requested['model_override']!r}"
        )
    effort = run.accepted_effort or run.requested["model_effort"]
    older = run.created.older_create
    if run.route.backend in EFFORT_BACKENDS and effort and older and stored["model_effort"] is None:
        ev["effort"] = older  # the release has no model_effort: nothing to echo
        notes.append(f"model_effort {effort!r} {older.split(':', 1)[0]}")
    elif run.route.backend in EFFORT_BACKENDS:
        if effort and stored["model_effort"] != effort:
            problems.append(f"model_effort is {stored['model_effort']!r}, requested/accepted {effort!r}")
        ev["effort"] = "checked" if effort else "not requested"
    else:
        ev["effort"] = "not applicable (the server drops model_effort for this backend)"
    ev["notes"] = notes
    if problems:
        return CheckResult.failed(
            check, target, "record does not echo the request: " + "; ".join(problems), ev
        )
    return CheckResult.passed(
        check, target, "record echoes the request" + (f" ({notes[0]})" if notes else ""), ev
    )


# ------------------------------------------------------------------ reaches execution


def _evidence_events(run: RouteRun) -> list[dict[str, Any]]:
    return [e for e in run.events if e.get("event_type") in ("tool_call", "tool_result", "assistant_message")]


def no_usable_answer(check: str, target: str, run: RouteRun, retry: RouteRun) -> CheckResult:
    """The no-output rule: the first mission ended silent; judge the one direct-output retry of the same route."""
    from sbxcheck.clients.missionruns import assistant_content

    model = run.route.model_override or "(default model)"
    first_errors = [
        trim(str(e.get("content") or ""), 200) for e in run.events if e.get("event_type") == "error"
    ]
    ev = route_evidence(run)
    ev["no_output"] = {
        "first": {"mission_id": run.mission_id, "status": run.status, "errors": first_errors[-2:]},
        "retry": {
            "mission_id": retry.mission_id,
            "status": retry.status,
            "prompt": "bounded direct-output (no tools, one line)",
            "errors": [
                trim(str(e.get("content") or ""), 200) for e in retry.events if e.get("event_type") == "error"
            ][-2:],
            "problem": retry.error.message
            if retry.error
            else (retry.rejection.reason if retry.rejection else None),
        },
        "substituted": False,
    }
    if retry.created is not None and assistant_content(retry.events):
        return CheckResult.passed(
            check,
            target,
            f"WARNING: the first mission ended without output; the one direct-output retry of {model} answered",
            ev,
        )
    return CheckResult.failed(
        check,
        target,
        f"addressed, no usable answer: {model} via {run.route.backend} ended without any assistant content, "
        "and so did its one bounded direct-output retry (never substituted with another model)",
        ev,
        Classification.NO_USABLE_ANSWER,
        cause=f"no-usable-answer:{run.route.backend}:{model}",
        recommendation=(
            f"report {model} as addressed with no usable answer; synthesise only from routes that answered "
            "and keep the provider failure apart from any conclusion; no second retry, no substitute model"
        ),
    )


def check_reaches_execution(run: RouteRun, *, blocked_signature: str | None = None) -> CheckResult:
    """Active or completed within the deadline, with execution evidence from the events."""
    check, target = "reaches_execution", run.route.label
    early = skip_or_error(check, target, run)
    if early is not None:
        return early
    if run.output_retry is not None:  # the no-output rule: the retry decides
        return no_usable_answer(check, target, run, run.output_retry)
    ev = route_evidence(run)
    status = run.status
    evidence = _evidence_events(run)
    ev.update(
        status=status,
        waited_s=run.waited_s,
        settled_s=run.settled_s,
        deadline_s=run.deadline_s,
        timeline=run.timeline,
        events_seen=len(run.events),
        evidence_events=len(evidence),
        followed_by=run.followed_by,  # the live stream or polling; the verdict rests on stored rows either way
        reads=run.reads,
    )
    if evidence:
        first = evidence[0]
        ev["first_evidence"] = {
            "type": first.get("event_type"),
            "sequence": first.get("sequence"),
            "tool": first.get("tool_name"),
        }
    errors = [trim(str(e.get("content") or ""), 300) for e in run.events if e.get("event_type") == "error"]
    if errors:
        ev["error_events"] = errors[-3:]
    unreadable = mission_cost(run.events).unreadable
    if unreadable is not None:  # the mission's own reported cost is unusable: said where it came from
        ev["cost_unreadable"] = f"bad_response: {unreadable}"
    ended = ended_by_control_plane(check, target, run, ev)
    if ended is not None:
        return ended
    if evidence and status in ("active", "completed", "awaiting_user"):
        return CheckResult.passed(
            check, target, f"{status} with execution evidence ({len(evidence)} events)", ev
        )
    if status == "pending":
        return CheckResult.failed(
            check,
            target,
            f"still pending after {run.waited_s:.0f}s (deadline "
            f"{run.deadline_s:.0f}s from dispatch): dispatched but never started",
            ev,
            Classification.TIMEOUT,
        )
    if status == "awaiting_user" and not evidence:
        return CheckResult.failed(
            check,
            target,
            "parked in awaiting_user before any tool call"
            + (f": {errors[-1]}" if errors else "")
            + " — a failed dispatch, no model verdict",
            ev,
            Classification.TRANSPORT_FAILURE,
        )
    if status in TERMINAL and not evidence:
        signature = crash_signature(run.events)
        ev["signature"] = signature
        if signature and blocked_signature == signature:
            return CheckResult.failed(
                check,
                target,
                f"{status} before any tool call: {signature} (shared adapter crash)",
                ev,
                Classification.INFRASTRUCTURE,
                cause=adapter_crash_cause(run.route.backend, signature),
                recommendation=f"stop launching {run.route.backend}; open exactly one bounded repair mission on a "
                "reliable route, then validate with one narrow probe before relaunching",
            )
        return CheckResult.failed(
            check,
            target,
            f"{status} before any tool call"
            + (f": {errors[-1]}" if errors else "")
            + " — a failed dispatch, no model verdict",
            ev,
            Classification.TRANSPORT_FAILURE,
        )
    return CheckResult.failed(
        check,
        target,
        f"{status} without execution evidence after {run.waited_s:.0f}s (deadline {run.deadline_s:.0f}s "
        "from dispatch)",
        ev,
        Classification.TIMEOUT,
    )


# ------------------------------------------------------------------ /goal limit


def check_prompt_limits(name: str, prompt: str) -> CheckResult:
    """A codex ``/goal`` objective over 4000 characters is refused by Codex's goal API; over 3500 is a warning."""
    check = "prompt_limits"
    stripped = prompt.lstrip()
    is_goal = stripped.startswith("/goal ")
    objective = stripped[len("/goal ") :] if is_goal else ""
    ev: dict[str, Any] = {"chars": len(prompt), "is_goal": is_goal, "limit": GOAL_LIMIT, "warn_at": GOAL_WARN}
    if not is_goal:
        return CheckResult.passed(check, name, f"not a /goal prompt ({len(prompt)} characters)", ev)
    ev["objective_chars"] = len(objective)
    if len(objective) > GOAL_LIMIT:
        return CheckResult.failed(
            check,
            name,
            f"/goal objective is {len(objective)} characters; Codex rejects "
            f"over {GOAL_LIMIT} — shorten it (move context to a linked doc)",
            ev,
            Classification.CONFIG_DEFECT,
        )
    if len(objective) > GOAL_WARN:
        ev["warning"] = f"objective over {GOAL_WARN} characters: keep only the durable objective"
    return CheckResult.passed(
        check, name, f"/goal objective is {len(objective)} characters (≤ {GOAL_LIMIT})", ev
    )
