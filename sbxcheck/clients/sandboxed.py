"""Typed REST client for a sandboxed.sh control plane (its REST API: auth, missions, workspaces, fleet).

One :class:`SandboxedClient` wraps an ``httpx.Client``. Every call has a timeout; only idempotent
GETs are retried on errors by the shared :class:`~sbxcheck.transports.http.RetryPolicy` (``retries``
extra attempts, bounded backoff, ``Retry-After`` honoured); pushback (429, 503 + Retry-After) is
waited out for every method (the server did not act; creates carry their idempotency key) until
the caller's deadline, then it is :class:`RateLimited`. Every attempt has a whole-request deadline
and a 16 MiB body cap (:func:`~sbxcheck.transports.http.send`).
HTTP failures are mapped to the sbxcheck error tree in one place (:meth:`SandboxedClient._send`):

==========================  ============================================================
connect refused / timeout   :class:`~sbxcheck.errors.HostUnreachable`
read/write timeout          :class:`~sbxcheck.errors.CommandTimeout`
401 / 403                   :class:`~sbxcheck.errors.AuthFailed` (message = server's text)
404                         :class:`NotFound`
429 / 503 + Retry-After     :class:`RateLimited` (a ``ServerError``), once the deadline is spent
5xx                         :class:`ServerError` (a ``TransportError``; carries ``status``)
other 4xx                   :class:`ApiRejected`; on create :class:`MissionRejected`
non-JSON / schema mismatch  :class:`~sbxcheck.errors.BadResponseError` (redacted excerpt)
==========================  ============================================================

Secrets: the password and token are registered with the default redactor, never appear in a
message or repr, and workspace records are reduced at the source: env-var *names* are kept,
values are dropped while parsing. Section numbers below point into specs/sandboxed-sh.md.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, TypeVar

import httpx
from pydantic import (
    BaseModel,
    JsonValue,
    ValidationError,
)

from sbxcheck import errors
from sbxcheck.clients.sandboxed_models import (
    AiProvider,
    AuthStatus,
    BackendInfo,
    CatalogProvider,
    CordonResult,
    CreateOutcome,
    EventPage,
    ExecResult,
    FleetHealth,
    HealthInfo,
    Mission,
    MissionsIntegrity,
    MissionSpec,
    ProviderCatalog,
    RemoteFleet,
    RunningEntry,
    StoredEvent,
    TrackRow,
    Workspace,
)
from sbxcheck.errors import (
    AuthFailed,
    BadResponseError,
    CommandTimeout,
    SbxError,
    TransportError,
)
from sbxcheck.ids import check_id, path_segment
from sbxcheck.redact import default_redactor
from sbxcheck.safeio import UnsafeInput, loads_bounded
from sbxcheck.transports.http import RetryPolicy, send, service_of

EFFORT_LADDER: Final = ("max", "xhigh", "high", "medium", "low")
MAX_SEQUENCE: Final = 9223372036854775807

_EXCERPT_CHARS: Final = 160
_REASON_CHARS: Final = 600
_EXEC_GRACE_S: Final = 15.0
_MODEL_NOT_FOUND_RE: Final = re.compile(r"Model '([^']*)' not found in (\S+) catalog", re.IGNORECASE)
_SUPPORTED_RE: Final = re.compile(r"Supported values:\s*(.+)", re.IGNORECASE | re.DOTALL)
_ID_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")

M = TypeVar("M", bound=BaseModel)


# ---- errors ---------------------------------------------------------------------------------


class _HttpStatusError(SbxError):
    """An HTTP answer that is an error: the endpoint, status, the server's reason and error code."""

    def __init__(self, endpoint: str, status: int, reason: str, *, error_code: str | None = None) -> None:
        super().__init__(
            f"{endpoint} -> {status}: {reason}",
            evidence={"endpoint": endpoint, "status": status, "reason": reason, "error_code": error_code},
        )
        self.endpoint = endpoint
        self.status = status
        self.reason = reason
        self.error_code = error_code


class ApiRejected(_HttpStatusError, BadResponseError):
    """The server understood the request and refused it with a 4xx (not auth, not 429)."""


class NotFound(ApiRejected):
    """404: the mission, workspace or node does not exist (or is gone)."""


class MissionRejected(ApiRejected):
    """Create refused (a 4xx). ``valid_models``/``supported_efforts`` are parsed from the server's text."""

    def __init__(
        self,
        endpoint: str,
        status: int,
        reason: str,
        *,
        error_code: str | None = None,
        valid_models: Sequence[str] = (),
        supported_efforts: Sequence[str] = (),
        holder: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(endpoint, status, reason, error_code=error_code)
        self.valid_models: list[str] = list(valid_models)
        self.supported_efforts: list[str] = list(supported_efforts)
        self.evidence.update(valid_models=self.valid_models, supported_efforts=self.supported_efforts)
        # a 409 conflict names the mission that holds the workspace/lease: its id and title, so the
        # message can say which mission to wait for or cancel
        self.holder: dict[str, str] = {
            k: default_redactor().redact_text(v)[:200]
            for k, v in (holder or {}).items()
            if k in ("mission_id", "title") and isinstance(v, str)
        }


class ServerError(_HttpStatusError, TransportError):
    """429 or 5xx: the control plane could not serve the request right now."""


class RateLimited(ServerError, errors.RateLimited):
    """429 (or 503 with Retry-After) still answered when the pushback deadline was spent."""


# ---- wire models ----------------------------------------------------------------------------


# ---- helpers --------------------------------------------------------------------------------


def excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    """A one-line, redacted, truncated excerpt of a response body."""
    flat = " ".join(default_redactor().redact_text(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_error_text(text: str) -> tuple[str, str | None, dict[str, Any]]:
    """Split an error body into ``(reason, error_code, json_doc)``; plain text stays the reason."""
    raw = text.strip()
    doc: dict[str, Any] = {}
    code: str | None = None
    reason = raw
    with contextlib.suppress(ValueError):
        parsed = loads_bounded(raw)
        if isinstance(parsed, dict):
            doc = parsed
            err = parsed.get("error")
            msg = parsed.get("message")
            code = err if isinstance(err, str) else None
            if isinstance(msg, str) and msg:
                reason = msg
            elif code:
                reason = code
        elif isinstance(parsed, str):
            reason = parsed
    reason = default_redactor().redact_text(reason)
    if len(reason) > _REASON_CHARS:
        reason = reason[: _REASON_CHARS - 1] + "…"
    return reason, code, doc


def _id_tokens(text: str) -> list[str]:
    out: list[str] = []
    for raw in re.split(r"[\s,;|]+", text):
        token = raw.strip("`'\"[](){}<>*•").rstrip(".:").lstrip("-")
        if _ID_TOKEN_RE.fullmatch(token) and (
            any(c.isdigit() for c in token) or "-" in token or "/" in token
        ):
            out.append(token)
    return list(dict.fromkeys(out))


def parse_valid_models(text: str, doc: Mapping[str, Any] | None = None) -> list[str]:
    """Valid catalog ids from a model-not-found error (spec 3.4 step 23); ``[]`` if none listed."""
    for key in ("valid_models", "available_models", "valid_ids", "models"):
        listed = (doc or {}).get(key)
        if isinstance(listed, list) and all(isinstance(x, str) for x in listed):
            return list(dict.fromkeys(listed))
    match = _MODEL_NOT_FOUND_RE.search(text)
    if not match:
        return []
    tail = text[match.end() :]
    _label, colon, rest = tail.partition(":")
    return _id_tokens(rest if colon else tail)


def parse_supported_efforts(text: str) -> list[str]:
    """Supported values from ``Invalid model_effort for backend '<b>'. Supported values: ...``."""
    match = _SUPPORTED_RE.search(text)
    if not match:
        return []
    return list(dict.fromkeys(re.findall(r"[a-z]+", match.group(1).lower())))


def _validation_summary(exc: ValidationError) -> str:
    """Locations and messages only: pydantic's default text would quote the (secret-bearing) input."""
    parts = [
        f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
        for err in exc.errors(include_input=False, include_url=False)[:3]
    ]
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def _int_header(resp: httpx.Response, name: str) -> int | None:
    value = resp.headers.get(name)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _mission_segment(mission_id: str) -> str:
    """A mission id (a UUID, from a server, the ledger or a caller) as one encoded path segment."""
    return path_segment(mission_id, field="mission_id", source="mission path")


def _workspace_segment(workspace_id: str) -> str:
    """A workspace id (a UUID) as one encoded path segment."""
    return path_segment(workspace_id, field="workspace_id", source="workspace path")


# ---- the client -----------------------------------------------------------------------------


class _ExecBody(BaseModel):
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


class _LoginBody(BaseModel):
    token: str
    exp: int | None = None


def _names(doc: Any, key: str, endpoint: str) -> list[str]:
    """Names from a bare array (or ``{key: [...]}``) of strings or objects with ``id``/``name``."""
    items = doc.get(key) if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise BadResponseError(f"{endpoint}: expected a JSON array of {key}", evidence={"endpoint": endpoint})
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            value = item.get("id") or item.get("name")
            if isinstance(value, str):
                out.append(value)
    return out


class SandboxedClient:
    """Typed client for the sandboxed.sh REST API. Usable as a context manager.

    With ``token`` the JWT is used as given; otherwise the first authenticated call logs in with
    ``password`` (and ``username`` in multi-user mode). With neither, no Authorization header is
    sent (dev mode). A token is never refreshed automatically: a 401 is reported as it is.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        password: str | None = None,
        username: str | None = None,
        timeout_s: float = 15.0,
        transport: httpx.BaseTransport | None = None,
        retries: int = 2,
    ) -> None:
        # retries=0: no retry of any kind, pushback included
        self.retry_policy = RetryPolicy(retries=retries, pushback_retries=30 if retries else 0)
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.token_exp: int | None = None
        self._token = token or None
        self._password = password
        self._username = username
        redactor = default_redactor()
        redactor.register(token)
        redactor.register(password)
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)

    def __repr__(self) -> str:
        return f"SandboxedClient({self.base_url!r}, authenticated={self._token is not None})"

    # ---- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the underlying connection pool."""
        self._http.close()

    def __enter__(self) -> SandboxedClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def authenticated(self) -> bool:
        """True once a token is held (given or obtained by :meth:`login`)."""
        return self._token is not None

    def bearer_token(self) -> str | None:
        """The JWT in use, for handing to another client (e.g. the MCP). A secret: never log it."""
        return self._token

    # ---- transport core -----------------------------------------------------------------------

    def login(self) -> None:
        """``POST /api/auth/login`` with the configured password; keep the JWT for later calls."""
        if self._password is None:
            raise AuthFailed("login: no password configured for the control plane")
        body: dict[str, str] = {"password": self._password}
        if self._username is not None:
            body["username"] = self._username
        resp = self._send("POST", "/api/auth/login", json_body=body, auth=False)
        endpoint = "POST /api/auth/login"
        try:
            parsed = _LoginBody.model_validate(loads_bounded(resp.content))
        except (ValueError, ValidationError):
            # No excerpt: a login body holds the token.
            raise BadResponseError(f"{endpoint}: response is not {{token, exp}} JSON") from None
        default_redactor().register(parsed.token)
        self._token = parsed.token
        self.token_exp = parsed.exp

    def auth_headers(self) -> dict[str, str]:
        """The Authorization header (logging in first when needed) for a companion connection such as
        the live event stream. It holds a secret: never log it."""
        return self._headers(True)

    def _headers(self, auth: bool) -> dict[str, str]:
        if not auth:
            return {}
        if self._token is None and self._password is not None:
            self.login()
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json_body: Mapping[str, object] | None = None,
        auth: bool = True,
        timeout_s: float | None = None,
        rejection: type[ApiRejected] = ApiRejected,
    ) -> httpx.Response:
        """Send one request and return a 2xx response; every failure is mapped here, once."""
        endpoint = f"{method} {path}"
        timeout = self.timeout_s if timeout_s is None else timeout_s
        resp = send(
            self._http,
            method,
            path,
            label=endpoint,
            base_url=self.base_url,
            timeout_s=timeout,
            policy=self.retry_policy,
            retry=method == "GET",  # only idempotent calls are retried on errors (pushback: all)
            params=dict(params) if params else None,
            json=json_body,
            headers=self._headers(auth),
        )
        self._raise_for_status(endpoint, resp, rejection)
        return resp

    @staticmethod
    def _raise_for_status(endpoint: str, resp: httpx.Response, rejection: type[ApiRejected]) -> None:
        status = resp.status_code
        if status < 400:
            return
        reason, code, doc = parse_error_text(resp.text)
        reason = reason or resp.reason_phrase or f"HTTP {status}"
        if status in (401, 403):
            evidence: dict[str, Any] = {"endpoint": endpoint, "status": status}
            with contextlib.suppress(RuntimeError):  # the service the token was refused by: one cause
                evidence["service"] = service_of(str(resp.request.url))
            raise AuthFailed(f"{endpoint}: {reason}", evidence=evidence)
        if status == 429 or (status == 503 and "retry-after" in resp.headers):
            raise RateLimited(endpoint, status, f"{reason} (pushed back until the deadline)", error_code=code)
        if status >= 500:
            raise ServerError(endpoint, status, reason, error_code=code)
        if status == 404:
            raise NotFound(endpoint, status, reason, error_code=code)
        if issubclass(rejection, MissionRejected):
            raise MissionRejected(
                endpoint,
                status,
                reason,
                error_code=code,
                valid_models=parse_valid_models(resp.text, doc),
                supported_efforts=parse_supported_efforts(resp.text),
                holder=doc,
            )
        raise rejection(endpoint, status, reason, error_code=code)

    @staticmethod
    def _shown(resp: httpx.Response, secret_bearing: bool) -> str:
        """``: '<redacted excerpt>'``, or nothing for secret-bearing endpoints (workspaces)."""
        return "" if secret_bearing else f": {excerpt(resp.text)!r}"

    def _parse(
        self, endpoint: str, resp: httpx.Response, model: type[M], *, secret_bearing: bool = False
    ) -> M:
        """The body as one ``model``; BadResponseError (endpoint, reason, redacted excerpt) otherwise."""
        return self._validate(
            endpoint, resp, model, self._json(endpoint, resp, secret_bearing), secret_bearing
        )

    def _parse_list(
        self, endpoint: str, resp: httpx.Response, model: type[M], *, secret_bearing: bool = False
    ) -> list[M]:
        """The body as a bare JSON array of ``model``."""
        data = self._json(endpoint, resp, secret_bearing)
        if not isinstance(data, list):
            raise BadResponseError(
                f"{endpoint}: expected a JSON array, got {type(data).__name__}{self._shown(resp, secret_bearing)}",
                evidence={"endpoint": endpoint},
            )
        return [self._validate(endpoint, resp, model, item, secret_bearing) for item in data]

    def _json(self, endpoint: str, resp: httpx.Response, secret_bearing: bool) -> Any:
        try:
            return loads_bounded(resp.content)
        except UnsafeInput as exc:
            raise BadResponseError(f"{endpoint}: {exc}", evidence={"endpoint": endpoint}) from None
        except ValueError:
            ctype = resp.headers.get("content-type", "?")
            raise BadResponseError(
                f"{endpoint}: body is not JSON (status {resp.status_code}, {ctype})"
                f"{self._shown(resp, secret_bearing)}",
                evidence={"endpoint": endpoint, "status": resp.status_code},
            ) from None

    def _validate(
        self, endpoint: str, resp: httpx.Response, model: type[M], data: Any, secret_bearing: bool
    ) -> M:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise BadResponseError(
                f"{endpoint}: response is not a {model.__name__} ({_validation_summary(exc)})"
                f"{self._shown(resp, secret_bearing)}",
                evidence={"endpoint": endpoint},
            ) from None

    def _get(
        self, path: str, model: type[M], *, params: Mapping[str, str | int] | None = None, auth: bool = True
    ) -> M:
        resp = self._send("GET", path, params=params, auth=auth)
        return self._parse(f"GET {path}", resp, model)

    # ---- health, auth, fleet ------------------------------------------------------------------

    def health(self) -> HealthInfo:
        """``GET /api/health`` (public; no token is sent or obtained)."""
        return self._get("/api/health", HealthInfo, auth=False)

    def auth_status(self) -> AuthStatus:
        """``GET /api/auth/status``."""
        return self._get("/api/auth/status", AuthStatus, auth=False)

    def fleet_health(self) -> FleetHealth:
        """``GET /api/health/fleet``."""
        return self._get("/api/health/fleet", FleetHealth)

    def remote_nodes(self) -> RemoteFleet:
        """``GET /api/remote-nodes``."""
        return self._get("/api/remote-nodes", RemoteFleet)

    def cordon_node(self, name: str, *, cordoned: bool = True) -> CordonResult:
        """``POST /api/nodes/:name/cordon`` (or ``uncordon``); unknown node → :class:`NotFound`."""
        node = path_segment(name, shape="name", field="name", source="cordon_node")
        path = f"/api/nodes/{node}/{'cordon' if cordoned else 'uncordon'}"
        resp = self._send("POST", path, json_body={})
        return self._parse(f"POST {path}", resp, CordonResult)

    # ---- missions -----------------------------------------------------------------------------

    def submit_mission(self, spec: MissionSpec) -> CreateOutcome:
        """``POST /api/control/missions`` with the coalescing and ignored-field headers."""
        path = "/api/control/missions"
        endpoint = f"POST {path}"
        resp = self._send("POST", path, json_body=spec.body(), rejection=MissionRejected)
        mission = self._parse(endpoint, resp, Mission)
        check_id(mission.id, field="id", source=endpoint)  # a server's id is data, never a path
        ignored = resp.headers.get("x-ignored-fields", "")
        return CreateOutcome(
            mission=mission,
            coalesced_with=resp.headers.get("x-coalesced-with") or None,
            ignored_fields=tuple(f for f in ignored.split(",") if f),
        )

    def create_mission(
        self,
        *,
        title: str | None = None,
        prompt: str | None = None,
        workspace_id: str | None = None,
        agent: str | None = None,
        backend: str | None = None,
        model_override: str | None = None,
        model_effort: str | None = None,
        fast_mode: bool | None = None,
        config_profile: str | None = None,
        idempotency_key: str | None = None,
        project: str | None = None,
        track: str | None = None,
        tags: Sequence[str] | None = None,
        priority: int | None = None,
        deadline: str | None = None,
        origin: str | None = None,
        origin_session_id: str | None = None,
        estimated_disk_gib: int | None = None,
        remote_node_id: str | None = None,
        remote_requirements: Sequence[str] | None = None,
        extra: Mapping[str, JsonValue] | None = None,
    ) -> Mission:
        """Create a mission (spec 3.4); a 4xx refusal raises :class:`MissionRejected`."""
        spec = MissionSpec(
            title=title,
            prompt=prompt,
            workspace_id=workspace_id,
            agent=agent,
            backend=backend,
            model_override=model_override,
            model_effort=model_effort,
            fast_mode=fast_mode,
            config_profile=config_profile,
            idempotency_key=idempotency_key,
            project=project,
            track=track,
            tags=tags,
            priority=priority,
            deadline=deadline,
            origin=origin,
            origin_session_id=origin_session_id,
            estimated_disk_gib=estimated_disk_gib,
            remote_node_id=remote_node_id,
            remote_requirements=remote_requirements,
            extra=dict(extra or {}),
        )
        return self.submit_mission(spec).mission

    def get_mission(self, mission_id: str) -> Mission:
        """``GET /api/control/missions/:id``; unknown id → :class:`NotFound`, another's record → bad response."""
        path = f"/api/control/missions/{_mission_segment(mission_id)}"
        return self._get(path, Mission).asked_for(mission_id, f"GET {path}")

    def list_missions(
        self,
        *,
        status: str | Collection[str] | None = None,
        all: bool = False,
        workspace: str | None = None,
        project: str | None = None,
        tag: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[Mission]:
        """``GET /api/control/missions``: attention-only unless ``status`` or ``all`` is given (spec 3.6)."""
        params: dict[str, str | int] = {}
        if status is not None:
            params["status"] = status if isinstance(status, str) else ",".join(status)
        if all:
            params["all"] = "true"
        for key, value in (("workspace", workspace), ("project", project), ("tag", tag)):
            if value is not None:
                params[key] = value
        if limit is not None:
            params["limit"] = limit
        if offset is not None:
            params["offset"] = offset
        path = "/api/control/missions"
        resp = self._send("GET", path, params=params)
        return self._parse_list(f"GET {path}", resp, Mission)

    def mission_events_page(
        self,
        mission_id: str,
        since_seq: int | None = None,
        *,
        before_seq: int | None = None,
        limit: int | None = None,
        types: Collection[str] | None = None,
        view: str | None = None,
    ) -> EventPage:
        """``GET .../missions/:id/events`` with an explicit cursor (``since_seq=0`` when none given)."""
        params: dict[str, str | int] = {}
        if before_seq is not None:
            params["before_seq"] = before_seq
        else:
            params["since_seq"] = 0 if since_seq is None else since_seq
        if limit is not None:
            params["limit"] = limit
        if types:
            params["types"] = ",".join(types)
        if view is not None:
            params["view"] = view
        path = f"/api/control/missions/{_mission_segment(mission_id)}/events"
        resp = self._send("GET", path, params=params)
        events = self._parse_list(f"GET {path}", resp, StoredEvent)
        return EventPage(
            events=events,
            max_sequence=_int_header(resp, "x-max-sequence"),
            total_events=_int_header(resp, "x-total-events"),
        )

    def mission_events(
        self,
        mission_id: str,
        since_seq: int | None = None,
        limit: int | None = None,
        *,
        before_seq: int | None = None,
        types: Collection[str] | None = None,
        view: str | None = None,
    ) -> list[StoredEvent]:
        """Events in ascending order after ``since_seq`` (or below ``before_seq``)."""
        return self.mission_events_page(
            mission_id, since_seq, before_seq=before_seq, limit=limit, types=types, view=view
        ).events

    def cancel_mission(self, mission_id: str) -> bool:
        """``POST .../missions/:id/cancel``; False when the mission is unknown or gone (404)."""
        try:
            self._send("POST", f"/api/control/missions/{_mission_segment(mission_id)}/cancel", json_body={})
        except NotFound:
            return False
        return True

    def running(self) -> list[RunningEntry]:
        """``GET /api/control/running``: the control actor's live missions."""
        path = "/api/control/running"
        resp = self._send("GET", path)
        return self._parse_list(f"GET {path}", resp, RunningEntry)

    def wait_for_mission(
        self,
        mission_id: str,
        until: Collection[str] | Callable[[Mission], bool],
        *,
        timeout_s: float,
        interval_s: float = 1.0,
    ) -> Mission:
        """Poll ``get_mission`` until ``until`` holds; :class:`CommandTimeout` at the deadline."""
        done: Callable[[Mission], bool]
        if callable(until):
            done = until
        else:
            wanted = frozenset(until)

            def done(m: Mission) -> bool:
                return m.status in wanted

        deadline = time.monotonic() + timeout_s
        polls = 0
        while True:
            mission = self.get_mission(mission_id)
            polls += 1
            if done(mission):
                return mission
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CommandTimeout(
                    f"mission {mission_id}: condition not met within {timeout_s:g}s "
                    f"(last status {mission.status!r} after {polls} polls)",
                    evidence={"mission_id": mission_id, "status": mission.status, "polls": polls},
                )
            time.sleep(min(interval_s, remaining))

    # ---- workspaces ---------------------------------------------------------------------------

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

    # ---- mission hygiene, workspace and catalog readiness: read-only, what the runbook checks -

    def missions_integrity(self) -> MissionsIntegrity:
        """``GET /api/control/missions/integrity``: orphaned/stale groups."""
        return self._get("/api/control/missions/integrity", MissionsIntegrity)

    def list_missions_paged(
        self, *, page_size: int = 200, max_missions: int = 1000
    ) -> tuple[list[Mission], bool]:
        """Every mission of the default (attention-only) list, page by page; True when cut at ``max_missions``."""
        size = max(1, min(200, page_size))
        out: list[Mission] = []
        seen: set[str] = set()
        while len(out) < max_missions:
            page = self.list_missions(limit=size, offset=len(out))
            fresh = [m for m in page if m.id not in seen]  # a page shifting under us repeats rows
            seen.update(m.id for m in fresh)
            out.extend(fresh)
            if len(page) < size or not fresh:
                return out, False
        return out[:max_missions], True

    def library_agents(self) -> list[str]:
        """``GET /api/library/agent``: the library agents' names (a bare array, or ``{"agents": [...]}``)."""
        path = "/api/library/agent"
        resp = self._send("GET", path)
        return _names(self._json(f"GET {path}", resp, False), "agents", f"GET {path}")

    def backends(self) -> list[BackendInfo]:
        """``GET /api/backends``: the registered backends."""
        path = "/api/backends"
        return self._parse_list(f"GET {path}", self._send("GET", path), BackendInfo)

    def backend_agents(self, backend: str) -> list[str]:
        """``GET /api/backends/:id/agents``: the agent ids a backend offers (codex: ``default``)."""
        path = f"/api/backends/{backend}/agents"
        resp = self._send("GET", path)
        return _names(self._json(f"GET {path}", resp, False), "agents", f"GET {path}")

    def ai_providers(self) -> list[AiProvider]:
        """``GET /api/ai/providers``: configured providers and the backends each serves."""
        path = "/api/ai/providers"
        return self._parse_list(f"GET {path}", self._send("GET", path), AiProvider, secret_bearing=True)

    def tracks(self, project: str) -> list[TrackRow]:
        """``GET /api/control/tracks?project=``: the project's track rows and their mission counts."""
        path = "/api/control/tracks"
        return self._parse_list(f"GET {path}", self._send("GET", path, params={"project": project}), TrackRow)

    def provider_catalog(self) -> list[CatalogProvider]:
        """``GET /api/providers?include_all=true``: the static model catalog."""
        path = "/api/providers"
        resp = self._send("GET", path, params={"include_all": "true"})
        return self._parse(f"GET {path}", resp, ProviderCatalog).providers

