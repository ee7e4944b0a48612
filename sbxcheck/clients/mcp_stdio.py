"""One MCP server process over stdio, driven synchronously: spawn, handshake, bounded requests, teardown.

The SDK is async; :class:`McpStdioSession` runs one ``stdio_client`` + ``ClientSession`` on a
private anyio event loop in a background thread (a blocking portal), so every sync call from a
pytest item shares one server process and one session. Every wait is bounded: the handshake by
``startup_timeout_s``, each request by the deadline its caller gives, teardown by
``shutdown_timeout_s`` (the SDK's own stdio shutdown closes stdin, then terminates and kills the
process group).

Transport failures map onto :mod:`sbxcheck.errors`:

* the server cannot be spawned, exits, or never completes the handshake → :class:`McpServerUnavailable`
  (a :class:`~sbxcheck.errors.HostUnreachable`; the message names the command, never its env);
* a request outlives its deadline → :class:`McpCallTimeout` (a :class:`~sbxcheck.errors.CommandTimeout`);
* an answer that does not match the protocol → :class:`~sbxcheck.errors.BadResponseError`;
* any other JSON-RPC error is re-raised as the SDK's ``MCPError``, for the caller to read.

The server's stderr goes to a bounded ring buffer, never to our output; :meth:`McpStdioSession.stderr_tail`
returns it redacted, for evidence.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Protocol, Self, TextIO, TypeVar

import anyio
import mcp_types
import pydantic
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from sbxcheck.errors import BadResponseError, CommandTimeout, HostUnreachable, SbxError
from sbxcheck.redact import Redactor, default_redactor

_T = TypeVar("_T")

STDERR_LIMIT_BYTES: Final = 64 * 1024
CALL_TIMEOUT_S: Final = 30.0  # one request to the server
STARTUP_TIMEOUT_S: Final = 20.0  # spawn and handshake
SHUTDOWN_TIMEOUT_S: Final = 10.0  # close, then the process's exit

# Slack on top of an async deadline before the sync side stops waiting on the loop thread.
_GRACE_S: Final = 5.0
# Names of env vars whose values also go to the process-wide redactor (all values are masked locally).
_SECRET_NAME_RE: Final = re.compile(r"(?i)token|secret|password|passwd|api_?key|credential|private|auth")


class McpServerUnavailable(HostUnreachable):
    """The MCP server could not be spawned, exited, or did not complete the handshake in time."""


class McpCallTimeout(CommandTimeout):
    """An MCP request did not get an answer before its deadline."""


class _StderrCapture:
    """An OS pipe for a child's stderr, drained by a daemon thread into a bounded tail buffer."""

    def __init__(self, limit: int) -> None:
        self._limit = max(1024, limit)
        self._buf = bytearray()
        self._dropped = 0
        self._lock = threading.Lock()
        read_fd, write_fd = os.pipe()
        self._sink: TextIO | None = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._thread = threading.Thread(
            target=self._drain, args=(read_fd,), name="sbxcheck-mcp-stderr", daemon=True
        )
        self._thread.start()

    @property
    def sink(self) -> TextIO:
        """The write end to hand to the child (our copy is closed once the child holds it)."""
        if self._sink is None:
            raise RuntimeError("stderr sink already released")
        return self._sink

    def release_sink(self) -> None:
        """Close our copy of the write end, so EOF arrives when the child exits."""
        sink, self._sink = self._sink, None
        if sink is not None:
            with contextlib.suppress(OSError):
                sink.close()

    def _drain(self, fd: int) -> None:
        try:
            while True:
                chunk = os.read(fd, 8192)
                if not chunk:
                    return
                with self._lock:
                    self._buf += chunk
                    excess = len(self._buf) - self._limit
                    if excess > 0:
                        del self._buf[:excess]
                        self._dropped += excess
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)

    def tail(self) -> tuple[str, int]:
        """The buffered tail as text and how many earlier bytes were dropped."""
        with self._lock:
            return self._buf.decode("utf-8", errors="replace"), self._dropped

    def finish(self, timeout_s: float) -> None:
        """Release the sink and give the drain thread a bounded moment to reach EOF."""
        self.release_sink()
        self._thread.join(timeout_s)


class _MessageSource(Protocol):
    """What :class:`_EofWatch` needs of the transport's read stream.

    Our own protocol: the SDK's (``ReadStream``) lives in a private module a minor release may move.
    """

    async def receive(self) -> SessionMessage | Exception: ...

    async def aclose(self) -> None: ...


class _EofWatch:
    """Wraps the transport's read stream and records when it ends (the server's stdout closed).

    The SDK reports both a dead connection and the real server's tool failures as code -32000;
    this flag tells them apart.
    """

    def __init__(self, inner: _MessageSource) -> None:
        self._inner = inner
        self.ended = threading.Event()

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.ended.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _EofWatch:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


def _leaf_exception(exc: BaseException) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class McpStdioSession:
    """One MCP server process over stdio and its client session, behind sync calls; a context manager.

    ``env`` is merged over the SDK's safe default environment (HOME, PATH, …) for the server
    process; its values are masked in every message this session produces.
    """

    def __init__(
        self,
        command: list[str],
        *,
        env: dict[str, str],
        timeout_s: float = CALL_TIMEOUT_S,
        cwd: Path | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
        stderr_limit: int = STDERR_LIMIT_BYTES,
        redactor: Redactor | None = None,
    ) -> None:
        if not command:
            raise ValueError("command must not be empty")
        self._command = list(command)
        self._env = dict(env)
        self._timeout_s = timeout_s
        self._cwd = cwd
        self._startup_timeout_s = startup_timeout_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._stderr_limit = stderr_limit
        self._shared_redactor = redactor or default_redactor()
        self._local_redactor = Redactor(self._env.values())
        for name, value in self._env.items():
            if _SECRET_NAME_RE.search(name):
                self._shared_redactor.register(value)
        self._lock = threading.Lock()
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._task: Future[None] | None = None
        self._stop: anyio.Event | None = None
        self._session: ClientSession | None = None
        self._eof: _EofWatch | None = None
        self._stderr: _StderrCapture | None = None
        self._tools: list[str] = []
        self._arguments: dict[str, frozenset[str]] = {}  # tool -> the argument names its inputSchema lists
        self._server_info: tuple[str, str] | None = None
        self._dead = False

    # -- display and redaction -------------------------------------------------------------

    @property
    def command_display(self) -> str:
        """The command line, shell-quoted and redacted (env values and credential shapes masked)."""
        return self.redact(shlex.join(self._command))

    def redact(self, text: str) -> str:
        """Mask this session's env values and every secret the shared redactor knows."""
        return self._shared_redactor.redact_text(self._local_redactor.redact_text(text))

    @property
    def state(self) -> str:
        """``open`` (started), ``dead`` (the server exited) or ``closed``."""
        return "dead" if self._dead else "open" if self._session is not None else "closed"

    def __repr__(self) -> str:
        return f"McpStdioSession(command={self.command_display!r}, state={self.state})"

    def stderr_tail(self) -> str:
        """The server's captured stderr (last ``stderr_limit`` bytes), redacted."""
        if self._stderr is None:
            return ""
        text, dropped = self._stderr.tail()
        prefix = f"[... {dropped} earlier bytes dropped]\n" if dropped else ""
        return prefix + self.redact(text)

    def evidence(self, **extra: Any) -> dict[str, Any]:
        """The evidence of a failure: the redacted command, the stderr tail and ``extra``."""
        return {"command": self.command_display, "stderr_tail": self.stderr_tail(), **extra}

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def timeout_s(self) -> float:
        """The default deadline of one request, in seconds."""
        return self._timeout_s

    @property
    def server_info(self) -> tuple[str, str] | None:
        """``(name, version)`` from the server's ``initialize`` answer, once started."""
        return self._server_info

    @property
    def tools(self) -> list[str]:
        """Tool names advertised at start (or at the last :meth:`list_tools`)."""
        return list(self._tools)

    def tool_arguments(self, tool: str) -> frozenset[str] | None:
        """The argument names ``tool``'s advertised ``inputSchema`` lists (None: no such tool)."""
        return self._arguments.get(tool)

    def _note_schemas(self, tools: list[Any]) -> list[str]:
        """Keep each tool's argument names (its ``inputSchema`` properties); the tool names."""
        self._arguments = {tool.name: _argument_names(tool.input_schema) for tool in tools}
        return [tool.name for tool in tools]

    def start(self) -> Self:
        """Spawn the server and complete the MCP handshake; McpServerUnavailable on failure."""
        with self._lock:
            if self._portal is not None:
                return self
            self._dead = False
            self._eof = None
            self._server_info = None
            self._stderr = _StderrCapture(self._stderr_limit)
            portal_cm = start_blocking_portal(name="sbxcheck-mcp")
            self._portal = portal_cm.__enter__()
            self._portal_cm = portal_cm
            ready: Future[list[str]] = Future()
            self._task = self._portal.start_task_soon(self._run_session, ready)
        try:
            self._tools = ready.result(timeout=self._startup_timeout_s + _GRACE_S)
        except FutureTimeout:
            self._teardown()
            raise McpServerUnavailable(
                f"MCP server {self.command_display} did not complete the handshake "
                f"within {self._startup_timeout_s:g}s",
                evidence=self.evidence(),
            ) from None
        except (KeyboardInterrupt, SystemExit):
            self._teardown()
            raise
        except BaseException as exc:  # the handshake task's failure, re-raised here
            self._teardown()
            raise self._startup_error(exc) from None
        return self

    def _startup_error(self, exc: BaseException) -> SbxError:
        leaf = _leaf_exception(exc)
        if isinstance(leaf, TimeoutError):
            why = f"did not complete the handshake within {self._startup_timeout_s:g}s"
        elif isinstance(leaf, MCPError):
            why = f"failed the handshake ({self.redact(leaf.message)})"
            if self._eof is not None and self._eof.ended.is_set():
                why = "exited before completing the handshake"
        elif isinstance(leaf, OSError):
            why = f"could not be started ({leaf.strerror or type(leaf).__name__})"
        else:
            why = f"failed to start ({type(leaf).__name__})"
        return McpServerUnavailable(f"MCP server {self.command_display} {why}", evidence=self.evidence())

    async def _run_session(self, ready: Future[list[str]]) -> None:
        """The session task: spawn, handshake, list tools, then idle until asked to stop."""
        self._stop = anyio.Event()
        assert self._stderr is not None
        params = StdioServerParameters(
            command=self._command[0],
            args=self._command[1:],
            env=self._env,
            cwd=self._cwd,
            encoding_error_handler="replace",
        )
        try:
            async with stdio_client(params, errlog=self._stderr.sink) as (read, write):
                self._stderr.release_sink()
                self._eof = _EofWatch(read)
                async with ClientSession(self._eof, write, read_timeout_seconds=self._timeout_s) as session:
                    with anyio.fail_after(self._startup_timeout_s):
                        init = await session.initialize()
                        listing = await session.list_tools()
                    self._server_info = (init.server_info.name, init.server_info.version)
                    self._session = session
                    ready.set_result(self._note_schemas(list(listing.tools)))
                    await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise
        finally:
            self._session = None

    def close(self) -> None:
        """End the session and the server process (bounded); safe to call more than once."""
        self._teardown()

    def _teardown(self) -> None:
        with self._lock:
            portal, portal_cm, task = self._portal, self._portal_cm, self._task
            self._portal = self._portal_cm = self._task = None
            if portal is None or portal_cm is None:
                if self._stderr is not None:
                    self._stderr.finish(0.0)
                return
            stop = self._stop
            if stop is not None:
                with contextlib.suppress(RuntimeError):
                    portal.call(stop.set)
            if task is not None:
                try:
                    task.result(timeout=self._shutdown_timeout_s)
                except FutureTimeout:
                    task.cancel()
                except BaseException:  # the session's own failure was reported where it happened
                    pass
            with contextlib.suppress(RuntimeError):
                portal.call(portal.stop, True)
            with contextlib.suppress(Exception):
                portal_cm.__exit__(None, None, None)
            self._stop = None
            self._session = None
            if self._stderr is not None:
                self._stderr.finish(1.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------------

    def live_session(self, what: str) -> tuple[BlockingPortal, ClientSession]:
        """The loop's portal and the session; McpServerUnavailable (``cannot <what>``) when not started
        or the server has exited."""
        portal, session = self._portal, self._session
        if portal is None or session is None:
            raise McpServerUnavailable(
                f"MCP server {self.command_display} is not started; cannot {what}", evidence=self.evidence()
            )
        if self._dead or (self._eof is not None and self._eof.ended.is_set()):
            self._dead = True
            raise McpServerUnavailable(
                f"MCP server {self.command_display} has exited; cannot {what}", evidence=self.evidence()
            )
        return portal, session

    def run(
        self, what: str, portal: BlockingPortal, request: Callable[[], Awaitable[_T]], *, timeout_s: float
    ) -> _T:
        """Run ``request()`` on ``portal`` (from :meth:`live_session`); map transport failures (other
        MCPErrors are re-raised)."""
        future: Future[_T] = portal.start_task_soon(request)
        try:
            return future.result(timeout=timeout_s + _GRACE_S)
        except FutureTimeout:
            future.cancel()
            raise McpCallTimeout(
                f"MCP {what} got no answer within {timeout_s:g}s",
                evidence=self.evidence(timeout_s=timeout_s),
            ) from None
        except CancelledError:
            raise McpServerUnavailable(
                f"MCP server {self.command_display} was closed during {what}", evidence=self.evidence()
            ) from None
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise McpCallTimeout(
                    f"MCP {what} got no answer within {timeout_s:g}s",
                    evidence=self.evidence(timeout_s=timeout_s),
                ) from None
            if exc.code == mcp_types.CONNECTION_CLOSED and self._eof is not None and self._eof.ended.is_set():
                self._dead = True
                raise McpServerUnavailable(
                    f"MCP server {self.command_display} exited during {what}", evidence=self.evidence()
                ) from None
            raise
        except pydantic.ValidationError as exc:
            raise BadResponseError(
                f"MCP {what}: the server's answer does not match the protocol ({exc.error_count()} errors)",
                evidence={"command": self.command_display},
            ) from None

    def list_tools(self) -> list[str]:
        """Ask the server for its tool names (and refresh :attr:`tools`, which names are resolved against)."""
        portal, session = self.live_session("list tools")

        async def _list() -> list[str]:
            listing = await session.list_tools()
            return self._note_schemas(list(listing.tools))

        try:
            names = self.run("tools/list", portal, _list, timeout_s=self._timeout_s)
        except MCPError as exc:
            raise BadResponseError(
                f"MCP tools/list failed: {self.redact(exc.message)}", evidence={"code": exc.code}
            ) from None
        self._tools = names
        return list(names)


def _argument_names(schema: Any) -> frozenset[str]:
    """The property names of a tool's ``inputSchema`` (none when it is not an object schema)."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return frozenset(k for k in properties if isinstance(k, str)) if isinstance(properties, dict) else frozenset()
