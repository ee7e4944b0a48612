"""What a person sees of one failed or errored check, the same in the terminal, JUnit, Allure and HTML.

- :func:`next_step` — the recommendation (the check's own, else the classification's default), whole;
- :func:`key_evidence_lines` — the few evidence lines that say what was seen (the changed files,
  the missing models), not counts of them;
- :func:`user_text` — runbook section references (a section sign and number, maybe after a spec
  file name) removed: the reader has no runbook open;
- :func:`detail_block` — all of the above as one block of text;
- :func:`outcome_counts`, :func:`counts_line` — checks per outcome, the items an interrupt left unrun
  apart from the skips.

Pure functions over results-document records (dicts, as in results.json): no pytest, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from sbxcheck.display import one_line

__all__ = [
    "counts_line",
    "detail_block",
    "headline",
    "key_evidence_lines",
    "next_step",
    "outcome_counts",
    "shorten",
    "user_text",
]

# a spec section reference: a section sign (\u00a7) and its number, maybe after the spec file name
_SECTION = r"(?:[\w./-]+\.md\s*)?\u00a7[\d.]*\d(?:\s*[–-]\s*\u00a7?[\d.]*\d)?"
_RUNBOOK_REF = re.compile(
    rf"\s*\((?:see\s+)?(?:the\s+)?(?:runbook\s+)?{_SECTION}(?:\s*,\s*{_SECTION})*\)"
    rf"|(?:see\s+)?(?:(?:the\s+)?runbook\s+)?{_SECTION}(?:\s*,\s*{_SECTION})*"
)
#: Evidence keys that are bulk output, not the key facts (shown only in the full evidence).
_BULK_KEYS = frozenset({"stdout", "stderr", "git_output", "output", "body", "response", "raw", "trace"})
_MAX_VALUE = 160
_MAX_LIST_ITEMS = 10


def outcome_counts(summary: Mapping[str, int], not_run: int) -> dict[str, int]:
    """Checks per outcome (failed, error, waived, skipped, not run, passed) from a report's ``summary``.

    An item an interrupt left unrun is recorded as skipped; a count line shows it as "not run", so an
    interrupted run never reads as a run whose checks were skipped on purpose.
    """
    skipped = summary.get("skipped", 0)
    unrun = min(not_run, skipped)
    return {
        "failed": summary.get("failed", 0),
        "error": summary.get("error", 0),
        "waived": summary.get("waived", 0),
        "skipped": skipped - unrun,
        "not run": unrun,
        "passed": summary.get("passed", 0),
    }


def counts_line(summary: Mapping[str, int], not_run: int) -> str:
    """``checks: N (2 not run, 1 passed)``: the terminal's and ``sbxcheck report``'s count line."""
    tally = outcome_counts(summary, not_run)
    return f"checks: {summary.get('total', 0)} (" + ", ".join(f"{v} {k}" for k, v in tally.items() if v) + ")"


def user_text(text: str) -> str:
    """``text`` without runbook section references, whitespace tidied."""
    cleaned = _RUNBOOK_REF.sub("", text)
    cleaned = re.sub(r"[ \t]{2,}", " ", cleaned)
    return re.sub(r"\s+([,;.])", r"\1", cleaned).strip()


def shorten(text: str, limit: int = 200) -> str:
    """One line of at most ``limit`` characters, cut at a word boundary with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1].rsplit(" ", 1)[0]
    return cut + "…"


def _classification(check: Mapping[str, Any]) -> str:
    return str(check.get("classification") or ("check_failed" if check.get("outcome") == "failed" else "-"))


def headline(check: Mapping[str, Any], limit: int = 200) -> str:
    """``[<classification>] <message>`` on one line; with history ``[<classification>; failing for 6 runs
    since 2026-12-01]``."""
    since = f"; {check['failing_for']}" if check.get("failing_for") else ""
    return shorten(f"[{_classification(check)}{since}] {user_text(str(check.get('message') or ''))}", limit)


def next_step(check: Mapping[str, Any], inventory_flag: str = "") -> str | None:
    """What to do next for a failed or errored check, never cut; None for passed and skipped.

    ``inventory_flag`` (``--sbx-inventory=PATH`` of the run) goes into the re-run command it offers.
    """
    if check.get("outcome") not in ("failed", "error"):
        return None
    text = str(check.get("recommendation") or "").strip()
    if not text:
        from sbxcheck.report.incidents import default_recommendation
        from sbxcheck.results import Classification

        try:
            classification = Classification(_classification(check))
        except ValueError:
            classification = Classification.CHECK_FAILED
        if classification is Classification.CHECK_FAILED:  # the default speaks of several checks
            text = "read the evidence, fix what it shows, then re-run this item"
        else:
            from sbxcheck.report.nextsteps import probe_command

            evidence = check.get("evidence")
            probe = probe_command(evidence) if isinstance(evidence, Mapping) else None
            text = default_recommendation(classification, [str(check.get("target") or "")], probe=probe)
        if check.get("nodeid"):
            pytest_cmd = f"pytest {inventory_flag}" if inventory_flag else "pytest"
            text += f" ({pytest_cmd} '{check['nodeid']}')"
    return user_text(" ".join(text.split()))


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        if not value.strip():
            return None
        first = value.strip().splitlines()[0]
        return shorten(first, _MAX_VALUE) + (
            " …" if "\n" in value.strip() and len(first) < _MAX_VALUE else ""
        )
    return None


def _item(value: Any) -> str:
    """A list element as shown: kept as is (porcelain's leading space matters) unless long or multi-line."""
    text = str(value).rstrip()
    return text if len(text) <= _MAX_VALUE and "\n" not in text else shorten(text, _MAX_VALUE)


def key_evidence_lines(evidence: Mapping[str, Any], limit: int = 12) -> list[str]:
    """The evidence a person needs to act, one fact per line.

    A check may name them itself (``evidence["key_evidence"]``, a list of strings). Otherwise lists of
    short strings come first (each element on its own line: the changed files, the missing models),
    then short scalar facts; bulk output (stdout, stderr, bodies) and nested objects stay in the full
    evidence.
    """
    named = evidence.get("key_evidence")
    if isinstance(named, list) and all(isinstance(x, str) for x in named):
        return [one_line(user_text(x)) for x in named[:limit]]
    lists: list[str] = []
    scalars: list[str] = []
    for key, value in evidence.items():
        if key in _BULK_KEYS or key == "key_evidence":
            continue
        key = one_line(str(key))  # a key name is the server's too: one line, whatever it holds
        if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) for v in value):
            shown = [_item(v) for v in value[:_MAX_LIST_ITEMS]]
            more = len(value) - len(shown)
            lists.append(f"{key}:")
            lists.extend(f"  {v}" for v in shown)
            if more > 0:
                lists.append(f"  … and {more} more")
        else:
            text = _scalar(value)
            if text is not None:
                scalars.append(f"{key}: {text}")
    lines = lists + scalars
    return lines[:limit] + ([f"… ({len(lines) - limit} more in the evidence)"] if len(lines) > limit else [])


def detail_block(check: Mapping[str, Any], incident: str | None = None) -> str:
    """Classification, message, incident, key evidence and next step as plain text lines: one line
    each, whatever line feeds the fleet's text in them holds (shown as ``^J``)."""
    lines = [
        f"outcome: {check.get('outcome')}",
        f"classification: {_classification(check)}",
        f"message: {one_line(user_text(str(check.get('message') or '')))}",
    ]
    if incident:
        lines.append(f"incident: {one_line(incident)}")
    evidence = check.get("evidence") or {}
    key = key_evidence_lines(evidence) if isinstance(evidence, Mapping) else []
    if key:
        lines.append("evidence:")
        lines.extend(f"  {line}" for line in key)
    step = next_step(check)
    if step:
        lines.append(f"next step: {one_line(step)}")
    return "\n".join(lines)


def evidence_json(evidence: Any) -> str:
    """The full evidence as indented JSON (for attachments and <system-out>)."""
    return json.dumps(evidence, indent=2, sort_keys=True, ensure_ascii=False, default=str)
