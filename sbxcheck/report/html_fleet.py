"""The report page's fleet grid (gate runs, routes, workspaces, nodes, the DGX chain) and credit panel."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from sbxcheck.report.history import CreditPoint, credit_of
from sbxcheck.report.html_base import OUTCOME_SYMBOL, PageContext, esc, item_anchor, shorten, sparkline
from sbxcheck.results import GATE_COLUMNS, CheckRecord

__all__ = ["render_credit", "render_grid"]

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


def _cell(record: CheckRecord, label: str) -> str:
    outcome = record.outcome.value
    title = f"{record.check} [{record.target}]: {outcome} — {record.message}"
    return (
        f'<a class="cell o-{outcome}" href="#{item_anchor(record.nodeid)}" title="{esc(title[:300])}">'
        f"{OUTCOME_SYMBOL.get(outcome, '?')} {esc(label)}</a>"
    )


def _split_gate_target(target: str, run_ids: Sequence[str]) -> tuple[str, str | None]:
    for run_id in sorted(run_ids, key=len, reverse=True):
        if target == run_id:
            return run_id, None
        if target.startswith(run_id + "-"):
            return run_id, target[len(run_id) + 1 :]
    return target, None


def render_grid(ctx: PageContext) -> str:
    """The fleet grid: one cell per item, in tables by kind (gate runs, routes, workspaces, DGX chain)."""
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


def render_credit(ctx: PageContext) -> str:
    """Gate E's credit per runtime key, with its trend across the history ("" when no item read it)."""
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
