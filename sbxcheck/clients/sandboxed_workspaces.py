"""Workspace calls of the sandboxed.sh REST client: records reduced at the source, and exec."""

from __future__ import annotations

import math
from typing import Final

from pydantic import BaseModel, JsonValue

from sbxcheck.clients.sandboxed_models import ExecResult, Workspace
from sbxcheck.clients.sandboxed_wire import SandboxedWire
from sbxcheck.ids import path_segment

_EXEC_GRACE_S: Final = 15.0


def _workspace_segment(workspace_id: str) -> str:
    """A workspace id (a UUID) as one encoded path segment."""
    return path_segment(workspace_id, field="workspace_id", source="workspace path")


class _ExecBody(BaseModel):
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


class WorkspaceCalls(SandboxedWire):
    """Workspaces: env-var values never leave these calls, and their answers are never excerpted."""

    def list_workspaces(self) -> list[Workspace]:
        """``GET /api/workspaces``, reduced at the source: env values never leave this call."""
        path = "/api/workspaces"
        resp = self._send("GET", path)
        return self._parse_list(f"GET {path}", resp, Workspace, secret_bearing=True)

    def get_workspace(self, workspace_id: str) -> Workspace:
        """``GET /api/workspaces/:id``, reduced at the source."""
        path = f"/api/workspaces/{_workspace_segment(workspace_id)}"
        resp = self._send("GET", path)
        return self._parse(f"GET {path}", resp, Workspace, secret_bearing=True)

    def workspace_exec(
        self, workspace_id: str, command: str, timeout_s: float = 60.0, *, cwd: str | None = None
    ) -> ExecResult:
        """``POST /api/workspaces/:id/exec`` → exit code, output, ``timed_out``.

        The server enforces ``timeout_secs`` (rounded up, max 600); the HTTP call waits that long
        plus a grace period.
        """
        secs = max(1, min(600, math.ceil(timeout_s)))
        body: dict[str, JsonValue] = {"command": command, "timeout_secs": secs}
        if cwd is not None:
            body["cwd"] = cwd
        path = f"/api/workspaces/{_workspace_segment(workspace_id)}/exec"
        endpoint = f"POST {path}"
        resp = self._send("POST", path, json_body=body, timeout_s=secs + _EXEC_GRACE_S)
        parsed = self._parse(endpoint, resp, _ExecBody, secret_bearing=True)
        return ExecResult(
            exit_code=-1 if parsed.exit_code is None else parsed.exit_code,
            stdout=parsed.stdout,
            stderr=parsed.stderr,
            timed_out=parsed.timed_out,
        )
