"""The simulator's admin API and knob gate: what exe.dev's ``new``/``rm`` verbs call to change the fleet.

:class:`SimAdmin` is a Starlette app (serve it on loopback with
:class:`~sbxcheck.sim.httpserver.BackgroundServer`), protected by a random bearer token:

- ``GET /vms`` → ``{"vms": [<ls --json entry>, ...]}``
- ``POST /vms`` ``{"name": "<vm>"}`` → 201 ``{vm_name, https_url, ssh_dest, ssh_port}`` (409 if it exists)
- ``DELETE /vms/{name}`` → 200 ``{"deleted": true}`` or 404

The work is done by an :class:`AdminBackend` (the :class:`~sbxcheck.sim.fleet.SimFleet`), in a thread,
because registering a VM with the SSH server blocks (bounded).

:class:`KnobGate` wraps the OpenRouter double's app and turns knob files into failures (see
:mod:`sbxcheck.sim.sssf_recipes` for the knobs).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sbxcheck.errors import SimError

VM_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_KEY_ITEM = re.compile(r"^/api/v1/keys/([0-9a-f]{64})$")


class VmExists(SimError):
    """A VM of that name is already live."""


class AdminBackend(Protocol):
    """What the admin API needs from the fleet."""

    def create_vm(self, name: str) -> dict[str, Any]: ...

    def delete_vm(self, name: str) -> bool: ...

    def list_vms(self) -> list[dict[str, Any]]: ...


class SimAdmin:
    """The admin API: bearer-token auth, JSON in and out, the work done by ``backend``."""

    def __init__(self, backend: AdminBackend, token: str) -> None:
        if len(token) < 16:
            raise SimError("sim admin: the token must be at least 16 characters")
        self._backend = backend
        self._token = token
        self.app = Starlette(
            routes=[
                Route("/vms", self._vms, methods=["GET", "POST"]),
                Route("/vms/{name}", self._vm, methods=["DELETE"]),
            ]
        )

    def _authorized(self, request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token.strip(), self._token)

    async def _vms(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, "missing or wrong admin token")
        if request.method == "GET":
            return JSONResponse({"vms": await run_in_threadpool(self._backend.list_vms)})
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "body must be JSON")
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str) or not VM_NAME_RE.match(name) or len(name) > 63:
            return _error(400, "name must be lowercase [a-z0-9-], at most 63 characters")
        try:
            info = await run_in_threadpool(self._backend.create_vm, name)
        except VmExists as exc:
            return _error(409, exc.message)
        except SimError as exc:
            return _error(500, exc.message)
        return JSONResponse(info, status_code=201)

    async def _vm(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, "missing or wrong admin token")
        name = request.path_params["name"]
        try:
            deleted = await run_in_threadpool(self._backend.delete_vm, name)
        except SimError as exc:
            return _error(500, exc.message)
        if not deleted:
            return _error(404, f"VM {name} not found")
        return JSONResponse({"deleted": True})


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)


def read_knob(knobs_dir: Path, name: str) -> str | None:
    """The stripped content of knob ``name``, or None when it is not set."""
    try:
        return (knobs_dir / name).read_text(encoding="utf-8").strip()
    except OSError:
        return None


class KnobGate:
    """ASGI wrapper for the OpenRouter double: knob files turn chosen key calls into HTTP 500.

    ``revoke-fail`` (run ids, one a line, or ``*``): ``DELETE /keys/<hash>`` of ``sbx-<run>`` fails.
    ``mount-fail`` = ``mint``: ``POST /keys`` fails. ``key_name`` maps a hash to its key's name.
    """

    def __init__(self, app: ASGIApp, knobs_dir: Path, key_name: Callable[[str], str | None]) -> None:
        self._app = app
        self._knobs = knobs_dir
        self._key_name = key_name

    def _failure(self, method: str, path: str) -> str | None:
        minting = method == "POST" and path.rstrip("/") == "/api/v1/keys"
        if minting and read_knob(self._knobs, "mount-fail") == "mint":
            return "simulated failure minting a key (sbxcheck knob mount-fail=mint)"
        match = _KEY_ITEM.match(path)
        if method == "DELETE" and match is not None:
            runs = (read_knob(self._knobs, "revoke-fail") or "").split()
            name = self._key_name(match.group(1))
            if name is not None and ("*" in runs or any(name == f"sbx-{run}" for run in runs)):
                return "simulated failure revoking a key (sbxcheck knob revoke-fail)"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            why = self._failure(str(scope.get("method", "")), str(scope.get("path", "")))
            if why is not None:
                await _error(500, why)(scope, receive, send)
                return
        await self._app(scope, receive, send)
