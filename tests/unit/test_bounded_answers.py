"""Answers that are bounded and checked before use: a stream line without end, a record of another
mission (the end-to-end runs are tests/integration/test_lying_control_plane.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from sbxcheck.clients.stream import bounded_lines

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
