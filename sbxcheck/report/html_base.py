"""The report page's shared pieces: escaping, the render context, outcome words and symbols, small graphics."""

from __future__ import annotations

import hashlib
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sbxcheck.report.history import HistoryView, ItemHistory, item_identity
from sbxcheck.report.nextsteps import inventory_flag
from sbxcheck.results import CheckRecord, Incident, RunReport

__all__ = [
    "OUTCOME_LABEL",
    "OUTCOME_SYMBOL",
    "PageContext",
    "esc",
    "fmt_seconds",
    "item_anchor",
    "next_step_html",
    "outcome_strip",
    "shorten",
    "sparkline",
]

OUTCOME_SYMBOL = {"passed": "✓", "failed": "✗", "error": "?", "waived": "~", "skipped": "–", "not run": "–"}

OUTCOME_LABEL = {
    "passed": "PASSED",
    "failed": "FAILED",
    "error": "COULD NOT TELL",
    "waived": "WAIVED",
    "skipped": "SKIPPED",
    "not run": "NOT RUN",
}


def esc(value: Any) -> str:
    """The text of ``value`` escaped for an element or a quoted attribute (``None`` is empty)."""
    return html.escape("" if value is None else str(value), quote=True)


def item_anchor(nodeid: str) -> str:
    """The id of an item's card: stable per node id, safe in a URL fragment."""
    return "item-" + hashlib.sha1(nodeid.encode(), usedforsecurity=False).hexdigest()[:12]


def fmt_seconds(value: float | None) -> str:
    """A duration as people read it: ``0.42 s``, ``12.3 s``, ``4m 05s``, ``1h 02m`` (``?`` unknown)."""
    if value is None:
        return "?"
    if value < 60:
        return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"
    minutes, seconds = divmod(round(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {seconds:02d}s"


def outcome_strip(outcomes: Iterable[str | None], dates: Sequence[str], *, big: bool = False) -> str:
    """One small square per run (oldest first), coloured by the item's outcome in it."""
    cells = []
    for when, outcome in zip(dates, outcomes, strict=False):
        css = outcome if outcome in OUTCOME_SYMBOL or outcome == "interrupted" else "empty"
        cells.append(f'<i class="o-{css}" title="{esc(when)}: {esc(outcome or "not run")}"></i>')
    css = "strip big" if big else "strip"
    return f'<span class="{css}" aria-label="last runs, oldest first">{"".join(cells)}</span>'


def sparkline(
    values: Sequence[float | None], *, width: int = 120, height: int = 22, floor: float | None = None
) -> str:
    """An inline SVG line of ``values`` (gaps skipped), with ``floor`` as a dashed line; "" under two points."""
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return ""
    top = max([*known, floor or 0.0]) or 1.0
    step = width / max(1, len(values) - 1)
    points = " ".join(
        f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}"
        for i, v in enumerate(values)
        if v is not None
    )
    floor_line = ""
    if floor is not None:
        y = height - 2 - (floor / top) * (height - 4)
        floor_line = (
            f'<line x1="0" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#cf222e" stroke-dasharray="3 2"/>'
        )
    return (
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
        f'{floor_line}<polyline fill="none" stroke="#0969da" stroke-width="1.5" points="{points}"/></svg>'
    )


@dataclass
class PageContext:
    """What each section of a page reads: the report, its history, each item's incident, the longest run."""

    report: RunReport
    history: HistoryView | None
    incident_of: dict[str, Incident]
    max_duration: float

    def dates(self) -> list[str]:
        return [r.started_at for r in self.history.runs] if self.history else []

    @property
    def inventory_flag(self) -> str:
        return inventory_flag(self.report.inventory.source)

    def hist(self, record: CheckRecord) -> ItemHistory | None:
        return self.history.items.get(item_identity(record)) if self.history else None


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def next_step_html(recommendation: str, commands: Sequence[str], *, title: str = "Next step") -> str:
    """A next-step box: the recommendation, then each command in a block with its copy button."""
    cmds = "".join(
        f'<div class="cmd"><pre><code>{esc(c)}</code></pre>'
        '<button class="copy" type="button" hidden>copy</button></div>'
        for c in commands
    )
    return f'<div class="next"><strong>{esc(title)}</strong>{esc(recommendation)}{cmds}</div>'
