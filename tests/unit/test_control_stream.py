"""The live event stream: the client's signals, lag and drop handling, fallback; the double's SSE."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sbxcheck.clients.sandboxed import SandboxedClient
from sbxcheck.clients.sandboxed_models import MissionSpec
from sbxcheck.clients.stream import ControlStream, describe
from sbxcheck.sim.controlplane import ControlPlaneDouble
from sbxcheck.sim.httpserver import BackgroundServer
from sbxcheck.sim.stream import LAG_MESSAGE

BASE = "http://cp.test"
MID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def frame(kind: str, **data: object) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def sse(*chunks: bytes) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(chunks))


def make(handler: httpx.MockTransport, **kwargs: object) -> ControlStream:
    return ControlStream(BASE, lambda: {"Authorization": "Bearer t"}, transport=handler, **kwargs)  # type: ignore[arg-type]


def wait_until(cond: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_signals_fold_status_and_evidence_per_mission_and_keepalives_are_ignored() -> None:
    body = [
        frame("status", state="idle", queue_len=0, mission_id=None),
        b": keepalive\n\n",
        frame("mission_status_changed", mission_id=MID, status="active"),
        frame("user_message", mission_id=MID, content="hi"),
        frame("tool_call", mission_id=MID, tool_call_id="c1", name="bash", args="ls"),
        frame("tool_call", mission_id="other", tool_call_id="c2", name="bash", args="ls"),
    ]
    gate = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        assert (
            request.headers["accept"] == "text/event-stream"
            and request.headers["authorization"] == "Bearer t"
        )

        def chunks() -> Iterator[bytes]:
            yield from body
            gate.wait(5)  # hold the connection open, as a live stream does

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())

    stream = make(httpx.MockTransport(handler))
    try:
        assert stream.start(wait_s=5) and stream.generation == 1
        wait_until(lambda: (s := stream.signal(MID)) is not None and s.evidence)
        sig = stream.signal(MID)
        assert sig is not None and (sig.status, sig.evidence, sig.events) == ("active", True, 3)
        assert [s for _, s in sig.statuses] == ["active"]
        assert stream.signal("unknown") is None
        assert describe(stream)["mode"] == "stream"
    finally:
        gate.set()
        stream.close()


def test_a_lag_error_moves_the_generation_so_followers_catch_up() -> None:
    gate = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        def chunks() -> Iterator[bytes]:
            yield frame("status", state="running", queue_len=0, mission_id=None)
            yield frame("error", message=LAG_MESSAGE, mission_id=None)
            yield frame("error", message="agent crashed", mission_id=MID)  # a mission's error: no lag
            gate.wait(5)

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())

    stream = make(httpx.MockTransport(handler))
    try:
        assert stream.start(wait_s=5)
        wait_until(lambda: stream.signal(MID) is not None)
        assert (stream.generation, stream.lags) == (2, 1)
        sig = stream.signal(MID)
        assert sig is not None and not sig.evidence and sig.status is None
    finally:
        gate.set()
        stream.close()


def test_a_dropped_connection_reconnects_with_a_new_generation() -> None:
    connects: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        connects.append(1)
        if len(connects) == 1:  # the first connection ends after one event: dropped
            return sse(frame("status", state="idle", queue_len=0, mission_id=None))
        gate = threading.Event()

        def chunks() -> Iterator[bytes]:
            yield frame("status", state="idle", queue_len=0, mission_id=None)
            gate.wait(3)

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())

    stream = make(httpx.MockTransport(handler))
    try:
        assert stream.start(wait_s=5)
        wait_until(lambda: stream.generation >= 2, timeout_s=6)
        assert stream.generation >= 2 and stream.drops >= 1 and not stream.absent
    finally:
        stream.close()


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(404, text="Not Found"),
        httpx.Response(401, text="Invalid or expired token"),
        httpx.Response(200, json={"not": "a stream"}),
    ],
    ids=["404-older-build", "401", "not-event-stream"],
)
def test_an_unavailable_stream_is_absent_at_once_and_says_why(response: httpx.Response) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return response

    stream = make(httpx.MockTransport(handler))
    assert stream.start(wait_s=5) is False
    assert stream.absent and len(calls) == 1
    assert describe(stream)["mode"] == "polling" and "/api/control/stream" in str(stream.why_absent)
    assert "Bearer" not in str(stream.why_absent)


def test_connects_that_keep_failing_are_bounded_then_absent() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    stream = make(httpx.MockTransport(handler), max_failures=2)
    stream._stop.wait = lambda timeout=None: False  # type: ignore[method-assign]  # no backoff sleep here
    assert stream.start(wait_s=5) is False
    assert stream.absent and stream.connects == 2 and "in a row failed" in str(stream.why_absent)


def test_an_oversized_event_drops_the_connection() -> None:
    huge = b"event: tool_call\ndata: " + b"x" * (1024 * 1024 + 10) + b"\n\n"
    stream = make(
        httpx.MockTransport(lambda r: sse(frame("status", state="idle", queue_len=0, mission_id=None), huge)),
        max_connects=1,
    )
    stream.start(wait_s=5)
    wait_until(lambda: stream.absent)
    assert stream.signal(MID) is None and stream.drops == 1


# ---- the double serves the stream (§3.7) ----------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlaneDouble, str]]:
    double = ControlPlaneDouble(Path(tmp_path_factory.mktemp("cp-stream")), seed=7)
    with BackgroundServer(double.app, name="controlplane") as srv:
        yield double, srv.url
    double.stop()


def _lines(url: str, token: str, until: str, timeout_s: float = 10.0) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    with httpx.stream(
        "GET", f"{url}/api/control/stream", headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s
    ) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            seen.append(line)
            if until in line or time.monotonic() > deadline:
                break
    return seen


def test_double_stream_starts_with_a_status_snapshot_and_carries_mission_events(
    served: tuple[ControlPlaneDouble, str],
) -> None:
    double, url = served
    double.clear_faults()
    with SandboxedClient(url, password=double.password) as client:
        client.login()
        token = client.bearer_token()
        assert token
        got: list[list[str]] = []
        reader = threading.Thread(target=lambda: got.append(_lines(url, token, '"tool_call"')))
        reader.start()
        wait_until(lambda: double.stream.subscriptions >= 1)
        time.sleep(0.1)
        client.submit_mission(MissionSpec(title="stream test", prompt="echo hi", backend="codex"))
        reader.join(15)
    lines = got[0]
    assert lines[0] == "event: status" and '"state"' in lines[1]
    kinds = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert "mission_status_changed" in kinds and kinds[-1] == "tool_call"
    call = json.loads(lines[-1].removeprefix("data: "))
    assert call["type"] == "tool_call" and call["mission_id"] and "name" in call and "args" in call


def test_double_stream_keepalive_lag_and_absent(served: tuple[ControlPlaneDouble, str]) -> None:
    double, url = served
    with SandboxedClient(url, password=double.password) as client:
        client.login()
        token = client.bearer_token()
        assert token
        double.stream.keepalive_s = 0.2
        try:
            assert ": keepalive" in _lines(url, token, "keepalive")
        finally:
            double.stream.keepalive_s = 15.0
        double.inject("cp.stream-lags")
        got: list[list[str]] = []
        reader = threading.Thread(target=lambda: got.append(_lines(url, token, "lagged")))
        reader.start()
        wait_until(lambda: double.stream.subscriptions >= 3)
        time.sleep(0.1)
        client.submit_mission(MissionSpec(title="lag test", prompt="echo hi", backend="codex"))
        reader.join(15)
        assert LAG_MESSAGE in got[0][-1]
        double.clear_faults("cp.stream-lags")
        double.inject("cp.stream-absent")
        try:
            resp = httpx.get(f"{url}/api/control/stream", headers={"Authorization": f"Bearer {token}"})
            assert resp.status_code == 404
        finally:
            double.clear_faults("cp.stream-absent")
        assert httpx.get(f"{url}/api/control/stream").status_code == 401  # the stream needs a token
