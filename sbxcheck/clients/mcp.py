"""A synchronous MCP client over stdio, built on the official SDK, for sandboxed.sh's assistant MCP.

The SDK is async; :class:`AssistantMcpClient` runs one ``stdio_client`` + ``ClientSession`` on a
private anyio event loop in a background thread (a blocking portal), so every sync call from a
pytest item shares one server process and one session. Every wait is bounded: the handshake by
``startup_timeout_s``, each call by ``timeout_s``, teardown by ``shutdown_timeout_s`` (the SDK's
own stdio shutdown closes stdin, then terminates and kills the process group).

Tool names may be given with or without the host prefix (``mcp_sandboxed_assistant_``, as a host names them);
they are resolved against the names the server advertises. Failures map onto :mod:`sbxcheck.errors`:

* the server cannot be spawned, exits, or never completes the handshake → :class:`McpServerUnavailable`
  (a :class:`~sbxcheck.errors.HostUnreachable`; the message names the command, never its env);
* a call outlives its deadline → :class:`McpCallTimeout` (a :class:`~sbxcheck.errors.CommandTimeout`);
* a tool failure comes back as ``McpToolResult(is_error=True)``, whether the server flags the result
  ``isError`` (SDK servers) or answers with a JSON-RPC error (the real server uses ``-32000``);
* text that must be JSON but is not → :class:`~sbxcheck.errors.BadResponseError` with a redacted excerpt.

The server's stderr goes to a bounded ring buffer, never to our output; :meth:`stderr_tail`
returns it redacted, for evidence.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
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

from sbxcheck.errors import BadResponseError, CommandTimeout, HostUnreachable, RateLimited, SbxError
from sbxcheck.redact import Redactor, default_redactor
from sbxcheck.safeio import loads_bounded
from sbxcheck.transports.http import pushback_deadline

#: a tool result that relays the control plane's pushback (the server did not act on the request)
PUSHBACK_TEXT = re.compile(r"\b429\b|\b503\b|too many requests|service unavailable", re.IGNORECASE)
MCP_PUSHBACK_WAIT_S = 1.0  # an MCP tool result carries no Retry-After
MCP_PUSHBACK_RETRIES = 30

_T = TypeVar("_T")

DEFAULT_PREFIX: Final = "mcp_sandboxed_assistant_"
STDERR_LIMIT_BYTES: Final = 64 * 1024
EXCERPT_CHARS: Final = 200

# Slack on top of an async deadline before the sync side stops waiting on the loop thread.
_GRACE_S: Final = 5.0
# Names of env vars whose values also go to the process-wide redactor (all values are masked locally).
_SECRET_NAME_RE: Final = re.compile(r"(?i)token|secret|password|passwd|api_?key|credential|private|auth")


class McpServerUnavailable(HostUnreachable):
    """The MCP server could not be spawned, exited, or did not complete the handshake in time."""


class McpCallTimeout(CommandTimeout):
    """An MCP request did not get an answer before its deadline."""


class UnknownToolError(BadResponseError):
    """The server does not advertise the tool, with or without the host prefix."""


@dataclass(frozen=True)
class McpToolResult:
    """One ``tools/call`` outcome. ``text`` and ``data`` may hold secrets and stay out of the repr.

    ``data`` is ``text`` parsed as JSON, else the structured content when the server sent any, else
    None. ``error_code`` is set when the failure arrived as a JSON-RPC error instead of ``isError``.
    """

    is_error: bool
    text: str = field(repr=False)
    data: Any | None = field(default=None, repr=False)
    tool: str = ""
    error_code: int | None = None

    def json(self, redact: Callable[[str], str] | None = None) -> Any:
        """The text parsed as JSON; BadResponseError (with a redacted excerpt) when it is not JSON."""
        try:
            return loads_bounded(self.text)
        except ValueError:
            if self.data is not None:
                return self.data
            mask = redact or default_redactor().redact_text
            excerpt = mask(self.text)[:EXCERPT_CHARS]  # redact first, then cut
            raise BadResponseError(
                f"MCP tool {self.tool or '?'} returned text that is not JSON: {excerpt!r}",
                evidence={"tool": self.tool, "excerpt": excerpt, "chars": len(self.text)},
            ) from None


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


def _result_text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))


def _json_or_none(text: str) -> Any | None:
    try:
        return loads_bounded(text)
    except ValueError:
        return None


class AssistantMcpClient:
    """A sync facade over one assistant-MCP stdio session; a context manager.

    ``env`` is merged over the SDK's safe default environment (HOME, PATH, …) for the server
    process; its values are masked in every message this client produces.
    """

    def __init__(
        self,
        command: list[str],
        *,
        env: dict[str, str],
        timeout_s: float = 30.0,
        cwd: Path | None = None,
        startup_timeout_s: float = 20.0,
        shutdown_timeout_s: float = 10.0,
        prefix: str = DEFAULT_PREFIX,
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
        self._prefix = prefix
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
        self._server_info: tuple[str, str] | None = None
        self._dead = False

    # -- display and redaction -------------------------------------------------------------

    @property
    def command_display(self) -> str:
        """The command line, shell-quoted and redacted (env values and credential shapes masked)."""
        return self.redact(shlex.join(self._command))

    def redact(self, text: str) -> str:
        """Mask this client's env values and every secret the shared redactor knows."""
        return self._shared_redactor.redact_text(self._local_redactor.redact_text(text))

    def __repr__(self) -> str:
        state = "dead" if self._dead else "open" if self._session is not None else "closed"
        return f"AssistantMcpClient(command={self.command_display!r}, state={state})"

    def stderr_tail(self) -> str:
        """The server's captured stderr (last ``stderr_limit`` bytes), redacted."""
        if self._stderr is None:
            return ""
        text, dropped = self._stderr.tail()
        prefix = f"[... {dropped} earlier bytes dropped]\n" if dropped else ""
        return prefix + self.redact(text)

    def _evidence(self, **extra: Any) -> dict[str, Any]:
        return {"command": self.command_display, "stderr_tail": self.stderr_tail(), **extra}

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def server_info(self) -> tuple[str, str] | None:
        """``(name, version)`` from the server's ``initialize`` answer, once started."""
        return self._server_info

    @property
    def tools(self) -> list[str]:
        """Tool names advertised at start (or at the last :meth:`list_tools`)."""
        return list(self._tools)

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
                evidence=self._evidence(),
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
        return McpServerUnavailable(f"MCP server {self.command_display} {why}", evidence=self._evidence())

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
                    ready.set_result([tool.name for tool in listing.tools])
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

    def _live_session(self, what: str) -> tuple[BlockingPortal, ClientSession]:
        portal, session = self._portal, self._session
        if portal is None or session is None:
            raise McpServerUnavailable(
                f"MCP server {self.command_display} is not started; cannot {what}", evidence=self._evidence()
            )
        if self._dead or (self._eof is not None and self._eof.ended.is_set()):
            self._dead = True
            raise McpServerUnavailable(
                f"MCP server {self.command_display} has exited; cannot {what}", evidence=self._evidence()
            )
        return portal, session

    def _run(
        self, what: str, portal: BlockingPortal, request: Callable[[], Awaitable[_T]], *, timeout_s: float
    ) -> _T:
        """Run ``request()`` on the loop; map transport failures (other MCPErrors are re-raised)."""
        future: Future[_T] = portal.start_task_soon(request)
        try:
            return future.result(timeout=timeout_s + _GRACE_S)
        except FutureTimeout:
            future.cancel()
            raise McpCallTimeout(
                f"MCP {what} got no answer within {timeout_s:g}s",
                evidence=self._evidence(timeout_s=timeout_s),
            ) from None
        except CancelledError:
            raise McpServerUnavailable(
                f"MCP server {self.command_display} was closed during {what}", evidence=self._evidence()
            ) from None
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise McpCallTimeout(
                    f"MCP {what} got no answer within {timeout_s:g}s",
                    evidence=self._evidence(timeout_s=timeout_s),
                ) from None
            if exc.code == mcp_types.CONNECTION_CLOSED and self._eof is not None and self._eof.ended.is_set():
                self._dead = True
                raise McpServerUnavailable(
                    f"MCP server {self.command_display} exited during {what}", evidence=self._evidence()
                ) from None
            raise
        except pydantic.ValidationError as exc:
            raise BadResponseError(
                f"MCP {what}: the server's answer does not match the protocol ({exc.error_count()} errors)",
                evidence={"command": self.command_display},
            ) from None

    def list_tools(self) -> list[str]:
        """Ask the server for its tool names (and refresh the cache used for name resolution)."""
        portal, session = self._live_session("list tools")

        async def _list() -> list[str]:
            listing = await session.list_tools()
            return [tool.name for tool in listing.tools]

        try:
            names = self._run("tools/list", portal, _list, timeout_s=self._timeout_s)
        except MCPError as exc:
            raise BadResponseError(
                f"MCP tools/list failed: {self.redact(exc.message)}", evidence={"code": exc.code}
            ) from None
        self._tools = names
        return list(names)

    def resolve_tool(self, tool: str) -> str:
        """The advertised name for ``tool``: exact, else with the prefix stripped, else added."""
        names = self._tools
        if tool in names:
            return tool
        if self._prefix:
            if tool.startswith(self._prefix) and tool[len(self._prefix) :] in names:
                return tool[len(self._prefix) :]
            if self._prefix + tool in names:
                return self._prefix + tool
        raise UnknownToolError(
            f"MCP server {self.command_display} does not advertise tool {tool!r}",
            evidence={"tool": tool, "prefix": self._prefix, "advertised": sorted(names)},
        )

    def call(
        self, tool: str, arguments: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> McpToolResult:
        """Call a tool; tool failures come back as ``is_error`` results, transport failures raise.

        A tool that relays the control plane's pushback (429, 503) is called again: the server did not
        act on the request, so repeating it is safe whatever the tool does. After the pushback deadline
        (the caller's, else 60 s) or MCP_PUSHBACK_RETRIES calls it is :class:`RateLimited`.
        """
        until = pushback_deadline(60.0)
        for _ in range(MCP_PUSHBACK_RETRIES):
            result = self._call_once(tool, arguments, timeout_s)
            if not (result.is_error and PUSHBACK_TEXT.search(result.text)):
                return result
            if time.monotonic() + MCP_PUSHBACK_WAIT_S >= until:
                break
            time.sleep(MCP_PUSHBACK_WAIT_S)
        raise RateLimited(
            f"MCP {tool}: the control plane kept pushing back (429) until the deadline",
            evidence={"via": "mcp", "tool": tool, "answer": self.redact(result.text)[:200]},
        )

    def _call_once(
        self, tool: str, arguments: dict[str, Any] | None, timeout_s: float | None
    ) -> McpToolResult:
        portal, session = self._live_session(f"call {tool}")
        name = self.resolve_tool(tool)
        deadline = self._timeout_s if timeout_s is None else timeout_s
        args = dict(arguments or {})

        async def _call() -> mcp_types.CallToolResult:
            with anyio.fail_after(deadline + 1.0):
                return await session.call_tool(name, args, read_timeout_seconds=deadline)

        what = f"call to tool {name}"
        try:
            result = self._run(what, portal, _call, timeout_s=deadline)
        except MCPError as exc:
            return McpToolResult(
                is_error=True,
                text=exc.message,
                data=_json_or_none(exc.message),
                tool=name,
                error_code=exc.code,
            )
        text = _result_text(result)
        data = _json_or_none(text)
        if data is None and result.structured_content is not None:
            data = result.structured_content
        return McpToolResult(is_error=bool(result.is_error), text=text, data=data, tool=name)

    def call_json(
        self, tool: str, arguments: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> McpToolResult:
        """Like :meth:`call`, but a successful result must be JSON (BadResponseError otherwise)."""
        result = self.call(tool, arguments, timeout_s=timeout_s)
        if not result.is_error:
            result.json(self.redact)
        return result

    # -- the assistant MCP's tools (specs/sandboxed-sh.md, 7); None arguments are left out -----

    def _tool(self, tool: str, **arguments: Any) -> McpToolResult:
        return self.call_json(tool, {k: v for k, v in arguments.items() if v is not None})

    def list_workspaces(self) -> McpToolResult:
        """``list_workspaces`` → ``{"workspaces": [...]}``; may carry env values, reduce before keeping."""
        return self._tool("list_workspaces")

    def start_mission(
        self,
        title: str,
        prompt: str,
        *,
        workspace_id: str | None = None,
        backend: str | None = None,
        model_override: str | None = None,
        model_effort: str | None = None,
        agent: str | None = None,
        **extra: Any,
    ) -> McpToolResult:
        """``start_mission`` → ``{"mission": <create response>}``; ``extra`` passes the tool's other fields."""
        return self._tool(
            "start_mission",
            title=title,
            prompt=prompt,
            workspace_id=workspace_id,
            backend=backend,
            model_override=model_override,
            model_effort=model_effort,
            agent=agent,
            **extra,
        )

    def get_mission(self, mission_id: str) -> McpToolResult:
        """``get_mission`` (the digest alias) → the mission digest."""
        return self._tool("get_mission", mission_id=mission_id)

    def get_mission_digest(self, mission_id: str) -> McpToolResult:
        """``get_mission_digest`` → the mission digest."""
        return self._tool("get_mission_digest", mission_id=mission_id)

    def get_mission_events(
        self,
        mission_id: str,
        *,
        limit: int | None = None,
        view: str | None = None,
        since_seq: int | None = None,
        before_seq: int | None = None,
    ) -> McpToolResult:
        """``get_mission_events`` → a bare event array (newest page when no cursor is given)."""
        return self._tool(
            "get_mission_events",
            mission_id=mission_id,
            limit=limit,
            view=view,
            since_seq=since_seq,
            before_seq=before_seq,
        )

    def list_missions(
        self,
        *,
        status: str | None = None,
        limit: int | None = None,
        project: str | None = None,
        tag: str | None = None,
    ) -> McpToolResult:
        """``list_missions`` → ``{"missions": [compact]}``."""
        return self._tool("list_missions", status=status, limit=limit, project=project, tag=tag)

    def list_active_missions(
        self, *, limit: int | None = None, project: str | None = None, tag: str | None = None
    ) -> McpToolResult:
        """``list_active_missions`` → ``{"missions": [compact]}`` (active/pending/awaiting_user/blocked)."""
        return self._tool("list_active_missions", limit=limit, project=project, tag=tag)

    def cancel_mission(self, mission_id: str) -> McpToolResult:
        """``cancel_mission`` → ``{"success": true, "cancelled": id}``; not-found on a gone mission is normal."""
        return self._tool("cancel_mission", mission_id=mission_id)

    def send_message_to_mission(self, mission_id: str, content: str) -> McpToolResult:
        """``send_message_to_mission`` → the REST message envelope."""
        return self._tool("send_message_to_mission", mission_id=mission_id, content=content)

    def get_mission_health(self, mission_id: str) -> McpToolResult:
        """``get_mission_health`` → status, live state, error signals and a recommendation."""
        return self._tool("get_mission_health", mission_id=mission_id)

    def workspace_bash(
        self,
        command: str,
        *,
        workspace_id: str | None = None,
        cwd: str | None = None,
        timeout_secs: int | None = None,
    ) -> McpToolResult:
        """``workspace_bash`` → ``{exit_code, stdout, stderr, timed_out}``; the call waits past ``timeout_secs``."""
        args = {"command": command, "workspace_id": workspace_id, "cwd": cwd, "timeout_secs": timeout_secs}
        deadline = max(self._timeout_s, float(timeout_secs or 0) + 10.0)
        return self.call_json(
            "workspace_bash", {k: v for k, v in args.items() if v is not None}, timeout_s=deadline
        )
