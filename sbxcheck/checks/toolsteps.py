"""Reading a mission's tool steps: each tool_call with its tool_result, what the call ran, and whether it failed."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sbxcheck.checks.base import trim
from sbxcheck.clients.missionruns import RouteRun
from sbxcheck.safeio import loads_bounded


def step_results(run: RouteRun) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(tool_call, its tool_result) pairs in order, matched by tool_call_id."""
    results = {e.get("tool_call_id"): e for e in run.events if e.get("event_type") == "tool_result"}
    return [(e, results.get(e.get("tool_call_id"))) for e in run.events if e.get("event_type") == "tool_call"]


def call_text(call: dict[str, Any]) -> str:
    """What a tool call ran: its ``command`` or ``path``, else its content as text."""
    content = call.get("content")
    try:
        doc = loads_bounded(content) if isinstance(content, str) else content
    except ValueError:
        return str(content or "")
    if isinstance(doc, dict):
        return str(doc.get("command") or doc.get("path") or doc)
    return str(doc)


@dataclass(frozen=True)
class StepOutcome:
    """What one tool result says: its output text, and why it failed (None: it succeeded)."""

    text: str
    failure: str | None

    @property
    def ok(self) -> bool:
        return self.failure is None


_TEXT_KEYS = ("output", "stdout", "result", "text", "content")
_EXIT_TEXT_RE = re.compile(
    r"(?i)^\W*(?:exit(?:ed)?(?: with)?(?: code| status)|process exited with(?: exit)? code|"
    r"command (?:failed|exited) with(?: exit)? code|return(?:ed)? code)\s*[:=]?\s*(-?\d+)\b"
)
_FAIL_STATUSES = frozenset({"error", "failed", "failure", "timeout", "timed_out", "cancelled", "canceled"})


def _exit_failure(source: str, value: Any) -> str | None:
    """A non-zero (or unreadable) exit code is a failure; 0 is not."""
    if value is None or isinstance(value, bool):
        return None
    try:
        code = int(str(value).strip())
    except ValueError:
        return f"{source} is {str(value)[:40]!r}, not a number"
    return None if code == 0 else f"{source} {code}"


def _flags_failure(where: str, doc: Any) -> str | None:
    """Failure flags in one mapping: is_error/isError, exit_code/exitCode/returncode, success, status, timed_out."""
    if not isinstance(doc, dict):
        return None
    for key in ("is_error", "isError", "error"):
        value = doc.get(key)
        if value is True or (key == "error" and isinstance(value, str) and value.strip()):
            return f"{where}{key}"
    for key in ("exit_code", "exitCode", "returncode", "return_code", "exit_status"):
        failure = _exit_failure(f"{where}{key}", doc.get(key))
        if failure:
            return failure
    if doc.get("success") is False or doc.get("ok") is False:
        return f"{where}success false"
    if doc.get("timed_out") is True:
        return f"{where}timed_out"
    status = doc.get("status")
    if isinstance(status, str) and status.strip().lower() in _FAIL_STATUSES:
        return f"{where}status {status.strip()!r}"
    if isinstance(status, int) and not isinstance(status, bool) and status != 0:
        return f"{where}status {status}"
    return None


_FLAG_KEYS = frozenset(
    {"is_error", "isError", "error", "exit_code", "exitCode", "returncode", "return_code", "exit_status"}
    | {"success", "ok", "timed_out", "status"}
)
_ENVELOPE_KEYS = _FLAG_KEYS | set(_TEXT_KEYS) | {"stderr", "command", "duration_ms", "cwd", "truncated"}


def _is_envelope(doc: Any) -> bool:
    """A JSON result envelope (``{"output": ..., "exit_code": ...}``): only envelope keys, one a status flag."""
    return isinstance(doc, dict) and bool(doc) and set(doc) <= _ENVELOPE_KEYS and bool(set(doc) & _FLAG_KEYS)


def tool_outcome(result: dict[str, Any] | None) -> StepOutcome:
    """Read one stored ``tool_result`` row whatever shape it has; a failed step is never evidence.

    Failure signals, any of: no result; ``is_error`` (row or ``metadata``); a non-zero ``exit_code``
    (row, ``metadata`` or a JSON content document); ``success: false``; a failing ``status``;
    ``timed_out``; or output whose first or last line is an exit-status line (``Exit code: 2``,
    ``Process exited with code 1``). The text is the output (``output``/``stdout``… of a JSON
    content document, plus its ``stderr``), else the content as written.
    """
    if not isinstance(result, dict):
        return StepOutcome("", "no tool result")
    content = result.get("content")
    text = content if isinstance(content, str) else ("" if content is None else json.dumps(content))
    doc: Any = content if isinstance(content, dict) else None
    if doc is None and isinstance(content, str) and content.lstrip().startswith("{"):
        try:
            doc = loads_bounded(content)
        except ValueError:  # not JSON, or refused as too deep or large
            doc = None
    if not _is_envelope(doc):
        doc = None  # a file that happens to be JSON is output, not a result envelope
    if isinstance(doc, dict):
        parts = [doc[k] for k in _TEXT_KEYS if isinstance(doc.get(k), str)][:1]
        if isinstance(doc.get("stderr"), str):
            parts.append(doc["stderr"])
        if parts:
            text = "".join(parts)
    failure = (
        _flags_failure("", result)
        or _flags_failure("metadata.", result.get("metadata"))
        or _flags_failure("content.", doc)
    )
    if failure is None:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        for line in (lines[:1] + lines[-1:]) if lines else []:
            found = _EXIT_TEXT_RE.match(line.strip())
            if found and int(found.group(1)) != 0:
                failure = f"output says {trim(line.strip(), 60)!r}"
                break
    return StepOutcome(text, failure)

