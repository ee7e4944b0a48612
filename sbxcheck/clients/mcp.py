"""The assistant MCP's tools, called synchronously: name resolution, pushback, results, typed wrappers.

:class:`AssistantMcpClient` calls the tools of sandboxed.sh's assistant MCP over one
:class:`~sbxcheck.clients.mcp_stdio.McpStdioSession` (the server process, its event loop, the
deadlines and the stderr tail), so every sync call from a pytest item shares one server process and
one session.

Tool names may be given with or without the host prefix (``mcp_sandboxed_assistant_``, as a host names them);
they are resolved against the names the server advertises. Failures map onto :mod:`sbxcheck.errors`:

* the server cannot be spawned, exits, or never completes the handshake →
  :class:`~sbxcheck.clients.mcp_stdio.McpServerUnavailable` (a :class:`~sbxcheck.errors.HostUnreachable`;
  the message names the command, never its env);
* a call outlives its deadline → :class:`~sbxcheck.clients.mcp_stdio.McpCallTimeout`
  (a :class:`~sbxcheck.errors.CommandTimeout`);
* a tool the server does not advertise → :class:`UnknownToolError`;
* a tool failure comes back as ``McpToolResult(is_error=True)``, whether the server flags the result
  ``isError`` (SDK servers) or answers with a JSON-RPC error (the real server uses ``-32000``);
* text that must be JSON but is not → :class:`~sbxcheck.errors.BadResponseError` with a redacted excerpt.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import anyio
import mcp_types
from mcp.shared.exceptions import MCPError

from sbxcheck.clients.mcp_stdio import (
    CALL_TIMEOUT_S,
    SHUTDOWN_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    STDERR_LIMIT_BYTES,
    McpStdioSession,
)
from sbxcheck.errors import BadResponseError, RateLimited
from sbxcheck.redact import Redactor, default_redactor
from sbxcheck.safeio import loads_bounded
from sbxcheck.transports.http import pushback_deadline

#: a tool result that relays the control plane's pushback (the server did not act on the request)
PUSHBACK_TEXT = re.compile(r"\b429\b|\b503\b|too many requests|service unavailable", re.IGNORECASE)
MCP_PUSHBACK_WAIT_S = 1.0  # an MCP tool result carries no Retry-After
MCP_PUSHBACK_RETRIES = 30

DEFAULT_PREFIX: Final = "mcp_sandboxed_assistant_"
EXCERPT_CHARS: Final = 200


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
        timeout_s: float = CALL_TIMEOUT_S,
        cwd: Path | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
        prefix: str = DEFAULT_PREFIX,
        stderr_limit: int = STDERR_LIMIT_BYTES,
        redactor: Redactor | None = None,
    ) -> None:
        self._stdio = McpStdioSession(
            command,
            env=env,
            timeout_s=timeout_s,
            cwd=cwd,
            startup_timeout_s=startup_timeout_s,
            shutdown_timeout_s=shutdown_timeout_s,
            stderr_limit=stderr_limit,
            redactor=redactor,
        )
        self._prefix = prefix

    # -- the session: display, redaction, lifecycle -------------------------------------------

    @property
    def command_display(self) -> str:
        """The command line, shell-quoted and redacted (env values and credential shapes masked)."""
        return self._stdio.command_display

    def redact(self, text: str) -> str:
        """Mask this client's env values and every secret the shared redactor knows."""
        return self._stdio.redact(text)

    def __repr__(self) -> str:
        return f"AssistantMcpClient(command={self.command_display!r}, state={self._stdio.state})"

    def stderr_tail(self) -> str:
        """The server's captured stderr (last ``stderr_limit`` bytes), redacted."""
        return self._stdio.stderr_tail()

    @property
    def server_info(self) -> tuple[str, str] | None:
        """``(name, version)`` from the server's ``initialize`` answer, once started."""
        return self._stdio.server_info

    @property
    def tools(self) -> list[str]:
        """Tool names advertised at start (or at the last :meth:`list_tools`)."""
        return self._stdio.tools

    def tool_arguments(self, tool: str) -> frozenset[str] | None:
        """The argument names the advertised ``tool`` takes (its ``inputSchema``; None: not advertised)."""
        try:
            return self._stdio.tool_arguments(self.resolve_tool(tool))
        except UnknownToolError:
            return None

    def start(self) -> Self:
        """Spawn the server and complete the MCP handshake; McpServerUnavailable on failure."""
        self._stdio.start()
        return self

    def close(self) -> None:
        """End the session and the server process (bounded); safe to call more than once."""
        self._stdio.close()

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

    def list_tools(self) -> list[str]:
        """Ask the server for its tool names (and refresh the cache used for name resolution)."""
        return self._stdio.list_tools()

    def resolve_tool(self, tool: str) -> str:
        """The advertised name for ``tool``: exact, else with the prefix stripped, else added."""
        names = self._stdio.tools
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
        portal, session = self._stdio.live_session(f"call {tool}")
        name = self.resolve_tool(tool)
        deadline = self._stdio.timeout_s if timeout_s is None else timeout_s
        args = dict(arguments or {})

        async def _call() -> mcp_types.CallToolResult:
            with anyio.fail_after(deadline + 1.0):
                return await session.call_tool(name, args, read_timeout_seconds=deadline)

        what = f"call to tool {name}"
        try:
            result = self._stdio.run(what, portal, _call, timeout_s=deadline)
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
        deadline = max(self._stdio.timeout_s, float(timeout_secs or 0) + 10.0)
        return self.call_json(
            "workspace_bash", {k: v for k, v in args.items() if v is not None}, timeout_s=deadline
        )
