"""The sandboxed.sh REST client's wire core: send one request, map its failure, parse its body."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from sbxcheck.clients.sandboxed_auth import BearerAuth, login_redirect, session_expired
from sbxcheck.clients.sandboxed_errors import (
    ApiRejected,
    MissionRejected,
    NotFound,
    RateLimited,
    ServerError,
    excerpt,
    parse_error_text,
    parse_supported_efforts,
    parse_valid_models,
)
from sbxcheck.clients.sandboxed_models import HealthInfo
from sbxcheck.clients.served import ServedApi, unmatched_route
from sbxcheck.clients.validation import validation_summary
from sbxcheck.errors import AuthFailed, BadResponseError, SbxError
from sbxcheck.safeio import UnsafeInput, loads_bounded
from sbxcheck.transports.cookies import refused_cookies
from sbxcheck.transports.http import (
    RetryPolicy,
    http_date,
    location_host,
    new_client,
    redirect_error,
    send,
    service_of,
)

M = TypeVar("M", bound=BaseModel)


class SandboxedWire(BearerAuth):
    """The connection, the one place an answer's status is mapped to an error, and the body parsers
    every endpoint call of :class:`~sbxcheck.clients.sandboxed.SandboxedClient` goes through."""

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
        allow_cleartext_password: bool = False,
    ) -> None:
        # retries=0: no retry of any kind, pushback included
        self.retry_policy = RetryPolicy(retries=retries, pushback_retries=30 if retries else 0)
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self._init_auth(token, password, username, allow_cleartext=allow_cleartext_password)
        self._http = new_client(base_url=self.base_url, timeout=timeout_s, transport=transport)
        self.served = ServedApi(lambda: self.health().version)  # what this release serves, as learned
        # the server's clock less this machine's, from the last answer's Date (None: none said)
        self.server_ahead: dt.timedelta | None = None

    # ---- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the underlying connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- transport core -----------------------------------------------------------------------

    def _login_request(self, body: dict[str, str]) -> httpx.Response:
        return self._send("POST", "/api/auth/login", json_body=body, auth=False)

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

        def once(headers: dict[str, str]) -> httpx.Response:
            return send(
                self._http,
                method,
                path,
                label=endpoint,
                base_url=self.base_url,
                timeout_s=timeout,
                policy=self.retry_policy,
                retry=method == "GET",  # only idempotent calls are retried on errors (pushback: all)
                redirects="return",  # never followed; a login page is an expired session (_answer)
                params=dict(params) if params else None,
                json=json_body,
                headers=headers,
            )

        try:
            resp = self._answer(endpoint, once, auth)
            said = http_date(resp.headers.get("date"))  # to the second: within the ledger's clock slack
            if said is not None:
                self.server_ahead = said - dt.datetime.now(dt.UTC)
            self._raise_for_status(endpoint, resp, rejection)
        except SbxError as exc:
            exc.evidence.update(refused_cookies(self._http.cookies.jar))  # a server that sets ever more
            raise
        return resp

    def _answer(
        self, endpoint: str, once: Callable[[dict[str, str]], httpx.Response], auth: bool
    ) -> httpx.Response:
        """The request's answer; an expired session (:func:`session_expired`: a 401, a login page) is
        met once: one login for every thread that met it, the request sent again (it did nothing)."""
        seen = self.login_attempts
        try:
            headers = self._headers(auth)  # the first login, when none was made yet
        except SbxError as exc:
            before = f"the login before it failed ({exc.message})"
            raise _with_evidence(exc, request_sent=False, reason=before) from None
        used = headers.get("Authorization", "").removeprefix("Bearer ") or None  # the token this request carries
        resp = once(headers)
        expired = session_expired(resp) if auth and used is not None else None
        if expired is None:
            return resp
        try:
            renewed = self.renew(used, seen)
        except SbxError as exc:  # the answer said the session was over: the request did nothing
            raise _with_evidence(exc, refused_before_acting=expired.said()) from None
        if renewed:
            resp = once(self._headers(auth))
            expired = session_expired(resp)
            if expired is None:
                return resp
        if expired.status == 401:
            return resp  # the server's own refusal text says the rest (_raise_for_status)
        again = "again after a fresh login" if renewed else "and there is no password to log in again with"
        raise AuthFailed(
            f"{endpoint}: answered {expired.said()} {again}: the session is over, or a proxy or SSO in "
            "front of the control plane does not take sbxcheck's token",
            evidence={
                "endpoint": endpoint,
                **expired.evidence(),
                "renewed": renewed,
                "refused_before_acting": expired.said(),
                "service": service_of(self.base_url),
            },
            recommendation="let the API through the proxy or SSO for sbxcheck's requests (or give the control "
            "plane's own URL), then re-run",
        )

    def _raise_for_status(self, endpoint: str, resp: httpx.Response, rejection: type[ApiRejected]) -> None:
        status = resp.status_code
        if 300 <= status < 400:
            if not login_redirect(resp):
                raise redirect_error(endpoint, resp)
            page = session_expired(resp)
            raise AuthFailed(  # an unauthenticated request (health, the login) sent to a login page
                f"{endpoint}: answered {page.said() if page else status}: a proxy or SSO in front of the control "
                "plane asks for its own login, which sbxcheck cannot give",
                evidence={"endpoint": endpoint, "status": status, "location_host": location_host(resp)},
                recommendation="let the API through the proxy for sbxcheck's requests, or give a JWT in token_env",
            )
        if status < 400:
            return
        reason, code, doc = parse_error_text(resp.text)
        reason = reason or resp.reason_phrase or f"HTTP {status}"
        if status in (401, 403):
            evidence: dict[str, Any] = {"endpoint": endpoint, "status": status, "refused_before_acting": str(status)}
            with contextlib.suppress(RuntimeError):  # the service the token was refused by: one cause
                evidence["service"] = service_of(str(resp.request.url))
            raise AuthFailed(f"{endpoint}: {reason}", evidence=evidence)
        if status == 429 or (status == 503 and "retry-after" in resp.headers):
            raise RateLimited(endpoint, status, f"{reason} (pushed back until the deadline)", error_code=code)
        if status >= 500:
            raise ServerError(endpoint, status, reason, error_code=code)
        unmatched = unmatched_route(endpoint, status, resp.text)
        if unmatched is not None:  # the release has no such route: what needs it is skipped
            raise self.served.route_missing(endpoint, unmatched)
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
                f"{endpoint}: response is not a {model.__name__} ({validation_summary(exc)})"
                f"{self._shown(resp, secret_bearing)}",
                evidence={"endpoint": endpoint},
            ) from None

    def _get(
        self, path: str, model: type[M], *, params: Mapping[str, str | int] | None = None, auth: bool = True
    ) -> M:
        resp = self._send("GET", path, params=params, auth=auth)
        return self._parse(f"GET {path}", resp, model)

    # ---- health: the release's version, read once into the served facts -----------------------

    def health(self) -> HealthInfo:
        """``GET /api/health`` (public; no token is sent or obtained)."""
        return self._get("/api/health", HealthInfo, auth=False)


def _with_evidence(exc: SbxError, **facts: object) -> SbxError:
    """A copy of ``exc`` whose evidence also holds ``facts`` (about the request it stopped)."""
    found = copy.copy(exc)
    found.evidence = {**exc.evidence, **facts}
    return found
