"""junit.xml rendering with the ``junit_xml`` package (1.9).

Layout: one ``<testsuite>`` per target (named by the target, e.g. a run id), one ``<testcase>``
per record with ``name`` = the pytest test name including its parameters (the last ``::`` part of
the nodeid), ``classname`` = ``<suite>.<check>``, ``time`` = ``duration_s`` and ``file`` = the
nodeid's path. Failed/errored/skipped records carry a ``<failure>``/``<error>``/``<skipped>``
element whose message is ``"<classification>: <message>"`` (failure/error ``type`` is the
classification).

Evidence — the choice made for junit_xml 1.9: its ``TestCase`` has **no per-case properties**
(only ``TestSuite(properties=...)`` exists), so

* each case's evidence is written as pretty JSON into that case's ``<system-out>``;
* the per-case key facts go into the suite's ``<properties>`` as ``<nodeid>.<key>``:
  ``<nodeid>.outcome``, ``.classification``, ``.attempts``, ``.cause``, ``.incident`` (when set)
  and one ``<nodeid>.evidence.<key>`` per top-level evidence key, its value flattened to a string
  (JSON for non-strings) and trimmed to :data:`MAX_VALUE_CHARS`.

Everything is rendered from the already redacted results document, and the final text passes
through the redactor once more.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import junit_xml

from sbxcheck.redact import Redactor, default_redactor

__all__ = ["MAX_VALUE_CHARS", "case_name", "flatten_value", "render_junit_xml", "trim_json"]

MAX_VALUE_CHARS = 2000
_TRIM_MARK = "…[trimmed]"


def _trim(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """Redact, then cut (a cut secret would no longer be recognised)."""
    return default_redactor().trim(text, limit, _TRIM_MARK)


def flatten_value(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """An evidence value as one trimmed string (strings as-is, everything else as compact JSON)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return _trim(text, limit)


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


def _case(check: Mapping[str, Any], incident: str | None) -> junit_xml.TestCase:
    nodeid = str(check["nodeid"])
    classification = check.get("classification") or ""
    message = str(check.get("message") or "")
    headline = f"{classification}: {message}" if classification else message
    headline = _trim(" ".join(headline.split()) or str(check["outcome"]))
    detail_lines = [f"classification: {classification or '-'}", f"message: {message}"]
    if check.get("cause"):
        detail_lines.append(f"cause: {check['cause']}")
    if incident:
        detail_lines.append(f"incident: {incident}")
    detail = _trim("\n".join(detail_lines), 4 * MAX_VALUE_CHARS)

    case = junit_xml.TestCase(
        name=case_name(nodeid),
        classname=f"{check.get('suite', '')}.{check.get('check', '')}",
        elapsed_sec=float(check.get("duration_s") or 0.0),
        stdout=json.dumps(trim_json(check.get("evidence") or {}), indent=2, ensure_ascii=False),
        file=nodeid.split("::", 1)[0],
    )
    outcome = check["outcome"]
    if outcome == "failed":
        case.add_failure_info(message=headline, output=detail, failure_type=classification or "failure")
    elif outcome == "error":
        case.add_error_info(message=headline, output=detail, error_type=classification or "error")
    elif outcome == "skipped":
        case.add_skipped_info(message=headline, output=detail)
    return case


def _properties(check: Mapping[str, Any], incident: str | None) -> dict[str, str]:
    nodeid = str(check["nodeid"])
    props = {
        f"{nodeid}.outcome": str(check["outcome"]),
        f"{nodeid}.classification": str(check.get("classification") or ""),
        f"{nodeid}.attempts": str(check.get("attempts", 1)),
    }
    if check.get("cause"):
        props[f"{nodeid}.cause"] = flatten_value(check["cause"])
    if incident:
        props[f"{nodeid}.incident"] = incident
    evidence = check.get("evidence") or {}
    for key, value in evidence.items():
        props[f"{nodeid}.evidence.{key}"] = flatten_value(value)
    return props


def render_junit_xml(document: Mapping[str, Any], redactor: Redactor) -> str:
    """junit.xml text for a (redacted) results document as produced by ``report_dict``."""
    incident_of: dict[str, str] = {}
    for incident in document.get("incidents", []):
        for nodeid in incident["checks"]:
            incident_of.setdefault(nodeid, incident["id"])

    by_target: dict[str, list[Mapping[str, Any]]] = {}
    for check in document["checks"]:
        by_target.setdefault(str(check["target"]), []).append(check)

    inventory = document.get("inventory", {})
    suites = []
    for target in sorted(by_target):
        properties: dict[str, str] = {
            "sbxcheck.schema": str(document.get("schema", "")),
            "sbxcheck.inventory.source": str(inventory.get("source", "")),
            "sbxcheck.inventory.sim": "yes" if inventory.get("sim") else "no",
        }
        cases = []
        for check in by_target[target]:
            incident = incident_of.get(str(check["nodeid"]))
            cases.append(_case(check, incident))
            properties.update(_properties(check, incident))
        suites.append(
            junit_xml.TestSuite(
                name=target,
                test_cases=cases,
                timestamp=str(document.get("started_at", "")) or None,
                properties=properties,
            )
        )
    text: str = junit_xml.to_xml_report_string(suites, prettyprint=True)
    return redactor.redact_text(text)
