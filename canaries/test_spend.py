"""The account behind the fleet can pay for the next run: its balance is above the inventory's floor."""

from __future__ import annotations

import pytest

from sbxcheck.suite import Inventory, Session, Verdict, check_credits

pytestmark = pytest.mark.canary


def test_credits(sbx_session: Session, sbx_inventory: Inventory, sbx_verdict: Verdict) -> None:
    """`GET /api/v1/credits` (provisioning key): the account balance is at least the inventory's floor."""
    sssf = sbx_inventory.sssf
    if sssf is None or sssf.account_credit_floor_usd is None:
        pytest.skip("no account floor: set [sssf] account_credit_floor_usd (and a provisioning key)")
    sbx_verdict(check_credits(sbx_session.openrouter_admin(), sssf.account_credit_floor_usd))
