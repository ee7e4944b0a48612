"""Run any ASGI app with uvicorn in a daemon thread on 127.0.0.1, for the simulator's doubles."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from sbxcheck.errors import SimError

_POLL_S = 0.01


class BackgroundServer:
    """An ASGI app served by uvicorn on a loopback port, in a daemon thread.

    ``start`` binds the listening socket itself before handing it to uvicorn, so ``port=0``
    picks a free port and :attr:`port` is the real one once ``start`` returns. Usable as a
    context manager.
    """

    def __init__(
        self, app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0, name: str = "sim-http"
    ) -> None:
        self._app = app
        self._host = host
        self._requested_port = port
        self._name = name
        self._port: int | None = None
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        """The bound port; raises SimError before ``start``."""
        if self._port is None:
            raise SimError(f"server {self._name!r} is not started")
        return self._port

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:PORT``."""
        return f"http://{self._host}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the server thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout_s: float = 10.0) -> BackgroundServer:
        """Bind, start serving, and wait until uvicorn reports it is up (SimError on deadline)."""
        if self._thread is not None:
            raise SimError(f"server {self._name!r} was already started")
        deadline = time.monotonic() + timeout_s
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._requested_port))
        except OSError as exc:
            where = f"{self._host}:{self._requested_port}"
            raise SimError(f"server {self._name!r} cannot bind {where}: {exc.strerror or exc}") from None
        self._sock = sock
        self._port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self._app,
            access_log=False,
            date_header=False,  # an app that answers with a Date sets its own (the control plane's clock)
            log_level="warning",
            log_config=None,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(target=self._run, name=f"sbxcheck-{self._name}", daemon=True)
        self._thread.start()
        while not server.started:
            if not self._thread.is_alive():
                self._close_socket()
                reason = type(self._error).__name__ if self._error else "exited"
                raise SimError(f"server {self._name!r} stopped while starting ({reason})")
            if time.monotonic() >= deadline:
                self.stop(timeout_s=1.0)
                raise SimError(f"server {self._name!r} not serving after {timeout_s:g}s")
            time.sleep(_POLL_S)
        return self

    def _run(self) -> None:
        assert self._server is not None and self._sock is not None
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # reported by start(); a daemon thread must not die loudly
            self._error = exc

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Ask uvicorn to exit and join the thread; return True when the thread has ended."""
        thread, server = self._thread, self._server
        if thread is None or server is None:
            return True
        deadline = time.monotonic() + timeout_s
        server.should_exit = True
        thread.join(max(0.0, deadline - time.monotonic() - 0.5))
        if thread.is_alive():
            server.force_exit = True
            thread.join(max(0.1, deadline - time.monotonic()))
        self._close_socket()
        return not thread.is_alive()

    def _close_socket(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()

    def __enter__(self) -> BackgroundServer:
        if self._thread is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
