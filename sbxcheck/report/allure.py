"""Allure annotations for one sbxcheck item (used only with ``--alluredir``, allure-pytest installed).

- labels: parentSuite = the suite (gate/canary/triage), suite = the check, subSuite = the target,
  feature = the check, severity (by suite and classification), tag = the classification;
- parameters: allure-pytest takes pytest's parameters, which sbxcheck keeps stable (run ids,
  models, route labels, never objects), so ``historyId`` links nightly runs; ``run``, ``model`` and
  ``route`` are added for display only (excluded from the history id). A gate item's parameters
  name its run id, which is new every night (``demo-20261201-9f0e11``): they are excluded too and
  its history rests on ``identity``, the item's stable identity (check, roster model, run name:
  ``gate/C_model_answers/google/gemini-3.6-flash@demo``, as the history uses);
- the incident (when the failure has a cause another item can share) as a link to report.html;
- one step per remote command or HTTP call the evidence records, with its duration;
- description: classification, message, key evidence and next step; the full evidence attached.

Every string passes the one redactor, :func:`sbxcheck.redact.default_redactor`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sbxcheck.display import for_display
from sbxcheck.report.present import detail_block, evidence_json
from sbxcheck.results import CheckResult, Classification

__all__ = ["annotate", "incident_candidate", "severity", "steps_from_evidence"]


def severity(suite: str, result: CheckResult) -> str:
    """Allure severity: a leaked secret blocks; the gate is critical; canaries and triage are normal."""
    if result.classification is Classification.SECURITY_EXPOSURE:
        return "blocker"
    return "critical" if suite == "gate" else "normal"


def incident_candidate(result: CheckResult) -> str | None:
    """The incident id this result joins when others share its cause (same rule as the report)."""
    from sbxcheck.report.incidents import TARGET_CLASSIFICATIONS, incident_id

    if result.classification is None or result.outcome.value not in ("failed", "error"):
        return None
    if result.cause:
        return incident_id(result.classification, result.cause.strip(), kind="cause")
    if result.classification in TARGET_CLASSIFICATIONS:
        return incident_id(result.classification, result.target, kind="target")
    return None


def steps_from_evidence(evidence: Mapping[str, Any]) -> list[tuple[str, float | None]]:
    """(title, seconds) for each remote command or HTTP call the evidence names.

    Reads ``evidence["calls"]`` (a list of ``{"command"|"url"|"name", "duration_s"}``) when a check
    records its calls, else the one command in ``evidence["ran"]`` on ``evidence["host"]``.
    """
    steps: list[tuple[str, float | None]] = []
    calls = evidence.get("calls")
    if isinstance(calls, list):
        for call in calls:
            if not isinstance(call, Mapping):
                continue
            title = call.get("command") or call.get("url") or call.get("name")
            if title:
                method = f"{call['method']} " if call.get("method") else ""
                duration = call.get("duration_s")
                steps.append(
                    (f"{method}{title}", float(duration) if isinstance(duration, (int, float)) else None)
                )
    elif evidence.get("ran"):
        host = f"ssh {evidence['host']}: " if evidence.get("host") else ""
        duration = evidence.get("duration_s")
        steps.append(
            (f"{host}{evidence['ran']}", float(duration) if isinstance(duration, (int, float)) else None)
        )
    return steps


def _stable_parameters(params: Mapping[str, Any]) -> dict[str, str]:
    """run, model and route from pytest's parameters (their stable keys), for display."""
    out: dict[str, str] = {}
    if isinstance(params.get("sbx_gate_model"), tuple):
        run_id, model = params["sbx_gate_model"]
        out["run"], out["model"] = str(run_id), str(model or "-")
    for name in ("sbx_gate_run", "sbx_run_entry"):
        if isinstance(params.get(name), str):
            out["run"] = params[name]
    if isinstance(params.get("sbx_route"), str):
        out["route"] = params["sbx_route"]
    return out


def annotate(
    result: CheckResult, *, suite: str, params: Mapping[str, Any], elapsed_s: float | None = None
) -> None:
    """Add this item's labels, links, parameters, steps, description and evidence to Allure.

    ``elapsed_s`` (the check's time so far) is the duration of a single recorded command whose own
    duration the evidence does not give.
    """
    import allure

    redact = for_display  # redacted, then control characters shown visibly
    dynamic: Any = allure.dynamic  # allure-python is untyped
    check = redact(result.check)
    dynamic.parent_suite(suite)
    dynamic.suite(check)
    dynamic.sub_suite(redact(result.target))
    dynamic.feature(check)
    dynamic.severity(severity(suite, result))
    if result.classification is not None:
        dynamic.tag(result.classification.value)
    for name, value in _stable_parameters(params).items():
        dynamic.parameter(name, redact(value), excluded=True)
    if suite == "gate":
        _history_by_identity(result, params, redact)
    incident = incident_candidate(result)
    if incident:
        dynamic.link(f"report.html#{incident}", name=f"incident {incident}")
    document = result.model_dump(mode="json")
    dynamic.description(redact(detail_block(document, incident)))
    steps = steps_from_evidence(result.evidence)
    if len(steps) == 1 and steps[0][1] is None and elapsed_s is not None:
        steps = [(steps[0][0], round(elapsed_s, 3))]
    _add_steps(steps, redact)
    allure.attach(
        redact(evidence_json(result.evidence)), name="evidence", attachment_type=allure.attachment_type.JSON
    )


def _history_by_identity(result: CheckResult, params: Mapping[str, Any], redact: Any) -> None:
    """Exclude the run-id-bearing pytest parameters from the history id; add the stable identity."""
    try:
        import allure_commons
        from allure_commons.model2 import Parameter
    except ImportError:
        return
    from sbxcheck.report.history import item_identity
    from sbxcheck.results import CheckRecord

    test = _running_test(allure_commons)
    if test is None:
        return
    for parameter in test.parameters:
        if parameter.name in params:
            parameter.excluded = True
    identity = item_identity(CheckRecord(nodeid="", suite="gate", **result.model_dump()))
    test.parameters.append(Parameter(name="identity", value=redact(identity)))


def _running_test(allure_commons: Any) -> Any:
    """The Allure test result allure-pytest is filling right now, or None."""
    listener = next(
        (p for p in allure_commons.plugin_manager.get_plugins() if hasattr(p, "allure_logger")), None
    )
    return listener.allure_logger.get_test(None) if listener is not None else None


def _add_steps(steps: list[tuple[str, float | None]], redact: Any) -> None:
    """Append finished steps with their measured durations to the running Allure test."""
    if not steps:
        return
    try:
        import allure_commons
        from allure_commons.model2 import Status, TestStepResult
    except ImportError:
        return
    test = _running_test(allure_commons)
    if test is None:
        return
    now_ms = int(time.time() * 1000)
    total_ms = sum(int((d or 0) * 1000) for _, d in steps)
    start = now_ms - total_ms  # the calls ran before the verdict, one after another
    for title, duration in steps:
        stop = start + int((duration or 0) * 1000)
        test.steps.append(TestStepResult(name=redact(title), start=start, stop=stop, status=Status.PASSED))
        start = stop
