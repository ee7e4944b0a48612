"""Mission hygiene: what an on-call operator looks at by hand (specs/sandboxed-sh.md, 3.3, 3.6 and 7).

Read-only: the integrity groups, the live runners' health, every non-terminal mission's staleness
verdict, and the ``get_mission_health`` signals across in-flight missions (one item per signal,
so the missions sharing one become one incident).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sbxcheck.checks import hygiene
from sbxcheck.clients.mcp_auth import auth_refusal
from sbxcheck.clients.sandboxed_models import IN_FLIGHT_STATUSES
from sbxcheck.errors import BadResponseError, SbxError
from sbxcheck.inventory import Inventory, SandboxedSection
from sbxcheck.plugin.session import SbxSession
from sbxcheck.results import CheckResult

pytestmark = [pytest.mark.canary, pytest.mark.xdist_group(name="sandboxed-control-plane")]

Verdict = Callable[[CheckResult], None]


def _section(inventory: Inventory) -> SandboxedSection:
    if inventory.sandboxed is None:
        pytest.skip("the inventory has no [sandboxed] section")
    return inventory.sandboxed


def test_missions_integrity(sbx_session: SbxSession, sbx_inventory: Inventory, sbx_verdict: Verdict) -> None:
    """`GET /missions/integrity`: no orphaned pending, no stale active (waiting ones are evidence)."""
    _section(sbx_inventory)
    sbx_verdict(hygiene.check_missions_integrity(sbx_session.sandboxed_client()))


def test_running_health(sbx_session: SbxSession, sbx_inventory: Inventory, sbx_verdict: Verdict) -> None:
    """`GET /running`: no stalled-severe, missing-deliverables or unexpected-end runner (warnings noted)."""
    _section(sbx_inventory)
    sbx_verdict(hygiene.check_running_health(sbx_session.sandboxed_client()))


def test_mission_verdicts(sbx_session: SbxSession, sbx_inventory: Inventory, sbx_verdict: Verdict) -> None:
    """Every non-terminal mission's staleness verdict, with the inventory's thresholds."""
    section = _section(sbx_inventory)
    sbx_verdict(hygiene.check_mission_verdicts(sbx_session.sandboxed_client(), section.hygiene))


@pytest.fixture(scope="module")
def mission_signal_scan(sbx_session: SbxSession, sbx_inventory: Inventory) -> hygiene.SignalScan | SbxError:
    """`get_mission_health` for each in-flight mission, asked once for every signal item."""
    section = _section(sbx_inventory)
    if section.mcp is None:
        pytest.skip("get_mission_health is an assistant-MCP tool and the inventory has no [sandboxed.mcp]")
    client = sbx_session.sandboxed_client()

    def in_flight() -> list[str]:
        missions, _ = client.list_missions_paged(max_missions=section.hygiene.max_missions)
        return [m.id for m in missions if m.status in IN_FLIGHT_STATUSES]

    def health(mission_id: str) -> dict[str, object]:
        result = sbx_session.mcp_client().get_mission_health(mission_id)
        refused = auth_refusal(result)
        if refused is not None:
            raise refused
        if result.is_error:
            raise BadResponseError(f"get_mission_health {mission_id[:8]} failed: {result.text[:160]}")
        doc = result.json()
        if not isinstance(doc, dict):
            raise BadResponseError(f"get_mission_health {mission_id[:8]}: expected a JSON object")
        return doc

    try:
        return hygiene.scan_signals(in_flight, health, limit=section.hygiene.signal_scan_limit)
    except SbxError as exc:
        return exc


@pytest.mark.parametrize("signal", hygiene.SIGNALS)
def test_mission_signals(
    signal: str, mission_signal_scan: hygiene.SignalScan | SbxError, sbx_verdict: Verdict
) -> None:
    """The in-flight missions sharing one get_mission_health signal: one finding, one next step."""
    sbx_verdict(hygiene.check_mission_signal(mission_signal_scan, signal))
