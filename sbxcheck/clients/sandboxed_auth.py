"""How the sandboxed.sh client authenticates: a given JWT, or a login with the password (kept,
renewed once when a request is refused 401, and issued apart for a companion such as the MCP server).

Secrets: the password and every token are registered with the default redactor.
"""

from __future__ import annotations

import threading

import httpx
from pydantic import BaseModel, ValidationError

from sbxcheck.errors import AuthFailed, BadResponseError
from sbxcheck.redact import default_redactor
from sbxcheck.safeio import loads_bounded


class _LoginBody(BaseModel):
    token: str
    exp: int | None = None


class BearerAuth:
    """The bearer token of a client that logs in through :meth:`_login_request` (the REST client)."""

    token_exp: int | None
    renewals: int  # logins after a token was refused (the first login not counted)

    def _init_auth(self, token: str | None, password: str | None, username: str | None) -> None:
        self.token_exp = None
        self._token = token or None
        self._password = password
        self._username = username
        self._auth_lock = threading.Lock()  # one login at a time; a token renewed once for all waiters
        self.renewals = 0
        redactor = default_redactor()
        redactor.register(token)
        redactor.register(password)

    def _login_request(self, body: dict[str, str]) -> httpx.Response:
        """``POST /api/auth/login`` with ``body``, unauthenticated; a 2xx answer or an error raised."""
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
        body: dict[str, str] = {"password": self._password}
        if self._username is not None:
            body["username"] = self._username
        resp = self._login_request(body)
        endpoint = "POST /api/auth/login"
        try:
            parsed = _LoginBody.model_validate(loads_bounded(resp.content))
        except (ValueError, ValidationError):
            # No excerpt: a login body holds the token.
            raise BadResponseError(f"{endpoint}: response is not {{token, exp}} JSON") from None
        default_redactor().register(parsed.token)
        return parsed.token, parsed.exp

    def auth_headers(self) -> dict[str, str]:
        """The Authorization header (logging in first when needed) for a companion connection such as
        the live event stream. It holds a secret: never log it."""
        return self._headers(True)

    def _headers(self, auth: bool) -> dict[str, str]:
        if not auth:
            return {}
        if self._token is None and self._password is not None:
            with self._auth_lock:
                if self._token is None:
                    self.login()
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def renew(self, refused: str | None) -> bool:
        """Log in again when ``refused`` (the token a 401 answered) is still the one held; True when a
        fresh token is held (this call or a concurrent one renewed it), False without a password."""
        if self._password is None:
            return False
        with self._auth_lock:
            if self._token == refused:
                self.login()
                self.renewals += 1
        return self._token != refused
