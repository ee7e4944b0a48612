"""Provisioning-side OpenRouter client (specs/sssf-sandbox.md, 5): list keys, paged, read-only.

The provisioning key is registered with the default redactor and never appears in a message or
repr. ``GET /keys`` returns key *metadata* (hash, name, usage, limit, …), never a key's secret;
a ``key`` field, should one ever appear, is dropped while parsing. Upstream reads one page; the
list is paged by ``offset`` (100 per page) here until a short page, with a bounded page count.

Failures map onto :mod:`sbxcheck.errors`, once, in :meth:`OpenRouterAdmin._get`:

==========================  ==============================================
connect refused / timeout   :class:`~sbxcheck.errors.HostUnreachable`
read timeout                :class:`~sbxcheck.errors.CommandTimeout`
401 / 403                   :class:`~sbxcheck.errors.AuthFailed`
429 / 5xx                   :class:`~sbxcheck.errors.TransportError` (after the shared RetryPolicy)
other 4xx, non-JSON, shape  :class:`~sbxcheck.errors.BadResponseError` (redacted excerpt)
==========================  ==============================================
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Final

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from sbxcheck.clients.sandboxed import excerpt
from sbxcheck.clients.validation import validation_summary
from sbxcheck.errors import AuthFailed, BadResponseError, TransportError
from sbxcheck.redact import default_redactor
from sbxcheck.safeio import UnsafeInput, loads_bounded
from sbxcheck.transports.http import RetryPolicy, new_client, send

DEFAULT_BASE_URL: Final = "https://openrouter.ai/api/v1"
PAGE_SIZE: Final = 100


class OpenRouterKey(BaseModel):
    """One row of ``GET /keys``: metadata only. Unknown fields are kept; a secret never is."""

    model_config = ConfigDict(extra="allow")

    hash: str
    name: str = ""
    label: str | None = None
    disabled: bool = False
    limit: float | None = None
    limit_remaining: float | None = None
    usage: float | None = None
    created_at: str | None = None
    updated_at: str | None = None
    expires_at: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_secret(cls, data: object) -> object:
        if isinstance(data, dict) and "key" in data:
            return {k: v for k, v in data.items() if k != "key"}
        return data

    @property
    def short_hash(self) -> str:
        """The first 12 hex digits, for messages."""
        return self.hash[:12]


class AccountCredits(BaseModel):
    """``GET /api/v1/credits``: what the account bought and used (finite numbers only)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    total_credits: float
    total_usage: float

    @property
    def remaining(self) -> float:
        return self.total_credits - self.total_usage


def _error_reason(resp: httpx.Response) -> str:
    """``error.message`` of an OpenRouter error body, else a redacted excerpt."""
    try:
        doc = loads_bounded(resp.content)
    except ValueError:  # UnsafeInput included
        return excerpt(resp.text) or resp.reason_phrase
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return excerpt(err["message"])
    return excerpt(resp.text)


class OpenRouterAdmin:
    """Read-only management calls with the provisioning key. Usable as a context manager."""

    def __init__(
        self,
        base_url: str,
        provisioning_key: str,
        timeout_s: float = 15.0,
        *,
        transport: httpx.BaseTransport | None = None,
        retries: int = 2,
        max_pages: int = 50,
    ) -> None:
        if not provisioning_key:
            raise AuthFailed("OpenRouter: no provisioning key given")
        if retries < 0 or max_pages < 1:
            raise ValueError("retries must be >= 0 and max_pages >= 1")
        self.retry_policy = RetryPolicy(retries=retries)
        default_redactor().register(provisioning_key)
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_pages = max_pages
        self.pages_read = 0
        self._http = new_client(
            base_url=self.base_url,
            timeout=timeout_s,
            transport=transport,
            headers={"Authorization": f"Bearer {provisioning_key}"},
        )

    def __repr__(self) -> str:
        return f"OpenRouterAdmin({self.base_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenRouterAdmin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _get(self, path: str, params: dict[str, str | int]) -> Any:
        """One GET, retried on 429/5xx and dropped connections; the parsed JSON body."""
        endpoint = f"GET {path}"
        label = f"OpenRouter {endpoint}"
        resp = send(
            self._http,
            "GET",
            path,
            label=label,
            base_url=self.base_url,
            timeout_s=self.timeout_s,
            policy=self.retry_policy,
            params=params,
        )
        status = resp.status_code
        ev = {"endpoint": endpoint, "status": status}
        if status in (401, 403):
            raise AuthFailed(f"OpenRouter {endpoint} -> {status}: {_error_reason(resp)}", evidence=ev)
        if status == 429 or status >= 500:
            raise TransportError(f"OpenRouter {endpoint} -> {status}: {_error_reason(resp)}", evidence=ev)
        if status >= 400:
            raise BadResponseError(f"OpenRouter {endpoint} -> {status}: {_error_reason(resp)}", evidence=ev)
        try:
            return loads_bounded(resp.content)
        except UnsafeInput as exc:
            raise BadResponseError(f"OpenRouter {endpoint}: {exc}", evidence=ev) from None
        except ValueError:
            raise BadResponseError(
                f"OpenRouter {endpoint}: body is not JSON: {excerpt(resp.text)!r}", evidence=ev
            ) from None

    def list_keys(self, *, include_disabled: bool = True) -> list[OpenRouterKey]:
        """Every key on the account: ``GET /keys`` paged by ``offset`` until a short page.

        Raises BadResponseError when the account has more than ``max_pages`` pages or the server
        answers the same page twice (an ignored ``offset``): a partial list is never returned.
        """
        keys: list[OpenRouterKey] = []
        seen: set[str] = set()
        self.pages_read = 0
        for page in range(self.max_pages):
            params: dict[str, str | int] = {"offset": page * PAGE_SIZE}
            if include_disabled:
                params["include_disabled"] = "true"
            rows = self._rows(self._get("/keys", params))
            self.pages_read += 1
            fresh = [k for k in rows if k.hash not in seen]
            if rows and not fresh:
                raise BadResponseError(
                    f"OpenRouter GET /keys: page at offset {page * PAGE_SIZE} repeats earlier keys "
                    "(offset ignored?); the list would be incomplete",
                    evidence={"endpoint": "GET /keys", "offset": page * PAGE_SIZE},
                )
            keys.extend(fresh)
            seen.update(k.hash for k in fresh)
            if len(rows) < PAGE_SIZE:
                return keys
        raise BadResponseError(
            f"OpenRouter GET /keys: more than {self.max_pages} pages of {PAGE_SIZE}; refusing a partial list",
            evidence={"endpoint": "GET /keys", "pages": self.max_pages},
        )

    def key_info(self) -> dict[str, Any]:
        """``GET /key``: what the key in use is (its ``data``: label, limit, usage, is_provisioning_key)."""
        doc = self._get("/key", {})
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, dict):
            raise BadResponseError(
                'OpenRouter GET /key: expected {"data": {...}}', evidence={"endpoint": "GET /key"}
            )
        return data

    def credits(self) -> AccountCredits:
        """``GET /credits`` (provisioning key): the account's purchased credits and total usage, in USD."""
        doc = self._get("/credits", {})
        data = doc.get("data") if isinstance(doc, dict) else None
        try:
            return AccountCredits.model_validate(data)
        except ValidationError as exc:
            raise BadResponseError(
                f"OpenRouter GET /credits: expected {{data: {{total_credits, total_usage}}}} "
                f"({validation_summary(exc)})",
                evidence={"endpoint": "GET /credits"},
            ) from None

    @staticmethod
    def _rows(doc: Any) -> list[OpenRouterKey]:
        rows = doc.get("data") if isinstance(doc, dict) else doc
        if not isinstance(rows, list):
            shape = f"keys {sorted(doc)[:8]}" if isinstance(doc, dict) else type(doc).__name__
            raise BadResponseError(
                f'OpenRouter GET /keys: expected {{"data": [...]}}, got {shape}',
                evidence={"endpoint": "GET /keys"},
            )
        try:
            return [OpenRouterKey.model_validate(r) for r in rows]
        except ValidationError as exc:
            raise BadResponseError(
                f"OpenRouter GET /keys: a row is not key metadata ({validation_summary(exc)})",
                evidence={"endpoint": "GET /keys"},
            ) from None
