"""Every HTTP body is capped on the wire and after decoding, before it is decoded whole.

A few hundred bytes of ``Content-Encoding: gzip, gzip`` inflate to any size: the cap holds only if
it is counted while the decoders are fed, piece by piece. Also here: encodings that are not read,
a stream a proxy compressed anyway, the bounded cookie jar and an untrusted TLS certificate.
"""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support.hostile_http import Answer, HostileServer, gzip_bomb
from support.tls_registry import UntrustedRegistry

from sbxcheck.clients.sandboxed import NotFound, SandboxedClient
from sbxcheck.clients.stream import ControlStream
from sbxcheck.errors import BadResponseError, HostUnreachable
from sbxcheck.transports.cookies import MAX_JAR_BYTES
from sbxcheck.transports.http import RetryPolicy, get_start, new_client, send
from sbxcheck.transports.http_body import PIECE, decoded

MiB = 1 << 20
MID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
OTHER = "0a0b0c0d-0000-4000-8000-0000000001d0"


def _send(handler: Callable[[httpx.Request], httpx.Response], max_bytes: int) -> httpx.Response:
    with new_client(base_url="http://cp.test", transport=httpx.MockTransport(handler)) as client:
        return send(
            client, "GET", "/x", label="GET /x", base_url="http://cp.test", timeout_s=30.0,
            policy=RetryPolicy(retries=0), max_bytes=max_bytes,
        )  # fmt: skip


def _streamed(body: bytes, encoding: str) -> Callable[[httpx.Request], httpx.Response]:
    """An answer whose body arrives as raw bytes on a stream, as from the network (not decoded in memory)."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-encoding": encoding}, stream=httpx.ByteStream(body))

    return handler


def _peak_while(call: Callable[[], object]) -> tuple[int, object]:
    tracemalloc.start()
    try:
        try:
            result: object = call()
        except Exception as exc:  # the caller asserts on it
            result = exc
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def test_a_stacked_gzip_bomb_is_refused_at_the_cap_while_it_is_decoded() -> None:
    bomb = gzip_bomb(64 * MiB, layers=2)  # a few hundred bytes
    assert len(bomb) < 4096
    peak, result = _peak_while(lambda: _send(_streamed(bomb, "gzip, gzip"), max_bytes=MiB))
    assert isinstance(result, BadResponseError), result
    assert "above 1 MiB" in result.message and "refused, not parsed" in result.message
    assert peak < 6 * MiB, f"peak {peak / MiB:.1f} MiB while refusing a 64 MiB bomb at a 1 MiB cap"


def test_the_app_probe_cuts_a_bomb_at_its_cap_without_inflating_it() -> None:
    """``get_start`` reads a server the VM's agent controls: a bomb is cut at the probe's 64 KiB."""
    bomb = gzip_bomb(256 * MiB, layers=2)
    page = {"/": Answer(200, {"content-type": "text/html", "content-encoding": "gzip, gzip"}, lambda: [bomb])}
    with HostileServer(page) as server:
        peak, resp = _peak_while(lambda: get_start(server.url + "/", timeout_s=30.0, max_bytes=64 * 1024))
    assert isinstance(resp, httpx.Response), resp
    assert len(resp.content) == 64 * 1024 and set(resp.content) == {0}
    assert peak < 4 * MiB, f"peak {peak / MiB:.1f} MiB for a 64 KiB page start"


def test_an_encoding_not_read_is_refused_by_name_and_never_asked_for() -> None:
    seen: list[str] = []

    def brotli(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("accept-encoding", ""))
        return _streamed(b"\x1b\x03\x00\xf8", "br")(request)

    with pytest.raises(BadResponseError, match="Content-Encoding 'br' is not one sbxcheck reads"):
        _send(brotli, max_bytes=MiB)
    assert seen == ["gzip, deflate"]  # what sbxcheck decodes itself, whatever decoders httpx finds installed


def _pieces(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_every_encoding_read_decodes_whole_in_pieces_of_any_size(chunk: int) -> None:
    text = json.dumps({"ok": [i for i in range(3000)]}).encode()
    raw_deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    cases = {
        "gzip": (gzip.compress(text), ["gzip"]),
        "two gzip members": (gzip.compress(text[:100]) + gzip.compress(text[100:]), ["gzip"]),
        "deflate (zlib)": (zlib.compress(text), ["deflate"]),
        "deflate (raw)": (raw_deflate.compress(text) + raw_deflate.flush(), ["deflate"]),
        "gzip, gzip": (gzip.compress(gzip.compress(text)), ["gzip", "gzip"]),
        "deflate, gzip": (gzip.compress(zlib.compress(text)), ["deflate", "gzip"]),
    }
    for name, (body, layers) in cases.items():
        pieces = list(decoded(_pieces(body, chunk), layers))
        assert b"".join(pieces) == text, name
        assert max(map(len, pieces)) <= PIECE, name


def test_no_decoder_call_yields_more_than_a_piece() -> None:
    pieces = decoded(iter([gzip_bomb(8 * MiB)]), ["gzip"])
    sizes = [len(p) for p in pieces]
    assert sum(sizes) == 8 * MiB and max(sizes) <= PIECE


def test_a_stream_a_proxy_compressed_anyway_is_read_decoded() -> None:
    """Asked for identity, a proxy gzipped the event stream: its events are read, not its compressed bytes."""
    events = b"".join(
        b'event: mission_status_changed\ndata: {"mission_id": "%s", "status": "active"}\n\n' % MID.encode()
        for _ in range(3)
    )
    packed = gzip.compress(events)

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(packed))

    stream = ControlStream("http://cp.test", dict, transport=httpx.MockTransport(handler), max_connects=1)
    try:
        stream.start(wait_s=30.0)  # one connect: live while it reads, then the stream ends
        deadline = time.monotonic() + 30
        while not stream.absent and time.monotonic() < deadline:
            time.sleep(0.05)
        signal = stream.signal(MID)
        assert signal is not None and signal.status == "active" and signal.events == 3, stream.why_absent
    finally:
        stream.close()


def test_a_server_that_sets_ever_more_cookies_cannot_grow_the_cookie_header() -> None:
    """A server that sets a new cookie on every answer: the Cookie header stays bounded (else 431s)."""
    sent: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        cookie = request.headers.get("cookie", "")
        sent.append(len(cookie))
        if len(cookie) > 16 * 1024:  # as a real server (or its proxy) refuses an oversized header
            return httpx.Response(431, text="Request Header Fields Too Large")
        n = len(sent)
        headers = [("set-cookie", f"affinity{n}={'v' * 200}; Path=/")]
        if OTHER in request.url.path:
            return httpx.Response(404, text="no such mission", headers=headers)
        mission = {"id": MID, "status": "active", "title": "t", "backend": "codex"}
        return httpx.Response(200, json=mission, headers=headers)

    client = SandboxedClient("https://cp.test", token="t0k3n", transport=httpx.MockTransport(handler), retries=0)
    with client:
        for _ in range(200):
            client.get_mission(MID)
        with pytest.raises(NotFound) as refused:
            client.get_mission(OTHER)
    assert max(sent) <= MAX_JAR_BYTES + 512, max(sent)
    assert refused.value.evidence.get("cookies_refused", 0) > 100, refused.value.evidence


def test_an_untrusted_certificate_says_so_in_the_message(tmp_path: Path) -> None:
    registry = UntrustedRegistry(tmp_path)
    try:
        client = SandboxedClient(registry.url, timeout_s=10.0, retries=0)
        with client, pytest.raises(HostUnreachable) as refused:
            client.health()
    finally:
        registry.close()
    message = refused.value.message
    assert "does not trust" in message and "self-signed certificate" in message, message
    assert "cannot connect" not in message
    assert refused.value.evidence["request_sent"] is False
    assert "CA" in (refused.value.recommendation or "")


def test_the_app_probe_reports_a_page_in_an_encoding_not_read() -> None:
    """A page the VM's app compressed with brotli is named as such, never judged as its raw bytes."""
    from sbxcheck.checks.observe import probe_https

    page = {"/": Answer(200, {"content-type": "text/html", "content-encoding": "br"}, lambda: [b"\x1b\x03\x00\xf8"])}
    with HostileServer(page) as server:
        probe = probe_https(server.url + "/", 30.0)
    assert probe.status == 0 and "Content-Encoding 'br' is not one sbxcheck reads" in probe.error, probe
