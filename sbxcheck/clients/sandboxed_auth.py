"""How the sandboxed.sh client authenticates: a given JWT, or a login with the password (kept,
renewed once when the session is found expired, and issued apart for a companion such as the MCP server).

An expired session does not always answer 401: a proxy or SSO in front of the control plane may
redirect to its login page or answer that page (HTML) where JSON was asked. :func:`session_expired`
reads all three; the client then logs in once more (one login for every thread that met the same
expired token, and one failure shared with them too) and sends the request again.

A password is never sent in cleartext over a network: a login to ``http://`` on a host that is not
this machine's loopback is refused unless the inventory says ``allow_cleartext_password = true``.

Secrets: the password and every token are registered with the default redactor.
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import httpx
from pydantic import BaseModel, ValidationError

from sbxcheck.errors import AuthFailed, BadResponseError, InventoryError, SbxError
from sbxcheck.redact import default_redactor
from sbxcheck.safeio import loads_bounded
from sbxcheck.transports.http import cleartext_to_network, location_host, service_of

LOGIN: Final = "POST /api/auth/login"
_HTML: Final = frozenset({"text/html", "application/xhtml+xml"})
# where a proxy or SSO sends a browser to log in: /login, /sso/..., /oauth2/start, /saml2, /.auth/login ...
_LOGIN_PAGE: Final = re.compile(r"log[-_]?in|sign[-_]?in|\bsso\b|oauth|saml|openid|\bauth\b|\bcas\b|\bidp\b", re.I)


class _LoginBody(BaseModel):
    token: str
    exp: int | None = None


@dataclass(frozen=True)
class Expired:
    """An answer that says the session is over, in one of its forms; never its token or cookie."""

    status: int
    content_type: str
    location_host: str | None = None

    def said(self) -> str:
        """``302 to a login page on host sso.example.com``, ``200 text/html where JSON was asked``, ``401``."""
        if 300 <= self.status < 400:
            where = f" on host {self.location_host}" if self.location_host else ""
            return f"{self.status} to a login page{where}"
        if self.content_type in _HTML:
            return f"{self.status} {self.content_type} where JSON was asked"
        return f"{self.status} ({self.content_type or 'no content type'})"

    def evidence(self) -> dict[str, object]:
        return {"status": self.status, "content_type": self.content_type, "location_host": self.location_host}


def _content_type(resp: httpx.Response) -> str:
    value: str = resp.headers.get("content-type", "")
    return value.split(";", 1)[0].strip().lower()[:80]


def login_redirect(resp: httpx.Response) -> bool:
    """A 3xx whose Location (host or path, never its query) looks like a login page."""
    if not 300 <= resp.status_code < 400:
        return False
    location = resp.headers.get("location", "").split("?", 1)[0]
    return bool(_LOGIN_PAGE.search(location))


def session_expired(resp: httpx.Response) -> Expired | None:
    """What an answer to an authenticated request says when the session is over: a 401, a redirect to
    a login page, or an HTML page where JSON was asked (a proxy's or SSO's); None otherwise."""
    ctype = _content_type(resp)
    if resp.status_code == 401:
        return Expired(401, ctype)
    if login_redirect(resp):
        return Expired(resp.status_code, ctype, location_host(resp))
    if 200 <= resp.status_code < 300 and ctype in _HTML:
        return Expired(resp.status_code, ctype)
    return None


def cleartext_refusal(url: str, *, allowed: bool) -> InventoryError | None:
    """The error a login to ``url`` is refused with when the password would cross a network in
    cleartext (``http://`` to a host other than this machine's loopback) and it is not ``allowed``."""
    if allowed or not cleartext_to_network(url):
        return None
    return InventoryError(
        f"[sandboxed] url {url} is plain http:// to a host that is not this machine: the password would "
        "cross the network in cleartext on every login; not sent",
        evidence={"service": service_of(url), "request_sent": False, "reason": "a password over cleartext refused"},
        recommendation="use the control plane's https:// URL, or, where the network path is trusted, set "
        "allow_cleartext_password = true in [sandboxed]",
    )


class BearerAuth:
    """The bearer token of a client that logs in through :meth:`_login_request` (the REST client)."""

    base_url: str
    token_exp: int | None
    renewals: int  # logins after a token was refused (the first login not counted)
    logins: int  # every login attempt (a success or not)

    def _init_auth(
        self, token: str | None, password: str | None, username: str | None, *, allow_cleartext: bool = False
    ) -> None:
        self.token_exp = None
        self._token = token or None
        self._password = password
        self._username = username
        self._allow_cleartext = allow_cleartext
        self._auth_lock = threading.Lock()  # one login at a time; its outcome is every waiter's
        self._attempts = 0  # logins tried: a waiter that sees it move takes that login's outcome
        self._failed: SbxError | None = None  # the last login's failure, for the threads that waited on it
        self.renewals = 0
        self.logins = 0
        redactor = default_redactor()
        redactor.register(token)
        redactor.register(password)

    def _login_request(self, body: dict[str, str]) -> httpx.Response:
        """``POST /api/auth/login`` with ``body``, unauthenticated; the answer (a 3xx unfollowed) or an error."""
        raise NotImplementedError

    @property
    def authenticated(self) -> bool:
        """True once a token is held (given or obtained by :meth:`login`)."""
        return self._token is not None

    def bearer_token(self) -> str | None:
        """The JWT in use, for handing to another client (e.g. the MCP). A secret: never log it."""
        return self._token

    def login(self) -> None:
        """``POST /api/auth/login`` with the configured password; keep the JWT."""
        self._token, self.token_exp = self._issue()

    def fresh_token(self) -> str | None:
        """A token of its own for a companion (the MCP server) from a new login, not the one this
        client keeps using; None without a password. A secret: never log it."""
        return self._issue()[0] if self._password is not None else None

    def _issue(self) -> tuple[str, int | None]:
        if self._password is None:
            raise AuthFailed("login: no password configured for the control plane")
        self._refuse_cleartext()
        body: dict[str, str] = {"password": self._password}
        if self._username is not None:
            body["username"] = self._username
        self.logins += 1
        resp = self._login_request(body)
        if login_redirect(resp) or _content_type(resp) in _HTML:
            page = Expired(resp.status_code, _content_type(resp), location_host(resp))
            raise AuthFailed(
                f"{LOGIN}: answered {page.said()}: a proxy or SSO in front of the control plane asks for "
                "its own login, which sbxcheck cannot give",
                evidence={"endpoint": LOGIN, **page.evidence()},
                recommendation="let the API through the proxy for sbxcheck's requests, or give a JWT in token_env",
            )
        try:
            parsed = _LoginBody.model_validate(loads_bounded(resp.content))
        except (ValueError, ValidationError):
            # No excerpt: a login body holds the token.
            raise BadResponseError(
                f"{LOGIN}: response is not {{token, exp}} JSON (status {resp.status_code}, "
                f"{_content_type(resp) or 'no content type'}, {len(resp.content)} bytes)",
                evidence={"endpoint": LOGIN, "status": resp.status_code},
            ) from None
        default_redactor().register(parsed.token)
        return parsed.token, parsed.exp

    def _refuse_cleartext(self) -> None:
        """InventoryError before a password would cross a network in cleartext (unless allowed)."""
        refused = cleartext_refusal(self.base_url, allowed=self._allow_cleartext)
        if refused is not None:
            raise refused

    def auth_headers(self) -> dict[str, str]:
        """The Authorization header (logging in first when needed) for a companion connection such as
        the live event stream. It holds a secret: never log it."""
        return self._headers(True)

    @property
    def login_attempts(self) -> int:
        """How many logins were tried so far: taken with the token a request used, it tells a later
        :meth:`renew` whether a login was tried for that token since (whose outcome it then shares)."""
        return self._attempts

    def _headers(self, auth: bool) -> dict[str, str]:
        if not auth:
            return {}
        if self._token is None and self._password is not None:
            self._single_login(lambda: self._token is None, self._attempts)
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def renew(self, refused: str | None, seen: int | None = None) -> bool:
        """Log in again when ``refused`` (the token an expired answer came with) is still the one held;
        True when a fresh token is held (this call or a concurrent one renewed it), False without a
        password. ``seen`` (:attr:`login_attempts` when the refused token was taken): a login tried for
        it since, that failed, is this call's failure too — one login for all, not one each."""
        if self._password is None:
            return False
        if self._single_login(lambda: self._token == refused, self._attempts if seen is None else seen):
            self.renewals += 1
        return self._token != refused

    def _single_login(self, needed: Callable[[], bool], seen: int) -> bool:
        """Log in under the lock when ``needed()`` still holds; True when this call logged in. A login
        tried since ``seen`` (by another thread) decides for this one: its token, or its failure raised."""
        with self._auth_lock:
            if not needed():
                return False
            if self._attempts != seen and self._failed is not None:
                raise copy.copy(self._failed)  # the login just tried for the same token failed
            self._attempts += 1
            try:
                self.login()
            except SbxError as exc:
                self._failed = exc
                raise
            self._failed = None
            return True
