"""Reading a failed assistant-MCP tool result as a credential refusal (no mcp SDK import: checks use it).

The MCP turns every REST failure behind a tool into one ``-32000`` text: ``list workspaces
failed (401 Unauthorized): Invalid or expired token``, ``Mission not found: 401 Unauthorized``. A
401/403 there is an auth failure (a token to renew), never a bad response.
"""

from __future__ import annotations

import re
from typing import Final, Protocol

from sbxcheck.errors import AuthFailed

# The control plane's own 401 texts (specs/sandboxed-sh.md, 2), and the MCP's "no token configured" message.
AUTH_TEXTS: Final = (
    "Invalid or expired token",
    "Missing Authorization header",
    "Invalid user",
    "no API token",
)
_AUTH_STATUS_RE: Final = re.compile(r"(?:^|[\s(:])(401 Unauthorized|403 Forbidden)\b", re.IGNORECASE)


class FailedToolResult(Protocol):
    """The fields of :class:`~sbxcheck.clients.mcp.McpToolResult` this module reads."""

    @property
    def is_error(self) -> bool: ...

    @property
    def text(self) -> str: ...

    @property
    def tool(self) -> str: ...

    @property
    def error_code(self) -> int | None: ...


def auth_refusal(result: FailedToolResult) -> AuthFailed | None:
    """An :class:`~sbxcheck.errors.AuthFailed` when a failed tool relays a credential refusal, else None."""
    if not result.is_error:
        return None
    text = result.text
    found = next((t for t in AUTH_TEXTS if t.lower() in text.lower()), None)
    status = _AUTH_STATUS_RE.search(text)
    if found is None and status is None:
        return None
    said = " / ".join(x for x in (status.group(1) if status else None, found) if x)
    return AuthFailed(
        f"MCP {result.tool or 'tool'}: the control plane refused the MCP server's credentials ({said})",
        evidence={
            "via": "mcp",
            "tool": result.tool,
            "error_code": result.error_code,
            "refused_before_acting": said,  # the control plane refused the tool's request: it did nothing
        },
    )
