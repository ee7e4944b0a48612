"""One mission interface over two transports: the REST API and the assistant MCP server.

A route's ``via`` picks the channel; everything after dispatch (reading the record, following
events, cancelling) goes through the same channel, so the REST and MCP paths can be compared.
Both return plain JSON-like dicts: the checks read fields, not transport objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sbxcheck.clients.mcp_auth import auth_refusal
from sbxcheck.clients.sandboxed import (
    MissionRejected,
    NotFound,
    SandboxedClient,
    SlotsFull,
    parse_error_text,
    parse_supported_efforts,
    parse_valid_models,
)
from sbxcheck.clients.sandboxed_models import MissionSpec, check_record_id
from sbxcheck.errors import AuthFailed, BadResponseError, NotServed, SbxError, TransportError
from sbxcheck.ids import check_id

if TYPE_CHECKING:  # the MCP SDK is imported only by a session that starts the assistant MCP
    from sbxcheck.clients.mcp import AssistantMcpClient, McpToolResult

# the REST status or text an MCP tool relays when the control plane pushed back (429 / 503); a tool
# result carries no headers, so a relayed 503 counts as pushback (the server did not act either way)


@dataclass(frozen=True)
class Created:
    """What a create answered: the mission record and whether it was an existing one."""

    mission: dict[str, Any]
    coalesced_with: str | None = None
    idempotency_supported: bool = True
    first_message: str | None = None  # how the prompt was sent when the create could not carry it
    prompt_refused: str | None = None  # why the prompt could not be sent at all (the mission waits)
    older_create: str | None = None  # the create kept only an older release's body: what it dropped
    awaiting_slot: str | None = None  # created, its first message not sent: every mission slot is taken


class MissionChannel(Protocol):
    """Dispatch, read, follow and cancel missions."""

    via: str

    def create(self, spec: MissionSpec) -> Created: ...

    def get(self, mission_id: str) -> dict[str, Any]: ...

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]: ...

    def cancel(self, mission_id: str) -> bool: ...

    def start(self, mission_id: str, prompt: str) -> None: ...


class RestChannel:
    """Missions over ``/api/control`` with the typed REST client."""

    via = "rest"

    def __init__(self, client: SandboxedClient) -> None:
        self.client = client

    def create(self, spec: MissionSpec) -> Created:
        """Create; a release whose stored record lacks fields the create sent keeps only the February
        create body (no prompt, no idempotency key): the prompt goes as the mission's first message."""
        outcome = self.client.submit_mission(spec)
        mission = outcome.mission.model_dump(mode="json")
        dropped = dropped_fields(spec, mission)
        if not dropped or outcome.coalesced_with:
            return Created(mission, outcome.coalesced_with)
        served = self.client.served
        served.note_create_drops(dropped)
        older = (
            f"not served by this control plane (version {served.version or 'unknown'}): its create stored "
            f"no {', '.join(dropped)}, so it keeps an older release's body (no prompt, effort or idempotency key)"
        )
        if not spec.prompt:
            return Created(mission, None, idempotency_supported=False, older_create=older)
        mission_id = str(mission["id"])
        way = PARALLEL_START
        try:
            self.start(mission_id, spec.prompt)
        except SlotsFull as exc:  # the caller waits for a slot and calls start() again
            served.first_message = way
            return Created(
                mission, None, idempotency_supported=False, first_message=way, older_create=older,
                awaiting_slot=exc.reason,
            )  # fmt: skip
        except NotServed:  # a release before /parallel: the message route is all it has
            way = "POST /api/control/message {content, mission_id}"
            try:
                self.client.send_message(mission_id, spec.prompt)
            except SbxError as exc:
                return self._refused(mission, dropped, older, exc)
        except SbxError as exc:
            return self._refused(mission, dropped, older, exc)
        served.first_message = way
        return Created(mission, None, idempotency_supported=False, first_message=way, older_create=older)

    def start(self, mission_id: str, prompt: str) -> None:
        """Start a created mission with ``prompt`` as its first message, in a slot of its own
        (:class:`SlotsFull` when there is none: the prompt is never queued on another mission)."""
        self.client.start_mission_parallel(mission_id, prompt)

    def _refused(self, mission: dict[str, Any], dropped: tuple[str, ...], older: str, exc: SbxError) -> Created:
        """The created mission whose first message was refused: it would stay pending (cancelled at close)."""
        version = self.client.served.version or "unknown"
        refused = (
            f"this control plane (version {version}) drops the prompt at create (its record lacks "
            f"{', '.join(dropped)}) and refused the first message ({exc.message}): the mission would stay pending"
        )
        return Created(mission, None, idempotency_supported=False, prompt_refused=refused, older_create=older)

    def get(self, mission_id: str) -> dict[str, Any]:
        return self.client.get_mission(mission_id).model_dump(mode="json")

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        return [
            e.model_dump(mode="json") for e in self.client.mission_events(mission_id, since_seq=since_seq)
        ]

    def cancel(self, mission_id: str) -> bool:
        return self.client.cancel_mission(mission_id)


#: How an older release's mission gets its first message: in a slot of its own, or not at all (409).
#: ``POST /api/control/message`` would queue it on the running mission when every slot is taken.
PARALLEL_START = "POST /api/control/missions/:id/parallel {content}"

#: Fields a current create stores verbatim when sent; a record without one sent came from an older release.
ECHOED_FIELDS = ("tags", "project", "track", "origin_session_id")


def dropped_fields(spec: MissionSpec, record: dict[str, Any]) -> tuple[str, ...]:
    """The verbatim-stored fields ``spec`` sent that ``record`` lacks altogether (a value the server
    normalised is kept, not dropped; ``tags``: a tag sent and not stored)."""
    body = spec.body()
    missing = []
    for name in ECHOED_FIELDS:
        sent = body.get(name)
        if not sent:
            continue
        stored = record.get(name)
        if name == "tags" and isinstance(sent, list) and isinstance(stored, list):
            if any(tag not in stored for tag in sent):
                missing.append(name)
        elif stored is None:
            missing.append(name)
    return tuple(missing)


class McpChannel:
    """Missions through the assistant MCP tools (start_mission, get_mission, get_mission_events, cancel)."""

    via = "mcp"

    def __init__(
        self,
        client: AssistantMcpClient,
        renew: Callable[[AssistantMcpClient], AssistantMcpClient | None] | None = None,
    ) -> None:
        self.client = client
        self._renew = renew  # a client holding a fresh token, after this one's was refused; None: cannot

    def _call(self, call: Callable[[], McpToolResult]) -> McpToolResult:
        """``call``; once more on a renewed client when the tool relays a refused token — the control
        plane refused the request, so it did nothing, a start_mission neither."""
        result = call()
        if result.is_error and self._renew is not None and _auth_error(result) is not None:
            fresh = self._renew(self.client)
            if fresh is not None:
                self.client = fresh
                result = call()
        return result

    def create(self, spec: MissionSpec) -> Created:
        # a pushed-back create is repeated by the client: the server did not act, so no second mission
        result = self._call(
            lambda: self.client.start_mission(
                spec.title or "sbxcheck mission",
                spec.prompt or "",
                workspace_id=spec.workspace_id,
                backend=spec.backend,
                model_override=spec.model_override,
                model_effort=spec.model_effort,
                agent=spec.agent,
            )
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
        doc = self._json("get_mission", self._call(lambda: self.client.get_mission(mission_id)))
        mission = doc.get("mission", doc) if isinstance(doc, dict) else None
        if not isinstance(mission, dict):
            raise BadResponseError("MCP get_mission: expected a mission object")
        check_record_id(mission_id, mission.get("id"), "MCP get_mission")
        return mission

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        doc = self._json(
            "get_mission_events",
            self._call(
                lambda: self.client.get_mission_events(mission_id, since_seq=since_seq, view="all", limit=200)
            ),
        )
        rows = doc.get("events", doc) if isinstance(doc, dict) else doc
        if not isinstance(rows, list):
            raise BadResponseError("MCP get_mission_events: expected a list of events")
        return [r for r in rows if isinstance(r, dict)]

    def cancel(self, mission_id: str) -> bool:
        result = self._call(lambda: self.client.cancel_mission(mission_id))
        if result.is_error:
            if "not found" in result.text.lower() or "404" in result.text:
                return False
            raise TransportError(f"MCP cancel_mission failed: {self.client.redact(result.text)[:200]}")
        return True

    def start(self, mission_id: str, prompt: str) -> None:
        """Never needed: ``start_mission`` carries its prompt, so an MCP create never waits for a slot."""
        raise BadResponseError(f"mission {mission_id}: the assistant MCP cannot start a created mission")

    def _json(self, tool: str, result: McpToolResult) -> Any:
        if result.is_error:
            _raise_auth(result, self.client)
            if "not found" in result.text.lower():
                raise NotFound(f"MCP {tool}", 404, self.client.redact(result.text)[:200])
            raise TransportError(f"MCP {tool} failed: {self.client.redact(result.text)[:200]}")
        return result.json(self.client.redact)


AUTH_TEXTS = ("Invalid or expired token", "Missing Authorization header", "Invalid user", "no API token")


def _auth_error(result: McpToolResult) -> AuthFailed | None:
    """The server's own 401 texts, relayed by the MCP tool, are an auth failure — not a rejection."""
    for text in AUTH_TEXTS:
        if text.lower() in result.text.lower():
            refused = {"via": "mcp", "refused_before_acting": text}  # the control plane did nothing
            return AuthFailed(f"MCP {result.tool or 'tool'}: {text}", evidence=refused)
    return auth_refusal(result)  # a bare "401 Unauthorized" status (e.g. get_mission's not-found text)


def _raise_auth(result: McpToolResult, client: AssistantMcpClient) -> None:
    refused = _auth_error(result)
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
