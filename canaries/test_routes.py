"""Mission route health on a sandboxed.sh control plane: per route, three items.

``dispatched`` (created once, at the requested effort), ``record_echoes_request`` (agent, backend,
model, effort as stored) and ``reaches_execution`` (active with execution evidence in time). Every
route of the session is dispatched at once, so the matrix costs about the slowest route.
"""

from __future__ import annotations

import pytest

from sbxcheck.suite import (
    MissionDispatcher,
    Verdict,
    check_dispatched,
    check_prompt_limits,
    check_reaches_execution,
    check_record_echoes_request,
)

pytestmark = pytest.mark.canary


def _wait_s(missions: MissionDispatcher) -> float:
    return missions.section.execution_deadline_s + 90


def test_route_dispatched(sbx_route: str, sbx_missions: MissionDispatcher, sbx_verdict: Verdict) -> None:
    """The create is accepted once (a retry with the same idempotency key returns the same mission)."""
    sbx_verdict(check_dispatched(sbx_missions.route(sbx_route, _wait_s(sbx_missions))))


def test_route_record_echoes_request(
    sbx_route: str, sbx_missions: MissionDispatcher, sbx_verdict: Verdict
) -> None:
    """The stored record shows what was asked (a normalised model id is reported, not failed)."""
    sbx_verdict(check_record_echoes_request(sbx_missions.route(sbx_route, _wait_s(sbx_missions))))


def test_route_reaches_execution(
    sbx_route: str, sbx_missions: MissionDispatcher, sbx_verdict: Verdict
) -> None:
    """Active or completed in time, with a tool_call, tool_result or assistant_message as evidence."""
    run = sbx_missions.route(sbx_route, _wait_s(sbx_missions))
    shared = sbx_missions.shared_crash(run.route.backend, _wait_s(sbx_missions))
    sbx_verdict(check_reaches_execution(run, blocked_signature=shared))


def test_prompt_limits(sbx_prompt: tuple[str, str], sbx_verdict: Verdict) -> None:
    """Every prompt the suite sends: a /goal objective over 4000 characters fails, over 3500 warns."""
    name, prompt = sbx_prompt
    sbx_verdict(check_prompt_limits(name, prompt))
