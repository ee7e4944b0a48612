"""A session's expiry in any form: a 401, a redirect to a login page, an HTML page where JSON was asked.

A proxy or SSO in front of the control plane answers an expired session with its login page, not a
401. The client logs in once more (one login for every thread that met the same expired token, and
one failure shared by them), sends the request again, and otherwise says exactly what it was
answered — never a token, a cookie or a Location's query. A password is not sent in cleartext over
a network, and a create that cannot have made anything never stays open in the ledger.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from sbxcheck.clients.sandboxed import SandboxedClient
from sbxcheck.errors import AuthFailed, BadResponseError, InventoryError, made_nothing
from sbxcheck.transports.http import cleartext_to_network

BASE = "https://cp.test"
PASSWORD = "pw-unit-5e55-10n"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZWZhdWx0In0.c2Vzc2lvbi1leHBpcnk"
MID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
SSO = "https://sso.example.com/oauth2/start?rd=%2Fapi&state=st4t3-s3cr3t"
PAGE = "<!doctype html><html><title>Sign in</title><body>sign in</body></html>"

Expiry = Callable[[], httpx.Response]
FORMS: dict[str, Expiry] = {
    "302 to a login page": lambda: httpx.Response(302, headers={"location": SSO, "set-cookie": "sso=c00k1e"}),
    "303 to a login page": lambda: httpx.Response(303, headers={"location": "/login?next=/api"}),
    "307 to a login page": lambda: httpx.Response(307, headers={"location": "https://idp.example.com/saml2/sso"}),
    "an HTML page where JSON was asked": lambda: httpx.Response(200, text=PAGE, headers={"content-type": "text/html"}),
    "401": lambda: httpx.Response(401, text="Invalid or expired token"),
}


class Plane:
    """The first token authorizes ``uses`` requests, a renewed one ``renewed_uses`` (None: any); a spent
    token meets ``expired()``. Logins are counted; ``login`` answers every login after the first."""

    def __init__(
        self,
        uses: int,
        expired: Expiry,
        *,
        login: Callable[[int], httpx.Response] | None = None,
        renewed_uses: int | None = None,
    ) -> None:
        self.uses, self.expired, self.login, self.renewed_uses = uses, expired, login, renewed_uses
        self.issued = 0
        self.spent: dict[str, int] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()
        self.hold: threading.Barrier | None = None  # every expired answer waits here for the others

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/auth/login":
            with self.lock:
                self.issued += 1
                issued = self.issued
            if self.login is not None and issued > 1:
                response = self.login(issued)
            else:
                response = httpx.Response(200, json={"token": f"{TOKEN}{issued}", "exp": 1_900_000_000})
        else:
            token = request.headers.get("authorization", "").removeprefix("Bearer ")
            with self.lock:
                self.spent[token] = self.spent.get(token, 0) + 1
                used = self.spent[token]
            limit = self.uses if token.endswith(f"{TOKEN}1") else self.renewed_uses
            if limit is not None and used > limit:
                response = self.expired()
                if self.hold is not None:
                    self.hold.wait(timeout=30)
            else:
                response = httpx.Response(200, json={"id": MID, "status": "active", "title": "t", "backend": "codex"})
        with self.lock:
            self.requests.append((request.method, request.url.path, response.status_code))
        return response

    def data_requests(self) -> list[tuple[str, str, int]]:
        return [r for r in self.requests if r[1] != "/api/auth/login"]


def _client(plane: Plane, **kwargs: object) -> SandboxedClient:
    kwargs.setdefault("password", PASSWORD)
    return SandboxedClient(BASE, transport=httpx.MockTransport(plane), timeout_s=5.0, retries=0, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("form", list(FORMS))
def test_an_expired_session_in_any_form_is_renewed_once_and_the_request_sent_again(form: str) -> None:
    plane = Plane(uses=1, expired=FORMS[form])
    with _client(plane) as client:
        client.get_mission(MID)  # the first token's one request
        assert client.get_mission(MID).id == MID  # met the expiry, logged in again, sent again
    assert plane.issued == 2 and client.renewals == 1
    assert [status for _, _, status in plane.data_requests()][1:] == [FORMS[form]().status_code, 200]


@pytest.mark.parametrize("form", [f for f in FORMS if f != "401"])
def test_a_login_wall_that_stays_is_auth_failed_naming_what_was_answered(form: str) -> None:
    plane = Plane(uses=0, expired=FORMS[form], renewed_uses=0)
    with _client(plane) as client, pytest.raises(AuthFailed) as refused:
        client.get_mission(MID)
    error = refused.value
    answered = FORMS[form]()
    assert f"answered {answered.status_code}" in error.message and "again after a fresh login" in error.message
    assert error.evidence["status"] == answered.status_code and error.evidence["renewed"] is True
    if "login page" in form:
        assert "to a login page" in error.message
        host = httpx.URL(answered.headers["location"]).host or None
        assert error.evidence["location_host"] == host and (host is None or host in error.message)
    else:
        assert "text/html where JSON was asked" in error.message and error.evidence["content_type"] == "text/html"
    shown = json.dumps([error.message, error.evidence, error.recommendation])
    for secret in (TOKEN, "st4t3-s3cr3t", "c00k1e", "oauth2/start", "rd="):
        assert secret not in shown
    assert plane.issued == 2  # the first login and one renewal: not a loop
    assert made_nothing(error) is not None  # the server refused it before acting


def test_a_static_token_met_by_a_login_page_is_auth_failed_at_once() -> None:
    plane = Plane(uses=0, expired=FORMS["302 to a login page"], renewed_uses=0)
    with _client(plane, password=None, token=TOKEN) as client, pytest.raises(AuthFailed) as refused:
        client.get_mission(MID)
    assert "302 to a login page on host sso.example.com" in refused.value.message
    assert "no password to log in again" in refused.value.message
    assert plane.issued == 0 and len(plane.requests) == 1


def test_a_login_answered_by_a_login_page_is_auth_failed_naming_it() -> None:
    def sso(_: int) -> httpx.Response:
        return httpx.Response(200, text=PAGE, headers={"content-type": "text/html; charset=utf-8"})

    plane = Plane(uses=0, expired=FORMS["401"], login=sso)
    plane.issued = 1  # every login from the first answers the SSO's page
    with _client(plane) as client, pytest.raises(AuthFailed) as refused:
        client.get_mission(MID)
    assert "POST /api/auth/login: answered 200 text/html where JSON was asked" in refused.value.message


@pytest.mark.parametrize("login_fails", [False, True])
def test_threads_that_meet_one_expired_session_log_in_once(login_fails: bool) -> None:
    """Eight requests meet the same expired token at once: one login renews it for all, and a login
    that fails is the failure of all eight, not eight logins."""
    threads = 8

    def wall(_: int) -> httpx.Response:
        return httpx.Response(302, headers={"location": SSO})

    plane = Plane(uses=1, expired=FORMS["302 to a login page"], login=wall if login_fails else None)
    client = _client(plane)
    client.get_mission(MID)  # logged in; the token's one request spent
    plane.hold = threading.Barrier(threads)
    outcomes: list[object] = []

    def read() -> None:
        try:
            outcomes.append(client.get_mission(MID).id)
        except AuthFailed as exc:
            outcomes.append(exc)

    workers = [threading.Thread(target=read) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    client.close()
    assert len(outcomes) == threads
    assert plane.issued == 2, plane.issued  # the first login and one renewal, whatever the threads
    if login_fails:
        assert all(isinstance(o, AuthFailed) and "POST /api/auth/login" in o.message for o in outcomes), outcomes
    else:
        assert outcomes == [MID] * threads


# ---- a create never sent, or refused before it acted, is never left open ------------------------


def test_a_login_answered_200_with_an_empty_body_marks_the_create_never_sent() -> None:
    plane = Plane(uses=1, expired=FORMS["401"], login=lambda _: httpx.Response(200, content=b""))
    plane.issued = 1  # the first login already answers the empty body
    with _client(plane) as client, pytest.raises(BadResponseError) as failed:
        client.create_mission(title="t", prompt="p")
    assert plane.data_requests() == []  # the create never left
    why = made_nothing(failed.value)
    assert why is not None and "before the request was sent" in why and "login" in why, why


# ---- a password is never sent in cleartext over a network ---------------------------------------


@pytest.mark.parametrize(
    ("url", "cleartext"),
    [
        ("http://cp.example.com:3000", True),
        ("http://10.0.0.7", True),
        ("http://127.0.0.1:3000", False),
        ("http://[::1]:3000", False),
        ("http://localhost:3000", False),
        ("http://cp.localhost", False),
        ("https://cp.example.com", False),
    ],
)
def test_cleartext_is_judged_from_the_url_as_written(url: str, cleartext: bool) -> None:
    assert cleartext_to_network(url) is cleartext


def test_a_password_over_cleartext_to_another_host_is_refused_before_it_is_sent() -> None:
    plane = Plane(uses=9, expired=FORMS["401"])
    client = SandboxedClient("http://cp.example.com:3000", password=PASSWORD, transport=httpx.MockTransport(plane))
    with client, pytest.raises(InventoryError) as refused:
        client.get_mission(MID)
    assert plane.requests == []  # neither the login nor the request left
    assert "cleartext" in refused.value.message and PASSWORD not in refused.value.message
    assert "allow_cleartext_password = true" in (refused.value.recommendation or "")
    assert refused.value.classification.value == "config_defect"
    allowed = SandboxedClient(
        "http://cp.example.com:3000", password=PASSWORD, transport=httpx.MockTransport(plane),
        allow_cleartext_password=True,
    )  # fmt: skip
    with allowed:
        assert allowed.get_mission(MID).id == MID


def test_doctor_says_a_password_would_cross_the_network_in_cleartext(tmp_path: Path) -> None:
    from sbxcheck.doctor import run_doctor
    from sbxcheck.preflight import InventoryChoice

    (tmp_path / "pw").write_text(PASSWORD)
    inventory = tmp_path / "sbxcheck.toml"
    base = f'[sandboxed]\nurl = "http://cp.invalid:3000"\npassword_file = "{tmp_path / "pw"}"\nrequest_timeout_s = 5\n'
    lines: dict[bool, str] = {}
    for allowed in (False, True):
        inventory.write_text(base + ("allow_cleartext_password = true\n" if allowed else ""))
        out = io.StringIO()
        run_doctor(InventoryChoice(inventory, "--inventory"), out)
        lines[allowed] = out.getvalue()
    assert "✗ control plane login: [sandboxed] url http://cp.invalid:3000 is plain http://" in lines[False]
    assert "allow_cleartext_password = true" in lines[False] and PASSWORD not in lines[False]
    assert "control plane login" not in lines[True]


def test_an_unauthenticated_request_sent_to_a_login_page_is_auth_failed_naming_its_host_only() -> None:
    """/api/health behind an SSO proxy: not an 'unexpected redirect' to check the URL for, but a login
    the proxy asks for, which sbxcheck cannot give."""

    def proxy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"location": "https://sso.example.com/login?token=abc123secret"})

    client = SandboxedClient(BASE, token=TOKEN, transport=httpx.MockTransport(proxy), retries=0)
    with client, pytest.raises(AuthFailed) as refused:
        client.health()
    assert "GET /api/health: answered 302 to a login page on host sso.example.com" in refused.value.message
    assert "abc123secret" not in json.dumps([refused.value.message, refused.value.evidence])
