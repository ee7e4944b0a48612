"""report.html: a self-contained triage page (inline CSS, a small inline script, no network).

Read top to bottom at 3 a.m.: the verdict and counts; incidents with their next step as commands
to copy; kept VMs; the fleet grid (one cell per item, linking to it); the items, failed and errored
first, each with its message, key evidence and next step in view and the full evidence folded;
then history (flaky items, durations, credit) when ``--sbx-history`` is on.

Everything is complete without JavaScript; the script only adds the filters and copy buttons.
Rendered from the already redacted results document; every value goes through ``html.escape``
and the final text passes through the redactor once more.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

from sbxcheck.display import for_display
from sbxcheck.redact import Redactor
from sbxcheck.report.history import (
    CreditPoint,
    HistoryView,
    IncidentStatus,
    credit_of,
    item_identity,
    run_duration_s,
    verdict_of,
)
from sbxcheck.report.html_base import (
    OUTCOME_LABEL,
    OUTCOME_SYMBOL,
    PageContext,
    esc,
    fmt_seconds,
    item_anchor,
    next_step_html,
    outcome_strip,
    shorten,
    sparkline,
)
from sbxcheck.report.incidents import default_recommendation
from sbxcheck.report.nextsteps import (
    extract_commands,
    next_step_commands,
    not_run_command,
    probe_command,
    rerun_command,
)
from sbxcheck.report.present import outcome_counts
from sbxcheck.results import GATE_COLUMNS, CheckRecord, Classification, Incident, Outcome, RunReport


def _asset(name: str) -> str:
    return resources.files("sbxcheck.report").joinpath("assets", name).read_text(encoding="utf-8")


_CSS = _asset("report.css")
_SCRIPT = _asset("report.js")

__all__ = [
    "extract_commands",
    "item_anchor",
    "next_step_commands",
    "not_run_command",
    "render_html",
    "rerun_command",
    "verdict_headline",
]

_ORDER = {"failed": 0, "error": 1, "skipped": 2, "passed": 3}

_HEADLINE = {
    "failed": "FAILED — something in the fleet is wrong",
    "error": "COULD NOT TELL — some checks could not reach a verdict",
    "passed": "HEALTHY — every check passed",
    "empty": "NO CHECKS RAN",
    "interrupted": "INTERRUPTED — the run stopped before every check ran",
}
#: How many not-run items the banner names (the items list has every one).
_BANNER_NOT_RUN = 20

_ROUTE_STAGES = (
    ("dispatched", "dispatched"),
    ("record_echoes_request", "echo"),
    ("reaches_execution", "execution"),
)
_DGX_CHAIN = (
    ("tailscaled_enabled", "tailscaled enabled"),
    ("tailscaled_active", "active"),
    ("tailscale_ping", "ping"),
    ("dgx_ssh", "SSH"),
)
_KEY_EVIDENCE = (
    "error", "stderr", "state", "status", "http_status", "porcelain_sample", "signature", "remaining_usd",
    "floor_usd", "limit_usd", "usage_usd", "model", "finish_reason", "rate_problems", "waited_s",
    "deadline_s", "events_seen", "notes", "stdout", "head", "recorded_commit_sha", "ran", "exit_code", "host",
)  # fmt: skip
_MAX_EVIDENCE_LINES = 6


def _cell(record: CheckRecord, label: str) -> str:
    outcome = record.outcome.value
    title = f"{record.check} [{record.target}]: {outcome} — {record.message}"
    return (
        f'<a class="cell o-{outcome}" href="#{item_anchor(record.nodeid)}" title="{esc(title[:300])}">'
        f"{OUTCOME_SYMBOL.get(outcome, '?')} {esc(label)}</a>"
    )


# ------------------------------------------------------------------ sections


def _top(ctx: PageContext) -> str:
    report = ctx.report
    verdict = verdict_of(report)
    summary = report.summary
    total = summary.get("total", len(report.checks))
    tally = outcome_counts(summary, len(report.not_run))
    pills = "".join(
        f'<span class="pill o-{"skipped" if o == "not run" else o}">{OUTCOME_SYMBOL[o]} {n} '
        f"{esc(OUTCOME_LABEL[o].lower())}</span>"
        for o, n in tally.items()
        if n or o in ("failed", "passed")
    )
    suites = Counter(r.suite for r in report.checks)
    inventory = report.inventory
    source = inventory.source
    if inventory.sim and "simulated" not in source:
        source += " (simulated fleet)"
    meta = [
        ("inventory", source),
        ("started (UTC)", report.started_at),
        ("took", fmt_seconds(run_duration_s(report))),
        ("suites", ", ".join(f"{k} ({v})" for k, v in sorted(suites.items())) or "none"),
        ("incidents", str(len(report.incidents))),
    ]
    from sbxcheck.spend import spend_worth_showing

    if spend_worth_showing(report.spend):  # only when the run dispatched missions
        from sbxcheck.spend import spend_line

        meta.append(("spend", spend_line(report.spend).removeprefix("spend: ")))
    meta_html = "".join(f"<div><span>{esc(k)}</span>{esc(v)}</div>" for k, v in meta)
    history = ""
    if ctx.history and ctx.history.runs:
        runs = ctx.history.runs
        history = (
            f"<div><span>last {len(runs)} runs (oldest → now)</span>"
            f"{outcome_strip([r.verdict if r.verdict != 'empty' else None for r in runs], ctx.dates(), big=True)}</div>"
        )
    details = ""
    if inventory.details:
        details = (
            "<details><summary>inventory details</summary><pre>"
            + esc(json.dumps(inventory.details, indent=2, ensure_ascii=False, sort_keys=True))
            + "</pre></details>"
        )
    problems = summary.get("failed", 0) + summary.get("error", 0)
    toc = [("#incidents", f"Incidents ({len(report.incidents)})"), ("#fleet", "Fleet grid")]
    toc.append(("#items", f"Items ({problems} not passed first)" if problems else "Items"))
    if ctx.history is not None:
        toc.append(("#history", f"History (flaky: {len(ctx.history.flaky)})"))
    nav = '<nav class="toc">' + "".join(f'<a href="{h}">{esc(t)}</a>' for h, t in toc) + "</nav>"
    banner = (
        '<p class="warn sim-banner" id="simulated"><strong>Simulated run</strong>: these verdicts are '
        "about a simulated fleet, not a real one (the embedded one: no inventory was given, or --sbx-sim; "
        "or an inventory `sbxcheck sim up` wrote). "
        "CI jobs set --sbx-require-inventory so a lost inventory stops the run instead.</p>"
        if inventory.sim
        else ""
    )
    return (
        f'<header class="verdict v-{verdict}" id="verdict" data-verdict="{verdict}">'
        f"<h1>{esc(verdict_headline(verdict, summary))}</h1><p>{esc(total)} checks: {pills_text(tally)}</p>"
        f"{_not_run_banner(report)}</header>"
        f'<main>{banner}<div class="meta">{meta_html}{history}</div><p>{pills}</p>{nav}{details}'
    )


def verdict_headline(verdict: str, summary: Mapping[str, int] | None = None) -> str:
    """The banner's headline for a verdict (``verdict_of``), e.g. "INTERRUPTED — the run stopped …".

    A healthy run with skipped items says how many passed and how many were skipped, not "every check".
    """
    skipped = (summary or {}).get("skipped", 0)
    if verdict == "passed" and skipped:
        return f"HEALTHY — {(summary or {}).get('passed', 0)} passed, {skipped} skipped"
    return _HEADLINE.get(verdict, verdict.upper())


def _not_run_banner(report: RunReport) -> str:
    """An interrupted run's banner says why it stopped and names what did not run."""
    if not report.interrupted:
        return ""
    why = f" ({report.interrupted_reason})" if report.interrupted_reason else ""
    names = "".join(f"<li><code>{esc(n)}</code></li>" for n in report.not_run[:_BANNER_NOT_RUN])
    more = len(report.not_run) - _BANNER_NOT_RUN
    if more > 0:
        names += f"<li>… and {more} more (see the items below)</li>"
    rerun = not_run_command(report)
    return (
        f'<p class="not-run">{len(report.not_run)} selected item(s) did not run{esc(why)}; '
        "re-run them for a verdict</p>"
        + (next_step_html("", [rerun], title="Re-run what did not run") if rerun else "")
        + (f'<ul class="not-run">{names}</ul>' if names else "")
    )


def pills_text(tally: Mapping[str, int]) -> str:
    """The banner's count line from :func:`outcome_counts` (not run only when there were such items)."""
    return ", ".join(f"{n} {OUTCOME_LABEL[o].lower()}" for o, n in tally.items() if n or o != "not run")


def _incidents(ctx: PageContext) -> str:
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
        commands = next_step_commands(members, incident.recommendation, ctx.inventory_flag)
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


def _split_gate_target(target: str, run_ids: Sequence[str]) -> tuple[str, str | None]:
    for run_id in sorted(run_ids, key=len, reverse=True):
        if target == run_id:
            return run_id, None
        if target.startswith(run_id + "-"):
            return run_id, target[len(run_id) + 1 :]
    return target, None


def _grid(ctx: PageContext) -> str:
    records = ctx.report.checks
    used: set[str] = set()
    parts: list[str] = []

    per_model = {c.check for c in GATE_COLUMNS if c.per_model}
    gate = [r for r in records if r.suite == "gate" and r.check in {c.check for c in GATE_COLUMNS}]
    if gate:
        run_ids = sorted({r.target for r in gate if r.check not in per_model})
        cells: dict[tuple[str, str], list[CheckRecord]] = defaultdict(list)
        models: dict[str, set[str]] = defaultdict(set)  # per-model check -> the models it was run for
        for r in gate:
            run, rest = _split_gate_target(r.target, run_ids)
            column = r.check
            if r.check in per_model:
                models[r.check].add(rest or r.target)
                column = f"{r.check}:{rest or r.target}"
            if run not in run_ids:
                run_ids.append(run)
            cells[(run, column)].append(r)
            used.add(r.nodeid)
        columns = [
            pair
            for c in GATE_COLUMNS
            for pair in (
                [(f"{c.check}:{m}", f"{c.label} {m}") for m in sorted(models[c.check])]
                if c.per_model
                else [(c.check, c.label)]
            )
        ]
        columns = [(key, label) for key, label in columns if any(k[1] == key for k in cells)]
        parts.append(_table("Gate: runs × items", "run", run_ids, columns, cells, short_labels=True))

    routes = [r for r in records if r.check in dict(_ROUTE_STAGES)]
    if routes:
        cells = defaultdict(list)
        for r in routes:
            cells[(r.target, r.check)].append(r)
            used.add(r.nodeid)
        rows = sorted({r.target for r in routes})
        parts.append(_table("Routes × stages", "route", rows, list(_ROUTE_STAGES), cells))

    workspaces = [r for r in records if r.check == "workspace_visible"]
    if workspaces:
        cells = defaultdict(list)
        backends: set[str] = set()
        for r in workspaces:
            backend = str(r.evidence.get("backend") or r.target.split("-", 1)[0])
            workspace = str(r.evidence.get("workspace") or r.target.removeprefix(backend + "-"))
            backends.add(backend)
            cells[(workspace, backend)].append(r)
            used.add(r.nodeid)
        rows = sorted({k[0] for k in cells})
        parts.append(
            _table("Workspaces × backends", "workspace", rows, [(b, b) for b in sorted(backends)], cells)
        )

    nodes = [r for r in records if r.check == "remote_node"]
    if nodes:
        used.update(r.nodeid for r in nodes)
        parts.append(
            '<h3>Nodes</h3><div class="flow">' + "".join(_cell(r, r.target) for r in nodes) + "</div>"
        )

    dgx = [r for r in records if r.check in dict(_DGX_CHAIN)]
    if dgx:
        by_host: dict[str, dict[str, CheckRecord]] = defaultdict(dict)
        for r in dgx:
            param = r.nodeid.rsplit("[", 1)[1].rstrip("]") if "[" in r.nodeid else r.target
            by_host[param][r.check] = r
            used.add(r.nodeid)
        rows_html = []
        for host, steps in sorted(by_host.items()):
            chain = '<span class="arrow">→</span>'.join(
                _cell(steps[check], label)
                if check in steps
                else f'<span class="muted">{esc(label)}: not run</span>'
                for check, label in _DGX_CHAIN
            )
            rows_html.append(f'<p class="chain"><strong>{esc(host)}</strong>: {chain}</p>')
        parts.append("<h3>DGX chain</h3>" + "".join(rows_html))

    leftover = [r for r in records if r.nodeid not in used]
    if leftover:
        by_suite: dict[str, list[CheckRecord]] = defaultdict(list)
        for r in leftover:
            by_suite[r.suite].append(r)
        for suite, members in sorted(by_suite.items()):
            cells_html = "".join(
                _cell(r, f"{r.check}" + (f" [{r.target}]" if r.target else "")) for r in members
            )
            parts.append(f'<h3>Other {esc(suite)} checks</h3><div class="flow">{cells_html}</div>')
    return '<h2 id="fleet">Fleet</h2><div class="grid-wrap" id="grid">' + "".join(parts) + "</div>"


def _table(
    title: str,
    corner: str,
    rows: Sequence[str],
    columns: Sequence[tuple[str, str]],
    cells: Mapping[tuple[str, str], list[CheckRecord]],
    *,
    short_labels: bool = False,
) -> str:
    head = f"<tr><th>{esc(corner)}</th>" + "".join(f"<th>{esc(label)}</th>" for _, label in columns) + "</tr>"
    body = []
    for row in rows:
        tds = []
        for key, label in columns:
            members = cells.get((row, key), [])
            text = label.split(" ", 1)[0] if short_labels else label
            tds.append("<td>" + "".join(_cell(m, text) for m in members) + "</td>")
        body.append(f"<tr><th>{esc(row)}</th>{''.join(tds)}</tr>")
    return f"<h3>{esc(title)}</h3><table>{head}{''.join(body)}</table>"


def _credit(ctx: PageContext) -> str:
    points = credit_of(ctx.report)
    read = {p.nodeid for p in points}
    unread = [r for r in ctx.report.checks if r.check == "E_credit_remaining" and r.nodeid not in read]
    if not points and not unread:
        return ""
    trend = ctx.history.credit if ctx.history else {}
    rows = [
        f'<div><a href="#{item_anchor(r.nodeid)}">{esc(r.target)}</a></div><div class="cbar" title="not read"></div>'
        f'<div class="o-{r.outcome.value}">not read: {esc(shorten(r.message, 120))}</div>'
        for r in unread
    ]
    for p in points:
        bar = _credit_bar(p)
        series = [pt.remaining_usd if pt else None for _, pt in trend.get(p.key, [])]
        spark = sparkline(series, floor=p.floor_usd) if len(series) > 1 else ""
        if p.remaining_usd is None:
            text = "uncapped (limit null)"
        else:
            text = f"${p.remaining_usd:.2f} left of ${p.limit_usd or 0:.2f}; floor ${p.floor_usd or 0:.2f}"
        rows.append(
            f'<div><a href="#{item_anchor(p.nodeid)}">{esc(p.run_id)}</a></div>{bar}'
            f"<div>{esc(text)} {spark}</div>"
        )
    return (
        '<h3 id="credit">Credit remaining per runtime key (gate E; black mark = floor)</h3>'
        f'<div class="credit">{"".join(rows)}</div>'
    )


def _credit_bar(p: CreditPoint) -> str:
    if p.remaining_usd is None or not p.limit_usd:
        return '<div class="cbar" title="uncapped"></div>'
    share = max(0.0, min(1.0, p.remaining_usd / p.limit_usd))
    low = p.floor_usd is not None and p.remaining_usd < p.floor_usd
    floor = ""
    if p.floor_usd is not None:
        floor = f'<b style="left:{max(0.0, min(1.0, p.floor_usd / p.limit_usd)) * 100:.1f}%"></b>'
    return (
        f'<div class="cbar" title="remaining {p.remaining_usd:.2f} of {p.limit_usd:.2f}">'
        f'<i class="{"low" if low else ""}" style="width:{share * 100:.1f}%"></i>{floor}</div>'
    )


def _filters(report: RunReport) -> str:
    def select(name: str, label: str, values: Iterable[str], extra: Sequence[tuple[str, str]] = ()) -> str:
        options = '<option value="">all</option>' + "".join(
            f'<option value="{esc(v)}">{esc(t)}</option>' for v, t in extra
        )
        options += "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in sorted(set(values)) if v)
        return (
            f'<label>{esc(label)} <select name="{esc(name)}" id="filter-{esc(name)}">{options}</select></label>'
        )

    checks = report.checks
    return (
        '<form id="filters" hidden onsubmit="return false">'
        + select(
            "outcome",
            "outcome",
            [],
            [
                ("problems", "failed or could not tell"),
                ("failed", "failed"),
                ("error", "could not tell (error)"),
                ("skipped", "skipped"),
                ("passed", "passed"),
            ],
        )
        + select("suite", "suite", [r.suite for r in checks])
        + select("target", "target", [r.target for r in checks])
        + select(
            "classification", "classification", [r.classification.value for r in checks if r.classification]
        )
        + '<span class="muted" id="shown"></span></form>'
    )


def _key_evidence(evidence: Mapping[str, Any]) -> list[tuple[str, str]]:
    keys = [k for k in _KEY_EVIDENCE if k in evidence] + [k for k in evidence if k not in _KEY_EVIDENCE]
    lines = []
    for key in keys:
        value = evidence[key]
        if value is None or value == "" or value == [] or value == {}:
            continue
        if isinstance(value, (dict, list)):
            text = json.dumps(value, ensure_ascii=False, sort_keys=True)
            if len(text) > 200:
                continue
        else:
            text = str(value)
        lines.append((key, shorten(text, 200)))
        if len(lines) >= _MAX_EVIDENCE_LINES:
            break
    return lines


def _item(ctx: PageContext, record: CheckRecord) -> str:
    outcome = record.outcome.value
    classification = record.classification.value if record.classification else ""
    incident = ctx.incident_of.get(record.nodeid)
    hist = ctx.hist(record)
    tags = []
    if classification:
        tags.append(f'<span class="tag">{esc(classification)}</span>')
    if incident is not None:
        tags.append(f'<a class="tag" href="#{esc(incident.id)}">incident {esc(incident.id)}</a>')
    if hist is not None:
        if hist.flaky:
            tags.append(
                f'<span class="tag flaky">FLAKY: {hist.flips} flips in {len(hist.outcomes)} runs</span>'
            )
        if hist.failing_since:
            since = "at least since" if hist.streak_reaches_window_start else "since"
            tags.append(
                f'<span class="tag ongoing">{esc(OUTCOME_LABEL[outcome].lower())} {since} {esc(hist.failing_since)} '
                f"({hist.failing_runs} run{'s' if hist.failing_runs != 1 else ''})</span>"
            )
    width = (record.duration_s / ctx.max_duration * 100) if ctx.max_duration else 0.0
    duration = (
        f'<span class="dur" title="duration"><span class="bar"><i style="width:{width:.1f}%"></i></span>'
        f"{esc(fmt_seconds(record.duration_s))}</span>"
    )
    strip = outcome_strip(hist.outcomes, ctx.dates()) if hist is not None and len(hist.outcomes) > 1 else ""
    header = (
        f'<header><span class="badge o-{outcome}">{OUTCOME_SYMBOL.get(outcome, "?")} '
        f"{esc(OUTCOME_LABEL.get(outcome, outcome))}"
        f"</span><strong>{esc(record.check)}</strong><code>{esc(record.target)}</code>{''.join(tags)}{strip}"
        f"{duration}</header>"
    )
    body = f'<p class="msg">{esc(record.message)}</p>'
    if record.outcome in (Outcome.FAILED, Outcome.ERROR):
        lines = "".join(f"<li><code>{esc(k)}</code>: {esc(v)}</li>" for k, v in _key_evidence(record.evidence))
        if lines:
            body += f'<ul class="ev">{lines}</ul>'
        if (
            incident is not None
            and (record.recommendation or incident.recommendation) == incident.recommendation
        ):
            body += (
                f'<div class="next"><strong>Next step — shared by incident <a href="#{esc(incident.id)}">'
                f"{esc(incident.id)}</a> (commands there)</strong>{esc(incident.recommendation)}</div>"
            )
        else:
            recommendation = record.recommendation or default_recommendation(
                record.classification or Classification.CHECK_FAILED,
                [record.target],
                probe=probe_command(record.evidence),
            )
            body += next_step_html(
                recommendation, next_step_commands([record], recommendation, ctx.inventory_flag)
            )
    facts = f"attempts: {record.attempts}" + (f" · cause: {record.cause}" if record.cause else "")
    evidence = json.dumps(record.evidence, indent=2, ensure_ascii=False, sort_keys=True)
    folded = (
        f"<details><summary>full evidence · <code>{esc(record.nodeid)}</code></summary>"
        f'<p class="muted">{esc(facts)} · identity {esc(item_identity(record))}</p><pre>{esc(evidence)}</pre></details>'
    )
    return (
        f'<article class="item o-{outcome}" id="{item_anchor(record.nodeid)}" data-outcome="{esc(outcome)}" '
        f'data-suite="{esc(record.suite)}" data-target="{esc(record.target)}" '
        f'data-classification="{esc(classification)}">{header}{body}{folded}</article>'
    )


def _items(ctx: PageContext) -> str:
    ordered = sorted(ctx.report.checks, key=lambda r: (_ORDER.get(r.outcome.value, 9), r.nodeid))
    problems = sum(1 for r in ordered if r.outcome in (Outcome.FAILED, Outcome.ERROR))
    note = f"{problems} not passed, listed first" if problems else "all passed"
    return (
        f'<h2 id="items">Items ({len(ordered)}; {note})</h2>{_filters(ctx.report)}'
        f'<div id="item-list">{"".join(_item(ctx, r) for r in ordered)}</div>'
    )


def _history(ctx: PageContext) -> str:
    history = ctx.history
    if history is None:
        return ""
    dates = ctx.dates()
    parts = [f'<h2 id="history">History ({len(history.runs)} runs kept)</h2>']
    for warning in history.warnings:
        parts.append(f'<p class="warn">{esc(warning)}</p>')
    flaky = history.flaky
    if flaky:
        rows = "".join(
            f"<tr><td>{esc(i.identity)}</td><td>{outcome_strip(i.outcomes, dates)}</td><td>{i.flips}</td></tr>"
            for i in flaky
        )
        parts.append(
            f"<h3>Flaky items ({len(flaky)}; flipped at least twice)</h3>"
            f"<table><tr><th>item</th><th>outcomes (oldest → now)</th><th>flips</th></tr>{rows}</table>"
        )
    else:
        parts.append('<p class="muted">No flaky items in the window.</p>')
    failing = history.failing
    if failing:
        rows = "".join(
            f"<tr><td>{esc(i.identity)}</td><td>{outcome_strip(i.outcomes, dates)}</td>"
            f"<td>{'≥ ' if i.streak_reaches_window_start else ''}{esc(i.failing_since)}</td>"
            f"<td>{i.failing_runs}</td></tr>"
            for i in failing
        )
        parts.append(
            "<h3>Failing now, since</h3><table><tr><th>item</th><th>outcomes</th><th>since</th><th>runs</th></tr>"
            f"{rows}</table>"
        )
    slow = sorted(history.items.values(), key=lambda i: -(i.durations[-1] or 0.0))[:8]
    slow = [i for i in slow if i.durations and i.durations[-1]]
    if slow:
        rows = "".join(
            f"<tr><td>{esc(i.identity)}</td><td>{esc(fmt_seconds(i.durations[-1]))}</td><td>{sparkline(i.durations)}</td></tr>"
            for i in slow
        )
        parts.append(
            "<h3>Duration trend (slowest now)</h3><table><tr><th>item</th><th>now</th><th>trend</th></tr>"
            f"{rows}</table>"
        )
    return "".join(parts)


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
    verdict = verdict_of(report)
    title = f"{_HEADLINE[verdict].split(' —')[0]} · sbxcheck · {report.inventory.source}"
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
        f"{_top(ctx)}{_incidents(ctx)}{_mounts(report)}{_grid(ctx)}{_credit(ctx)}{_items(ctx)}{_history(ctx)}"
        f"{_machines(report)}</main><script>{_SCRIPT}</script></body></html>\n"
    )
    return for_display(page, redactor)  # redacted, then no control character but \n and \t
