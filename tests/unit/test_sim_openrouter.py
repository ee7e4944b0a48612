"""The OpenRouter double over real HTTP (BackgroundServer + httpx): keys, /key, credits, chat, SSE."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sbxcheck.errors import SimError
from sbxcheck.sim.httpserver import BackgroundServer
from sbxcheck.sim.openrouter import PAGE_SIZE, OpenRouterDouble

MODEL = "deepseek/deepseek-v4-flash-0731"
KEY_RE = re.compile(r"sk-or-v1-[0-9a-f]{64}")


class Api:
    """A client bound to one double."""

    def __init__(self, double: OpenRouterDouble, client: httpx.Client) -> None:
        self.double = double
        self.client = client

    def prov(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.double.provisioning_key}"}

    @staticmethod
    def bearer(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def chat(
        self, key: str, prompt: str = "Reply with ping", model: str = MODEL, **extra: Any
    ) -> httpx.Response:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], **extra}
        return self.client.post("/chat/completions", json=body, headers=self.bearer(key))


@pytest.fixture
def api() -> Iterator[Api]:
    double = OpenRouterDouble()
    server = BackgroundServer(double.app).start(timeout_s=10)
    try:
        with httpx.Client(base_url=f"{server.url}/api/v1", timeout=10) as client:
            yield Api(double, client)
    finally:
        assert server.stop(timeout_s=5)


def sse_events(text: str) -> tuple[list[dict[str, Any]], list[str], bool]:
    """(JSON chunks, comment lines, saw [DONE]) from an SSE body."""
    chunks: list[dict[str, Any]] = []
    comments: list[str] = []
    done = False
    for line in text.splitlines():
        if line.startswith(":"):
            comments.append(line)
        elif line.startswith("data: "):
            payload = line[len("data: ") :]
            if payload == "[DONE]":
                done = True
            else:
                assert not done, "data after [DONE]"
                chunks.append(json.loads(payload))
    return chunks, comments, done


# ---- BackgroundServer ---------------------------------------------------------------------------


def test_background_server_picks_a_port_and_stops() -> None:
    server = BackgroundServer(OpenRouterDouble().app)
    with pytest.raises(SimError):
        _ = server.url
    with server:
        assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}"
        assert server.running
        assert httpx.get(f"{server.url}/api/v1/key", timeout=5).status_code == 401
    assert not server.running


def test_background_server_bind_failure_is_a_sim_error() -> None:
    with BackgroundServer(OpenRouterDouble().app) as first, pytest.raises(SimError, match="cannot bind"):
        BackgroundServer(OpenRouterDouble().app, port=first.port).start(timeout_s=2)


# ---- key management -----------------------------------------------------------------------------


def test_mint_returns_secret_top_level_and_metadata_under_data(api: Api) -> None:
    r = api.client.post("/keys", json={"name": "sbx-run-1", "limit": 50}, headers=api.prov())
    assert r.status_code == 201
    body = r.json()
    assert KEY_RE.fullmatch(body["key"])
    data = body["data"]
    assert re.fullmatch(r"[0-9a-f]{64}", data["hash"])
    assert data["name"] == "sbx-run-1" and data["limit"] == 50.0 and data["usage"] == 0.0
    assert data["limit_remaining"] == 50.0 and data["disabled"] is False
    for field in (
        "label",
        "limit_reset",
        "include_byok_in_limit",
        "usage_daily",
        "usage_weekly",
        "usage_monthly",
        "byok_usage",
        "created_at",
        "updated_at",
        "expires_at",
    ):
        assert field in data
    assert body["key"] not in json.dumps(data)
    assert api.double.key(data["hash"]).secret == body["key"]


def test_keys_require_the_provisioning_key(api: Api) -> None:
    secret, _ = api.double.mint("sbx-a", 5.0)
    assert api.client.post("/keys", json={"name": "x"}, headers=api.bearer(secret)).status_code == 403
    assert api.client.get("/keys").status_code == 401
    assert api.client.get("/keys", headers=api.bearer("sk-or-v1-" + "0" * 64)).status_code == 401
    assert api.client.post("/keys", json={"limit": 1}, headers=api.prov()).status_code == 400
    assert api.client.post("/keys", content=b"{nope", headers=api.prov()).status_code == 400


def test_list_paginates_100_per_page_and_never_shows_secrets(api: Api) -> None:
    minted = [api.double.mint(f"sbx-{i:03d}", 1.0) for i in range(PAGE_SIZE + 5)]
    personal, personal_h = api.double.mint("personal", None)
    pages: list[list[dict[str, Any]]] = []
    offset = 0
    while True:
        r = api.client.get("/keys", params={"offset": offset}, headers=api.prov())
        assert r.status_code == 200
        page = r.json()["data"]
        if not page:
            break
        pages.append(page)
        offset += len(page)
    assert [len(p) for p in pages] == [100, 6]
    hashes = [k["hash"] for p in pages for k in p]
    assert hashes == [*(h for _, h in minted), personal_h]
    text = json.dumps(pages)
    assert not any(secret in text for secret, _ in minted) and personal not in text
    assert "secret" not in text and not KEY_RE.search(text)
    assert api.client.get("/keys", params={"offset": "x"}, headers=api.prov()).status_code == 400


def test_disabled_keys_listed_only_on_request(api: Api) -> None:
    _, h = api.double.mint("sbx-off", 1.0)
    api.double.key(h).disabled = True

    def listed(**params: str) -> list[str]:
        data = api.client.get("/keys", params=params, headers=api.prov()).json()["data"]
        return [k["hash"] for k in data]

    assert h not in listed()
    assert h in listed(include_disabled="true")


def test_delete_then_404_and_absent_from_list(api: Api) -> None:
    _, h = api.double.mint("sbx-del", 1.0)
    r = api.client.delete(f"/keys/{h}", headers=api.prov())
    assert r.status_code == 200 and r.json() == {"deleted": True}
    assert api.client.delete(f"/keys/{h}", headers=api.prov()).status_code == 404
    assert api.client.delete(f"/keys/{'f' * 64}", headers=api.prov()).status_code == 404
    assert api.client.delete("/keys/not-a-hash", headers=api.prov()).status_code == 404
    listed = api.client.get("/keys", params={"include_disabled": "true"}, headers=api.prov()).json()["data"]
    assert h not in [k["hash"] for k in listed]
    assert api.double.key(h).deleted


# ---- /key and /credits --------------------------------------------------------------------------


def test_key_info_capped_uncapped_and_after_delete(api: Api) -> None:
    capped, capped_h = api.double.mint("sbx-capped", 50.0)
    api.double.set_usage(capped_h, 12.5)
    data = api.client.get("/key", headers=api.bearer(capped)).json()["data"]
    assert data["limit"] == 50.0 and data["usage"] == 12.5 and data["limit_remaining"] == 37.5
    assert data["is_provisioning_key"] is False and data["is_free_tier"] is False
    assert data["rate_limit"]["requests"] == -1 and data["expires_at"] is None

    uncapped, uncapped_h = api.double.mint("sbx-uncapped", None)
    data = api.client.get("/key", headers=api.bearer(uncapped)).json()["data"]
    assert data["limit"] is None and data["limit_remaining"] is None

    api.double.set_limit(uncapped_h, 10.0)
    assert api.client.get("/key", headers=api.bearer(uncapped)).json()["data"]["limit"] == 10.0

    # the measured upstream trap: a deleted key still answers 200 on /key
    assert api.client.delete(f"/keys/{capped_h}", headers=api.prov()).status_code == 200
    assert api.client.get("/key", headers=api.bearer(capped)).status_code == 200

    prov = api.client.get("/key", headers=api.prov()).json()["data"]
    assert prov["is_provisioning_key"] is True and prov["limit"] is None
    assert api.client.get("/key", headers=api.bearer("sk-or-v1-" + "1" * 64)).status_code == 401
    assert api.client.get("/key", headers={"Authorization": "Basic abc"}).status_code == 401


def test_credits_sum_usage(api: Api) -> None:
    _, a = api.double.mint("a", 10.0)
    _, b = api.double.mint("b", None)
    api.double.set_usage(a, 1.25)
    api.double.set_usage(b, 0.5)
    data = api.client.get("/credits", headers=api.prov()).json()["data"]
    assert data == {"total_credits": 100.0, "total_usage": 1.75}


# ---- chat completions ---------------------------------------------------------------------------


def test_chat_non_stream_ping_pong_and_usage_accumulates(api: Api) -> None:
    secret, h = api.double.mint("sbx-chat", 50.0)
    r = api.chat(secret, provider={"zdr": True, "data_collection": "deny"}, max_tokens=16)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    message = body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "pong", "reasoning": None}
    assert body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    rates = api.double.catalog[MODEL]
    expected = (usage["prompt_tokens"] * rates.input + usage["completion_tokens"] * rates.output) / 1e6
    assert usage["cost"] == pytest.approx(expected) and expected > 0
    assert api.double.key(h).usage == pytest.approx(expected)

    other = api.chat(secret, prompt="Say something").json()
    assert other["choices"][0]["message"]["content"] != "pong"
    total = expected + other["usage"]["cost"]
    assert api.double.key(h).usage == pytest.approx(total)
    assert api.client.get("/key", headers=api.bearer(secret)).json()["data"]["usage"] == pytest.approx(total)


def test_chat_stream_sse_with_usage_last_and_done(api: Api) -> None:
    secret, _ = api.double.mint("sbx-stream", None)
    r = api.chat(secret, prompt="Tell me a story", stream=True, stream_options={"include_usage": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    chunks, comments, done = sse_events(r.text)
    assert done and comments == [": OPENROUTER PROCESSING"]
    assert r.text.index(": OPENROUTER PROCESSING") < r.text.index("data: ")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text.startswith("This is a simulated reply") and len(chunks) > 2
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "stop"
    assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(last["usage"])
    assert all("usage" not in c for c in chunks[:-1])


def test_reasoning_only_key(api: Api) -> None:
    secret, h = api.double.mint("sbx-ro", None)
    api.double.key(h).reasoning_only = True
    message = api.chat(secret).json()["choices"][0]["message"]
    assert message["content"] is None and message["reasoning"] == "pong"
    chunks, _, done = sse_events(api.chat(secret, stream=True).text)
    assert done
    assert "".join(c["choices"][0]["delta"].get("reasoning") or "" for c in chunks) == "pong"
    assert not "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)


def test_402_when_exhausted(api: Api) -> None:
    secret, h = api.double.mint("sbx-broke", 1.0)
    api.double.set_usage(h, 1.0)
    r = api.chat(secret)
    assert r.status_code == 402
    assert r.json()["error"]["code"] == 402 and r.json()["error"]["message"].startswith(
        "Insufficient credits"
    )
    api.double.set_limit(h, None)
    assert api.chat(secret).status_code == 200


def test_400_for_model_down_or_unknown(api: Api) -> None:
    secret, h = api.double.mint("sbx-down", None)
    api.double.key(h).models_down.add("z-ai/glm-5.2")
    r = api.chat(secret, model="z-ai/glm-5.2")
    assert r.status_code == 400
    assert r.json() == {"error": {"message": "z-ai/glm-5.2 is not a valid model ID", "code": 400}}
    assert api.chat(secret, model="nope/nope").status_code == 400
    assert api.chat(secret, model="moonshotai/kimi-k3").status_code == 200
    bad = api.client.post("/chat/completions", content=b"{not json", headers=api.bearer(secret))
    assert bad.status_code == 400 and "error" in bad.json()


def test_401_for_provisioning_unknown_disabled_and_deleted_keys(api: Api) -> None:
    r = api.chat(api.double.provisioning_key)
    assert r.status_code == 401 and r.json() == {"error": {"message": "User not found", "code": 401}}
    assert api.chat("sk-or-v1-" + "2" * 64).status_code == 401
    assert api.chat("garbage").status_code == 401
    assert api.client.post("/chat/completions", json={"model": MODEL}).status_code == 401
    secret, h = api.double.mint("sbx-x", None)
    api.double.key(h).disabled = True
    assert api.chat(secret).status_code == 401
    api.double.key(h).disabled = False
    api.double.delete(h)
    assert api.chat(secret).status_code == 401


def test_latency_is_honoured(api: Api) -> None:
    secret, h = api.double.mint("sbx-slow", None)
    api.double.key(h).latency_s = 0.3
    r = api.chat(secret)
    assert r.status_code == 200 and r.elapsed.total_seconds() >= 0.3


def test_request_log_never_holds_secrets(api: Api) -> None:
    secret, h = api.double.mint("sbx-log", None)
    api.chat(secret)
    api.chat(api.double.provisioning_key)
    api.client.get("/keys", headers=api.prov())
    log = api.double.requests
    assert [(e.method, e.path, e.status) for e in log] == [
        ("POST", "/api/v1/chat/completions", 200),
        ("POST", "/api/v1/chat/completions", 401),
        ("GET", "/api/v1/keys", 200),
    ]
    assert log[0].key_hash == h and log[0].model == MODEL and log[1].key_hash is None
    assert secret not in repr(log) and api.double.provisioning_key not in repr(log)
    assert secret not in repr(api.double.key(h))
    api.double.clear_requests()
    assert api.double.requests == []
