"""What a run spent, and the cap it ran under: a core module (results only), read by the plugin and the reports.

* :func:`mission_cost_usd` — a mission's cost from its stored ``assistant_message`` events
  (``cost_cents``, where the control plane reports it; folded into ``metadata`` or ``content``).
* :func:`summarize_spend` — the run's spend from the cleanup lines (each mission's ``cost_usd``),
  the cap (``--sbx-max-spend``) and the items the cap kept back.
* :func:`spend_line` — the one line the terminal and the page show.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sbxcheck.results import CheckRecord, Classification, Outcome


def _cents(event: Mapping[str, Any]) -> float | None:
    for source in (event.get("metadata"), event):
        if isinstance(source, Mapping):
            value = source.get("cost_cents")
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                return float(value)
    content = event.get("content")
    if isinstance(content, str) and content.lstrip().startswith("{"):
        try:
            doc = json.loads(content)
        except ValueError:
            return None
        if isinstance(doc, dict):
            value = doc.get("cost_cents")
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                return float(value)
    return None


def mission_cost_usd(events: Iterable[Mapping[str, Any]]) -> float | None:
    """The sum of ``cost_cents`` over the mission's assistant messages, in USD; None when none reports one."""
    costs = [
        c for e in events if e.get("event_type") == "assistant_message" for c in [_cents(e)] if c is not None
    ]
    return round(sum(costs) / 100.0, 6) if costs else None


def summarize_spend(
    cleanup: Sequence[Mapping[str, Any]], records: Sequence[CheckRecord], *, cap_usd: float | None
) -> dict[str, Any]:
    """The run's spend: missions (known cost, unknown cost), the cap, and what the cap kept back."""
    missions = [c for c in cleanup if c.get("kind") == "mission"]
    known = [float(c["cost_usd"]) for c in missions if isinstance(c.get("cost_usd"), int | float)]
    held = sorted(
        {
            r.nodeid
            for r in records
            if r.classification is Classification.SPEND_CAP and r.outcome is Outcome.ERROR
        }
    )
    total = round(sum(known), 6)
    return {
        "total_usd": total,
        "missions": len(missions),
        "missions_cost_unknown": len(missions) - len(known),
        "cap_usd": cap_usd,
        "cap_reached": cap_usd is not None and (total >= cap_usd or bool(held)),
        "not_run": held,
        "source": "assistant_message cost_cents of each mission this run created",
    }


def spend_worth_showing(spend: Mapping[str, Any] | None) -> bool:
    """A spend line says something when the run created missions or had a cap (a gate-only run has
    neither: its pings are not counted, and "$0 on 0 missions" would read as a measurement)."""
    if not spend:
        return False
    return bool(spend.get("missions") or spend.get("cap_usd") is not None)


def spend_line(spend: Mapping[str, Any]) -> str:
    """One line for the terminal and the page: what the run spent, and the cap."""
    text = f"spend: ${spend.get('total_usd', 0):.4f} on {spend.get('missions', 0)} mission(s)"
    if spend.get("missions_cost_unknown"):
        text += f" ({spend['missions_cost_unknown']} without a reported cost)"
    cap = spend.get("cap_usd")
    if cap is not None:
        held = spend.get("not_run") or []
        text += f"; cap ${cap:.4f}" + (
            f" reached: {len(held)} item(s) not run" if spend.get("cap_reached") else " not reached"
        )
    return text
