"""The account behind the fleet can pay for the next run: its balance is above the inventory's floor."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sbxcheck.checks.spend import check_credits
from sbxcheck.inventory import Inventory
from sbxcheck.plugin.session import SbxSession
from sbxcheck.results import CheckResult

pytestmark = pytest.mark.canary


def test_credits(
    sbx_session: SbxSession, sbx_inventory: Inventory, sbx_verdict: Callable[[CheckResult], None]
) -> None:
    """`GET /api/v1/credits` (provisioning key): the account balance is at least the inventory's floor."""
    sssf = sbx_inventory.sssf
    if sssf is None or sssf.account_credit_floor_usd is None:
        pytest.skip("no account floor: set [sssf] account_credit_floor_usd (and a provisioning key)")
    sbx_verdict(check_credits(sbx_session.openrouter_admin(), sssf.account_credit_floor_usd))
