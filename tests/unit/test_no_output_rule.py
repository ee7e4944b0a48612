"""The no-output rule (issue 21 item 5, spec §8.9): one bounded direct-output retry, then "no usable answer"."""

from __future__ import annotations

from typing import Any

import pytest

from sbxcheck.checks.missions import check_reaches_execution
from sbxcheck.clients.channels import Created
from sbxcheck.clients.missionruns import silent_end
from sbxcheck.clients.sandboxed_models import MissionSpec
from sbxcheck.inventory import RouteSpec, SandboxedSection
from sbxcheck.lifecycle import MissionDispatcher
from sbxcheck.lifecycle.prompts import DIRECT_OUTPUT_PROMPT
from sbxcheck.results import Classification, Outcome

IDLE = "OpenCode idle timeout: the model stopped producing output before finishing the turn."


class _Channel:
    """Every mission fails on an idle timeout, except (optionally) the direct-output retry."""

    via = "rest"

    def __init__(self, retry_answers: bool) -> None:
        self.retry_answers = retry_answers
        self.created: list[MissionSpec] = []

    def create(self, spec: MissionSpec) -> Created:
        self.created.append(spec)
        return Created({"id": f"m{len(self.created)}", "status": "pending"}, None)

    def get(self, mission_id: str) -> dict[str, Any]:
        return {"id": mission_id, "status": "completed" if self._answers(mission_id) else "failed"}

    def _answers(self, mission_id: str) -> bool:
        return self.retry_answers and self.created[int(mission_id[1:]) - 1].prompt == DIRECT_OUTPUT_PROMPT

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        if since_seq:
            return []
        if self._answers(mission_id):
            return [{"event_type": "assistant_message", "sequence": 1, "content": "answer: 4"}]
        return [
            {"event_type": "user_message", "sequence": 1, "content": "probe"},
            {"event_type": "error", "sequence": 2, "content": IDLE},
        ]

    def cancel(self, mission_id: str) -> bool:
        return False


def _run(retry_answers: bool) -> tuple[Any, _Channel]:
    route = RouteSpec(name="glm", backend="opencode", agent="plan", model_override="glm-5.2")
    section = SandboxedSection(
        url="http://127.0.0.1:1", routes=[route], execution_deadline_s=5, poll_interval_s=0.01
    )
    channel = _Channel(retry_answers)
    dispatcher = MissionDispatcher(
        section,
        lambda via: channel,  # type: ignore[arg-type, return-value]
        "tag" * 8,
        workspace_ids=dict,
        exec_sha256=lambda ws, path: "",
    )
    try:
        run = dispatcher.route("glm", 10)
    finally:
        dispatcher.close()
    return run, channel


def test_a_silent_model_is_retried_once_on_the_same_route_then_reported_no_usable_answer() -> None:
    run, channel = _run(retry_answers=False)
    retries = [s for s in channel.created if s.prompt == DIRECT_OUTPUT_PROMPT]
    assert len(retries) == 1, "exactly one bounded retry"
    assert {(s.backend, s.model_override) for s in channel.created} == {("opencode", "glm-5.2")}, (
        "never swapped"
    )
    result = check_reaches_execution(run)
    assert result.outcome is Outcome.FAILED and result.classification is Classification.NO_USABLE_ANSWER
    assert result.message.startswith("addressed, no usable answer: glm-5.2 via opencode")
    assert result.evidence["no_output"]["substituted"] is False


def test_a_retry_that_answers_passes_with_a_warning() -> None:
    run, _ = _run(retry_answers=True)
    result = check_reaches_execution(run)
    assert result.outcome is Outcome.PASSED and result.message.startswith("WARNING: the first mission ended")


@pytest.mark.parametrize(
    ("events", "silent"),
    [
        ([{"event_type": "error", "content": IDLE}], True),
        ([{"event_type": "error", "content": "fn3 is not a function"}], False),
        (
            [{"event_type": "error", "content": IDLE}, {"event_type": "assistant_message", "content": "ok"}],
            False,
        ),
        (
            [{"event_type": "assistant_message", "content": "  "}, {"event_type": "error", "content": IDLE}],
            True,
        ),
        ([], False),
    ],
)
def test_silent_end_needs_a_no_output_error_and_no_assistant_content(
    events: list[dict[str, Any]], silent: bool
) -> None:
    assert silent_end(events) is silent
