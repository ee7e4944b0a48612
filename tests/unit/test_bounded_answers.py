"""Answers that are bounded and checked before use: a stream line without end, a record of another
mission (the end-to-end runs are tests/integration/test_lying_control_plane.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import httpx
import pytest

from sbxcheck.clients.sandboxed import SandboxedClient
from sbxcheck.clients.stream import bounded_lines
from sbxcheck.errors import BadResponseError

ASKED = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
OTHER = "0a0b0c0d-0000-4000-8000-0000000001d0"


# ------------------------------------------------------------------ a stream line without end


def test_a_line_over_the_cap_is_cut_while_it_is_read() -> None:
    consumed = itertools.count()

    def endless() -> Iterator[bytes]:
        yield b"event: status\ndata: {}\n\ndata: "
        while True:
            next(consumed)
            yield b"x" * 4096

    lines = list(bounded_lines(endless(), 64 * 1024))
    assert lines == ["event: status", "data: {}", "", None]
    assert next(consumed) <= 17  # never buffered past the cap (64 KiB / 4 KiB, and one more)


@pytest.mark.parametrize(
    "chunks",
    [
        [b"event: a\r\ndata: 1\r\n\r\n"],
        [b"event: a\r", b"\ndata: 1\r", b"\n\r", b"\n"],
        [b"event: a\rdata: 1\r\r"],
        [b"event: a\n", b"data: 1\n\n"],
    ],
)
def test_every_sse_line_end_splits_lines_across_chunks(chunks: list[bytes]) -> None:
    assert list(bounded_lines(chunks, 100)) == ["event: a", "data: 1", ""]


# ------------------------------------------------------------------ the record asked for


def test_a_record_of_another_mission_is_a_bad_response_naming_both_ids() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": OTHER, "status": "completed", "backend": "claudecode"})

    client = SandboxedClient("http://cp.test", token="t", transport=httpx.MockTransport(handler))
    with pytest.raises(BadResponseError) as caught:
        client.get_mission(ASKED)
    assert ASKED in caught.value.message and OTHER in caught.value.message
    assert "claudecode" not in caught.value.message
    assert caught.value.classification.value == "bad_response"
