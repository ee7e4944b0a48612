"""The report page's incidents: each with its status, next step and items; loose failures; resolved ones."""

from __future__ import annotations

from collections.abc import Sequence

from sbxcheck.report.history import IncidentStatus
from sbxcheck.report.html_base import OUTCOME_SYMBOL, PageContext, esc, item_anchor, next_step_html, shorten
from sbxcheck.report.nextsteps import next_step_commands
from sbxcheck.results import CheckRecord, Outcome

__all__ = ["render_incidents"]


def render_incidents(ctx: PageContext) -> str:
    """Incidents (new first), each with its next step and items; then loose failures and resolved ones."""
    report, history = ctx.report, ctx.history
    by_nodeid = {r.nodeid: r for r in report.checks}
    problems = [r for r in report.checks if r.outcome in (Outcome.FAILED, Outcome.ERROR)]
    blocks = []
    rank = {"new": 0, "ongoing": 1}
    ordered = sorted(
        report.incidents,
        key=lambda i: rank.get(s.status, 2) if history and (s := history.status_of(i)) else 2,
    )
    for incident in ordered:
        members = [by_nodeid[n] for n in incident.checks if n in by_nodeid]
        status = history.status_of(incident) if history else None
        tag = _status_tag(status)
        commands = next_step_commands(members, incident.commands, ctx.inventory_flag)
        links = _member_links(members)
        only_errors = all(m.outcome is Outcome.ERROR for m in members)
        blocks.append(
            f'<section class="incident{" c-error" if only_errors else ""}" id="{esc(incident.id)}" '
            f'data-classification="{esc(incident.classification.value)}">'
            f'<h3>{tag} <span class="tag">{esc(incident.classification.value)}</span> {esc(incident.id)}</h3>'
            f"<p>{esc(incident.summary)}</p>"
            f"{next_step_html(incident.recommendation, commands)}"
            f"{links}</section>"
        )
    resolved = history.resolved if history else []
    head = f'<h2 id="incidents">Incidents ({len(report.incidents)})</h2>'
    grouped = {n for incident in report.incidents for n in incident.checks}
    loose = [r for r in problems if r.nodeid not in grouped]
    if loose:
        rows = "".join(
            f'<li><a href="#{item_anchor(r.nodeid)}"><span class="o-{r.outcome.value}">'
            f"{OUTCOME_SYMBOL[r.outcome.value]}"
            f"</span> {esc(r.check)} [{esc(r.target)}]</a> — {esc(shorten(r.message, 160))}</li>"
            for r in loose[:12]
        )
        more = f"<li>… and {len(loose) - 12} more under Items</li>" if len(loose) > 12 else ""
        lead = "Not passed, outside any incident" if blocks else "No failures share a cause; not passed"
        blocks.append(
            f'<section class="loose"><h3>{lead} ({len(loose)}) — each shows its next step under Items</h3>'
            f"<ul>{rows}{more}</ul></section>"
        )
    if not blocks:
        why = " among the checks that ran (the rest did not run)" if report.not_run else ""
        blocks.append(f'<p class="muted">No incidents{why or ": every check passed or was skipped"}.</p>')
    if resolved:
        items = "".join(
            f'<li>{_status_tag(s)} <span class="tag">{esc(s.incident.classification.value)}</span> '
            f'{esc(s.incident.summary)} <span class="muted">(open {s.runs} run{"s" if s.runs != 1 else ""} '
            f"from {esc(s.since)})</span></li>"
            for s in resolved
        )
        blocks.append(f"<h3>Resolved since the previous run ({len(resolved)})</h3><ul>{items}</ul>")
    return head + "".join(blocks)


def _member_links(members: Sequence[CheckRecord]) -> str:
    """The affected items; a message they all share is said once."""
    messages = {m.message for m in members}
    shared = len(members) > 1 and len(messages) == 1

    def link(m: CheckRecord) -> str:
        return (
            f'<a href="#{item_anchor(m.nodeid)}"><span class="o-{m.outcome.value}">'
            f"{OUTCOME_SYMBOL[m.outcome.value]}</span> "
            f"{esc(m.check)} [{esc(m.target)}]</a>"
        )

    if shared:
        return (
            f"<p><strong>{len(members)} items</strong>, all: {esc(shorten(next(iter(messages)), 240))}</p>"
            f'<p class="members">{", ".join(link(m) for m in members)}</p>'
        )
    rows = "".join(f"<li>{link(m)} — {esc(shorten(m.message, 160))}</li>" for m in members)
    return f"<ul>{rows}</ul>"


def _status_tag(status: IncidentStatus | None) -> str:
    if status is None:
        return ""
    if status.status == "ongoing":
        runs = f"{status.runs} run" + ("s" if status.runs != 1 else "")
        return f'<span class="tag ongoing">ONGOING since {esc(status.since)} ({runs})</span>'
    return f'<span class="tag {esc(status.status)}">{esc(status.status.upper())}</span>'
