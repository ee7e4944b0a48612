"""What a session's missions cost, and ``--sbx-max-spend``: nothing more is dispatched once it is reached.

Costs are booked per mission from its stored events (never the live stream's sum). A cost the
control plane reported in a form that cannot be used is kept with its reason and never summed: under
a cap it counts as reaching the cap, since guessing low would let a run pass the cap silently.
"""

from __future__ import annotations

from typing import Any

from sbxcheck.results import CheckResult, Classification
from sbxcheck.spend import MissionCost


class SpendCap:
    """The session's booked mission costs and, with a cap, the not-run result once it is reached."""

    def __init__(self, cap_usd: float | None) -> None:
        self.cap_usd = cap_usd  # with a cap, missions go one at a time: each cost known before the next
        self.costs: dict[str, float | None] = {}  # mission id -> USD (None: not reported)
        self.cost_unreadable: dict[str, str] = {}  # mission id -> why its reported cost cannot be used

    def book(self, mission_id: str, cost: MissionCost) -> None:
        """Record what ``mission_id`` cost; an unreadable cost is kept with its reason, never summed."""
        self.costs[mission_id] = cost.usd
        if cost.unreadable is not None:
            self.cost_unreadable[mission_id] = cost.unreadable

    @property
    def spent_usd(self) -> float:
        """What the booked missions reported costing so far (readable costs only)."""
        return round(sum(c for c in self.costs.values() if c is not None), 6)

    def refusal(self, label: str) -> CheckResult | None:
        """The not-run result for ``label`` once the cap is reached (or a cost could not be read), else None."""
        cap = self.cap_usd
        if cap is None:
            return None
        evidence: dict[str, Any] = {
            "cap_usd": cap,
            "spent_usd": self.spent_usd,
            "missions_before": len(self.costs),
        }
        if self.cost_unreadable:
            mission_id, why = next(iter(self.cost_unreadable.items()))
            evidence["cost_unreadable"] = dict(self.cost_unreadable)
            return CheckResult.errored(
                "spend_cap",
                label,
                f"not run: --sbx-max-spend ${cap:.4f} taken as reached: the cost of mission {mission_id} "
                f"could not be read ({why}), so what was spent is unknown",
                Classification.SPEND_CAP,
                evidence,
                recommendation="read the control plane's cost for that mission by hand before running more "
                "under a cap; nothing else was dispatched once a cost could not be read",
            )
        if self.spent_usd < cap:
            return None
        return CheckResult.errored(
            "spend_cap",
            label,
            f"not run: --sbx-max-spend ${cap:.4f} reached (${self.spent_usd:.4f} spent by "
            f"{len(self.costs)} mission(s) before it)",
            Classification.SPEND_CAP,
            evidence,
            recommendation="raise --sbx-max-spend deliberately or select fewer routes; nothing else was "
            "dispatched once the cap was reached",
        )
