"""One mission interface over two transports: the REST API and the assistant MCP server.

A route's ``via`` picks the channel; everything after dispatch (reading the record, following
events, cancelling) goes through the same channel, so the REST and MCP paths can be compared.
Both return plain JSON-like dicts: the checks read fields, not transport objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sbxcheck.clients.mcp import AssistantMcpClient, McpToolResult
from sbxcheck.clients.mcp_auth import auth_refusal
from sbxcheck.clients.sandboxed import (
    MissionRejected,
    NotFound,
    SandboxedClient,
    parse_error_text,
    parse_supported_efforts,
    parse_valid_models,
)
from sbxcheck.clients.sandboxed_models import MissionSpec, check_record_id
from sbxcheck.errors import AuthFailed, BadResponseError, TransportError
from sbxcheck.ids import check_id

# the REST status or text an MCP tool relays when the control plane pushed back (429 / 503); a tool
# result carries no headers, so a relayed 503 counts as pushback (the server did not act either way)


@dataclass(frozen=True)
class Created:
    """What a create answered: the mission record and whether it was an existing one."""

    mission: dict[str, Any]
    coalesced_with: str | None = None
    idempotency_supported: bool = True


class MissionChannel(Protocol):
    """Dispatch, read, follow and cancel missions."""

    via: str

    def create(self, spec: MissionSpec) -> Created: ...

    def get(self, mission_id: str) -> dict[str, Any]: ...

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]: ...

    def cancel(self, mission_id: str) -> bool: ...


class RestChannel:
    """Missions over ``/api/control`` with the typed REST client."""

    via = "rest"

    def __init__(self, client: SandboxedClient) -> None:
        self.client = client

    def create(self, spec: MissionSpec) -> Created:
        outcome = self.client.submit_mission(spec)
        return Created(outcome.mission.model_dump(mode="json"), outcome.coalesced_with)

    def get(self, mission_id: str) -> dict[str, Any]:
        return self.client.get_mission(mission_id).model_dump(mode="json")

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        return [
            e.model_dump(mode="json") for e in self.client.mission_events(mission_id, since_seq=since_seq)
        ]

    def cancel(self, mission_id: str) -> bool:
        return self.client.cancel_mission(mission_id)


class McpChannel:
    """Missions through the assistant MCP tools (start_mission, get_mission, get_mission_events, cancel)."""

    via = "mcp"

    def __init__(self, client: AssistantMcpClient) -> None:
        self.client = client

    def create(self, spec: MissionSpec) -> Created:
        # a pushed-back create is repeated by the client: the server did not act, so no second mission
        result = self.client.start_mission(
            spec.title or "sbxcheck mission",
            spec.prompt or "",
            workspace_id=spec.workspace_id,
            backend=spec.backend,
            model_override=spec.model_override,
            model_effort=spec.model_effort,
            agent=spec.agent,
        )
        if result.is_error:
            _raise_auth(result, self.client)
            raise _rejection("MCP start_mission", result)
        doc = result.json()
        mission = doc.get("mission", doc) if isinstance(doc, dict) else None
        if not isinstance(mission, dict) or not isinstance(mission.get("id"), str):
            raise BadResponseError("MCP start_mission: the answer has no mission id")
        check_id(
            mission["id"], field="id", source="MCP start_mission"
        )  # data, never a path or a ledger ident
        # the MCP start_mission tool takes no idempotency_key: a retried create is a new mission
        return Created(mission, None, idempotency_supported=False)

    def get(self, mission_id: str) -> dict[str, Any]:
        doc = self._json("get_mission", self.client.get_mission(mission_id))
        mission = doc.get("mission", doc) if isinstance(doc, dict) else None
        if not isinstance(mission, dict):
            raise BadResponseError("MCP get_mission: expected a mission object")
        check_record_id(mission_id, mission.get("id"), "MCP get_mission")
        return mission

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        doc = self._json(
            "get_mission_events",
            self.client.get_mission_events(mission_id, since_seq=since_seq, view="all", limit=200),
        )
        rows = doc.get("events", doc) if isinstance(doc, dict) else doc
        if not isinstance(rows, list):
            raise BadResponseError("MCP get_mission_events: expected a list of events")
        return [r for r in rows if isinstance(r, dict)]

    def cancel(self, mission_id: str) -> bool:
        result = self.client.cancel_mission(mission_id)
        if result.is_error:
            if "not found" in result.text.lower() or "404" in result.text:
                return False
            raise TransportError(f"MCP cancel_mission failed: {self.client.redact(result.text)[:200]}")
        return True

    def _json(self, tool: str, result: McpToolResult) -> Any:
        if result.is_error:
            _raise_auth(result, self.client)
            if "not found" in result.text.lower():
                raise NotFound(f"MCP {tool}", 404, self.client.redact(result.text)[:200])
            raise TransportError(f"MCP {tool} failed: {self.client.redact(result.text)[:200]}")
        return result.json(self.client.redact)


AUTH_TEXTS = ("Invalid or expired token", "Missing Authorization header", "Invalid user", "no API token")


def _raise_auth(result: McpToolResult, client: AssistantMcpClient) -> None:
    """The server's own 401 texts, relayed by the MCP tool, are an auth failure — not a rejection."""
    for text in AUTH_TEXTS:
        if text.lower() in result.text.lower():
            raise AuthFailed(f"MCP {result.tool or 'tool'}: {text}", evidence={"via": "mcp"})
    refused = auth_refusal(result)  # a bare "401 Unauthorized" status (e.g. get_mission's not-found text)
    if refused is not None:
        raise refused


def _rejection(endpoint: str, result: McpToolResult) -> MissionRejected:
    """Turn an MCP create failure (the server's REST text inside) into the same error REST raises."""
    text = result.text.removeprefix("Failed to create mission:").strip()
    reason, code, doc = parse_error_text(text)
    return MissionRejected(
        endpoint,
        400,
        reason,
        error_code=code,
        valid_models=parse_valid_models(reason, doc),
        supported_efforts=parse_supported_efforts(reason),
        holder=doc,
    )
