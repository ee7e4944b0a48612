"""Dispatch contracts (specs/sandboxed-sh.md, 8.1 and 8.2), for routes that opt in with ``contract``.

A roadmap dispatch carries project, track, acceptance criteria and a retry-safe idempotency key:
the record echoes them, the same key returns the original mission, ``GET /tracks`` shows the track
reserved — and completion is not acceptance. A conversational dispatch's origin_session_id is echoed.
"""

from __future__ import annotations

import pytest

from sbxcheck.suite import MissionDispatcher, Session, Verdict, check_dispatch_contract

pytestmark = pytest.mark.canary


def test_dispatch_contract(
    sbx_contract: str, sbx_missions: MissionDispatcher, sbx_session: Session, sbx_verdict: Verdict
) -> None:
    """The route's mission honours its roadmap or conversational dispatch contract."""
    run = sbx_missions.route(sbx_contract, sbx_missions.section.execution_deadline_s + 90)
    sbx_verdict(check_dispatch_contract(run, sbx_session.sandboxed_client()))
