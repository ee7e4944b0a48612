"""Spend accounting and the account-credits check (issue 21 item 4)."""

from __future__ import annotations

import json

import httpx
import pytest

from sbxcheck.checks.spend import check_credits
from sbxcheck.clients.openrouter import AccountCredits, OpenRouterAdmin
from sbxcheck.errors import AuthFailed
from sbxcheck.results import CheckRecord, Classification, Outcome
from sbxcheck.spend import mission_cost, mission_cost_usd, spend_line, summarize_spend


class _Admin:
    def __init__(self, credits: float, usage: float) -> None:
        self.value = AccountCredits(total_credits=credits, total_usage=usage)

    def credits(self) -> AccountCredits:
        return self.value


def test_credits_pass_at_or_above_the_floor_and_fail_below() -> None:
    ok = check_credits(_Admin(100.0, 40.0), 5.0)
    assert ok.outcome is Outcome.PASSED and ok.evidence["remaining_usd"] == 60.0
    low = check_credits(_Admin(10.0, 8.0), 5.0)
    assert low.outcome is Outcome.FAILED and "$2.00 is below the floor $5.00" in low.message
    assert low.recommendation and "add credits" in low.recommendation


def _admin(handler: httpx.MockTransport) -> OpenRouterAdmin:
    return OpenRouterAdmin(
        "http://openrouter.test/api/v1", "sk-or-v1-" + "a" * 64, transport=handler, retries=0
    )


def test_credits_client_reads_data_and_refuses_other_shapes() -> None:
    good = httpx.MockTransport(
        lambda r: httpx.Response(200, json={"data": {"total_credits": 12.5, "total_usage": 2.5}})
    )
    assert _admin(good).credits().remaining == 10.0
    bad = httpx.MockTransport(lambda r: httpx.Response(200, json={"total_credits": 1}))
    assert check_credits(_admin(bad), 1.0).classification is Classification.BAD_RESPONSE
    nan = httpx.MockTransport(
        lambda r: httpx.Response(200, content=b'{"data": {"total_credits": NaN, "total_usage": 0}}')
    )
    assert check_credits(_admin(nan), 1.0).outcome is Outcome.ERROR
    refused = httpx.MockTransport(lambda r: httpx.Response(401, json={"error": {"message": "No auth"}}))
    with pytest.raises(AuthFailed):
        _admin(refused).credits()


def test_mission_cost_sums_assistant_messages_wherever_the_cost_is_folded() -> None:
    events = [
        {"event_type": "assistant_message", "metadata": {"cost_cents": 2}},
        {"event_type": "assistant_message", "content": json.dumps({"cost_cents": 1.5})},
        {"event_type": "tool_call", "metadata": {"cost_cents": 99}},
        {"event_type": "assistant_message", "metadata": {"model": "m"}},
    ]
    assert mission_cost_usd(events) == 0.035
    assert mission_cost_usd([{"event_type": "assistant_message", "content": "ok"}]) is None


def test_spend_summary_counts_unknown_costs_and_what_the_cap_kept_back() -> None:
    cleanup = [
        {"kind": "mission", "ident": "m1", "cost_usd": 0.02},
        {"kind": "mission", "ident": "m2", "cost_usd": None},
        {"kind": "mount", "ident": "run"},
    ]
    held = CheckRecord(
        nodeid="canaries/test_routes.py::test_route_dispatched[b]",
        suite="canary",
        check="dispatched",
        target="b",
        outcome=Outcome.ERROR,
        classification=Classification.SPEND_CAP,
    )
    spend = summarize_spend(cleanup, [held], cap_usd=0.01)
    assert spend["total_usd"] == 0.02 and spend["missions"] == 2 and spend["missions_cost_unknown"] == 1
    assert spend["cap_reached"] and spend["not_run"] == [held.nodeid]
    assert spend_line(spend) == (
        "spend: $0.0200 on 2 mission(s) (1 without a reported cost); cap $0.0100 reached: 1 item(s) not run"
    )
    assert summarize_spend([], [], cap_usd=None)["cap_reached"] is False


def _messages(*cents: object) -> list[dict[str, object]]:
    return [
        {"event_type": "assistant_message", "sequence": i, "metadata": {"cost_cents": c}}
        for i, c in enumerate(cents, start=1)
    ]


@pytest.mark.parametrize(
    ("cents", "why"),
    [
        ((1.7e308, 1.7e308), "assistant_message 1: cost_cents 1.7e+308 is over 100000 for one message"),
        ((2, float("inf")), "assistant_message 2: cost_cents inf is not finite"),
        ((float("nan"),), "assistant_message 1: cost_cents nan is not finite"),
        ((-1e9,) * 5, "assistant_message 1: cost_cents -1000000000.0 is negative"),
        ((2, "7"), "assistant_message 2: cost_cents '7' is not a number"),
        ((True,), "assistant_message 1: cost_cents True is not a number"),
        ((90_000.0,) * 12, "the reported costs sum to $10,800.00, over $10,000 for one mission"),
    ],
)
def test_an_unusable_reported_cost_makes_the_mission_cost_unreadable_never_a_wrong_number(
    cents: tuple[object, ...], why: str
) -> None:
    cost = mission_cost(_messages(*cents))
    assert cost.usd is None and cost.unreadable == why


def test_a_run_with_an_unreadable_cost_has_an_honest_spend_line_and_the_cap_taken_as_reached() -> None:
    cleanup = [
        {"kind": "mission", "ident": "m1", "cost_usd": 0.02},
        {"kind": "mission", "ident": "m2", "cost_usd": None, "cost_unreadable": "bad_response: cost_cents -1e9"},
        {"kind": "mission", "ident": "m3", "cost_usd": float("inf")},  # a booked amount is checked too
        {"kind": "mission", "ident": "m4", "cost_usd": -5.0},
    ]
    spend = summarize_spend(cleanup, [], cap_usd=1.0)
    assert spend["total_usd"] == 0.02 and spend["missions_cost_unreadable"] == 3
    assert spend["missions_cost_unknown"] == 0 and spend["cap_reached"] is True
    assert json.loads(json.dumps(spend, allow_nan=False)) == spend  # every number is finite
    assert spend_line(spend) == (
        "spend: $0.0200 on 4 mission(s) (3 with an unreadable cost, not counted: m2: bad_response: "
        "cost_cents -1e9); cap $1.0000 taken as reached: what was spent is unknown"
    )
    uncapped = summarize_spend(cleanup[:2], [], cap_usd=None)
    assert uncapped["cap_reached"] is False and "unreadable" in spend_line(uncapped)


@pytest.mark.parametrize("total", [None, float("inf"), "a lot"])
def test_the_spend_line_never_raises_on_a_total_that_is_not_a_number(total: object) -> None:
    line = spend_line({"total_usd": total, "missions": 2, "cap_usd": 5.0})
    assert line == (
        "spend: an unreadable amount on 2 mission(s); cap $5.0000 taken as reached: what was spent is unknown"
    )
