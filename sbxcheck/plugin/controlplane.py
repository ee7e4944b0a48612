"""The control plane as a session reaches it: REST and MCP clients, the mission dispatcher, the catalog.

:class:`ControlPlane` is a resource of :class:`~sbxcheck.plugin.session.SbxSession`: each client is made
on first use from the inventory (secrets read from the environment or a file, never stored) and closed
in :meth:`ControlPlane.close`. The MCP server's session token is renewed when it expires.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sbxcheck.errors import InventoryError, SbxError
from sbxcheck.safeio import read_text_file

if TYPE_CHECKING:
    from sbxcheck.checks.catalog import CatalogSnapshot
    from sbxcheck.clients.channels import MissionChannel
    from sbxcheck.clients.mcp import AssistantMcpClient
    from sbxcheck.clients.openrouter import OpenRouterAdmin
    from sbxcheck.clients.sandboxed import SandboxedClient
    from sbxcheck.inventory import Inventory, RouteSpec
    from sbxcheck.lifecycle import MissionDispatcher
    from sbxcheck.lifecycle.ledger import Ledger
    from sbxcheck.plugin.runstate import RunState
    from sbxcheck.results import CheckResult


class Fleet(Protocol):
    """What the control plane needs of the session: the inventory, and the fleet made reachable."""

    def inventory(self) -> Inventory: ...

    def ensure_live(self) -> None: ...


class ControlPlane:
    """The inventory's ``[sandboxed]`` control plane (and ``[sssf]``'s OpenRouter account) for one session."""

    def __init__(
        self,
        fleet: Fleet,
        session_tag: str,
        ledger: Callable[[], Ledger],
        *,
        max_spend_usd: float | None = None,
        probe_route: str | None = None,
    ) -> None:
        self.fleet = fleet
        self.session_tag = session_tag
        self._ledger = ledger  # where the dispatcher writes its intents (made when it is)
        self.max_spend_usd = max_spend_usd
        self.probe_route = probe_route  # one narrow no-push probe of this route, nothing else
        self._client: SandboxedClient | None = None
        self._mcp: AssistantMcpClient | None = None
        self._mcp_token: str | None = None  # the session token the MCP server was started with
        self._mcp_lock = threading.Lock()
        self._dispatcher: MissionDispatcher | None = None
        self._catalog: CatalogSnapshot | None = None  # workspace and catalog readiness, read once

    def sandboxed_client(self) -> SandboxedClient:
        """The REST client for the inventory's control plane (secrets read from env/file, never stored)."""
        if self._client is None:
            from sbxcheck.clients.sandboxed import SandboxedClient

            section = self.fleet.inventory().sandboxed
            if section is None:
                raise InventoryError("the inventory has no [sandboxed] section")
            self.fleet.ensure_live()
            token = _secret_from_env(section.token_env, "sandboxed.token_env")
            password = _secret_from_env(section.password_env, "sandboxed.password_env")
            if password is None and section.password_file is not None:
                try:
                    password = read_text_file(section.password_file, 64 * 1024).strip()
                except (OSError, ValueError) as exc:
                    raise InventoryError(
                        f"sandboxed.password_file: cannot read {section.password_file} "
                        f"({getattr(exc, 'strerror', None) or exc})"
                    ) from None
            if token is None and password is None:
                raise InventoryError(
                    "[sandboxed] needs token_env, password_env or password_file to authenticate"
                )
            self._client = SandboxedClient(
                section.url,
                token=token,
                password=password,
                username=section.username,
                timeout_s=section.request_timeout_s,
                allow_cleartext_password=section.allow_cleartext_password,
            )
        return self._client

    def mcp_client(self, token: str | None = None) -> AssistantMcpClient:
        """The assistant MCP server (stdio), started once for the session (with ``token`` as its
        session token instead of the REST client's, when the session passes its own)."""
        if self._mcp is None:
            from sbxcheck.clients.mcp import AssistantMcpClient

            section = self.fleet.inventory().sandboxed
            if section is None or section.mcp is None:
                raise InventoryError(
                    'a route has via = "mcp" but the inventory has no [sandboxed.mcp] section'
                )
            self._require_assistant_mcp()
            env = dict(section.mcp.env)
            for name, local in section.mcp.env_from.items():
                value = _secret_from_env(local, f"sandboxed.mcp.env_from.{name}")
                if value is not None:
                    env[name] = value
            if section.mcp.pass_session_token and not any(k.endswith("API_TOKEN") for k in env):
                client = self.sandboxed_client()
                if token is None and not client.authenticated:
                    client.login()
                token = token or client.bearer_token()
                if token:
                    env["SANDBOXED_API_TOKEN"] = token
                    self._mcp_token = token
            env.setdefault("SANDBOXED_API_URL", section.url)
            client_mcp = AssistantMcpClient(section.mcp.command, env=env, timeout_s=section.mcp.timeout_s)
            try:
                client_mcp.start()
            except SbxError:  # one more start (a count of one): a server that fails twice is reported
                client_mcp = AssistantMcpClient(section.mcp.command, env=env, timeout_s=section.mcp.timeout_s)
                client_mcp.start()
            self._mcp = client_mcp
        return self._mcp

    def _require_assistant_mcp(self) -> None:
        """NotServed when the control plane's components (read once) list no ``assistant_mcp``: its
        release predates the assistant MCP. A release that lists no components decides nothing."""
        served = self.sandboxed_client().served
        if served.assistant_mcp is None:
            try:
                names = self.sandboxed_client().components()
            except SbxError:
                names = []
            if names:
                served.assistant_mcp = "assistant_mcp" in names
        if served.assistant_mcp is False:
            raise served.not_served("the assistant MCP", "(GET /api/system/components does not list it)")

    def openrouter_admin(self) -> OpenRouterAdmin:
        """Provisioning-side OpenRouter client (list keys); the key comes from an env var or a file."""
        from sbxcheck.clients.openrouter import OpenRouterAdmin

        sssf = self.fleet.inventory().sssf
        if sssf is None:
            raise InventoryError("the inventory has no [sssf] section")
        self.fleet.ensure_live()
        key = None
        if sssf.provisioning_key_env and os.environ.get(sssf.provisioning_key_env, "").strip():
            key = os.environ[sssf.provisioning_key_env].strip()
        elif sssf.provisioning_key_file is not None:
            key = _read_secret_file(
                sssf.provisioning_key_file, "OPENROUTER_PROVISIONING_KEY", "sssf.provisioning_key_file"
            )
        if not key:
            raise InventoryError(
                f"no provisioning key: set {sssf.provisioning_key_env or 'sssf.provisioning_key_env'} "
                "or sssf.provisioning_key_file"
            )
        return OpenRouterAdmin(sssf.openrouter_base_url, key)

    def channel(self, via: str) -> MissionChannel:
        from sbxcheck.clients.channels import McpChannel, RestChannel

        if via == "mcp":
            return McpChannel(self.mcp_client(), renew=self.renew_mcp)
        return RestChannel(self.sandboxed_client())

    def renew_mcp(self, refused: AssistantMcpClient) -> AssistantMcpClient | None:
        """The MCP server restarted with a fresh session token after ``refused`` relayed an expired one
        (once per refused server: concurrent callers get the one restart); None when the token is not
        the session's to renew (no password, or the inventory gives the MCP its own)."""
        with self._mcp_lock:
            if self._mcp is not refused:
                return self._mcp
            client = self._client
            if self._mcp_token is None or client is None:
                return None
            # a token of its own: the REST client's may be near its end too
            token = client.fresh_token()
            if token is None:
                return None
            self._mcp, self._mcp_token = None, None
            with contextlib.suppress(Exception):  # the refused server is done either way
                refused.close()
            return self.mcp_client(token)

    def dispatcher(self, state: RunState) -> MissionDispatcher:
        """The session's mission dispatcher (created once, for the routes and canaries ``state`` wants;
        dispatches on first use)."""
        if self._dispatcher is None:
            from sbxcheck.lifecycle import MissionDispatcher
            from sbxcheck.lifecycle.listing import every_owners_missions

            section = self.fleet.inventory().sandboxed
            if section is None:
                raise InventoryError("the inventory has no [sandboxed] section")
            client = self.sandboxed_client()

            def workspace_ids() -> dict[str, str]:
                return {w.name: w.id for w in client.list_workspaces()}

            def exec_sha256(workspace_id: str, path: str) -> str:
                result = client.workspace_exec(workspace_id, f"sha256sum {shlex.quote(path)}", timeout_s=30)
                digest = result.stdout.split()[0] if result.exit_code == 0 and result.stdout.split() else ""
                if len(digest) != 64:
                    from sbxcheck.errors import BadResponseError

                    raise BadResponseError(f"workspace exec sha256sum {path}: exit {result.exit_code}")
                return digest

            if state.wanted_routes is not None or state.wanted_canaries is not None:
                wanted_r, wanted_c = state.wanted_routes or set(), state.wanted_canaries or set()
                section = section.model_copy(
                    update={
                        "routes": [r for r in section.routes if r.label in wanted_r],
                        "canaries": [c for c in section.canaries if c.label in wanted_c],
                    }
                )
            if self.probe_route is not None:  # one narrow no-push probe of one route
                from sbxcheck.lifecycle.prompts import PROBE_PROMPT

                section = section.model_copy(
                    update={
                        "routes": [
                            r.model_copy(update={"prompt": PROBE_PROMPT})
                            for r in section.routes
                            if r.label == self.probe_route
                        ],
                        "canaries": [],
                    }
                )
            from sbxcheck.clients.stream import ControlStream

            self._dispatcher = MissionDispatcher(
                section,
                self.channel,
                self.session_tag,
                workspace_ids=workspace_ids,
                exec_sha256=exec_sha256,
                ledger=self._ledger(),
                list_missions=every_owners_missions(client),  # paged back to the oldest unanswered create
                preflight=self.route_preflight,  # a route that would fail readiness is not dispatched
                max_spend_usd=self.max_spend_usd,
                single_create=self.probe_route is not None,  # a probe: no idempotency retry
                # one live-stream subscription per session and control plane
                stream=ControlStream(section.url, client.auth_headers, connect_timeout_s=section.request_timeout_s),
            )
            self._dispatcher.on_wait = state.on_wait
        return self._dispatcher

    def catalog_snapshot(self) -> CatalogSnapshot:
        """What the control plane says of workspaces, agents, backends and models (read once a session)."""
        if self._catalog is None:
            from sbxcheck.checks.catalog import read_catalog

            self._catalog = read_catalog(self.sandboxed_client())
        return self._catalog

    def route_preflight(self, route: RouteSpec) -> CheckResult | None:
        """The readiness failure that dooms ``route`` (see :func:`sbxcheck.checks.catalog.route_preflight`)."""
        from sbxcheck.checks.catalog import route_preflight

        section = self.fleet.inventory().sandboxed
        removed = section.removed_providers if section is not None else []
        return route_preflight(self.catalog_snapshot(), route, removed_providers=removed)

    def close_missions(self, state: RunState) -> dict[str, str]:
        """Cancel this session's missions now (before the report is written); each one's end joins
        ``state.cleanup``."""
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is None:
            return {}
        from sbxcheck.lifecycle.closing import left_status

        report = state.finish_step("cancelling this session's missions", dispatcher.close)
        if report is None:  # abandoned by a second interrupt: the ledger says which are still open
            report = {"(the rest)": "cancel failed: abandoned at the second interrupt (see the ledger)"}
        for mission_id, how in report.items():
            line: dict[str, Any] = {
                "kind": "foreign mission" if mission_id in dispatcher.foreign else "mission",
                "ident": mission_id,
                "action": how,
                "ok": not how.startswith("cancel failed") and left_status(how) is None,
                "cost_usd": dispatcher.costs.get(mission_id),  # the run's spend
            }
            if left_status(how) is not None:  # still there after its cancel: the report's incident names it
                line["left_status"] = left_status(how)
            if mission_id in dispatcher.cost_unreadable:  # the control plane's cost was not a usable number
                line["cost_unreadable"] = f"bad_response: {dispatcher.cost_unreadable[mission_id]}"
            state.cleanup.append(line)
        return report

    def close(self) -> None:
        """Cancel what is still open (unreported: call :meth:`close_missions` first), close the clients."""
        dispatcher, self._dispatcher = self._dispatcher, None
        try:
            if dispatcher is not None:
                dispatcher.close()
        finally:
            for closer in (self._mcp, self._client):
                if closer is not None:
                    with contextlib.suppress(Exception):  # one failing close must not stop the rest
                        closer.close()
            self._mcp = None
            self._client = None


def _secret_from_env(name: str | None, field: str) -> str | None:
    """The value of the env var an inventory field names; a named but unset var is a clear error."""
    if not name:
        return None
    value = os.environ.get(name)
    if value is None or not value.strip():
        raise InventoryError(f"{field}: the environment variable {name} is not set in this shell")
    return value.strip()


def _read_secret_file(path: Path, dotenv_name: str, field: str) -> str | None:
    """A secret from a file: the whole (stripped) content, or the value of a ``NAME=value`` dotenv line."""
    try:
        text = read_text_file(path, 1024 * 1024)  # regular files only: a FIFO would block
    except (OSError, ValueError) as exc:
        raise InventoryError(
            f"{field}: cannot read {path} ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    value: str | None = None
    for line in text.splitlines():
        stripped = line.strip().removeprefix("export ").strip()
        if stripped.startswith(f"{dotenv_name}="):
            value = stripped.split("=", 1)[1].strip().strip("'\"")
    if value is None and "=" not in text:
        value = text.strip()
    return value or None
