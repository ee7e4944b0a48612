"""The workspace canary's verdict: the mission sees the checkout, its ref and pin, and reads a file over MCP."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from sbxcheck.checks.base import trim
from sbxcheck.checks.missions import (
    control_plane_error,
    ended_by_control_plane,
    not_dispatched,
    route_evidence,
    skip_or_error,
)
from sbxcheck.checks.toolsteps import StepOutcome, call_text, step_results, tool_outcome
from sbxcheck.clients.missionruns import CanaryRun, RouteRun
from sbxcheck.results import CheckResult, Classification, Outcome

SHA_RE = re.compile(r"\b[0-9a-f]{40}\b")
MOUNT_ERRORS = ("project not found", "file not found", "no such file", "not a git repository")


def _workspace_busy(check: str, target: str, workspace: str, run: RouteRun) -> CheckResult:
    """Another session's live mission holds the workspace: a conflict between runs, not a config defect.

    Nothing about the workspace was seen, so the verdict is ``error`` (could not tell), naming the
    holder: its mission id, title and, for an sbxcheck canary, the session tag its title carries.
    """
    assert run.rejection is not None
    holder = run.rejection.holder
    title = holder.get("title", "")
    words = title.split()
    tag = words[1] if len(words) > 1 and words[0] == "sbxcheck" else None
    who = f"session {tag}" if tag else "another session"
    ev = {
        **route_evidence(run),
        "workspace": workspace,
        "holder_mission_id": holder.get("mission_id"),
        "holder_title": title or None,
        "holder_session_tag": tag,
    }
    return CheckResult.errored(
        check,
        target,
        f"could not tell: workspace {workspace} is busy with {who}'s live mission "
        f"{holder.get('mission_id') or '?'} ({trim(title, 80)!r}); re-run when it has finished",
        Classification.INFRASTRUCTURE,
        ev,
        cause=f"workspace-busy:{workspace}",
    )


def check_workspace_visible(canary: CanaryRun) -> CheckResult:
    """The checkout, its ref and pin are visible to the mission, and an MCP tool returned the file's bytes."""
    spec = canary.spec
    check, target = "workspace_visible", spec.label
    if canary.not_dispatched is not None:
        return not_dispatched(check, target, canary.not_dispatched)
    if canary.skipped_incident:
        return CheckResult(
            check=check,
            target=target,
            outcome=Outcome.SKIPPED,
            message=f"not dispatched: backend {spec.backend} is blocked by incident {canary.skipped_incident}",
            evidence={"incident": canary.skipped_incident},
        )
    if canary.error is not None:
        return control_plane_error(check, target, canary.error, {})
    run = canary.run
    if run is None:
        return CheckResult.errored(check, target, "the canary did not run", Classification.INTERNAL_ERROR)
    early = skip_or_error(check, target, run)
    if early is not None:
        if run.rejection is not None and run.rejection.error_code == "workspace_occupied":
            return _workspace_busy(check, target, spec.workspace, run)
        if run.rejection is not None:
            return CheckResult.failed(
                check,
                target,
                f"canary create refused: {trim(run.rejection.reason, 200)}",
                route_evidence(run),
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
    pairs = step_results(run)
    outputs: dict[str, StepOutcome] = {}
    mcp_output: tuple[StepOutcome, str] | None = None
    for call, result in pairs:
        outcome = tool_outcome(result)
        name = str(call.get("tool_name") or "")
        if "read_file" in name and name.startswith("mcp"):
            mcp_output = (outcome, name)
        else:
            outputs[call_text(call)] = outcome

    def step(prefix: str) -> StepOutcome | None:
        return next((v for k, v in outputs.items() if k.startswith(prefix)), None)

    problems: list[str] = []
    mount_signals: list[str] = []
    failed_steps: dict[str, str] = {}

    def failed(label: str, outcome: StepOutcome | None) -> bool:
        """A step that ran and failed: its text is a mount signal, never evidence of what it read."""
        if outcome is None or outcome.ok:
            return False
        failed_steps[label] = str(outcome.failure)
        mount_signals.append(trim(outcome.text, 120))
        return True

    seen_path = step(f"ls -d {spec.checkout}")
    ls_failed = failed("ls", seen_path)
    ev["checkout_visible"] = bool(seen_path and seen_path.ok and spec.checkout in seen_path.text)
    if not ev["checkout_visible"]:
        problems.append(f"checkout {spec.checkout} not visible in the mission's scope")
    head = step(f"git -C {spec.checkout} rev-parse HEAD")
    found = SHA_RE.search(head.text) if head and not failed("git rev-parse", head) else None
    sha = found.group(0) if found else None
    ev["head"], ev["expected_ref"] = sha, spec.ref
    if sha is None or (spec.ref and sha != spec.ref):
        problems.append(
            "git ref not readable"
            if sha is None
            else f"HEAD {sha[:12]} != expected {spec.ref[:12] if spec.ref else ''}"
        )
    if spec.pin_file:
        pin = step(f"cat {spec.checkout}/{spec.pin_file}")
        value = pin.text.strip() if pin and not failed(f"cat {spec.pin_file}", pin) else None
        ev["pin"], ev["expected_pin"] = value or None, spec.pin
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
        mcp, tool = mcp_output
        ev["mcp_tool"] = tool
        if failed(tool, mcp):
            ev["mcp_sha256"] = None
            problems.append(f"MCP {tool} failed ({mcp.failure}): {trim(mcp.text, 120)}")
        else:
            digest = hashlib.sha256(mcp.text.encode()).hexdigest()
            ev["mcp_sha256"] = digest
            if canary.exec_sha256 is None:
                problems.append(
                    f"no independent sha256 of {spec.mcp_file} (workspace exec: {canary.exec_error})"
                )
            elif digest != canary.exec_sha256:
                problems.append(
                    f"MCP content sha256 {digest[:12]} != workspace exec sha256 {canary.exec_sha256[:12]}"
                )
    if failed_steps:
        ev["failed_steps"] = failed_steps
    ev["steps_seen"] = len(pairs)
    ended = ended_by_control_plane(check, target, run, ev) if problems else None
    if ended is not None:  # a deploy or the watchdog ended it: say so, not which step it never ran
        return ended
    if not problems:
        return CheckResult.passed(
            check,
            target,
            f"{spec.backend} sees {spec.checkout} at {sha[:12] if sha else '?'}"
            f"; MCP read matches exec sha256",
            ev,
        )
    # the mission ran `ls -d <checkout>` and it failed (whatever shape said so), or a failed step named a
    # missing project/file: the checkout is not mounted in the mission's scope
    if not ev["checkout_visible"] and (
        ls_failed or any(s in " ".join(mount_signals).lower() for s in MOUNT_ERRORS)
    ):
        ev["mount_signals"] = mount_signals[:4]
        return CheckResult.failed(
            check,
            target,
            f"{spec.backend} sees no checkout {spec.checkout} in {spec.workspace} (failed steps: "
            + (", ".join(f"{k} [{v}]" for k, v in failed_steps.items()) or "none")
            + "): workspace mount defect",
            ev,
            Classification.WORKSPACE_MOUNT_DEFECT,
            recommendation="a control-plane mount/path propagation defect for this backend, not a Lean or MCP "
            "failure; at most one bounded, no-deploy repair with a regression test, then re-run the canary",
        )
    return CheckResult.failed(check, target, "; ".join(problems), ev)
