"""An HTTP body read boundedly: capped on the wire and after decoding, before it is ever whole.

httpx inflates each received chunk in one call, so a body of a few KB (``Content-Encoding: gzip,
gzip``, 980 bytes to 512 MiB) was whole in memory before its length was looked at. Here the raw
bytes (``iter_raw``) go through sbxcheck's own decoders, fed incrementally with ``max_length``: no
call yields more than :data:`PIECE` bytes, and the reader counts decoded bytes as they come out.

Encodings read: identity, gzip (``x-gzip``) and deflate (zlib or raw), stacked up to
:data:`MAX_LAYERS` deep. A request says so (:data:`ACCEPT_ENCODING`, whatever optional decoders
httpx finds installed); a body in another encoding (br, zstd, compress) is refused, never guessed.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import httpx

ACCEPT_ENCODING: Final = "gzip, deflate"
PIECE: Final = 64 * 1024  # the most one decoder call may yield
MAX_LAYERS: Final = 4  # stacked encodings read at most (each holds a 32 KiB window)
_GZIP: Final = frozenset({"gzip", "x-gzip"})
_READ: Final = _GZIP | {"deflate"}


class BodyEncodingError(ValueError):
    """The body's Content-Encoding is not one sbxcheck reads, or its bytes are not that encoding."""


def content_encodings(headers: httpx.Headers) -> list[str]:
    """The encodings applied to the body, in the order they were applied (identity left out).

    BodyEncodingError names an encoding that is not read, or more than :data:`MAX_LAYERS` of them.
    """
    layers: list[str] = []
    for value in headers.get_list("content-encoding"):
        for token in value.split(","):
            name = token.strip().lower()
            if not name or name == "identity":
                continue
            if name not in _READ:
                raise BodyEncodingError(
                    f"Content-Encoding {name[:40]!r} is not one sbxcheck reads (gzip, deflate)"
                )
            layers.append(name)
    if len(layers) > MAX_LAYERS:
        raise BodyEncodingError(f"{len(layers)} stacked Content-Encodings, above the {MAX_LAYERS} read")
    return layers


def raw_body(resp: httpx.Response) -> tuple[Iterator[bytes], list[str]]:
    """The body's raw chunks as they arrive and the encodings still to undo on them.

    A response whose body is already in memory (an in-process transport built it from content,
    as ``httpx.MockTransport`` does) holds it decoded: it is given as it is, with none to undo.
    """
    if resp.is_stream_consumed:
        content = resp.content
        return iter([content[i : i + PIECE] for i in range(0, len(content), PIECE)]), []
    return resp.iter_raw(), content_encodings(resp.headers)


def decoded(chunks: Iterable[bytes], layers: Sequence[str]) -> Iterator[bytes]:
    """The body's decoded bytes from its raw ``chunks``, in pieces of at most :data:`PIECE` bytes.

    The last encoding applied is undone first. Decoding is lazy: a reader that stops pulling (its
    cap reached) stops every decoder with it.
    """
    stream: Iterable[bytes] = chunks
    for layer in reversed(layers):
        stream = _inflate(stream, layer)
    return iter(stream)


def _inflate(chunks: Iterable[bytes], layer: str) -> Iterator[bytes]:
    """One gzip or deflate layer undone incrementally (a gzip body may hold several members)."""
    gzip = layer in _GZIP
    wbits = zlib.MAX_WBITS | 16
    if not gzip:
        head, chunks = _head(chunks, 2)
        wbits = zlib.MAX_WBITS if _zlib_header(head) else -zlib.MAX_WBITS  # deflate sent raw, as some do
    inflater = zlib.decompressobj(wbits)
    ended = between = False  # between: a gzip member ended; another may follow
    for chunk in chunks:
        data = chunk
        while not ended:
            if between:
                data = data.lstrip(b"\0")  # NUL padding after a member is no member
                if not data:
                    break
                inflater, between = zlib.decompressobj(wbits), False
            try:
                out = inflater.decompress(data, PIECE)
            except zlib.error as exc:
                raise BodyEncodingError(f"the body is not valid {layer} ({exc})") from None
            if out:
                yield out
            if inflater.eof:
                data = inflater.unused_data
                between, ended = gzip, not gzip  # after deflate's end, trailing bytes are read off the wire, not kept
                continue
            data = inflater.unconsumed_tail
            if not data and len(out) < PIECE:
                break  # this chunk is used up and nothing is pending: the next one
    if not inflater.eof:
        tail = inflater.flush()  # an unfinished stream: what was decoded so far (nothing is pending)
        if tail:
            yield tail


def _head(chunks: Iterable[bytes], n: int) -> tuple[bytes, Iterator[bytes]]:
    """The first ``n`` bytes of ``chunks`` (fewer if it is shorter) and every chunk, those bytes included."""
    stream = iter(chunks)
    taken: list[bytes] = []
    while sum(map(len, taken)) < n:
        chunk = next(stream, None)
        if chunk is None:
            break
        taken.append(chunk)
    return b"".join(taken)[:n], itertools.chain(taken, stream)


def _zlib_header(head: bytes) -> bool:
    """Whether ``head`` starts a zlib stream (RFC 1950: method 8, a header checksum divisible by 31)."""
    return len(head) == 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
