"""The report page's "Waived" section: the waived items with their waiver and history, then every waiver
of the run (no longer needed, matching nothing, expired, expiring within a day)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sbxcheck.report.html_base import PageContext, esc, item_anchor
from sbxcheck.report.waivers import days_left_text, waiver_label
from sbxcheck.results import CheckRecord, Outcome

__all__ = ["render_waivers"]

_STATUS_WORDS = {
    "waiving": "waiving",
    "not needed": "no longer needed: its items passed",
    "not covering": "not covering: its items failed for another cause",
    "unmatched": "matched no selected item",
    "not tested": "its items were skipped",
    "expired": "expired: its items count again",
}


def _link(url: object) -> str:
    text = str(url or "")
    if not text.startswith(("http://", "https://")):  # validated at load; a page never links anything else
        return esc(text)
    return f'<a href="{esc(text)}" rel="noreferrer">{esc(text)}</a>'


def _waiver_cell(waiver: Mapping[str, Any]) -> str:
    owner = f" · owner {esc(waiver.get('owner'))}" if waiver.get("owner") else ""
    cause = f" · cause <code>{esc(waiver.get('cause'))}</code>" if waiver.get("cause") else ""
    link = f"<br>{_link(waiver.get('link'))}" if waiver.get("link") else ""
    return (
        f'{esc(waiver.get("reason"))}<br><span class="muted">until {esc(waiver.get("until"))} '
        f"({esc(days_left_text(waiver.get('days_left')))}){owner}{cause}</span>{link}"
        f'<br><span class="muted">{esc(waiver_label(waiver))}</span>'
    )


def _history_cell(ctx: PageContext, record: CheckRecord) -> str:
    if ctx.history is None:
        return '<span class="muted">no history kept (--sbx-history)</span>'
    hist = ctx.hist(record)
    last = None
    if hist is not None:
        dates = ctx.dates()
        passed = [d for d, o in zip(dates, hist.outcomes, strict=False) if o == Outcome.PASSED.value]
        last = passed[-1] if passed else None
    since = esc(record.failing_for or "")
    window = len(ctx.history.runs)
    passed_text = f"last passed {esc(last)}" if last else f"not passed in the last {window} run(s)"
    return f'{since}<br><span class="muted">{passed_text}</span>'


def _waived_row(ctx: PageContext, record: CheckRecord) -> str:
    """One waived item: what it had (outcome, classification, cause), its waiver, its history."""
    waiver = record.waiver or {}
    classification = record.classification.value if record.classification else ""
    had = f"{esc(waiver.get('item_outcome') or 'failed')}, {esc(classification)}"
    if record.cause:
        had += f"<br><code>{esc(record.cause)}</code>"
    return (
        f'<tr><td><a href="#{item_anchor(record.nodeid)}"><code>{esc(record.nodeid)}</code></a></td>'
        f"<td>{had}</td><td>{_waiver_cell(waiver)}</td><td>{_history_cell(ctx, record)}</td></tr>"
    )


def render_waivers(ctx: PageContext) -> str:
    """The "Waived" section ("" when the run had no waiver)."""
    report = ctx.report
    waived = [r for r in report.checks if r.outcome is Outcome.WAIVED]
    if not waived and not report.waivers:
        return ""
    parts = [f'<h2 id="waived">Waived ({len(waived)} item(s); {len(report.waivers)} waiver(s))</h2>']
    for waiver in report.waivers:
        if waiver.get("expires_soon"):
            parts.append(
                f'<p class="warn">Expires within a day: {esc(waiver_label(waiver))} '
                f"(until {esc(waiver.get('until'))}) — renew it or fix the cause, else its items count again.</p>"
            )
    if waived:
        rows = "".join(_waived_row(ctx, r) for r in waived)
        parts.append(
            '<p class="muted">Known failures: they ran and failed for the waived cause, and are left out of the '
            "verdict and the exit code until their waiver ends.</p>"
            "<table><tr><th>item</th><th>had</th><th>waiver</th><th>history</th></tr>"
            f"{rows}</table>"
        )
    rows = "".join(
        f'<tr><td><code>{esc(w.get("match"))}</code></td><td class="w-{esc(str(w.get("status")).replace(" ", "-"))}">'
        f"{esc(_STATUS_WORDS.get(str(w.get('status')), w.get('status')))}"
        + "".join(
            f'<br><span class="muted">{esc(status)}: {esc(", ".join(items))}</span>'
            for status, items in (w.get("items") or {}).items()
            if status != "waived"
        )
        + f"</td><td>{_waiver_cell(w)}</td></tr>"
        for w in report.waivers
    )
    if rows:
        parts.append(
            f"<h3>Waivers of this run</h3><table><tr><th>match</th><th>status</th><th>waiver</th></tr>{rows}</table>"
        )
    return "".join(parts)
