"""Mission route-health and workspace-visibility verdicts (specs/sandboxed-sh.md §8.3–§8.10).

Pure functions over what the dispatcher saw (``RouteRun``/``CanaryRun``). A mission reaching
``pending`` proves nothing: the record must echo the request and there must be execution evidence
(a tool_call, tool_result or assistant_message). The agent's own summary is never evidence.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from sbxcheck.checks.base import trim
from sbxcheck.errors import SbxError
from sbxcheck.lifecycle import TERMINAL, CanaryRun, RouteRun, adapter_crash_cause, crash_signature
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.safeio import loads_bounded

GOAL_LIMIT = 4000
GOAL_WARN = 3500
EFFORT_BACKENDS = frozenset({"codex", "claudecode"})
SHA_RE = re.compile(r"\b[0-9a-f]{40}\b")
MOUNT_ERRORS = ("project not found", "file not found", "no such file", "not a git repository")


def _base(run: RouteRun) -> dict[str, Any]:
    ev: dict[str, Any] = {"via": run.route.via, "requested": dict(run.requested)}
    if run.mission_id:
        ev["mission_id"] = run.mission_id
    return ev


def _control_plane_error(check: str, target: str, error: SbxError, evidence: dict[str, Any]) -> CheckResult:
    """A transport-level failure: every item that met the same one shares a cause, so it is one incident."""
    return CheckResult.errored(
        check,
        target,
        error.message,
        error.classification,
        {**evidence, **error.evidence},
        cause=f"control-plane-{error.classification.value}",
    )


def _skip_or_error(check: str, target: str, run: RouteRun) -> CheckResult | None:
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
        return _control_plane_error(check, target, run.error, _base(run))
    if run.created is None:
        return CheckResult(
            check=check,
            target=target,
            outcome=Outcome.SKIPPED,
            message="no mission was created (see the route's dispatched item)",
            evidence=_base(run),
        )
    return None


# ------------------------------------------------------------------ dispatched


def check_dispatched(run: RouteRun) -> CheckResult:
    """The create was accepted, once, at the requested effort (or the ladder says where it landed)."""
    check, target = "dispatched", run.route.label
    if run.skipped_incident or run.error is not None:
        return _skip_or_error(check, target, run) or CheckResult.errored(
            check, target, "?", Classification.INTERNAL_ERROR
        )
    ev = _base(run)
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
        if rej.supported_efforts or "model_effort" in rej.reason:
            ev["supported_efforts"] = rej.supported_efforts
            return CheckResult.failed(
                check,
                target,
                f"no effort on the ladder was accepted: {trim(rej.reason, 200)}",
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
    if run.retry is not None:
        retry_id = run.retry.mission.get("id")
        ev.update(retry_mission_id=retry_id, retry_coalesced_with=run.retry.coalesced_with)
        if retry_id != run.mission_id:
            return CheckResult.failed(
                check,
                target,
                f"idempotency ignored: a retried create with the same key made a second mission {retry_id} "
                f"(both are cancelled at teardown)",
                ev,
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


# ------------------------------------------------------------------ record echoes request


def model_match(requested: str | None, stored: str | None) -> str:
    """``exact``, ``normalised`` (provider prefix added/stripped, alias expanded), ``missing`` or ``different``."""
    if requested is None:
        return "not_requested"
    if not stored:
        return "missing"
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
    early = _skip_or_error(check, target, run)
    if early is not None:
        return early
    assert run.created is not None
    record = run.record or run.created.mission
    created = run.created.mission
    ev = _base(run)
    stored = {k: record.get(k) for k in ("backend", "model_override", "model_effort")}
    stored["agent"] = created.get("agent", record.get("agent"))  # only full reads carry agent (§3.5)
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
    if run.route.backend in EFFORT_BACKENDS:
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


def check_reaches_execution(run: RouteRun, *, blocked_signature: str | None = None) -> CheckResult:
    """Active or completed within the deadline, with execution evidence from the events."""
    check, target = "reaches_execution", run.route.label
    early = _skip_or_error(check, target, run)
    if early is not None:
        return early
    ev = _base(run)
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
    if evidence and status in ("active", "completed", "awaiting_user"):
        return CheckResult.passed(
            check, target, f"{status} with execution evidence ({len(evidence)} events)", ev
        )
    if status == "pending":
        return CheckResult.failed(
            check,
            target,
            f"still pending after {run.waited_s:.0f}s (deadline "
            f"{run.deadline_s:.0f}s): dispatched but never started",
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
                "reliable route, then validate with one narrow probe before relaunching (§8.8)",
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
        f"{status} without execution evidence after {run.waited_s:.0f}s",
        ev,
        Classification.TIMEOUT,
    )


# ------------------------------------------------------------------ workspace visibility


def _step_results(run: RouteRun) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(tool_call, its tool_result) pairs in order, matched by tool_call_id."""
    results = {e.get("tool_call_id"): e for e in run.events if e.get("event_type") == "tool_result"}
    return [(e, results.get(e.get("tool_call_id"))) for e in run.events if e.get("event_type") == "tool_call"]


def _call_text(call: dict[str, Any]) -> str:
    content = call.get("content")
    try:
        doc = loads_bounded(content) if isinstance(content, str) else content
    except ValueError:
        return str(content or "")
    if isinstance(doc, dict):
        return str(doc.get("command") or doc.get("path") or doc)
    return str(doc)


def check_workspace_visible(canary: CanaryRun) -> CheckResult:
    """The checkout, its ref and pin are visible to the mission, and an MCP tool returned the file's bytes."""
    spec = canary.spec
    check, target = "workspace_visible", spec.label
    if canary.skipped_incident:
        return CheckResult(
            check=check,
            target=target,
            outcome=Outcome.SKIPPED,
            message=f"not dispatched: backend {spec.backend} is blocked by incident {canary.skipped_incident}",
            evidence={"incident": canary.skipped_incident},
        )
    if canary.error is not None:
        return _control_plane_error(check, target, canary.error, {})
    run = canary.run
    if run is None:
        return CheckResult.errored(check, target, "the canary did not run", Classification.INTERNAL_ERROR)
    early = _skip_or_error(check, target, run)
    if early is not None:
        if run.rejection is not None:
            return CheckResult.failed(
                check,
                target,
                f"canary create refused: {trim(run.rejection.reason, 200)}",
                _base(run),
                Classification.CONFIG_DEFECT,
            )
        return early
    ev: dict[str, Any] = {
        "mission_id": run.mission_id,
        "backend": spec.backend,
        "workspace": spec.workspace,
        "checkout": spec.checkout,
        "status": run.status,
    }
    pairs = _step_results(run)
    outputs: dict[str, tuple[str, bool]] = {}
    mcp_output: tuple[str, bool, str] | None = None
    for call, result in pairs:
        text = str(result.get("content") or "") if result else ""
        failed = bool(result is None or (result.get("metadata") or {}).get("is_error"))
        name = str(call.get("tool_name") or "")
        if "read_file" in name and name.startswith("mcp"):
            mcp_output = (text, failed, name)
        else:
            outputs[_call_text(call)] = (text, failed)

    def step(prefix: str) -> tuple[str, bool] | None:
        return next((v for k, v in outputs.items() if k.startswith(prefix)), None)

    problems: list[str] = []
    mount_signals: list[str] = []
    seen_path = step(f"ls -d {spec.checkout}")
    ev["checkout_visible"] = bool(seen_path and not seen_path[1] and spec.checkout in seen_path[0])
    if not ev["checkout_visible"]:
        problems.append(f"checkout {spec.checkout} not visible in the mission's scope")
        if seen_path:
            mount_signals.append(trim(seen_path[0], 120))
    head = step(f"git -C {spec.checkout} rev-parse HEAD")
    found = SHA_RE.search(head[0]) if head and not head[1] else None
    sha = found.group(0) if found else None
    ev["head"], ev["expected_ref"] = sha, spec.ref
    if sha is None or (spec.ref and sha != spec.ref):
        problems.append(
            "git ref not readable"
            if sha is None
            else f"HEAD {sha[:12]} != expected {spec.ref[:12] if spec.ref else ''}"
        )
        if head:
            mount_signals.append(trim(head[0], 120))
    if spec.pin_file:
        pin = step(f"cat {spec.checkout}/{spec.pin_file}")
        value = pin[0].strip() if pin and not pin[1] else None
        ev["pin"], ev["expected_pin"] = value, spec.pin
        if not value or (spec.pin and value != spec.pin):
            problems.append(
                f"{spec.pin_file} not readable"
                if not value
                else f"{spec.pin_file} is {value!r}, expected {spec.pin!r}"
            )
    ev["exec_sha256"] = canary.exec_sha256
    if mcp_output is None:
        problems.append("no registered MCP tool was called to read the file")
    else:
        text, failed, tool = mcp_output
        digest = hashlib.sha256(text.encode()).hexdigest()
        ev["mcp_tool"], ev["mcp_sha256"] = tool, digest if not failed else None
        if failed:
            problems.append(f"MCP {tool} failed: {trim(text, 120)}")
            mount_signals.append(trim(text, 120))
        elif canary.exec_sha256 is None:
            problems.append(f"no independent sha256 of {spec.mcp_file} (workspace exec: {canary.exec_error})")
        elif digest != canary.exec_sha256:
            problems.append(
                f"MCP content sha256 {digest[:12]} != workspace exec sha256 {canary.exec_sha256[:12]}"
            )
    ev["steps_seen"] = len(pairs)
    if not problems:
        return CheckResult.passed(
            check,
            target,
            f"{spec.backend} sees {spec.checkout} at {sha[:12] if sha else '?'}"
            f"; MCP read matches exec sha256",
            ev,
        )
    if not ev["checkout_visible"] and any(s in " ".join(mount_signals).lower() for s in MOUNT_ERRORS):
        ev["mount_signals"] = mount_signals[:4]
        return CheckResult.failed(
            check,
            target,
            f"{spec.backend} sees no checkout in {spec.workspace} (ephemeral directory; MCP: project/file not found): "
            "workspace mount defect",
            ev,
            Classification.WORKSPACE_MOUNT_DEFECT,
            recommendation="a control-plane mount/path propagation defect for this backend, not a Lean or MCP "
            "failure; at most one bounded, no-deploy repair with a regression test, then re-run the canary",
        )
    return CheckResult.failed(check, target, "; ".join(problems), ev)


# ------------------------------------------------------------------ /goal limit


def check_prompt_limits(name: str, prompt: str) -> CheckResult:
    """A codex ``/goal`` objective must be at most 4000 characters; over 3500 is a warning (§8.4)."""
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
