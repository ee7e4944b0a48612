"""Auth resource of the simulated control plane: login, auth status, the bearer guard (JWT)."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable

import jwt
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from sbxcheck.sim.controlplane.base import DoubleBase
from sbxcheck.sim.controlplane.model import (
    EXPIRY_HTML_FAULT,
    EXPIRY_REDIRECT_FAULT,
    LOGIN_EMPTY_FAULT,
    SSO_LOGIN_URL,
    TOKEN_EXPIRES_FAULT,
    Handler,
    plain_text,
)

#: the faults under which a token is spent after :attr:`token_requests` requests
_SPENDING_FAULTS = (TOKEN_EXPIRES_FAULT, EXPIRY_REDIRECT_FAULT, EXPIRY_HTML_FAULT)
_SSO_PAGE = (
    "<!doctype html><html><head><title>Sign in</title></head><body><form method=post "
    'action="/oauth2/login"><input name=user><input type=password name=password></form></body></html>'
)


class AuthRoutes(DoubleBase):
    """``/api/auth/*`` and the bearer guard every other route sits behind."""

    @property
    def auth_mode(self) -> str:
        """``multi_user`` when users are configured, else ``single_tenant``."""
        return "multi_user" if self.users else "single_tenant"

    def _authenticate(self, request: Request) -> str | Response:
        if self.dev_mode:
            return "dev"
        header = request.headers.get("authorization", "")
        token = header[7:] if header.startswith(("Bearer ", "bearer ")) else header
        if not token.strip():
            return self._refused(request, "Missing Authorization header")
        if "cp.auth-expired" in self.faults:
            return self._refused(request, "Invalid or expired token")
        try:
            claims = jwt.decode(token, self._jwt_secret, algorithms=["HS256"])
        except jwt.PyJWTError:
            return self._refused(request, "Invalid or expired token")
        sub = claims.get("sub")
        if not isinstance(sub, str) or (self.users and sub not in self.users):
            return self._refused(request, "Invalid user")
        spending = any(f in self.faults for f in _SPENDING_FAULTS)
        if spending and self._token_spent(str(claims.get("jti"))):
            return self._refused(request, "Invalid or expired token")
        return sub

    def _refused(self, request: Request, text: str) -> Response:
        """A refused token's answer: the control plane's 401, or what an SSO proxy in front says instead
        (``cp.expiry-redirect``: 302 to its login page; ``cp.expiry-html``: that page, 200)."""
        if EXPIRY_REDIRECT_FAULT in self.faults:
            back = f"https://{request.url.netloc}{request.url.path}"
            return RedirectResponse(f"{SSO_LOGIN_URL}?rd={back}&state=s3ss10n-{len(text)}", status_code=302)
        if EXPIRY_HTML_FAULT in self.faults:
            return HTMLResponse(_SSO_PAGE, status_code=200)
        return plain_text(401, text)

    def _token_spent(self, jti: str) -> bool:
        """``cp.token-expires`` (and the SSO forms): the token has expired once it has authorized :attr:`token_requests`
        requests (a count, not a clock: the expiry lands mid-run however fast the machine is)."""
        with self._lock:
            used = self.token_uses.get(jti, 0) + 1
            self.token_uses[jti] = used
        return used > self.token_requests

    def _guard(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            who = self._authenticate(request)
            if isinstance(who, Response):
                return who
            return await handler(request, who)

        return endpoint

    async def _login(self, request: Request) -> Response:
        if not self.jwt_secret_configured:
            return plain_text(500, "JWT_SECRET not configured")
        if LOGIN_EMPTY_FAULT in self.faults:
            return Response(b"", status_code=200, media_type="application/json")
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        password, username = body.get("password"), body.get("username")
        if not isinstance(password, str):
            return plain_text(
                422, "Failed to deserialize the JSON body into the target type: missing field `password`"
            )
        if username is not None and not isinstance(username, str):
            return plain_text(
                422, "Failed to deserialize the JSON body into the target type: username: invalid type"
            )
        given = password.strip().encode()
        if self.users:
            name = (username or "").strip()
            if not name:
                return plain_text(401, "Username required")
            expected = self.users.get(name)
            if expected is None or not hmac.compare_digest(given, expected.encode()):
                return plain_text(401, "Invalid username or password")
            sub = name
        else:
            if not hmac.compare_digest(given, self.password.encode()):
                return plain_text(401, "Invalid password")
            sub = self.single_tenant_user_id
        return JSONResponse(self.issue_token(sub))

    def issue_token(self, sub: str) -> dict[str, object]:
        """A signed JWT for ``sub`` and its expiry; each one is told apart (``jti``) for ``cp.token-expires``."""
        now = int(self.clock())
        exp = now + self.jwt_ttl_days * 86400
        token = jwt.encode(
            {"sub": sub, "usr": sub, "iat": now, "exp": exp, "jti": secrets.token_hex(8)},
            self._jwt_secret,
            algorithm="HS256",
        )
        return {"token": token, "exp": exp}

    async def _auth_status(self, request: Request) -> Response:
        return JSONResponse(
            {
                "auth_mode": self.auth_mode,
                "password_source": "environment",
                "password_changed_at": None,
                "dev_mode": self.dev_mode,
            }
        )
