"""Dispatch contracts: roadmap and conversational dispatches judged from what came back."""

from __future__ import annotations

from typing import Any

import pytest

from sbxcheck.checks.contract import NOT_ACCEPTANCE, check_dispatch_contract
from sbxcheck.clients.channels import Created
from sbxcheck.clients.missionruns import RouteRun
from sbxcheck.clients.sandboxed import MissionRejected
from sbxcheck.clients.sandboxed_models import Mission, TrackRow
from sbxcheck.inventory import RouteSpec
from sbxcheck.lifecycle.prompts import contract_fields
from sbxcheck.results import Outcome

ROADMAP = RouteSpec(
    name="terra",
    backend="codex",
    contract="roadmap",
    project="verity",
    track="canary",
    acceptance_criteria=["answers ok"],
)
CHAT = RouteSpec(name="chat", backend="claudecode", contract="conversational", origin_session_id="chat-1")


def _run(route: RouteSpec, record: dict[str, Any], retry_id: str | None = "m1") -> RouteRun:
    run = RouteRun(route=route, title="t", idempotency_key="sbxcheck-key", requested={})
    run.created = Created({"id": "m1", "status": "pending", **record})
    if retry_id is not None:
        run.retry = Created(
            {"id": retry_id, "status": "pending"}, coalesced_with="m1" if retry_id == "m1" else None
        )
    return run


class Plane:
    """The track's row (``total`` missions over every night) and its missions, newest first."""

    def __init__(self, total: int, titles: list[str] | None = None) -> None:
        self.total = total
        self.titles = ["t"] if titles is None else titles  # the run's title is "t"
        self.asked: list[dict[str, Any]] = []

    def tracks(self, project: str) -> list[TrackRow]:
        return [TrackRow(project=project, track="canary", total=self.total, active=1)] if self.total else []

    def list_missions(self, **query: Any) -> list[Mission]:
        self.asked.append(query)
        return [
            Mission(id=f"m{i}", status="completed", title=title, project="verity", track="canary")
            for i, title in enumerate(self.titles)
        ]


def _tracks(total: int) -> Plane:
    return Plane(total, ["t", "t (idempotency retry)"][: min(total, 2)])


def test_a_roadmap_contract_passes_and_says_completion_is_not_acceptance() -> None:
    result = check_dispatch_contract(_run(ROADMAP, {"project": "verity", "track": "canary"}), _tracks(1))
    assert result.outcome is Outcome.PASSED
    assert result.evidence["completion_is_not_acceptance"] == NOT_ACCEPTANCE
    assert "completion is not acceptance" in result.message


@pytest.mark.parametrize(
    ("record", "retry_id", "total", "why"),
    [
        ({"project": "verity"}, "m1", 1, "track is None"),
        ({"project": "verity", "track": "canary"}, "m2", 2, "made a second mission"),
        ({"project": "verity", "track": "canary"}, "m1", 2, "holds 2 missions for one intent"),
        ({"project": "verity", "track": "canary"}, "m1", 0, "shows no track"),
        ({"project": "verity", "track": "canary"}, None, 1, "retry was not made"),
    ],
)
def test_a_broken_roadmap_contract_fails_for_its_reason(
    record: dict[str, Any], retry_id: str | None, total: int, why: str
) -> None:
    result = check_dispatch_contract(_run(ROADMAP, record, retry_id), _tracks(total))
    assert result.outcome is Outcome.FAILED and why in result.message


def test_a_refused_retry_fails() -> None:
    run = _run(ROADMAP, {"project": "verity", "track": "canary"}, None)
    run.retry_rejection = MissionRejected("POST /api/control/missions", 409, "track_owned")
    result = check_dispatch_contract(run, _tracks(1))
    assert result.outcome is Outcome.FAILED and "refused: track_owned" in result.message


def test_a_conversational_contract_needs_the_origin_session_echoed() -> None:
    assert (
        check_dispatch_contract(_run(CHAT, {"origin_session_id": "chat-1"}), _tracks(0)).outcome
        is Outcome.PASSED
    )
    dropped = check_dispatch_contract(_run(CHAT, {}), _tracks(0))
    assert dropped.outcome is Outcome.FAILED and "origin_session_id is None" in dropped.message


def test_contract_fields_are_sent_and_the_inventory_requires_them() -> None:
    assert contract_fields(ROADMAP) == {
        "project": "verity",
        "track": "canary",
        "extra": {"acceptance_criteria": ["answers ok"]},
    }
    assert contract_fields(CHAT) == {"origin": "hermes", "origin_session_id": "chat-1"}
    with pytest.raises(ValueError, match="needs project, track and acceptance_criteria"):
        RouteSpec(backend="codex", contract="roadmap", project="verity")
    with pytest.raises(ValueError, match="needs origin_session_id"):
        RouteSpec(backend="codex", contract="conversational")


def test_no_mission_means_no_verdict_on_the_contract() -> None:
    run = RouteRun(route=ROADMAP, title="t", idempotency_key="k", requested={})
    run.rejection = MissionRejected("POST /api/control/missions", 400, "Unknown backend: codex")
    result = check_dispatch_contract(run, _tracks(0))
    assert result.outcome is Outcome.FAILED and result.message.startswith("no mission to judge")


def test_earlier_sessions_missions_in_the_track_are_not_this_intents() -> None:
    """Night three: the track holds three nights' missions; this session's intent holds one of them."""
    plane = Plane(3, ["t", "sbxcheck 1a2b3c4d route terra", "sbxcheck 9f8e7d6c route terra (idempotency retry)"])
    result = check_dispatch_contract(_run(ROADMAP, {"project": "verity", "track": "canary"}), plane)
    assert result.outcome is Outcome.PASSED, result.message
    assert result.evidence["intent_missions"] == ["m0"]
    assert plane.asked == [{"all": True, "project": "verity", "track": "canary", "limit": 200}]
