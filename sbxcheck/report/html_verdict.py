"""The report page's head: the verdict banner and headline, the run's facts and contents, the not-run banner."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping

from sbxcheck.report.history import run_duration_s, verdict_of
from sbxcheck.report.html_base import (
    OUTCOME_LABEL,
    OUTCOME_SYMBOL,
    PageContext,
    esc,
    fmt_seconds,
    next_step_html,
    outcome_strip,
)
from sbxcheck.report.nextsteps import not_run_command
from sbxcheck.report.present import outcome_counts
from sbxcheck.results import RunReport

__all__ = ["page_title", "pills_text", "render_verdict", "verdict_headline"]

_HEADLINE = {
    "failed": "FAILED — something in the fleet is wrong",
    "error": "COULD NOT TELL — some checks could not reach a verdict",
    "passed": "HEALTHY — every check passed",
    "empty": "NO CHECKS RAN",
    "interrupted": "INTERRUPTED — the run was stopped before it finished",
}
#: How many not-run items the banner names (the items list has every one).
_BANNER_NOT_RUN = 20


def render_verdict(ctx: PageContext) -> str:
    """The verdict banner (headline, counts, not-run banner), then the run's facts, pills and contents."""
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
    toc = [("#incidents", f"Incidents ({len(report.incidents)})")]
    if report.waivers or summary.get("waived"):
        toc.append(("#waived", f"Waived ({summary.get('waived', 0)}; {len(report.waivers)} waivers)"))
    toc.append(("#fleet", "Fleet grid"))
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


def page_title(report: RunReport) -> str:
    """The page's title: the verdict's first words, then the inventory the run checked."""
    return f"{_HEADLINE[verdict_of(report)].split(' —')[0]} · sbxcheck · {report.inventory.source}"


def verdict_headline(verdict: str, summary: Mapping[str, int] | None = None) -> str:
    """The banner's headline for a verdict (``verdict_of``), e.g. "INTERRUPTED — the run stopped …".

    A healthy run with skipped or waived items says how many passed, were waived (known failures) and
    were skipped, not "every check".
    """
    counts = summary or {}
    waived, skipped = counts.get("waived", 0), counts.get("skipped", 0)
    if verdict == "passed" and (skipped or waived):
        rest = [f"{waived} waived (known failures)" if waived else "", f"{skipped} skipped" if skipped else ""]
        return f"HEALTHY — {counts.get('passed', 0)} passed, " + ", ".join(r for r in rest if r)
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
    left = "".join(
        f"<li>{esc(str(e.get('kind')))} <code>{esc(str(e.get('ident')))}</code> ({esc(str(e.get('state')))}) "
        f"{esc(str(e.get('why') or ''))}</li>"
        for e in report.left
    )
    ran = (
        f"{len(report.not_run)} selected item(s) did not run{esc(why)}; re-run them for a verdict"
        if report.not_run
        else f"every selected item ran, but the run was stopped before it finished{esc(why)}"
    )
    return (
        f'<p class="not-run">{ran}</p>'
        + (f'<p class="not-run">left open (the ledger keeps them):</p><ul class="not-run">{left}</ul>' if left else "")
        + (next_step_html("", [rerun], title="Re-run what did not run") if rerun else "")
        + (f'<ul class="not-run">{names}</ul>' if names else "")
    )


def pills_text(tally: Mapping[str, int]) -> str:
    """The banner's count line from :func:`outcome_counts` (not run and waived only when there were such items)."""
    return ", ".join(f"{n} {OUTCOME_LABEL[o].lower()}" for o, n in tally.items() if n or o not in ("not run", "waived"))
