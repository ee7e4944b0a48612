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
from sbxcheck.clients.sandboxed_errors import message_dropped
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
    dropped: tuple[str, ...] = ()  # fields the create sent that the release dropped
    decided_by: str | None = None  # the answer that showed what the create took (x-ignored-fields, the record)


class MissionChannel(Protocol):
    """Dispatch, read, follow and cancel missions."""

    via: str

    def create(self, spec: MissionSpec) -> Created: ...

    def get(self, mission_id: str) -> dict[str, Any]: ...

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]: ...

    def cancel(self, mission_id: str) -> bool: ...

    def acknowledge(self, mission_id: str) -> None: ...

    def start(self, mission_id: str, prompt: str) -> None: ...


class RestChannel:
    """Missions over ``/api/control`` with the typed REST client."""

    via = "rest"

    def __init__(self, client: SandboxedClient) -> None:
        self.client = client

    def create(self, spec: MissionSpec) -> Created:
        """Create; a release whose create did not take the prompt (:func:`create_took`, learned from the
        answer) gets it as the mission's first message, in a slot of its own, and no keyed retry."""
        outcome = self.client.submit_mission(spec)
        mission = outcome.mission.model_dump(mode="json")
        if outcome.coalesced_with:
            return Created(mission, outcome.coalesced_with)
        took = create_took(spec, mission, outcome.ignored_fields)
        if took.prompt:
            return Created(
                mission, None, idempotency_supported=took.idempotency, dropped=took.dropped, decided_by=took.why
            )
        served = self.client.served
        served.note_create_drops(took.dropped)
        older = (
            f"not served by this control plane (version {served.version or 'unknown'}): {took.why}, so its create "
            "keeps an older release's body (no prompt, no idempotency key)"
        )
        common: dict[str, Any] = {"idempotency_supported": False, "older_create": older}
        common.update(dropped=took.dropped, decided_by=took.why)
        if not spec.prompt:
            return Created(mission, None, **common)
        mission_id = str(mission["id"])
        way = PARALLEL_START
        try:
            self.start(mission_id, spec.prompt)
        except SlotsFull as exc:  # the caller waits for a slot and calls start() again
            served.first_message = way
            return Created(mission, None, first_message=way, awaiting_slot=exc.reason, **common)
        except NotServed:  # a release before /parallel: the message route is all it has
            way = "POST /api/control/message {content, mission_id}"
            try:
                self.client.send_message(mission_id, spec.prompt)
            except SbxError as exc:
                return self._refused(mission, took, older, exc)
        except SbxError as exc:
            return self._refused(mission, took, older, exc)
        served.first_message = way
        return Created(mission, None, first_message=way, **common)

    def start(self, mission_id: str, prompt: str) -> None:
        """Start a created mission with ``prompt`` as its first message, in a slot of its own
        (:class:`SlotsFull` when there is none: the prompt is never queued on another mission)."""
        self.client.start_mission_parallel(mission_id, prompt)

    def _refused(self, mission: dict[str, Any], took: CreateTook, older: str, exc: SbxError) -> Created:
        """The created mission whose first message was refused: it would stay pending (cancelled at close)."""
        version = self.client.served.version or "unknown"
        refused = (
            f"this control plane (version {version}) does not take the prompt at create ({took.why}) and "
            f"refused the first message ({exc.message}): the mission would stay pending"
        )
        return Created(
            mission, None, idempotency_supported=False, prompt_refused=refused, older_create=older,
            dropped=took.dropped, decided_by=took.why,
        )  # fmt: skip

    def get(self, mission_id: str) -> dict[str, Any]:
        return self.client.get_mission(mission_id).model_dump(mode="json")

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        return [
            e.model_dump(mode="json") for e in self.client.mission_events(mission_id, since_seq=since_seq)
        ]

    def cancel(self, mission_id: str) -> bool:
        return self.client.cancel_mission(mission_id)

    def acknowledge(self, mission_id: str) -> None:
        """Archive a mission whose turn ended (awaiting_user, ack): ``POST .../status acknowledged``."""
        self.client.set_mission_status(mission_id, "acknowledged")


#: How an older release's mission gets its first message: in a slot of its own, or not at all (409).
#: ``POST /api/control/message`` would queue it on the running mission when every slot is taken.
PARALLEL_START = "POST /api/control/missions/:id/parallel {content}"

#: Fields a create that takes the prompt stores verbatim when sent (``origin`` came with ``prompt`` and
#: ``idempotency_key``: 1.3.0 has none of the three, cba9502 all); a record without one sent shows a create
#: that kept an older body.
ECHOED_FIELDS = ("origin", "tags", "project", "track", "origin_session_id")


@dataclass(frozen=True)
class CreateTook:
    """What a create took of the body it was sent, as its answer showed it."""

    prompt: bool
    idempotency: bool
    dropped: tuple[str, ...]
    why: str  # the answer that decided: the x-ignored-fields header, or the stored record


def create_took(spec: MissionSpec, record: dict[str, Any], ignored: tuple[str, ...] | None) -> CreateTook:
    """What the create took: a release that names what it ignored (``x-ignored-fields``) is taken at its
    word; one that does not is read from its record: a field it stores verbatim, sent and missing,
    shows an older create body, which takes neither a prompt nor an idempotency key."""
    sent = spec.body()
    if ignored is not None:
        dropped = tuple(f for f in ignored if f in sent)
        why = f"its answer's x-ignored-fields names {', '.join(ignored) or 'nothing'}"
        return CreateTook("prompt" not in dropped, "idempotency_key" not in dropped, dropped, why)
    missing = dropped_fields(spec, record)
    if missing:
        return CreateTook(False, False, missing, f"its record lacks {', '.join(missing)}, which the create sent")
    echoed = [name for name in ECHOED_FIELDS if sent.get(name)]
    why = f"its record echoes {', '.join(echoed)}" if echoed else "nothing it sent was missing from its record"
    return CreateTook(True, True, (), why)


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
        self._seen: dict[str, int] = {}  # mission -> the newest event sequence read while restarting it

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
        """``start_mission`` with the fields its advertised ``inputSchema`` takes; a field the tool does not
        take (project/track on 1.3.0, origin_session_id on every release so far) is named in ``dropped``."""
        takes = self.client.tool_arguments("start_mission") or frozenset()
        wanted: dict[str, Any] = {
            "project": spec.project,
            "track": spec.track,
            "tags": list(spec.tags) if spec.tags else None,
            "origin": spec.origin,
            "origin_session_id": spec.origin_session_id,
            "idempotency_key": spec.idempotency_key,
        }
        extra = {k: v for k, v in wanted.items() if v is not None and k in takes}
        dropped = tuple(k for k, v in wanted.items() if v is not None and k not in takes)
        why = (
            f"the MCP start_mission tool's inputSchema takes no {', '.join(dropped)}"
            if dropped
            else "the MCP start_mission tool's inputSchema takes every field sent"
        )
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
                **extra,
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
        # a tool without idempotency_key makes a new mission on every retried create: no keyed retry
        return Created(
            mission, None, idempotency_supported="idempotency_key" in extra, dropped=dropped, decided_by=why
        )

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

    def acknowledge(self, mission_id: str) -> None:
        """``acknowledge_mission``; :class:`NotServed` where the server has no such tool (1.3.0)."""
        if self.client.tool_arguments("acknowledge_mission") is None:
            raise NotServed("MCP acknowledge_mission", None, "the assistant MCP does not advertise the tool")
        result = self._call(lambda: self.client.call_json("acknowledge_mission", {"mission_id": mission_id}))
        if result.is_error:
            _raise_auth(result, self.client)
            raise TransportError(f"MCP acknowledge_mission failed: {self.client.redact(result.text)[:200]}")

    def start(self, mission_id: str, prompt: str) -> None:
        """Send the prompt again (``send_message_to_mission``) to a mission whose first message the control
        plane dropped for want of a slot (1.3.0); :class:`SlotsFull` when it drops this one too (a new
        error event saying so), so the caller waits for a slot and tries again."""
        seen = self._seen.get(mission_id)
        if seen is None:  # the drops so far (the first one, at create): one read, then a cursor
            seen = self._seen[mission_id] = self._new_drops(mission_id, 0)[1]
        result = self._call(lambda: self.client.send_message_to_mission(mission_id, prompt))
        if result.is_error:
            _raise_auth(result, self.client)
            raise TransportError(f"MCP send_message_to_mission failed: {self.client.redact(result.text)[:200]}")
        dropped, self._seen[mission_id] = self._new_drops(mission_id, seen)
        if dropped:
            raise SlotsFull("MCP send_message_to_mission", 409, dropped[-1])

    def _new_drops(self, mission_id: str, after: int) -> tuple[list[str], int]:
        """The mission's error events after sequence ``after`` that say a message was dropped (no slot was
        free), and the newest sequence read."""
        rows = self.events(mission_id, after)
        newest = max([after, *(e["sequence"] for e in rows if isinstance(e.get("sequence"), int))])
        texts = [str(e.get("content") or "") for e in rows if e.get("event_type") == "error"]
        return [t for t in texts if message_dropped(t)], newest

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
