"""report.html: one plain, self-contained page (inline CSS, no JavaScript).

Rendered from the already redacted results document; every value goes through ``html.escape``
and the final text passes through the redactor once more.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from sbxcheck.redact import Redactor

__all__ = ["render_html"]

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem; color: #1f2328; }
h1 { font-size: 1.4rem; margin-bottom: .3rem; }
h2 { font-size: 1.15rem; margin-top: 1.8rem; border-bottom: 1px solid #d0d7de; padding-bottom: .2rem; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; }
th, td { border: 1px solid #d0d7de; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: .15rem 1rem; margin: .5rem 0; }
dl.meta dt { font-weight: 600; }
dl.meta dd { margin: 0; }
pre { background: #f6f8fa; padding: .5rem; overflow-x: auto; white-space: pre-wrap;
      word-break: break-word; font-size: .8rem; margin: .3rem 0 0; }
code { font-size: .85rem; }
.outcome { font-weight: 700; text-transform: uppercase; font-size: .8rem; white-space: nowrap; }
.passed { color: #1a7f37; } .failed { color: #cf222e; }
.error { color: #bc4c00; } .skipped { color: #6e7781; }
tr.row-failed { background: #fff5f5; } tr.row-error { background: #fff8f0; }
.counts span { margin-right: 1rem; }
.incident { border: 1px solid #d0d7de; border-left: 4px solid #bc4c00;
            padding: .5rem .8rem; margin: .6rem 0; }
.incident p { margin: .25rem 0; }
.muted { color: #6e7781; }
"""

_OUTCOMES = ("passed", "failed", "error", "skipped")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _counts(summary: Mapping[str, Any]) -> str:
    parts = [f'<span class="{o}">{_e(o)}: {_e(summary.get(o, 0))}</span>' for o in _OUTCOMES]
    parts.append(f"<span>total: {_e(summary.get('total', 0))}</span>")
    return '<p class="counts">' + "".join(parts) + "</p>"


def _header(document: Mapping[str, Any]) -> str:
    inventory = document.get("inventory", {})
    rows = [
        ("inventory", inventory.get("source", "")),
        ("simulated fleet", "yes" if inventory.get("sim") else "no"),
        ("started", document.get("started_at", "")),
        ("finished", document.get("finished_at", "")),
        ("schema", document.get("schema", "")),
    ]
    meta = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows)
    details = inventory.get("details") or {}
    extra = ""
    if details:
        extra = (
            "<details><summary>inventory details</summary><pre>"
            + _e(json.dumps(details, indent=2, ensure_ascii=False, sort_keys=True))
            + "</pre></details>"
        )
    counts = _counts(document.get("summary", {}))
    return f'<h1>sbxcheck report</h1><dl class="meta">{meta}</dl>{extra}{counts}'


def _incidents(document: Mapping[str, Any]) -> str:
    incidents = document.get("incidents") or []
    if not incidents:
        return '<h2>Incidents</h2><p class="muted">No incidents: no failures share a cause.</p>'
    blocks = []
    for inc in incidents:
        members = "".join(f"<li><code>{_e(n)}</code></li>" for n in inc.get("checks", []))
        blocks.append(
            f'<div class="incident" id="{_e(inc.get("id"))}">'
            f"<p><strong>{_e(inc.get('id'))}</strong> · <code>{_e(inc.get('classification'))}</code></p>"
            f"<p>{_e(inc.get('summary'))}</p>"
            f"<p><strong>Recommendation:</strong> {_e(inc.get('recommendation'))}</p>"
            f"<details><summary>{len(inc.get('checks', []))} checks</summary><ul>{members}</ul></details>"
            "</div>"
        )
    return f"<h2>Incidents ({len(incidents)})</h2>" + "".join(blocks)


def _machines(document: Mapping[str, Any]) -> str:
    """The machine inventory: SSH-reachable machines and registered compute, each row dated."""
    rows = document.get("machine_inventory") or []
    if not rows:
        return ""
    keys = sorted({k for row in rows if isinstance(row, Mapping) for k in row})
    head = "".join(f"<th>{_e(k)}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(row.get(k, ''))}</td>" for k in keys) + "</tr>"
        for row in rows
        if isinstance(row, Mapping)
    )
    return f"<h2>Machine inventory ({len(rows)})</h2><table><tr>{head}</tr>{body}</table>"


def _mounts(document: Mapping[str, Any]) -> str:
    """Mounted runs and what became of each: kept runs name the command to get in."""
    rows = document.get("mounts") or []
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{_e(m.get('name'))}</td><td>{_e(m.get('run_id'))}</td><td>{_e(m.get('action'))}</td>"
        f"<td><code>{_e(m.get('ssh') or '')}</code></td><td>{_e(m.get('why'))}</td></tr>"
        for m in rows
        if isinstance(m, Mapping)
    )
    head = "<tr><th>mount</th><th>run id</th><th>action</th><th>get in</th><th>why</th></tr>"
    return f"<h2>Mounted runs ({len(rows)})</h2><table>{head}{body}</table>"


def _checks(document: Mapping[str, Any]) -> str:
    incident_of: dict[str, str] = {}
    for inc in document.get("incidents") or []:
        for nodeid in inc.get("checks", []):
            incident_of.setdefault(nodeid, inc.get("id", ""))
    head = (
        "<tr><th>outcome</th><th>check</th><th>target</th><th>classification</th>"
        "<th>message</th><th>duration (s)</th></tr>"
    )
    rows = []
    for check in document.get("checks") or []:
        outcome = str(check.get("outcome", ""))
        css = outcome if outcome in _OUTCOMES else ""
        nodeid = check.get("nodeid", "")
        incident = incident_of.get(nodeid)
        incident_link = f' · <a href="#{_e(incident)}">{_e(incident)}</a>' if incident else ""
        evidence = json.dumps(check.get("evidence") or {}, indent=2, ensure_ascii=False, sort_keys=True)
        extra_facts = f"attempts: {check.get('attempts', 1)}"
        if check.get("cause"):
            extra_facts += f" · cause: {check['cause']}"
        duration = check.get("duration_s") or 0.0
        rows.append(
            f'<tr class="row-{_e(css)}">'
            f'<td class="outcome {_e(css)}">{_e(outcome)}</td>'
            f'<td>{_e(check.get("check"))}<br><code class="muted">{_e(nodeid)}</code></td>'
            f"<td>{_e(check.get('target'))}</td>"
            f"<td>{_e(check.get('classification') or '')}{incident_link}</td>"
            f"<td>{_e(check.get('message'))}"
            f"<details><summary>evidence</summary>"
            f'<p class="muted">{_e(extra_facts)}</p><pre>{_e(evidence)}</pre></details></td>'
            f"<td>{_e(f'{float(duration):.3f}')}</td>"
            "</tr>"
        )
    return f"<h2>Checks ({len(rows)})</h2><table>{head}{''.join(rows)}</table>"


def render_html(document: Mapping[str, Any], redactor: Redactor) -> str:
    """report.html text for a (redacted) results document as produced by ``report_dict``."""
    inventory = document.get("inventory", {})
    title = f"sbxcheck report — {inventory.get('source', '')}"
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"{_header(document)}{_incidents(document)}{_mounts(document)}{_machines(document)}{_checks(document)}"
        "</body></html>\n"
    )
    return redactor.redact_text(page)
