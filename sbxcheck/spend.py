"""What a run spent, and the cap it ran under: a core module (results only), read by the plugin and the reports.

* :func:`mission_cost` — a mission's cost from its stored ``assistant_message`` events
  (``cost_cents``, where the control plane reports it; folded into ``metadata`` or ``content``).
  Each reported cost is checked (a finite, non-negative number under a per-message cap) and so is
  the sum; one that is not makes the mission's cost unreadable, never a wrong number.
* :func:`summarize_spend` — the run's spend from the cleanup lines (each mission's ``cost_usd``),
  the cap (``--sbx-max-spend``) and the items the cap kept back.
* :func:`spend_line` — the one line the terminal and the page show.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sbxcheck.results import CheckRecord, Classification, Outcome
from sbxcheck.safeio import loads_bounded

MAX_MESSAGE_CENTS: Final = 100_000.0  # $1,000 for one assistant message: past any real model call
MAX_MISSION_USD: Final = 10_000.0  # a sum past this is not a mission's cost
SPEND_SOURCE: Final = "assistant_message cost_cents of each mission this run created"


@dataclass(frozen=True)
class MissionCost:
    """What one mission cost: ``usd`` when every reported cost was readable (None when none was
    reported), else ``unreadable`` says which value could not be used and ``usd`` is None."""

    usd: float | None
    unreadable: str | None = None


def check_cents(value: object) -> tuple[float | None, str | None]:
    """One reported ``cost_cents``: ``(cents, None)`` when it is a finite, non-negative number under
    :data:`MAX_MESSAGE_CENTS`; ``(None, why)`` when it is present but unusable; ``(None, None)`` when absent."""
    if value is None:
        return None, None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None, f"cost_cents {shown(value)} is not a number"
    number = float(value)
    if not math.isfinite(number):
        return None, f"cost_cents {shown(value)} is not finite"
    if number < 0:
        return None, f"cost_cents {shown(value)} is negative"
    if number > MAX_MESSAGE_CENTS:
        return None, f"cost_cents {shown(value)} is over {MAX_MESSAGE_CENTS:.0f} for one message"
    return number, None


def shown(value: object) -> str:
    """A reported value, short enough for a line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _reported(event: Mapping[str, Any]) -> object:
    """The event's ``cost_cents`` (in ``metadata``, the event itself, or a JSON ``content``); None if absent.

    The content is the agent's text: read bounded (size and depth), never past what it says.
    """
    for source in (event.get("metadata"), event):
        if isinstance(source, Mapping) and "cost_cents" in source:
            return source.get("cost_cents")
    content = event.get("content")
    if isinstance(content, str) and content.lstrip().startswith("{"):
        try:
            doc = loads_bounded(content)
        except ValueError:  # not JSON, or too large or deep to read (UnsafeInput): no cost said there
            return None
        if isinstance(doc, dict):
            return doc.get("cost_cents")
    return None


def mission_cost(events: Iterable[Mapping[str, Any]]) -> MissionCost:
    """The sum of ``cost_cents`` over the mission's assistant messages, in USD (None when none reports
    one); unreadable when one message's cost is not a usable number or the sum is past
    :data:`MAX_MISSION_USD` — never a wrong number."""
    total, seen = 0.0, False
    for event in events:
        if event.get("event_type") != "assistant_message":
            continue
        cents, why = check_cents(_reported(event))
        if why is not None:
            where = event.get("sequence")
            return MissionCost(None, f"assistant_message {where if isinstance(where, int) else '?'}: {why}")
        if cents is not None:
            total, seen = total + cents, True
    if not seen:
        return MissionCost(None)
    usd = round(total / 100.0, 6)
    if usd > MAX_MISSION_USD:
        return MissionCost(
            None, f"the reported costs sum to ${usd:,.2f}, over ${MAX_MISSION_USD:,.0f} for one mission"
        )
    return MissionCost(usd)


def mission_cost_usd(events: Iterable[Mapping[str, Any]]) -> float | None:
    """The mission's cost in USD; None when none is reported or one is unreadable (:func:`mission_cost`)."""
    return mission_cost(events).usd


def _usd(value: object) -> float | None:
    """A booked ``cost_usd`` when it is a usable amount, else None."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0 <= number <= MAX_MISSION_USD else None


def summarize_spend(
    cleanup: Sequence[Mapping[str, Any]], records: Sequence[CheckRecord], *, cap_usd: float | None
) -> dict[str, Any]:
    """The run's spend: missions (known cost, unknown cost, unreadable cost), the cap, and what the cap
    kept back. An unreadable cost is never summed; with a cap, it counts as the cap reached (what was
    spent is unknown, so the cap cannot be said to hold)."""
    missions = [c for c in cleanup if c.get("kind") == "mission"]
    known: list[float] = []
    unreadable: list[dict[str, str]] = []
    for line in missions:
        usd = _usd(line.get("cost_usd"))
        why = line.get("cost_unreadable")
        if isinstance(why, str) and why:
            unreadable.append({"mission": str(line.get("ident")), "why": why})
        elif usd is not None:
            known.append(usd)
        elif line.get("cost_usd") is not None:
            why = f"cost_usd {shown(line.get('cost_usd'))} is not a usable amount"
            unreadable.append({"mission": str(line.get("ident")), "why": why})
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
        "missions_cost_unknown": len(missions) - len(known) - len(unreadable),
        "missions_cost_unreadable": len(unreadable),
        "cost_unreadable": unreadable,
        "cap_usd": cap_usd,
        "cap_reached": cap_usd is not None and (total >= cap_usd or bool(held) or bool(unreadable)),
        "not_run": held,
        "source": SPEND_SOURCE,
    }


def spend_worth_showing(spend: Mapping[str, Any] | None) -> bool:
    """A spend line says something when the run created missions or had a cap (a gate-only run has
    neither: its pings are not counted, and "$0 on 0 missions" would read as a measurement)."""
    if not spend:
        return False
    return bool(spend.get("missions") or spend.get("cap_usd") is not None)


def _amount(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def spend_line(spend: Mapping[str, Any]) -> str:
    """One line for the terminal and the page: what the run spent, and the cap. It never raises: a
    total or cap that is not a finite number is said to be unreadable, never shown as a number."""
    total = _amount(spend.get("total_usd", 0))
    missions = spend.get("missions", 0)
    shown_total = f"${total:.4f}" if total is not None else "an unreadable amount"
    text = f"spend: {shown_total} on {missions} mission(s)"
    notes = []
    if spend.get("missions_cost_unknown"):
        notes.append(f"{spend['missions_cost_unknown']} without a reported cost")
    unreadable = spend.get("missions_cost_unreadable") or 0
    if unreadable:
        first = (spend.get("cost_unreadable") or [{}])[0]
        why = f": {first.get('mission')}: {first.get('why')}" if isinstance(first, Mapping) and first else ""
        notes.append(f"{unreadable} with an unreadable cost, not counted{why}")
    if notes:
        text += f" ({'; '.join(notes)})"
    cap = spend.get("cap_usd")
    if cap is not None:
        held = spend.get("not_run") or []
        cap_amount = _amount(cap)
        text += f"; cap ${cap_amount:.4f}" if cap_amount is not None else "; cap (unreadable)"
        if unreadable or total is None:
            text += " taken as reached: what was spent is unknown"
            text += f", {len(held)} item(s) not run" if held else ""
        elif spend.get("cap_reached"):
            text += f" reached: {len(held)} item(s) not run"
        else:
            text += " not reached"
    return text
