"""The report page's history panel: flaky items, failing streaks and duration trends across kept runs."""

from __future__ import annotations

from sbxcheck.report.html_base import PageContext, esc, fmt_seconds, outcome_strip, sparkline

__all__ = ["render_history"]


def render_history(ctx: PageContext) -> str:
    """Flaky items, failing streaks and duration trends across the kept runs ("" without history)."""
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
