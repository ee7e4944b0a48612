"""The report page's items: the filters, then one card per item with its key evidence and next step."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sbxcheck.report.history import item_identity
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
)
from sbxcheck.report.incidents import default_recommendation
from sbxcheck.report.nextsteps import next_step_commands, probe_command, record_commands
from sbxcheck.results import CheckRecord, Classification, Outcome, RunReport

__all__ = ["render_items"]

_ORDER = {"failed": 0, "error": 1, "waived": 2, "skipped": 3, "passed": 4}

_KEY_EVIDENCE = (
    "error", "stderr", "state", "status", "http_status", "porcelain_sample", "signature", "remaining_usd",
    "floor_usd", "limit_usd", "usage_usd", "model", "finish_reason", "rate_problems", "waited_s",
    "deadline_s", "events_seen", "notes", "stdout", "head", "recorded_commit_sha", "ran", "exit_code", "host",
)  # fmt: skip
_MAX_EVIDENCE_LINES = 6


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
                ("waived", "waived (known failure)"),
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
    if record.waiver is not None:
        tags.append(f'<a class="tag waived" href="#waived">waiver: {esc(record.waiver.get("status"))}</a>')
    if record.failing_for:  # how long it has failed for this same cause
        tags.append(f'<span class="tag ongoing">{esc(record.failing_for)}</span>')
    if hist is not None:
        if hist.flaky:
            tags.append(
                f'<span class="tag flaky">FLAKY: {hist.flips} flips in {len(hist.outcomes)} runs</span>'
            )
        if hist.failing_since and not record.failing_for:
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
    if record.outcome in (Outcome.FAILED, Outcome.ERROR, Outcome.WAIVED):
        lines = "".join(f"<li><code>{esc(k)}</code>: {esc(v)}</li>" for k, v in _key_evidence(record.evidence))
        if lines:
            body += f'<ul class="ev">{lines}</ul>'
    if record.outcome in (Outcome.FAILED, Outcome.ERROR):
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
                recommendation,
                next_step_commands([record], record_commands(record, recommendation), ctx.inventory_flag),
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


def render_items(ctx: PageContext) -> str:
    """The filters, then one card per item, failed and errored first."""
    ordered = sorted(ctx.report.checks, key=lambda r: (_ORDER.get(r.outcome.value, 9), r.nodeid))
    problems = sum(1 for r in ordered if r.outcome in (Outcome.FAILED, Outcome.ERROR))
    waived = sum(1 for r in ordered if r.outcome is Outcome.WAIVED)
    note = f"{problems} not passed, listed first" if problems else "none failed" if waived else "all passed"
    note += f"; {waived} waived" if waived else ""
    return (
        f'<h2 id="items">Items ({len(ordered)}; {note})</h2>{_filters(ctx.report)}'
        f'<div id="item-list">{"".join(_item(ctx, r) for r in ordered)}</div>'
    )
