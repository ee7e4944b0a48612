"""A loopback HTTP server that answers what a test tells it to: bombs, endless bodies, deep JSON.

``HostileServer({path: Answer(...)})`` serves each path its answer (any method); a body is an
iterable made fresh per request, so an endless generator streams until the client hangs up.
:func:`gzip_bomb` builds a small body that inflates to a large one without ever holding it whole.
"""

from __future__ import annotations

import http.server
import itertools
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Answer:
    """What one path answers: a status, headers, and a body made fresh for each request."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Callable[[], Iterable[bytes]] = lambda: [b""]
    chunked: bool = False  # no Content-Length: the body ends when the server closes the connection


def gzip_bomb(decoded_bytes: int, layers: int = 1) -> bytes:
    """``decoded_bytes`` zero bytes gzipped ``layers`` times over, compressed as a stream (never whole)."""
    data: Iterable[bytes] = _zeros(decoded_bytes)
    for _ in range(layers):
        data = list(_gzip(data))
    return b"".join(data)


def endless_gzip() -> Iterator[bytes]:
    """A gzip stream of zeros that never ends (each piece a small chunk of the compressor's output)."""
    yield from _gzip(itertools.repeat(bytes(CHUNK)))


def endless_zeros() -> Iterator[bytes]:
    """Zero bytes, forever."""
    return itertools.repeat(bytes(CHUNK))


def _zeros(n: int) -> Iterator[bytes]:
    block = bytes(min(n, 1 << 20))
    while n > 0:
        yield block[: min(n, len(block))]
        n -= len(block)


def _gzip(chunks: Iterable[bytes]) -> Iterator[bytes]:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    for chunk in chunks:
        out = packer.compress(chunk)
        if out:
            yield out
    yield packer.flush()


class HostileServer:
    """A threaded loopback HTTP/1.1 server; ``url`` is its base, ``hits`` counts requests per path."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = answers
        self.hits: dict[str, int] = {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _answer(self) -> None:
                path = self.path.split("?", 1)[0]
                outer.hits[path] = outer.hits.get(path, 0) + 1
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                answer = outer.answers.get(path, Answer(404, {"content-type": "text/plain"}, lambda: [b"no"]))
                body = answer.body()
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if answer.chunked:
                    self.send_header("connection", "close")
                    self.close_connection = True
                else:
                    body = [b"".join(body)]
                    self.send_header("content-length", str(len(body[0])))
                self.end_headers()
                try:
                    for chunk in body:
                        self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            do_GET = do_POST = _answer

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
