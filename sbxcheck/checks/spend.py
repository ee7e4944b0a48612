"""Whether the account can afford the next run; the run's own spend is :mod:`sbxcheck.spend`.

:func:`check_credits` — ``GET /api/v1/credits`` with the provisioning key: the account balance
against the inventory's floor.
"""

from __future__ import annotations

from typing import Final, Protocol

from sbxcheck.checks.base import run_check
from sbxcheck.clients.openrouter import AccountCredits
from sbxcheck.results import CheckResult

CHECK_CREDITS: Final = "credits"


class CreditsApi(Protocol):
    def credits(self) -> AccountCredits: ...


def check_credits(admin: CreditsApi, floor_usd: float, *, target: str = "openrouter-account") -> CheckResult:
    """The OpenRouter account's remaining balance (credits − usage) is at least ``floor_usd``."""

    def body() -> CheckResult:
        credits = admin.credits()
        evidence = {
            "endpoint": "GET /api/v1/credits",
            "total_credits_usd": credits.total_credits,
            "total_usage_usd": credits.total_usage,
            "remaining_usd": round(credits.remaining, 4),
            "floor_usd": floor_usd,
        }
        if credits.remaining < floor_usd:
            return CheckResult.failed(
                CHECK_CREDITS,
                target,
                f"account balance ${credits.remaining:.2f} is below the floor ${floor_usd:.2f} "
                f"(credits ${credits.total_credits:.2f}, used ${credits.total_usage:.2f})",
                evidence,
                recommendation=(
                    "add credits to the OpenRouter account (or lower [sssf] account_credit_floor_usd "
                    "deliberately) before the next run: gate pings and missions will start failing 402"
                ),
            )
        return CheckResult.passed(
            CHECK_CREDITS,
            target,
            f"account balance ${credits.remaining:.2f} ≥ floor ${floor_usd:.2f}",
            evidence,
        )

    return run_check(CHECK_CREDITS, target, body)
