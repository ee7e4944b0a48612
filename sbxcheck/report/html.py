"""report.html: a self-contained triage page (inline CSS, a small inline script, no network).

Read top to bottom at 3 a.m.: the verdict and counts; incidents with their next step as commands
to copy; the waived items (known failures) and the run's waivers; kept VMs; the fleet grid (one cell
per item, linking to it); the items, failed and errored
first, each with its message, key evidence and next step in view and the full evidence folded;
then history (flaky items, durations, credit) when ``--sbx-history`` is on.

Everything is complete without JavaScript; the script only adds the filters and copy buttons.
Rendered from the already redacted results document; every value goes through ``html.escape``
and the final text passes through the redactor once more.

Each section renders in its own module over the shared ``html_base``: ``html_verdict`` (the head),
``html_incidents``, ``html_waivers``, ``html_fleet`` (grid and credit), ``html_items`` and ``html_history``; this
module frames the page and adds the mount and machine tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

from sbxcheck.display import for_display
from sbxcheck.redact import Redactor
from sbxcheck.report.history import HistoryView
from sbxcheck.report.html_base import PageContext, esc, item_anchor
from sbxcheck.report.html_fleet import render_credit, render_grid
from sbxcheck.report.html_history import render_history
from sbxcheck.report.html_incidents import render_incidents
from sbxcheck.report.html_items import render_items
from sbxcheck.report.html_verdict import page_title, render_verdict, verdict_headline
from sbxcheck.report.html_waivers import render_waivers
from sbxcheck.report.nextsteps import next_step_commands, not_run_command, record_commands, rerun_command
from sbxcheck.results import Incident, RunReport


def _asset(name: str) -> str:
    return resources.files("sbxcheck.report").joinpath("assets", name).read_text(encoding="utf-8")


_CSS = _asset("report.css")
_SCRIPT = _asset("report.js")

__all__ = [
    "item_anchor",
    "next_step_commands",
    "not_run_command",
    "record_commands",
    "render_html",
    "rerun_command",
    "verdict_headline",
]


def _key_proof(mount: Mapping[str, Any]) -> str:
    """The runtime key's end as GET /keys proved it ("" before any teardown ran)."""
    teardown = mount.get("teardown")
    if not isinstance(teardown, Mapping):
        return ""
    revocation = teardown.get("revocation")
    status = revocation.get("status") if isinstance(revocation, Mapping) else None
    return f"{status} (GET /keys)" if status and status != "not checked" else f"recipe: {teardown.get('key') or '?'}"


def _mounts(report: RunReport) -> str:
    rows = [m for m in report.mounts if isinstance(m, Mapping)]
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{esc(m.get('name'))}</td><td>{esc(m.get('run_id'))}</td><td>{esc(m.get('action'))}</td>"
        f"<td><code>{esc(m.get('ssh') or '')}</code></td><td>{esc(_key_proof(m))}</td><td>{esc(m.get('why'))}</td></tr>"
        for m in rows
    )
    head = "<tr><th>mount</th><th>run id</th><th>action</th><th>get in</th><th>key</th><th>why</th></tr>"
    return f'<h2 id="mounts">Mounted runs ({len(rows)})</h2><table>{head}{body}</table>'


def _machines(report: RunReport) -> str:
    rows = [row for row in report.machine_inventory if isinstance(row, Mapping)]
    if not rows:
        return ""
    keys = sorted({k for row in rows for k in row})
    head = "".join(f"<th>{esc(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{esc(row.get(k, ''))}</td>" for k in keys) + "</tr>" for row in rows)
    return f"<details><summary>Machine inventory ({len(rows)})</summary><table><tr>{head}</tr>{body}</table></details>"


def render_html(document: Mapping[str, Any], redactor: Redactor, history: HistoryView | None = None) -> str:
    """report.html text for a (redacted) results document as produced by ``report_dict``."""
    report = RunReport.model_validate(dict(document))
    incident_of: dict[str, Incident] = {}
    for incident in report.incidents:
        for nodeid in incident.checks:
            incident_of.setdefault(nodeid, incident)
    ctx = PageContext(report, history, incident_of, max((r.duration_s for r in report.checks), default=0.0))
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(page_title(report))}</title><style>{_CSS}</style></head><body>"
        f"{render_verdict(ctx)}{render_incidents(ctx)}{render_waivers(ctx)}{_mounts(report)}{render_grid(ctx)}{render_credit(ctx)}"
        f"{render_items(ctx)}{render_history(ctx)}"
        f"{_machines(report)}</main><script>{_SCRIPT}</script></body></html>\n"
    )
    return for_display(page, redactor)  # redacted, then no control character but \n and \t
