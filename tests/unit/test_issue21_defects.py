"""Issue 21's two defects: the machine inventory's "live" claim, and an MCP 401 read as a bad response."""

from __future__ import annotations

from typing import Any

import pytest

from sbxcheck.checks.discovery import check_discovery_mcp
from sbxcheck.checks.github import mcp_exec
from sbxcheck.clients.mcp import McpToolResult
from sbxcheck.clients.mcp_auth import auth_refusal
from sbxcheck.clients.sandboxed_models import FleetHealth, RemoteFleet
from sbxcheck.errors import AuthFailed, HostUnreachable
from sbxcheck.inventory import Inventory
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.suite import machine_inventory

FLEET_OK = {"status": "ok", "control_responsive": True, "disk_level": "ok"}
NODES = {
    "enabled": True,
    "nodes": [{"id": "babylon", "status": "online", "last_seen": "2026-06-10T12:00:00Z"}],
}


class _Client:
    def __init__(self, *, fleet_health_fails: bool) -> None:
        self.fleet_health_fails = fleet_health_fails
        self.calls: list[str] = []

    def remote_nodes(self) -> RemoteFleet:
        self.calls.append("remote_nodes")
        return RemoteFleet.model_validate(NODES)

    def fleet_health(self) -> FleetHealth:
        self.calls.append("fleet_health")
        if self.fleet_health_fails:
            raise HostUnreachable("GET /api/health/fleet: connection refused")
        return FleetHealth.model_validate(FLEET_OK)


class _Session:
    def __init__(self, client: _Client) -> None:
        self.client = client

    def sandboxed_client(self) -> _Client:
        return self.client


def _inventory() -> Inventory:
    return Inventory.model_validate(
        {"sandboxed": {"url": "http://127.0.0.1:1", "token_env": "SBX_TOKEN"}, "ssh": {"machines": []}}
    )


def _run_inventory_item(client: _Client) -> CheckResult:
    return machine_inventory(_Session(client), _inventory(), None)


def test_machine_inventory_reads_fleet_health_before_calling_compute_live() -> None:
    client = _Client(fleet_health_fails=False)
    result = _run_inventory_item(client)
    assert "fleet_health" in client.calls, "a live claim needs GET /api/health/fleet in this run"
    [row] = result.evidence["machine_inventory"]
    assert row["live"] is True and row["checked_at"]


def test_machine_inventory_is_dated_not_live_when_fleet_health_cannot_be_read() -> None:
    result = _run_inventory_item(_Client(fleet_health_fails=True))
    [row] = result.evidence["machine_inventory"]
    assert row["live"] is False
    assert "GET /api/health/fleet" in row["note"]
    assert result.evidence["fleet_health_checked"] is False


# ------------------------------------------------------------------ MCP 401


class _Mcp:
    def __init__(self, text: str) -> None:
        self.text = text

    def call(self, tool: str, arguments: dict[str, Any], *, timeout_s: float | None = None) -> McpToolResult:
        return McpToolResult(is_error=True, text=self.text, tool=tool, error_code=-32000)

    def workspace_bash(self, command: str, **kwargs: Any) -> McpToolResult:
        return McpToolResult(is_error=True, text=self.text, tool="workspace_bash", error_code=-32000)


REFUSALS = [
    "list workspaces failed (401 Unauthorized): Invalid or expired token",
    "Workspace exec failed (401 Unauthorized): Missing Authorization header",
    "Mission not found: 401 Unauthorized",
    "list workspaces failed (403 Forbidden): Invalid user",
]


@pytest.mark.parametrize("text", REFUSALS)
def test_mcp_discovery_401_is_an_auth_failure(text: str) -> None:
    result = check_discovery_mcp(_Mcp(text))
    assert result.outcome is Outcome.ERROR
    assert result.classification is Classification.AUTH_FAILED, result.message


@pytest.mark.parametrize("text", REFUSALS)
def test_mcp_workspace_bash_401_is_an_auth_failure(text: str) -> None:
    run = mcp_exec(_Mcp(text), "ws-1")
    with pytest.raises(AuthFailed):
        run("true", 5.0)


@pytest.mark.parametrize(
    "text",
    [
        "Workspace exec failed (500 Internal Server Error): boom",
        "Invalid UUID: 401",
        "Mission not found: 404 Not Found",
        "Failed to create mission: model 'x401' not found",
    ],
)
def test_other_mcp_failures_are_not_auth_failures(text: str) -> None:
    assert auth_refusal(McpToolResult(is_error=True, text=text, tool="t")) is None
    assert check_discovery_mcp(_Mcp(text)).classification is Classification.BAD_RESPONSE
