"""junit.xml, valid against junit-10.xsd (the schema pytest's own tests validate ``xunit2`` against).

Written with the standard library's ElementTree, as pytest writes its own ``--junitxml``. The
junit-xml package cannot produce valid output for this schema: it writes ``file`` on testcases,
``disabled`` on testsuites, ``<error>`` (the schema knows only ``failure``) and puts per-case facts
nowhere but suite-level ``<properties>``.

Layout:

- ``<testsuites>`` with one ``<testsuite>`` per suite — gate, canary, triage — in that order, with
  real counts and times (the sum of its items' ``duration_s``);
- one ``<testcase>`` per check: ``classname`` = ``<suite>.<check>``, ``name`` = the pytest test name
  with its parameters, ``time`` = ``duration_s``;
- a failed or errored check has a ``<failure>`` whose ``message`` holds the classification, the
  incident id and the next step, and whose ``type`` is the classification (``error/<classification>``
  for an sbxcheck error: this schema has no ``<error>`` element inside a testcase; the testsuite's
  ``errors`` attribute still counts them); a skipped one has ``<skipped message=...>``; a waived one
  ``<skipped type="sbxcheck.waived" message=...>`` whose message holds the waiver, its reason and what
  the item had (counted with the suite's skipped, as pytest counts an xfail);
- the details — key evidence, next step, then the full evidence as JSON — in the testcase's
  ``<system-out>``. No ``<properties>`` inside a testcase (the schema forbids them) and no suite-level
  evidence;
- each testsuite's ``<properties>`` say which fleet was checked: ``sbxcheck.fleet`` is ``simulated``
  (the embedded fleet) or ``real``, and ``sbxcheck.inventory`` names the inventory's source; then the
  run's ``sbxcheck.verdict`` (passed, failed, error, empty or interrupted, whichever suite) and, with
  ``--sbx-report-url``, ``sbxcheck.report_url``.

Everything is rendered from the already redacted results document, and the final text passes
through the redactor once more.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from sbxcheck.display import for_display, xml_text
from sbxcheck.redact import Redactor, default_redactor
from sbxcheck.report.history import verdict_of
from sbxcheck.report.present import detail_block, next_step, shorten, user_text
from sbxcheck.results import RunReport

__all__ = ["MAX_VALUE_CHARS", "SUITE_ORDER", "case_name", "render_junit_xml", "trim_json"]

MAX_VALUE_CHARS = 2000
SUITE_ORDER = ("gate", "canary", "triage", "run")
_TRIM_MARK = "…[trimmed]"


def _trim(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """Redact, then cut (a cut secret would no longer be recognised)."""
    return default_redactor().trim(text, limit, _TRIM_MARK)


def trim_json(value: Any, limit: int = MAX_VALUE_CHARS) -> Any:
    """A copy of JSON-like ``value`` with every string trimmed to ``limit`` characters."""
    if isinstance(value, str):
        return _trim(value, limit)
    if isinstance(value, Mapping):
        return {str(k): trim_json(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [trim_json(v, limit) for v in value]
    return value


def case_name(nodeid: str) -> str:
    """The pytest test name with its parameters: the last ``::`` part of ``nodeid``."""
    return nodeid.rsplit("::", 1)[-1]


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.3f}"


def _message(check: Mapping[str, Any], incident: str | None) -> str:
    """One line: ``[classification] message (incident INC-…) — next step: …``; the step is never cut.

    With history the classification is followed by how long the item has failed for it."""
    classification = check.get("classification") or "-"
    since = f"; {check['failing_for']}" if check.get("failing_for") else ""
    parts = [f"[{classification}{since}] {shorten(user_text(str(check.get('message') or '')), 300)}"]
    if incident:
        parts.append(f"(incident {incident})")
    step = check.get("next_step") or next_step(check)
    if step:
        parts.append(f"— next step: {step}")
    return " ".join(parts)


def _case(check: Mapping[str, Any], incident: str | None) -> ET.Element:
    case = ET.Element(
        "testcase",
        {
            "classname": f"{check.get('suite', '')}.{check.get('check', '')}",
            "name": case_name(str(check["nodeid"])),
            "time": _seconds(float(check.get("duration_s") or 0.0)),
        },
    )
    outcome = check["outcome"]
    classification = str(check.get("classification") or "")
    if outcome in ("failed", "error"):
        kind = classification or "check_failed"
        failure = ET.SubElement(
            case,
            "failure",
            {"type": f"error/{kind}" if outcome == "error" else kind, "message": _message(check, incident)},
        )
        failure.text = detail_block(check, incident)
    elif outcome == "skipped":
        ET.SubElement(case, "skipped", {"message": user_text(str(check.get("message") or "skipped"))})
    elif outcome == "waived":  # a known failure, accepted until a date: skipped, as pytest files an xfail
        ET.SubElement(case, "skipped", {"type": "sbxcheck.waived", "message": _message(check, incident)})
    out = ET.SubElement(case, "system-out")
    evidence = json.dumps(
        trim_json(check.get("evidence") or {}), indent=2, ensure_ascii=False, sort_keys=True
    )
    out.text = f"{detail_block(check, incident)}\n\nevidence (full):\n{evidence}\n"
    return case


def _fleet_properties(document: Mapping[str, Any], verdict: str) -> ET.Element:
    """``<properties>``: a simulated run says so in junit.xml too (a CI job that lost its inventory)."""
    inventory = document.get("inventory") or {}
    properties = ET.Element("properties")
    fleet = "simulated" if inventory.get("sim") else "real"
    ET.SubElement(properties, "property", {"name": "sbxcheck.fleet", "value": fleet})
    ET.SubElement(properties, "property", {"name": "sbxcheck.inventory", "value": str(inventory.get("source", ""))})
    ET.SubElement(properties, "property", {"name": "sbxcheck.verdict", "value": verdict})
    if document.get("report_url"):
        ET.SubElement(properties, "property", {"name": "sbxcheck.report_url", "value": str(document["report_url"])})
    return properties


def _add_interrupted(
    element: ET.Element, document: Mapping[str, Any], checks: list[Mapping[str, Any]]
) -> None:
    """An interrupted run says so in every suite: properties, and the suite's items that did not run."""
    if not document.get("interrupted"):
        return
    not_run = set(document.get("not_run") or [])
    mine = [str(c["nodeid"]) for c in checks if c["nodeid"] in not_run]
    props = element.find("properties")
    if props is None:
        props = ET.SubElement(element, "properties")
    why = str(document.get("interrupted_reason") or "")
    ET.SubElement(props, "property", {"name": "sbxcheck.interrupted", "value": why or "true"})
    ET.SubElement(props, "property", {"name": "sbxcheck.not_run", "value": str(len(mine))})
    out = ET.SubElement(element, "system-out")
    out.text = (
        f"INTERRUPTED{f' ({why})' if why else ''}: {len(mine)} item(s) of this suite did not run\n"
        + "".join(f"  {n}\n" for n in mine)
    )


def render_junit_xml(document: Mapping[str, Any], redactor: Redactor) -> str:
    """junit.xml text for a (redacted) results document as produced by ``report_dict``."""
    incident_of: dict[str, str] = {}
    for incident in document.get("incidents", []):
        for nodeid in incident["checks"]:
            incident_of.setdefault(nodeid, incident["id"])
    by_suite: dict[str, list[Mapping[str, Any]]] = {}
    for check in document["checks"]:
        by_suite.setdefault(str(check.get("suite") or "sbxcheck"), []).append(check)
    order = [s for s in SUITE_ORDER if s in by_suite] + sorted(s for s in by_suite if s not in SUITE_ORDER)

    verdict = verdict_of(RunReport.model_validate(document))
    root = ET.Element("testsuites", {"name": "sbxcheck"})
    totals = {"tests": 0, "failures": 0, "errors": 0}
    total_time = 0.0
    for suite in order:
        checks = by_suite[suite]
        outcomes = [c["outcome"] for c in checks]
        suite_time = sum(float(c.get("duration_s") or 0.0) for c in checks)
        counts = {
            "tests": len(checks),
            "failures": outcomes.count("failed"),
            "errors": outcomes.count("error"),
            "skipped": outcomes.count("skipped") + outcomes.count("waived"),
        }
        element = ET.SubElement(
            root,
            "testsuite",
            {
                "name": suite,
                **{k: str(v) for k, v in counts.items()},
                "time": _seconds(suite_time),
                "timestamp": str(document.get("started_at", "")),
            },
        )
        element.append(_fleet_properties(document, verdict))  # one <properties>: fleet, verdict, interrupt
        _add_interrupted(element, document, checks)
        for check in checks:
            element.append(_case(check, incident_of.get(str(check["nodeid"]))))
        for key in totals:
            totals[key] += counts[key]
        total_time += suite_time
    root.attrib.update({k: str(v) for k, v in totals.items()})
    root.set("time", _seconds(total_time))
    ET.indent(root)
    text = '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
    return xml_text(for_display(text, redactor))  # redacted, neutralised, nothing XML 1.0 forbids
