"""OpenRouterAdmin: paging GET /keys past 100 keys, error mapping, no secret anywhere."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from sbxcheck.clients.openrouter import PAGE_SIZE, OpenRouterAdmin
from sbxcheck.errors import AuthFailed, BadResponseError, CommandTimeout, HostUnreachable, TransportError
from sbxcheck.sim.httpserver import BackgroundServer
from sbxcheck.sim.openrouter import OpenRouterDouble

PROV = "sk-or-v1-" + "ab" * 32


def meta(n: int) -> dict[str, object]:
    return {
        "hash": f"{n:064x}",
        "name": f"sbx-run-{n}",
        "label": "sk-or-v1-abc...def",
        "usage": 0.1,
        "limit": 50.0,
    }


def admin(
    handler: Callable[[httpx.Request], httpx.Response], *, retries: int = 2, max_pages: int = 50
) -> OpenRouterAdmin:
    return OpenRouterAdmin(
        "https://openrouter.test/api/v1",
        PROV,
        5.0,
        transport=httpx.MockTransport(handler),
        retries=retries,
        max_pages=max_pages,
    )


def paged(total: int, seen: list[int]) -> Callable[[httpx.Request], httpx.Response]:
    rows = [meta(i) for i in range(total)]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/keys"
        assert request.headers["authorization"] == f"Bearer {PROV}"
        offset = int(request.url.params.get("offset", "0"))
        seen.append(offset)
        return httpx.Response(200, json={"data": rows[offset : offset + PAGE_SIZE]})

    return handler


@pytest.mark.parametrize(("total", "offsets"), [(0, [0]), (99, [0]), (100, [0, 100]), (250, [0, 100, 200])])
def test_pages_until_a_short_page(total: int, offsets: list[int]) -> None:
    seen: list[int] = []
    with admin(paged(total, seen)) as client:
        keys = client.list_keys()
        assert client.pages_read == len(offsets)
    assert seen == offsets
    assert [k.name for k in keys] == [f"sbx-run-{i}" for i in range(total)]


def test_bounded_page_count_refuses_a_partial_list() -> None:
    seen: list[int] = []
    with (
        admin(paged(1000, seen), max_pages=3) as client,
        pytest.raises(BadResponseError, match="more than 3 pages"),
    ):
        client.list_keys()
    assert seen == [0, 100, 200]


def test_ignored_offset_is_detected() -> None:
    rows = [meta(i) for i in range(PAGE_SIZE)]
    client = admin(lambda r: httpx.Response(200, json={"data": rows}))
    with client, pytest.raises(BadResponseError, match="repeats earlier keys"):
        client.list_keys()


def test_models_keep_unknown_fields_and_drop_a_secret() -> None:
    row = {**meta(1), "usage_daily": 0.01, "workspace_id": "w1", "key": "sk-or-v1-" + "cd" * 32}
    with admin(lambda r: httpx.Response(200, json={"data": [row]})) as client:
        [k] = client.list_keys()
    assert k.model_extra == {"usage_daily": 0.01, "workspace_id": "w1"}
    assert "cd" * 32 not in k.model_dump_json() and "cd" * 32 not in repr(k)


def test_bare_list_is_accepted_and_bad_shapes_are_errors() -> None:
    with admin(lambda r: httpx.Response(200, json=[meta(1)])) as client:
        assert len(client.list_keys()) == 1
    with admin(lambda r: httpx.Response(200, json={"keys": []})) as client, pytest.raises(BadResponseError):
        client.list_keys()
    client = admin(lambda r: httpx.Response(200, json={"data": [{"name": "x"}]}))
    with client, pytest.raises(BadResponseError, match="hash"):
        client.list_keys()
    with admin(lambda r: httpx.Response(200, text="<html>")) as client, pytest.raises(BadResponseError):
        client.list_keys()


def test_error_mapping_and_no_key_in_messages() -> None:
    def status(code: int, body: object) -> Callable[[httpx.Request], httpx.Response]:
        return lambda r: httpx.Response(code, json=body)

    cases: list[tuple[Callable[[httpx.Request], httpx.Response], type[Exception]]] = [
        (status(401, {"error": {"message": "User not found", "code": 401}}), AuthFailed),
        (status(403, {"error": {"message": "Only provisioning keys can manage API keys"}}), AuthFailed),
        (status(500, {"error": {"message": "boom"}}), TransportError),
        (status(400, {"error": {"message": "offset must be an integer"}}), BadResponseError),
    ]
    for handler, exc in cases:
        with admin(handler, retries=0) as client, pytest.raises(exc) as info:
            client.list_keys()
        assert PROV not in str(info.value) and PROV not in repr(client)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with admin(refused) as client, pytest.raises(HostUnreachable):
        client.list_keys()
    with admin(slow) as client, pytest.raises(CommandTimeout):
        client.list_keys()


def test_retries_are_bounded() -> None:
    calls: list[int] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return (
            httpx.Response(503, json={"error": {"message": "overloaded"}})
            if len(calls) < 2
            else httpx.Response(200, json={"data": []})
        )

    with admin(flaky, retries=2) as client:
        assert client.list_keys() == []
    assert len(calls) == 2
    calls.clear()

    def down(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(503, json={})

    client = admin(down, retries=1)
    with client, pytest.raises(TransportError):
        client.list_keys()
    assert len(calls) == 2


@pytest.fixture
def double() -> Iterator[tuple[OpenRouterDouble, str]]:
    d = OpenRouterDouble()
    with BackgroundServer(d.app).start(timeout_s=10) as server:
        yield d, server.url + "/api/v1"


def test_against_the_openrouter_double_with_more_than_100_keys(double: tuple[OpenRouterDouble, str]) -> None:
    d, url = double
    minted = {d.mint(f"sbx-run-{i:03d}", 10.0)[1] for i in range(230)}
    d.mint("mac-mini-agent")
    with OpenRouterAdmin(url, d.provisioning_key, 10.0) as client:
        keys = client.list_keys()
        assert client.pages_read == 3
    assert {k.hash for k in keys} >= minted and len(keys) == 231
    secrets = {k.secret for k in d.keys(include_deleted=True)}
    assert not any(s in json.dumps([k.model_dump() for k in keys]) for s in secrets)
    with OpenRouterAdmin(url, d.mint("runtime")[0], 10.0) as client, pytest.raises(AuthFailed):
        client.list_keys()
