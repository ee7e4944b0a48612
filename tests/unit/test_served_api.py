"""What a control plane's release serves, learned from its answers; events and costs counted once."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from sbxcheck.checks.base import run_check
from sbxcheck.clients.channels import PARALLEL_START, RestChannel
from sbxcheck.clients.missionruns import new_events
from sbxcheck.clients.sandboxed import NotFound, SandboxedClient, SlotsFull
from sbxcheck.clients.sandboxed_models import MissionSpec
from sbxcheck.errors import NotServed
from sbxcheck.lifecycle.listing import MissionList, missions_since
from sbxcheck.results import CheckResult, Outcome
from sbxcheck.spend import mission_cost_usd

BASE = "http://cp.test"
MID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
Handler = Callable[[httpx.Request], httpx.Response]


def _event(seq: int, kind: str = "tool_call", **metadata: Any) -> dict[str, Any]:
    return {"id": seq, "mission_id": MID, "sequence": seq, "event_type": kind, "content": "", "metadata": metadata}


def _mission(mid: str = MID, status: str = "pending", **extra: Any) -> dict[str, Any]:
    return {"id": mid, "status": status, "title": "t", "backend": "codex", **extra}


@pytest.fixture
def client() -> Iterator[Callable[[Handler], tuple[SandboxedClient, list[httpx.Request]]]]:
    made: list[SandboxedClient] = []

    def make(handler: Handler) -> tuple[SandboxedClient, list[httpx.Request]]:
        seen: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            if request.url.path == "/api/health":
                return httpx.Response(200, json={"status": "ok", "version": "0.7.0"})
            return handler(request)

        c = SandboxedClient(BASE, token="t0k-unit", transport=httpx.MockTransport(record), timeout_s=2.0, retries=0)
        made.append(c)
        return c, seen

    yield make
    for c in made:
        c.close()


# ---- routes -----------------------------------------------------------------------------------


def test_a_route_answered_an_empty_404_is_not_served_naming_the_version(client: Any) -> None:
    c, seen = client(lambda r: httpx.Response(404))
    with pytest.raises(NotServed) as caught:
        c.fleet_health()
    assert caught.value.message.startswith("not served by this control plane (version 0.7.0): GET /api/health/fleet")
    with pytest.raises(NotServed):
        c.remote_nodes()
    assert sorted(c.served.routes_missing) == ["GET /api/health/fleet", "GET /api/remote-nodes"]
    assert sum(1 for r in seen if r.url.path == "/api/health") == 1  # the version is read once


def test_a_handlers_404_is_still_not_found(client: Any) -> None:
    c, _ = client(lambda r: httpx.Response(404, text=f"Mission {MID} not found"))
    with pytest.raises(NotFound) as caught:
        c.get_mission(MID)
    assert not isinstance(caught.value, NotServed) and c.served.routes_missing == {}


def test_a_route_that_parses_as_a_mission_id_is_not_served(client: Any) -> None:
    c, _ = client(lambda r: httpx.Response(400, text="Invalid URL: Cannot parse `integrity` to a UUID"))
    with pytest.raises(NotServed, match="integrity"):
        c.missions_integrity()


def test_a_check_that_meets_a_missing_route_is_skipped_not_errored(client: Any) -> None:
    c, _ = client(lambda r: httpx.Response(404))

    def body() -> CheckResult:
        c.fleet_health()
        raise AssertionError("unreachable")

    result = run_check("fleet_health", "control-plane", body)
    assert result.outcome is Outcome.SKIPPED and result.classification is None
    assert result.message.startswith("not served by this control plane (version 0.7.0)")


# ---- events and cost --------------------------------------------------------------------------


def test_events_beyond_an_ignored_cursor_are_dropped_and_learned(client: Any) -> None:
    rows = [_event(1), _event(2), _event(3), _event(3)]
    c, _ = client(lambda r: httpx.Response(200, json=rows))  # every row, whatever since_seq says
    assert [e.sequence for e in c.mission_events(MID, since_seq=2)] == [3]
    assert c.served.event_cursor_ignored
    assert any("de-duplicated by sequence" in line for line in c.served.skips())


def test_a_reread_counts_each_event_and_cost_once() -> None:
    first = [_event(1, "user_message"), _event(2, "assistant_message", cost_cents=2)]
    again = [*first, _event(3, "assistant_message", cost_cents=3)]  # a server that ignored the cursor
    seen = list(first)
    seen.extend(new_events(seen, again))
    assert [e["sequence"] for e in seen] == [1, 2, 3]
    assert mission_cost_usd(seen) == 0.05
    assert new_events(seen, again) == []


# ---- create -----------------------------------------------------------------------------------


def _spec() -> MissionSpec:
    return MissionSpec(title="t", prompt="say ok", backend="codex", tags=["sbxcheck"], idempotency_key="k1")


def _older_release(parallel: httpx.Response) -> Handler:
    """A create that keeps only the February body; ``/parallel`` answers ``parallel``; ``/message`` accepts."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/control/missions":
            return httpx.Response(200, json=_mission())  # no tags: an older create body
        if request.url.path == f"/api/control/missions/{MID}/parallel":
            return parallel
        if request.url.path == "/api/control/message":
            return httpx.Response(200, json={"id": "m-1", "queued": False})
        return httpx.Response(500)

    return handler


def test_a_create_that_lost_its_fields_starts_the_mission_in_a_slot_of_its_own(client: Any) -> None:
    c, seen = client(_older_release(httpx.Response(200, json={"ok": True, "mission_id": MID})))
    created = RestChannel(c).create(_spec())
    [start] = [r for r in seen if r.url.path.endswith("/parallel")]
    assert json.loads(start.content) == {"content": "say ok"}
    assert not [r for r in seen if r.url.path == "/api/control/message"]  # it would queue on a running one
    assert created.first_message == PARALLEL_START and created.awaiting_slot is None
    assert created.prompt_refused is None and not created.idempotency_supported
    assert c.served.create_drops == ("tags",)


def test_every_slot_taken_leaves_the_mission_created_and_waiting_never_queued_elsewhere(client: Any) -> None:
    full = httpx.Response(409, text="Maximum parallel missions (1) reached. 1 running.")
    c, seen = client(_older_release(full))
    created = RestChannel(c).create(_spec())
    assert created.awaiting_slot == "Maximum parallel missions (1) reached. 1 running."
    assert created.prompt_refused is None
    assert not [r for r in seen if r.url.path == "/api/control/message"]
    with pytest.raises(SlotsFull) as refused:
        c.start_mission_parallel(MID, "say ok")
    assert (refused.value.max_parallel, refused.value.running) == (1, 1)


def test_a_release_without_the_parallel_route_gets_the_first_message(client: Any) -> None:
    c, seen = client(_older_release(httpx.Response(404)))  # axum's unmatched route: empty 404
    created = RestChannel(c).create(_spec())
    [message] = [r for r in seen if r.url.path == "/api/control/message"]
    assert json.loads(message.content) == {"content": "say ok", "mission_id": MID}
    assert created.first_message == "POST /api/control/message {content, mission_id}"


def test_a_create_that_keeps_its_fields_sends_nothing_more(client: Any) -> None:
    c, seen = client(lambda r: httpx.Response(200, json=_mission(tags=["sbxcheck", "disk-estimate-gib:64"])))
    created = RestChannel(c).create(_spec())
    assert created.idempotency_supported and created.first_message is None
    assert [r.url.path for r in seen] == ["/api/control/missions"]


def test_a_prompt_that_cannot_be_sent_fails_at_once_saying_why(client: Any) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/control/missions":
            return httpx.Response(200, json=_mission())
        return httpx.Response(404)

    c, _ = client(handler)
    created = RestChannel(c).create(_spec())
    assert created.prompt_refused is not None
    assert "version 0.7.0" in created.prompt_refused and "would stay pending" in created.prompt_refused


# ---- lists ------------------------------------------------------------------------------------


def test_a_list_that_ignores_its_query_is_filtered_and_not_taken_for_complete(client: Any) -> None:
    rows = [_mission(f"00000000-0000-4000-8000-{i:012d}", "completed" if i % 2 else "active") for i in range(50)]
    c, seen = client(lambda r: httpx.Response(200, json=rows))  # the same 50 rows to every query
    missions, truncated = c.list_missions_paged(page_size=200)
    assert {m.status for m in missions} == {"active"} and len(missions) == 25
    assert truncated and c.served.list_offset_ignored and c.served.list_query_ignored
    assert len([r for r in seen if r.url.path == "/api/control/missions"]) == 2


def test_a_listing_of_an_unpaged_list_does_not_reach_back() -> None:
    rows = [
        {"id": f"00000000-0000-4000-8000-{i:012d}", "created_at": "2026-12-04T20:00:00Z", "title": "x"}
        for i in range(50)
    ]
    listing = missions_since(MissionList(lambda limit, offset: rows), dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
    assert not listing.reached and listing.pages == 2 and len(listing.missions) == 50


def test_a_short_list_still_ends_after_one_page() -> None:
    rows = [{"id": f"00000000-0000-4000-8000-{i:012d}", "created_at": "2026-12-04T20:00:00Z"} for i in range(7)]
    listing = missions_since(MissionList(lambda limit, offset: rows if offset == 0 else []), None)
    assert listing.reached and listing.pages == 1


def test_the_version_is_read_once_and_every_concurrent_reader_gets_it() -> None:
    import threading
    import time

    from sbxcheck.clients.served import ServedApi

    reads: list[int] = []

    def slow_health() -> str:
        reads.append(1)
        time.sleep(0.2)
        return "0.7.0"

    served = ServedApi(slow_health)
    got: list[str | None] = []
    threads = [threading.Thread(target=lambda: got.append(served.version)) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert got == ["0.7.0"] * 5 and len(reads) == 1
