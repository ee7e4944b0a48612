"""Loopback ports the simulator names before it serves on them.

The fleet writes its inventory (ports included) before any server starts. A port found free
and then let go can be taken in between, by another sim in a parallel worker or by any
outgoing connection's ephemeral port. A :class:`PortReservations` keeps a bound, not
listening, ``SO_REUSEADDR`` socket on each port it hands out: the kernel gives that port to
nobody else, connecting to it is refused, and the server that finally listens on it (also
with ``SO_REUSEADDR``, as uvicorn's socket and asyncio's servers are) may bind while the
reservation is still held, so a reservation can simply be kept for as long as the server
runs. A port held and never served is a refusing endpoint until :meth:`release` or
:meth:`close`.
"""

from __future__ import annotations

import socket
import threading


class PortReservations:
    """Ports on 127.0.0.1 held for servers that will listen on them later."""

    def __init__(self) -> None:
        self._held: dict[int, socket.socket] = {}
        self._lock = threading.Lock()

    def reserve(self) -> int:
        """Bind a fresh loopback port, keep it bound, and return its number."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
        except OSError:
            sock.close()
            raise
        port = int(sock.getsockname()[1])
        with self._lock:
            self._held[port] = sock
        return port

    def release(self, port: int) -> None:
        """Let ``port`` go; no-op for a port not held."""
        with self._lock:
            sock = self._held.pop(port, None)
        if sock is not None:
            sock.close()

    def held(self) -> list[int]:
        """Ports still held, sorted."""
        with self._lock:
            return sorted(self._held)

    def close(self) -> None:
        """Release every port still held; idempotent."""
        with self._lock:
            socks = list(self._held.values())
            self._held.clear()
        for sock in socks:
            sock.close()
