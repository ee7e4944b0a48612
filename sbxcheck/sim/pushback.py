"""The control plane pushing back: under ``cp.rate-limited`` every Nth request is refused unserved.

An ASGI middleware in front of the control-plane double's routes. The refused request never reaches
its handler (so a refused create makes no mission), alternating ``429 Too many requests`` and ``503
Service Unavailable``, each with ``Retry-After``, as a rate limiter or an overloaded proxy answers.
"""

from __future__ import annotations

import itertools
import threading
from typing import Final, Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

PUSHBACK_FAULT: Final = "cp.rate-limited"
EVERY_NTH: Final = 4
RETRY_AFTER_S: Final = 1


class _Faulted(Protocol):
    faults: set[str]


class PushbackMiddleware:
    """Refuse every ``EVERY_NTH`` request while the fault is on (counting every method and path)."""

    def __init__(self, app: ASGIApp, double: _Faulted) -> None:
        self.app = app
        self.double = double
        self._count = itertools.count(1)
        self._lock = threading.Lock()
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or PUSHBACK_FAULT not in self.double.faults:
            await self.app(scope, receive, send)
            return
        with self._lock:
            n = next(self._count)
        if n % EVERY_NTH:
            await self.app(scope, receive, send)
            return
        with self._lock:
            self.refused += 1
            status, body = (429, b"Too many requests") if self.refused % 2 else (503, b"Service Unavailable")
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", str(RETRY_AFTER_S).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
