"""What a run's waivers did, as text lines: the terminal summary and ``sbxcheck report`` print them.

Read from the results document (``checks[].waiver`` and ``waivers``): the waived items, each with its
waiver and how long it has failed; waivers no longer needed (their items passed), matching no item,
expired, or expiring within a day (a warning).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["days_left_text", "waiver_label", "waiver_lines", "waiver_text"]

#: A terminal line and its markup (``bold``, ``yellow``, ``purple`` ...).
Line = tuple[str, dict[str, bool]]


def waiver_label(waiver: Mapping[str, Any]) -> str:
    """``<file>: waiver #2 (match '<pattern>')``, as the run's messages name a waiver."""
    return f"{waiver.get('source')}: waiver #{waiver.get('index')} (match '{waiver.get('match')}')"


def days_left_text(days: object) -> str:
    """``6 days left``, ``1 day left``, ``less than a day left``, ``expired``."""
    if not isinstance(days, (int, float)) or isinstance(days, bool):
        return "?"
    if days <= 0:
        return "expired"
    if days < 1:
        return "less than a day left"
    whole = int(days)
    return f"{whole} day{'s' if whole != 1 else ''} left"


def waiver_text(waiver: Mapping[str, Any]) -> str:
    """One line: the waiver, until when, who owns it, why, and its link."""
    owner = f", owner {waiver['owner']}" if waiver.get("owner") else ""
    cause = f", cause {waiver['cause']}" if waiver.get("cause") else ""
    link = f" {waiver['link']}" if waiver.get("link") else ""
    left = days_left_text(waiver.get("days_left"))
    return f"{waiver_label(waiver)} until {waiver.get('until')} ({left}{cause}{owner}): {waiver.get('reason')}{link}"


def _had(check: Mapping[str, Any]) -> str:
    waiver = check.get("waiver") or {}
    had = f"{waiver.get('item_outcome') or 'failed'}, {check.get('classification') or 'check_failed'}"
    return had + (f"; {check['failing_for']}" if check.get("failing_for") else "")


def waiver_lines(document: Mapping[str, Any]) -> list[Line]:
    """The terminal's waiver lines (none when the run had no waiver)."""
    lines: list[Line] = []
    waived = [c for c in document.get("checks") or [] if c.get("outcome") == "waived"]
    if waived:
        lines.append(("", {}))
        lines.append(
            (f"waived: {len(waived)} item(s), known failures left out of the verdict", {"bold": True})
        )
        for check in waived:
            lines.append((f"    WAIVED {check['nodeid']} [{_had(check)}]", {"purple": True}))
            lines.append((f"        {waiver_text(check.get('waiver') or {})}", {}))
    for waiver in document.get("waivers") or []:
        label = waiver_label(waiver)
        items = waiver.get("items") or {}
        for nodeid in items.get("not needed") or []:
            lines.append((f"waiver no longer needed: {nodeid} passed ({label}); remove it", {"yellow": True}))
        status = waiver.get("status")
        if status == "unmatched":
            lines.append((f"waiver matched no selected item: {label}, until {waiver.get('until')}", {}))
        elif status == "expired":
            lines.append((f"waiver expired on {waiver.get('until')}: {label}; its items count again", {}))
        elif status == "not covering":
            lines.append(
                (f"waiver did not cover its items' failures (another cause): {label}", {"yellow": True})
            )
        if waiver.get("expires_soon"):
            lines.append(
                (
                    f"warning: {label} expires within a day ({waiver.get('until')}): renew it or fix the cause, "
                    "else its items count again",
                    {"yellow": True},
                )
            )
    return lines
