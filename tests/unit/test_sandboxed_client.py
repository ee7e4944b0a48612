"""SandboxedClient against httpx.MockTransport: auth, error mapping, retries, cursors, reduction."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from support.fake_time import patch_module_time

from sbxcheck.clients.sandboxed import (
    ApiRejected,
    MissionRejected,
    NotFound,
    SandboxedClient,
    ServerError,
    parse_valid_models,
)
from sbxcheck.clients.sandboxed_models import MissionSpec
from sbxcheck.errors import AuthFailed, BadResponseError, CommandTimeout, HostUnreachable, TransportError

BASE = "https://cp.test"  # a password goes only over TLS (or to loopback)
PASSWORD = "pw-unit-7f3a9c21"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZWZhdWx0In0.c2lnbmF0dXJlLXVuaXQtdGVzdA"
FAKE_JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJsZWFrZWQifQ.bGVha2VkLXNpZ25hdHVyZQ"
MID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
WS = "d5986335-0188-56d7-af20-2f39297826b9"

Handler = Callable[[httpx.Request], httpx.Response]


def mission(**extra: Any) -> dict[str, Any]:
    return {"id": MID, "status": "pending", "title": "t", "backend": "codex", **extra}


class Recorder:
    """Wraps a handler, records each request, and serves login itself."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/api/auth/login":
            body = json.loads(request.content)
            if body.get("password") != PASSWORD:
                return httpx.Response(401, text="Invalid password")
            return httpx.Response(200, json={"token": TOKEN, "exp": 1_900_000_000})
        return self.handler(request)

    def calls(self, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path == path]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record backoff sleeps instead of sleeping."""
    slept: list[float] = []
    for module in ("sbxcheck.clients.sandboxed_missions", "sbxcheck.transports.http"):  # polls; retry backoff
        patch_module_time(monkeypatch, module, sleep=slept.append)
    return slept


@pytest.fixture
def make() -> Iterator[Callable[..., tuple[SandboxedClient, Recorder]]]:
    clients: list[SandboxedClient] = []

    def _make(handler: Handler, **kwargs: Any) -> tuple[SandboxedClient, Recorder]:
        rec = Recorder(handler)
        kwargs.setdefault("password", PASSWORD)
        client = SandboxedClient(BASE, transport=httpx.MockTransport(rec), timeout_s=2.0, **kwargs)
        clients.append(client)
        return client, rec

    yield _make
    for c in clients:
        c.close()


# ---- auth -----------------------------------------------------------------------------------


def test_login_is_lazy_and_bearer_goes_on_every_call(
    make: Callable[..., tuple[SandboxedClient, Recorder]],
) -> None:
    client, rec = make(lambda r: httpx.Response(200, json=mission()))
    assert not client.authenticated
    client.get_mission(MID)
    client.get_mission(MID)
    assert len(rec.calls("/api/auth/login")) == 1
    gets = rec.calls(f"/api/control/missions/{MID}")
    assert [r.headers["authorization"] for r in gets] == [f"Bearer {TOKEN}"] * 2
    assert client.token_exp == 1_900_000_000
    assert TOKEN not in repr(client) and PASSWORD not in repr(client)


def test_login_body_and_health_is_public(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    client, rec = make(
        lambda r: httpx.Response(200, json={"status": "ok", "auth_mode": "multi_user", "new_field": 1}),
        username="ops",
    )
    health = client.health()
    assert health.auth_mode == "multi_user" and health.model_extra == {"new_field": 1}
    assert "authorization" not in rec.requests[0].headers
    client.login()
    assert json.loads(rec.calls("/api/auth/login")[0].content) == {"password": PASSWORD, "username": "ops"}


def test_401_maps_to_auth_failed_with_the_servers_plain_text(
    make: Callable[..., tuple[SandboxedClient, Recorder]],
) -> None:
    client, _ = make(
        lambda r: httpx.Response(401, text="Invalid or expired token"), token=TOKEN, password=None
    )
    with pytest.raises(AuthFailed) as info:
        client.fleet_health()
    assert "Invalid or expired token" in str(info.value)
    assert "GET /api/health/fleet" in str(info.value)
    assert TOKEN not in str(info.value) and TOKEN not in repr(info.value.evidence)


def test_wrong_password_is_auth_failed_without_the_password(
    make: Callable[..., tuple[SandboxedClient, Recorder]],
) -> None:
    client, _ = make(lambda r: httpx.Response(200, json=[]), password="not-the-password")
    with pytest.raises(AuthFailed, match="Invalid password") as info:
        client.list_missions()
    assert "not-the-password" not in str(info.value)


def test_no_credentials_sends_no_header(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    client, rec = make(lambda r: httpx.Response(401, text="Missing Authorization header"), password=None)
    with pytest.raises(AuthFailed, match="Missing Authorization header"):
        client.running()
    assert "authorization" not in rec.requests[0].headers


# ---- create refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Model 'opus-4.8' not found in anthropic catalog. Valid models: claude-opus-4-8, claude-sonnet-5, "
        "claude-fable-5-1",
        "Model 'opus-4.8' not found in anthropic catalog\nAvailable:\n- claude-opus-4-8\n- claude-sonnet-5\n"
        "- claude-fable-5-1\n",
        json.dumps(
            {
                "error": "Model 'opus-4.8' not found in anthropic catalog",
                "valid_models": ["claude-opus-4-8", "claude-sonnet-5", "claude-fable-5-1"],
            }
        ),
    ],
)
def test_unknown_model_is_mission_rejected_with_valid_ids(
    make: Callable[..., tuple[SandboxedClient, Recorder]], text: str
) -> None:
    client, rec = make(lambda r: httpx.Response(400, text=text))
    with pytest.raises(MissionRejected) as info:
        client.create_mission(title="t", backend="claudecode", model_override="opus-4.8")
    err = info.value
    assert err.status == 400
    assert "not found in anthropic catalog" in err.reason
    assert err.valid_models == ["claude-opus-4-8", "claude-sonnet-5", "claude-fable-5-1"]
    assert isinstance(err, BadResponseError)
    assert len(rec.calls("/api/control/missions")) == 1


def test_effort_rejection_lists_supported_values(
    make: Callable[..., tuple[SandboxedClient, Recorder]],
) -> None:
    text = "Invalid model_effort for backend 'codex'. Supported values: low, medium, high, xhigh"
    client, _ = make(lambda r: httpx.Response(400, text=text))
    with pytest.raises(MissionRejected) as info:
        client.create_mission(title="t", backend="codex", model_effort="max")
    assert info.value.supported_efforts == ["low", "medium", "high", "xhigh"]
    assert info.value.valid_models == []


def test_json_conflict_carries_error_code(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    doc = {"error": "workspace_occupied", "mission_id": MID, "title": "x", "message": "Workspace busy"}
    client, _ = make(lambda r: httpx.Response(409, text=json.dumps(doc)))
    with pytest.raises(MissionRejected) as info:
        client.create_mission(title="t", workspace_id=WS)
    assert (info.value.status, info.value.error_code, info.value.reason) == (
        409,
        "workspace_occupied",
        "Workspace busy",
    )


def test_create_body_and_headers(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    headers = {"x-coalesced-with": MID, "x-ignored-fields": "foo,bar"}
    client, rec = make(lambda r: httpx.Response(200, json=mission(), headers=headers))
    outcome = client.submit_mission(
        MissionSpec(
            title="t", prompt="p", backend="codex", tags=["a"], extra={"foo": 1, "bar": True}
        )
    )
    assert outcome.coalesced_with == MID and outcome.ignored_fields == ("foo", "bar")
    sent = json.loads(rec.calls("/api/control/missions")[0].content)
    assert sent == {"title": "t", "prompt": "p", "backend": "codex", "tags": ["a"], "foo": 1, "bar": True}


def test_other_4xx_and_404(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    client, _ = make(
        lambda r: (
            httpx.Response(404, text=f"Mission {MID} not found")
            if r.url.path.endswith(MID)
            else httpx.Response(
                400, text="Invalid view 'x'; expected one of: transcript, trace, history, all"
            )
        )
    )
    with pytest.raises(NotFound, match="not found"):
        client.get_mission(MID)
    with pytest.raises(ApiRejected) as info:
        client.mission_events(MID, view="x")
    assert info.value.status == 400 and not isinstance(info.value, MissionRejected)


# ---- 5xx / 429 and retries ----------------------------------------------------------------------


def test_5xx_on_create_is_not_retried(
    make: Callable[..., tuple[SandboxedClient, Recorder]], sleeps: list[float]
) -> None:
    client, rec = make(lambda r: httpx.Response(503, text="service unavailable"))
    with pytest.raises(ServerError) as info:
        client.create_mission(title="t")
    assert info.value.status == 503 and isinstance(info.value, TransportError)
    assert len(rec.calls("/api/control/missions")) == 1 and sleeps == []


def test_429_parallel_cap_is_a_server_error_with_code(
    make: Callable[..., tuple[SandboxedClient, Recorder]], sleeps: list[float]
) -> None:
    body = json.dumps({"error": "parallel_missions_cap", "cap": 2, "active": 2})
    client, _ = make(lambda r: httpx.Response(429, text=body))
    with pytest.raises(ServerError) as info:
        client.create_mission(title="t", project="verity")
    assert (info.value.status, info.value.error_code) == (429, "parallel_missions_cap")


def test_get_retries_twice_then_succeeds(
    make: Callable[..., tuple[SandboxedClient, Recorder]], sleeps: list[float]
) -> None:
    answers = iter(
        [httpx.Response(502, text="bad gateway"), httpx.Response(429, headers={"retry-after": "1"})]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return next(answers, httpx.Response(200, json=mission(status="active")))

    client, rec = make(handler)
    assert client.get_mission(MID).status == "active"
    assert len(rec.calls(f"/api/control/missions/{MID}")) == 3
    assert sleeps == [0.2, 1.0]  # backoff, then Retry-After (capped at 2 s)


def test_get_retries_are_bounded(
    make: Callable[..., tuple[SandboxedClient, Recorder]], sleeps: list[float]
) -> None:
    client, rec = make(lambda r: httpx.Response(503, text="overloaded"), retries=2)
    with pytest.raises(ServerError, match="503"):
        client.fleet_health()
    assert len(rec.calls("/api/health/fleet")) == 3 and len(sleeps) == 2


def test_connection_reset_is_retried_for_get_only(
    make: Callable[..., tuple[SandboxedClient, Recorder]], sleeps: list[float]
) -> None:
    def reset(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("connection reset by peer", request=request)

    client, rec = make(reset)
    with pytest.raises(TransportError, match="connection lost") as info:
        client.list_workspaces()
    assert type(info.value) is TransportError
    assert len(rec.calls("/api/workspaces")) == 3
    with pytest.raises(TransportError):
        client.cancel_mission(MID)
    assert len(rec.calls(f"/api/control/missions/{MID}/cancel")) == 1


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx.ConnectError("refused"), HostUnreachable),
        (httpx.ConnectTimeout("connect timeout"), HostUnreachable),
        (httpx.ReadTimeout("read timeout"), CommandTimeout),
    ],
)
def test_transport_exceptions_map(
    make: Callable[..., tuple[SandboxedClient, Recorder]], exc: httpx.HTTPError, expected: type[Exception]
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    client, rec = make(handler, token=TOKEN)
    with pytest.raises(expected):
        client.get_mission(MID)
    assert len(rec.requests) == 1  # neither connect failures nor timeouts are retried


# ---- bad bodies ---------------------------------------------------------------------------------


def test_non_json_body_is_bad_response_with_redacted_excerpt(
    make: Callable[..., tuple[SandboxedClient, Recorder]],
) -> None:
    # (an HTML page where JSON was asked is a login wall: test_session_expiry.py)
    text = f"Proxy error; session={FAKE_JWT}; Authorization: Bearer {FAKE_JWT}"
    client, _ = make(lambda r: httpx.Response(200, text=text, headers={"content-type": "text/plain"}))
    with pytest.raises(BadResponseError) as info:
        client.get_mission(MID)
    message = str(info.value)
    assert f"GET /api/control/missions/{MID}" in message
    assert "not JSON" in message and "[REDACTED]" in message and "Proxy error" in message
    assert FAKE_JWT not in message and FAKE_JWT[:20] not in message
    assert not isinstance(info.value, TransportError)


def test_schema_violation_names_endpoint_and_field(
    make: Callable[..., tuple[SandboxedClient, Recorder]],
) -> None:
    client, _ = make(lambda r: httpx.Response(200, json={"status": "active", "title": FAKE_JWT}))
    with pytest.raises(BadResponseError) as info:
        client.get_mission(MID)
    message = str(info.value)
    assert (
        f"GET /api/control/missions/{MID}" in message
        and "Mission" in message
        and "id: Field required" in message
    )
    assert "[REDACTED]" in message and FAKE_JWT not in message


def test_list_must_be_an_array(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    client, _ = make(lambda r: httpx.Response(200, json={"missions": []}))
    with pytest.raises(BadResponseError, match="expected a JSON array"):
        client.list_missions()


# ---- events, cancel, list -----------------------------------------------------------------------


def test_events_send_a_cursor_and_read_headers(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    rows = [
        {"id": 7, "mission_id": MID, "sequence": 4, "event_type": "tool_call", "tool_name": "bash",
         "content": '{"command":"ls"}', "metadata": None, "timestamp": "2026-06-01T00:00:00Z"},
        {"id": 8, "mission_id": MID, "sequence": 5, "event_type": "tool_result", "content": {"k": 1},
         "metadata": {"exit_code": 0}},
    ]  # fmt: skip
    client, rec = make(
        lambda r: httpx.Response(200, json=rows, headers={"X-Max-Sequence": "9", "X-Total-Events": "9"})
    )
    page = client.mission_events_page(MID, since_seq=3, limit=2, counts=True)
    assert [e.sequence for e in page.events] == [4, 5]
    assert (page.max_sequence, page.total_events) == (9, 9)
    assert page.events[0].metadata == {} and json.loads(page.events[1].content) == {"k": 1}
    client.mission_events(MID)
    client.mission_events(MID, since_seq=3, before_seq=100, types=["tool_call", "error"])
    params = [dict(r.url.params) for r in rec.calls(f"/api/control/missions/{MID}/events")]
    assert params[0] == {"since_seq": "3", "limit": "2"}
    # always a cursor (forward replay from the start), and no count scan unless asked for
    assert params[1] == {"since_seq": "0", "include_counts": "false"}
    assert params[2] == {"before_seq": "100", "types": "tool_call,error", "include_counts": "false"}  # before_seq wins


def test_cancel_404_is_false(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if MID in request.url.path:
            return httpx.Response(200, json={"ok": True, "cancelled": MID})
        return httpx.Response(404, text="Mission not found")

    client, rec = make(handler)
    assert client.cancel_mission(MID) is True
    assert client.cancel_mission("00000000-0000-0000-0000-00000000dead") is False
    assert json.loads(rec.calls(f"/api/control/missions/{MID}/cancel")[0].content) == {}


def test_list_params(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    client, rec = make(lambda r: httpx.Response(200, json=[mission(), mission(id=WS, status="completed")]))
    found = client.list_missions(status=["completed", "failed"], workspace="verity", limit=5)
    # a pending row answered to a completed/failed query: the server ignored the filter, applied here
    assert [m.status for m in found] == ["completed"] and client.served.list_query_ignored
    assert dict(rec.calls("/api/control/missions")[0].url.params) == {
        "status": "completed,failed",
        "workspace": "verity",
        "limit": "5",
    }


def test_wait_for_mission_has_a_deadline(
    make: Callable[..., tuple[SandboxedClient, Recorder]], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter(float(i) for i in range(100))
    patch_module_time(
        monkeypatch, "sbxcheck.clients.sandboxed_missions", monotonic=lambda: next(clock), sleep=lambda s: None
    )
    client, rec = make(lambda r: httpx.Response(200, json=mission(status="pending")))
    with pytest.raises(CommandTimeout, match="last status 'pending'"):
        client.wait_for_mission(MID, {"completed"}, timeout_s=3.0, interval_s=1.0)
    assert 2 <= len(rec.calls(f"/api/control/missions/{MID}")) <= 5


# ---- workspaces ---------------------------------------------------------------------------------


def test_workspaces_are_reduced_at_the_source(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    secret = "sim-secret-0123456789abcdef"
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    rows = [
        {
            "id": WS,
            "name": "verity",
            "status": "ready",
            "env_vars": {"API_TOKEN": secret, "GH_TOKEN": token, "EMPTY": ""},
            "init_script": f"export GH_TOKEN={token}",
            "config": {"k": secret},
            "future_field": secret,
            "skills": ["lean"],
            "init_scripts": ["base"],
        },
        {"id": "00000000-0000-0000-0000-000000000000", "name": "host", "env_vars": {"X": "[redacted]"}},
    ]
    client, _ = make(lambda r: httpx.Response(200, json=rows))
    verity, host = client.list_workspaces()
    assert verity.env_var_names == ["API_TOKEN", "EMPTY", "GH_TOKEN"]
    assert verity.env_values_present and verity.credential_like_env_names == ["API_TOKEN", "GH_TOKEN"]
    assert verity.credential_classes == {"API_TOKEN": "generic-secret", "GH_TOKEN": "github-token"}
    assert not host.env_values_present and host.env_var_names == ["X"]
    dumped = repr(verity) + verity.model_dump_json() + str(verity.model_extra)
    assert secret not in dumped and token not in dumped


def test_workspace_schema_error_does_not_echo_values(
    make: Callable[..., tuple[SandboxedClient, Recorder]],
) -> None:
    secret = "sim-secret-fedcba9876543210"
    client, _ = make(lambda r: httpx.Response(200, json=[{"name": secret, "env_vars": {"K": secret}}]))
    with pytest.raises(BadResponseError) as info:
        client.list_workspaces()
    assert "Workspace" in str(info.value) and secret not in str(info.value)


def test_workspace_exec(make: Callable[..., tuple[SandboxedClient, Recorder]]) -> None:
    answer = {"exit_code": 2, "stdout": "visible-stdout", "stderr": "err", "timed_out": False}
    client, rec = make(lambda r: httpx.Response(200, json=answer))
    result = client.workspace_exec(WS, "git rev-parse HEAD", timeout_s=2.5, cwd="verity")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out, result.ok) == (
        2, "visible-stdout", "err", False, False
    )  # fmt: skip
    assert "visible-stdout" not in repr(result)
    request = rec.calls(f"/api/workspaces/{WS}/exec")[0]
    assert json.loads(request.content) == {
        "command": "git rev-parse HEAD",
        "timeout_secs": 3,
        "cwd": "verity",
    }
    assert request.extensions["timeout"]["read"] == pytest.approx(18.0)


def test_parse_valid_models_edge_cases() -> None:
    assert parse_valid_models("Invalid password") == []
    assert parse_valid_models(
        "Model 'x' not found in opencode catalog; valid: zai/glm-5.2 | minimax/MiniMax-M3."
    ) == [
        "zai/glm-5.2",
        "minimax/MiniMax-M3",
    ]


class ExpiringTokens:
    """A control plane whose tokens expire after ``uses`` requests; each login issues a new one."""

    def __init__(self, uses: int) -> None:
        self.uses, self.issued = uses, 0
        self.spent: dict[str, int] = {}
        self.requests: list[tuple[str, str, int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/auth/login":
            self.issued += 1
            response = httpx.Response(200, json={"token": f"{TOKEN}{self.issued}", "exp": 1_900_000_000})
        else:
            token = request.headers.get("authorization", "").removeprefix("Bearer ")
            self.spent[token] = self.spent.get(token, 0) + 1
            if self.spent[token] > self.uses:
                response = httpx.Response(401, text="Invalid or expired token")
            else:
                response = httpx.Response(200, json=mission())
        self.requests.append((request.method, request.url.path, response.status_code))
        return response


def test_an_expired_token_is_renewed_once_and_the_refused_request_sent_once_more() -> None:
    plane = ExpiringTokens(uses=1)
    with SandboxedClient(BASE, password=PASSWORD, transport=httpx.MockTransport(plane), timeout_s=2.0) as client:
        client.get_mission(MID)  # the first token's one request
        client.create_mission(title="t", prompt="p")  # refused, renewed, sent again
    creates = [r for r in plane.requests if r[:2] == ("POST", "/api/control/missions")]
    assert [status for _, _, status in creates] == [401, 200]  # the refused create made nothing; one more
    assert plane.issued == 2 and client.renewals == 1


def test_a_renewed_token_refused_too_is_reported_not_renewed_again() -> None:
    plane = ExpiringTokens(uses=0)
    client = SandboxedClient(BASE, password=PASSWORD, transport=httpx.MockTransport(plane), timeout_s=2.0)
    with client, pytest.raises(AuthFailed, match="Invalid or expired token"):
        client.get_mission(MID)
    assert plane.issued == 2 and len([r for r in plane.requests if r[1] != "/api/auth/login"]) == 2


def test_a_static_token_that_expires_is_reported_as_it_is() -> None:
    plane = ExpiringTokens(uses=0)
    client = SandboxedClient(BASE, token=TOKEN, transport=httpx.MockTransport(plane), timeout_s=2.0)
    with client, pytest.raises(AuthFailed):
        client.create_mission(title="t", prompt="p")
    assert plane.issued == 0 and len(plane.requests) == 1
