"""Pushback is not a verdict: 429 / 503 + Retry-After are waited out for every method, then rate_limited."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from support.fake_time import patch_module_time

from sbxcheck.clients.channels import McpChannel
from sbxcheck.clients.mcp import AssistantMcpClient, McpToolResult
from sbxcheck.clients.sandboxed import RateLimited, SandboxedClient, ServerError
from sbxcheck.clients.sandboxed_models import MissionSpec
from sbxcheck.errors import RateLimited as RateLimitedBase
from sbxcheck.results import Classification
from sbxcheck.transports.http import pushback_until

BASE = "http://cp.test"
MID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    for module in ("sbxcheck.transports.http", "sbxcheck.clients.mcp"):
        patch_module_time(monkeypatch, module, sleep=slept.append)
    return slept


@pytest.fixture
def client_for() -> Iterator[
    Callable[[Callable[[httpx.Request], httpx.Response]], tuple[SandboxedClient, list[httpx.Request]]]
]:
    made: list[SandboxedClient] = []

    def make(
        handler: Callable[[httpx.Request], httpx.Response],
    ) -> tuple[SandboxedClient, list[httpx.Request]]:
        seen: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return handler(request)

        client = SandboxedClient(BASE, token="t" * 24, transport=httpx.MockTransport(record), timeout_s=2.0)
        made.append(client)
        return client, seen

    yield make
    for c in made:
        c.close()

WS_ID = "6f1c2a9e-3b4d-4c5e-8f70-1a2b3c4d5e6f"  # server ids are canonical UUIDs (issue 20)


def _answers(*responses: httpx.Response, then: httpx.Response) -> Callable[[httpx.Request], httpx.Response]:
    queue = list(responses)
    return lambda request: queue.pop(0) if queue else then


def test_create_pushed_back_is_sent_again_with_its_idempotency_key(
    client_for: Any, sleeps: list[float]
) -> None:
    handler = _answers(
        httpx.Response(429, text="Too many requests", headers={"retry-after": "1"}),
        httpx.Response(503, text="Service Unavailable", headers={"retry-after": "2"}),
        then=httpx.Response(200, json={"id": MID, "status": "pending", "title": "t"}),
    )
    client, seen = client_for(handler)
    outcome = client.submit_mission(MissionSpec(title="t", prompt="p", idempotency_key="sbxcheck-k1"))
    assert outcome.mission.id == MID
    assert sleeps == [1.0, 2.0]  # Retry-After, not the backoff table
    bodies = [json.loads(r.content) for r in seen]
    assert len(bodies) == 3 and {b["idempotency_key"] for b in bodies} == {"sbxcheck-k1"}


def test_503_without_retry_after_on_a_post_is_still_not_retried(client_for: Any, sleeps: list[float]) -> None:
    client, seen = client_for(lambda r: httpx.Response(503, text="down"))
    with pytest.raises(ServerError) as info:
        client.cancel_mission(MID)
    assert not isinstance(info.value, RateLimited) and len(seen) == 1 and sleeps == []


def test_pushback_until_the_deadline_is_rate_limited_never_a_check_failure(
    client_for: Any, sleeps: list[float]
) -> None:
    client, seen = client_for(
        lambda r: httpx.Response(429, text="Too many requests", headers={"retry-after": "1"})
    )
    with pushback_until(time.monotonic() + 3.5), pytest.raises(RateLimited) as info:
        client.workspace_exec(WS_ID, "sha256sum README.md")
    exc = info.value
    assert exc.classification is Classification.RATE_LIMITED and isinstance(exc, RateLimitedBase)
    assert "429" in exc.message and f"POST /api/workspaces/{WS_ID}/exec" in exc.message
    # the clock is real, the sleeps are not: the budget bounds the count (30 at most), never a loop
    assert 1 <= len(seen) <= 31 and all(s == 1.0 for s in sleeps)


def test_a_retry_after_beyond_the_deadline_gives_up_at_once(client_for: Any, sleeps: list[float]) -> None:
    client, seen = client_for(lambda r: httpx.Response(429, text="slow down", headers={"retry-after": "120"}))
    with pushback_until(time.monotonic() + 5), pytest.raises(RateLimited):
        client.get_mission(MID)
    assert len(seen) == 1 and sleeps == []


class _RelayingMcp(AssistantMcpClient):
    """An assistant MCP whose tools relay the REST 429 text ``failures`` times, then answer."""

    def __init__(self, failures: int) -> None:  # no server: only the call loop is under test
        self.failures = failures
        self.calls = 0

    def redact(self, text: str) -> str:
        return text

    def tool_arguments(self, tool: str) -> frozenset[str] | None:
        return None  # no server, no advertised schema: only the tool's own arguments are sent

    def _call_once(self, tool: str, arguments: dict[str, Any] | None, timeout_s: float | None) -> McpToolResult:
        self.calls += 1
        if self.calls <= self.failures:
            return McpToolResult(tool=tool, is_error=True, text="Failed to create mission: Too many requests")
        return McpToolResult(tool=tool, is_error=False, text=json.dumps({"mission": {"id": MID}}))


def test_mcp_relayed_429_is_waited_out_then_rate_limited(sleeps: list[float]) -> None:
    fake = _RelayingMcp(failures=2)
    channel = McpChannel(fake)
    assert channel.create(MissionSpec(title="t", prompt="p")).mission["id"] == MID
    assert fake.calls == 3 and sleeps == [1.0, 1.0]
    any_tool = _RelayingMcp(failures=1)  # every tool, not only the mission channel's
    assert not any_tool.call("workspace_bash", {"command": "true"}).is_error and any_tool.calls == 2
    stuck = McpChannel(_RelayingMcp(failures=1000))
    with pushback_until(time.monotonic() + 3), pytest.raises(RateLimitedBase) as info:
        stuck.create(MissionSpec(title="t", prompt="p"))
    assert info.value.classification is Classification.RATE_LIMITED


@pytest.mark.parametrize("server_behind_s", [0, 900, -900], ids=["in-step", "15-min-behind", "15-min-ahead"])
def test_a_retry_after_date_is_read_on_the_clock_that_wrote_it(server_behind_s: int) -> None:
    """Retry-After as an HTTP date: the wait is the date minus the answer's own Date header, not this machine's now."""
    import email.utils

    from sbxcheck.transports.http import retry_after_s

    server_now = time.time() - server_behind_s
    headers = {
        "date": email.utils.formatdate(server_now, usegmt=True),
        "retry-after": email.utils.formatdate(server_now + 30, usegmt=True),
    }
    assert retry_after_s(httpx.Response(429, headers=headers)) == 30.0
    # without a Date header the only clock left is this machine's
    alone = retry_after_s(httpx.Response(429, headers={"retry-after": headers["retry-after"]}))
    assert alone is not None and abs(alone - max(30.0 - server_behind_s, 0.0)) <= 2
