"""Workspaces resource of the simulated control plane: list, get, and exec inside a workspace."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sbxcheck.sim.controlplane.agent import AgentRunner
from sbxcheck.sim.controlplane.model import (
    _text,
    _uuid_or_none,
    _Workspace,
    run_bounded,
)
from sbxcheck.sim.faults import HOSTILE_TEXT


class WorkspaceRoutes(AgentRunner):
    """``/api/workspaces[/{id}]`` and ``POST /api/workspaces/{id}/exec``."""

    def _render_workspace(self, ws: _Workspace) -> dict[str, Any]:
        spec = ws.spec
        env = dict(ws.env)
        if self._fault_on("cp.env-values-exposed", ws.name, ws.id):
            env.update(ws.exposed_env)
        return {
            "id": ws.id,
            "name": ws.name,
            "path": str(ws.path),
            "workspace_type": spec.workspace_type if spec else "host",
            "status": f"{ws.status}{HOSTILE_TEXT}" if "cp.control-chars" in self.faults else ws.status,
            "error_message": ws.error_message,
            "created_at": ws.created_at,
            "skills": list(spec.skills) if spec else [],
            "plugins": [],
            "template": None,
            "config_profile": None,
            "distro": spec.distro if spec else None,
            "env_vars": env,  # REST is never scrubbed: names AND values
            "init_scripts": list(spec.init_scripts) if spec else [],
            "init_script": None,
            "shared_network": True,
            "tailscale_mode": "exit_node",
            "mcps": list(spec.mcps) if spec else [],
        }

    async def _list_workspaces(self, request: Request, user: str) -> Response:
        with self._lock:
            return JSONResponse([self._render_workspace(ws) for ws in self._workspaces.values()])

    async def _get_workspace(self, request: Request, user: str) -> Response:
        ws = self._workspaces.get(_uuid_or_none(request.path_params["id"]) or "")
        if ws is None:
            return _text(404, "Workspace not found")
        with self._lock:
            return JSONResponse(self._render_workspace(ws))

    async def _exec(self, request: Request, user: str) -> Response:
        ws = self._workspaces.get(_uuid_or_none(request.path_params["id"]) or "")
        if ws is None:
            return _text(404, "Workspace not found")
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        command, cwd, timeout, stdin = (
            body.get("command"),
            body.get("cwd"),
            body.get("timeout_secs"),
            body.get("stdin"),
        )
        extra_env = body.get("env") or {}
        if not isinstance(command, str):
            return _text(
                422, "Failed to deserialize the JSON body into the target type: missing field `command`"
            )
        if not command.strip():
            return _text(400, "command must not be empty")  # [U]
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)):
            return _text(
                422, "Failed to deserialize the JSON body into the target type: timeout_secs: invalid type"
            )
        if not isinstance(extra_env, dict) or (cwd is not None and not isinstance(cwd, str)):
            return _text(422, "Failed to deserialize the JSON body into the target type: invalid type")
        secs = min(600, max(1, 300 if timeout is None else timeout))
        workdir = ws.path / cwd if cwd else ws.path
        with self._lock:
            env = self._env_for(ws, ws.path)
        env.update({str(k): str(v) for k, v in extra_env.items()})
        shell = "/bin/bash" if shutil.which("bash") else "/bin/sh"
        code, out, err, timed_out = await asyncio.to_thread(
            run_bounded,
            [shell, "-c", command],
            workdir,
            env,
            float(secs),
            stdin if isinstance(stdin, str) else None,
        )
        return JSONResponse({"exit_code": code, "stdout": out, "stderr": err, "timed_out": timed_out})
