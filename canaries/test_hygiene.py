"""Mission hygiene: what an on-call operator looks at by hand (specs/sandboxed-sh.md, 3.3, 3.6 and 7).

Read-only: the integrity groups, the live runners' health, every non-terminal mission's staleness
verdict, and the ``get_mission_health`` signals across in-flight missions (one item per signal,
so the missions sharing one become one incident).
"""

from __future__ import annotations

import pytest

from sbxcheck.suite import (
    SIGNALS,
    Inventory,
    SandboxedSection,
    SbxError,
    Session,
    SignalScan,
    Verdict,
    check_mission_signal,
    check_mission_verdicts,
    check_missions_integrity,
    check_running_health,
    mission_signal_scan,
)

pytestmark = [pytest.mark.canary, pytest.mark.xdist_group(name="sandboxed-control-plane")]


def _section(inventory: Inventory) -> SandboxedSection:
    if inventory.sandboxed is None:
        pytest.skip("the inventory has no [sandboxed] section")
    return inventory.sandboxed


def test_missions_integrity(sbx_session: Session, sbx_inventory: Inventory, sbx_verdict: Verdict) -> None:
    """`GET /missions/integrity`: no orphaned pending, no stale active (waiting ones are evidence)."""
    _section(sbx_inventory)
    sbx_verdict(check_missions_integrity(sbx_session.sandboxed_client()))


def test_running_health(sbx_session: Session, sbx_inventory: Inventory, sbx_verdict: Verdict) -> None:
    """`GET /running`: no stalled-severe, missing-deliverables or unexpected-end runner (warnings noted)."""
    _section(sbx_inventory)
    sbx_verdict(check_running_health(sbx_session.sandboxed_client()))


def test_mission_verdicts(sbx_session: Session, sbx_inventory: Inventory, sbx_verdict: Verdict) -> None:
    """Every non-terminal mission's staleness verdict, with the inventory's thresholds."""
    section = _section(sbx_inventory)
    sbx_verdict(check_mission_verdicts(sbx_session.sandboxed_client(), section.hygiene))


@pytest.fixture(scope="module")
def mission_signal_scan_result(sbx_session: Session, sbx_inventory: Inventory) -> SignalScan | SbxError:
    """`get_mission_health` for each in-flight mission, asked once for every signal item."""
    section = _section(sbx_inventory)
    if section.mcp is None:
        pytest.skip("get_mission_health is an assistant-MCP tool and the inventory has no [sandboxed.mcp]")
    return mission_signal_scan(sbx_session, section)


@pytest.mark.parametrize("signal", SIGNALS)
def test_mission_signals(
    signal: str, mission_signal_scan_result: SignalScan | SbxError, sbx_verdict: Verdict
) -> None:
    """The in-flight missions sharing one get_mission_health signal: one finding, one next step."""
    sbx_verdict(check_mission_signal(mission_signal_scan_result, signal))
