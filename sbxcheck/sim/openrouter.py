"""An in-process double of the OpenRouter API subset SSSF uses (specs/sssf-sandbox.md, 5).

State lives on :class:`OpenRouterDouble`; ``.app`` is a Starlette app to serve with
:class:`sbxcheck.sim.httpserver.BackgroundServer`. Tests steer behaviour per key through the
:class:`KeyState` knobs (``reasoning_only``, ``models_down``, ``latency_s``, ``disabled``) and
read :attr:`OpenRouterDouble.requests`, which never holds a secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

KEY_PREFIX = "sk-or-v1-"
PAGE_SIZE = 100
_KEY_RE = re.compile(r"sk-or-v1-[0-9a-f]{64}")
_HASH_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ModelRates:
    """Dollars per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float


# The models.json template rates (specs/sssf-sandbox.md, 4), pulled live 2026-08-04.
DEFAULT_CATALOG: dict[str, ModelRates] = {
    "deepseek/deepseek-v4-flash-0731": ModelRates(0.09, 0.18, 0.018, 0.0),
    "openai/gpt-5.6-luna": ModelRates(0.1, 0.6, 0.01, 0.125),
    "z-ai/glm-5.2": ModelRates(0.76, 2.42, 0.14, 0.0),
    "openai/gpt-5.6-terra": ModelRates(1.0, 6.0, 0.1, 1.25),
    "google/gemini-3.6-flash": ModelRates(1.5, 7.5, 0.15, 0.0833),
    "anthropic/claude-sonnet-5": ModelRates(2.0, 10.0, 0.2, 2.5),
    "x-ai/grok-4.5": ModelRates(2.0, 6.0, 0.3, 0.0),
    "moonshotai/kimi-k3": ModelRates(3.0, 15.0, 0.3, 0.0),
    "anthropic/claude-opus-5": ModelRates(5.0, 25.0, 0.5, 6.25),
    "openai/gpt-5.6-sol": ModelRates(5.0, 30.0, 0.5, 6.25),
}


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _new_secret() -> str:
    return KEY_PREFIX + secrets.token_hex(32)


def _label(secret: str) -> str:
    """OpenRouter's display label: prefix, three hex digits, ellipsis, three hex digits."""
    body = secret[len(KEY_PREFIX) :]
    return f"{KEY_PREFIX}{body[:3]}...{body[-3:]}"


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


@dataclass
class KeyState:
    """One runtime key. Mutable knobs: ``reasoning_only``, ``models_down``, ``latency_s``, ``disabled``."""

    hash: str
    name: str
    secret: str = field(repr=False)
    label: str
    limit: float | None
    created_at: str
    usage: float = 0.0
    disabled: bool = False
    deleted: bool = False
    updated_at: str | None = None
    reasoning_only: bool = False
    models_down: set[str] = field(default_factory=set)
    latency_s: float = 0.0
    hostile_text: str = ""  # hostile text appended to every answer and error text of this key

    @property
    def limit_remaining(self) -> float | None:
        """``limit - usage`` floored at 0, or None when uncapped."""
        return None if self.limit is None else max(0.0, self.limit - self.usage)

    @property
    def exhausted(self) -> bool:
        """True when capped and the usage has reached the limit."""
        return self.limit is not None and self.usage >= self.limit

    def meta(self) -> dict[str, Any]:
        """The key's metadata as ``/keys`` shows it (never the secret)."""
        return {
            "hash": self.hash,
            "name": self.name,
            "label": self.label,
            "disabled": self.disabled,
            "limit": self.limit,
            "limit_remaining": self.limit_remaining,
            "limit_reset": None,
            "include_byok_in_limit": False,
            "usage": self.usage,
            "usage_daily": self.usage,
            "usage_weekly": self.usage,
            "usage_monthly": self.usage,
            "byok_usage": 0.0,
            "byok_usage_daily": 0.0,
            "byok_usage_weekly": 0.0,
            "byok_usage_monthly": 0.0,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expires_at": None,
        }


@dataclass(frozen=True)
class RequestRecord:
    """One request the double answered. Never holds a secret."""

    method: str
    path: str
    status: int
    key_hash: str | None
    model: str | None


_PROVISIONING = object()


class OpenRouterDouble:
    """State and Starlette app for the OpenRouter subset SSSF uses. Thread-safe."""

    def __init__(self, *, catalog: dict[str, ModelRates] | None = None, total_credits: float = 100.0) -> None:
        self._lock = threading.Lock()
        self.provisioning_key: str = _new_secret()
        self.catalog: dict[str, ModelRates] = dict(DEFAULT_CATALOG if catalog is None else catalog)
        self.total_credits = total_credits
        self._keys: dict[str, KeyState] = {}
        self._by_secret: dict[str, str] = {}
        self._log: list[RequestRecord] = []
        self.ignore_deletes = False  # openrouter.revoke-ignored: DELETE says yes and does nothing
        self.app = Starlette(
            routes=[
                Route("/api/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/api/v1/key", self._key_info, methods=["GET"]),
                Route("/api/v1/keys", self._keys_root, methods=["GET", "POST"]),
                Route("/api/v1/keys/{key_hash}", self._key_item, methods=["GET", "DELETE"]),
                Route("/api/v1/credits", self._credits, methods=["GET"]),
            ]
        )

    # ---- state API for tests and the simulator -------------------------------------------

    def mint(self, name: str, limit: float | None = None) -> tuple[str, str]:
        """Create a runtime key; return ``(secret, hash)``."""
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0 or None")
        secret = _new_secret()
        key_hash = hashlib.sha256(secret.encode()).hexdigest()
        state = KeyState(
            hash=key_hash,
            name=name,
            secret=secret,
            label=_label(secret),
            limit=None if limit is None else float(limit),
            created_at=_now_iso(),
        )
        with self._lock:
            self._keys[key_hash] = state
            self._by_secret[secret] = key_hash
        return secret, key_hash

    def key(self, key_hash: str) -> KeyState:
        """The live state of a key (deleted ones included); KeyError if never minted."""
        with self._lock:
            return self._keys[key_hash]

    def keys(self, *, include_deleted: bool = False) -> list[KeyState]:
        """All keys in creation order."""
        with self._lock:
            return [k for k in self._keys.values() if include_deleted or not k.deleted]

    def set_usage(self, key_hash: str, usage: float) -> None:
        """Set a key's spend in dollars."""
        with self._lock:
            state = self._keys[key_hash]
            state.usage = float(usage)
            state.updated_at = _now_iso()

    def set_limit(self, key_hash: str, limit: float | None) -> None:
        """Set a key's cap in dollars, or None for uncapped."""
        with self._lock:
            state = self._keys[key_hash]
            state.limit = None if limit is None else float(limit)
            state.updated_at = _now_iso()

    def delete(self, key_hash: str) -> bool:
        """Revoke a key; False if unknown or already deleted (``ignore_deletes``: say yes, do nothing)."""
        with self._lock:
            state = self._keys.get(key_hash)
            if state is None or state.deleted:
                return False
            if self.ignore_deletes:  # openrouter.revoke-ignored: the delete is answered, not done
                return True
            state.deleted = True
            state.updated_at = _now_iso()
            return True

    @property
    def requests(self) -> list[RequestRecord]:
        """A copy of the request log."""
        with self._lock:
            return list(self._log)

    def clear_requests(self) -> None:
        """Forget the request log."""
        with self._lock:
            self._log.clear()

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """Dollars charged for a call, from the catalog's per-million rates."""
        rates = self.catalog[model]
        return (prompt_tokens * rates.input + completion_tokens * rates.output) / 1e6

    # ---- HTTP helpers ---------------------------------------------------------------------

    def _record(self, request: Request, status: int, key_hash: str | None, model: str | None) -> None:
        with self._lock:
            self._log.append(RequestRecord(request.method, request.url.path, status, key_hash, model))

    def _error(
        self,
        request: Request,
        status: int,
        message: str,
        key_hash: str | None = None,
        model: str | None = None,
    ) -> JSONResponse:
        self._record(request, status, key_hash, model)
        return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)

    def _ok(
        self, request: Request, body: dict[str, Any], status: int = 200, key_hash: str | None = None
    ) -> JSONResponse:
        self._record(request, status, key_hash, None)
        return JSONResponse(body, status_code=status)

    def _who(self, request: Request) -> object | KeyState | None:
        """``_PROVISIONING``, the caller's KeyState (even if deleted), or None when unknown."""
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not _KEY_RE.fullmatch(token):
            return None
        with self._lock:
            if secrets.compare_digest(token, self.provisioning_key):
                return _PROVISIONING
            key_hash = self._by_secret.get(token)
            return None if key_hash is None else self._keys[key_hash]

    def _management(self, request: Request) -> JSONResponse | None:
        """None when the caller holds the provisioning key, else the error response."""
        who = self._who(request)
        if who is _PROVISIONING:
            return None
        if isinstance(who, KeyState) and not who.deleted:
            return self._error(request, 403, "Only provisioning keys can manage API keys", who.hash)
        return self._error(request, 401, "User not found")

    # ---- chat completions -----------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        who = self._who(request)
        if who is _PROVISIONING:
            return self._error(request, 401, "User not found")
        if not isinstance(who, KeyState) or who.deleted:
            return self._error(request, 401, "User not found")
        key = who
        if key.disabled:
            return self._error(request, 401, "Key is disabled", key.hash)
        with self._lock:
            exhausted = key.exhausted
        if exhausted:
            return self._error(
                request,
                402,
                "Insufficient credits. Add more using https://openrouter.ai/settings/credits",
                key.hash,
            )
        try:
            body = json.loads(await request.body())
        except ValueError:
            return self._error(request, 400, "Invalid JSON in request body", key.hash)
        if not isinstance(body, dict):
            return self._error(request, 400, "Request body must be a JSON object", key.hash)
        model = body.get("model")
        if not isinstance(model, str) or model not in self.catalog or model in key.models_down:
            shown = model if isinstance(model, str) else json.dumps(model)
            return self._error(request, 400, f"{shown} is not a valid model ID{key.hostile_text}", key.hash, shown)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self._error(request, 400, "messages must be a non-empty array", key.hash, model)

        prompt_text, last_user = _message_texts(messages)
        reply = "pong" if "ping" in last_user.lower() else f"This is a simulated reply from {model}."
        reply += key.hostile_text
        prompt_tokens, completion_tokens = _tokens(prompt_text), _tokens(reply)
        cost = self.cost(model, prompt_tokens, completion_tokens)
        usage = _usage(prompt_tokens, completion_tokens, cost, self.catalog[model])
        with self._lock:
            key.usage += cost
            key.updated_at = _now_iso()
        reasoning_only, latency_s = key.reasoning_only, key.latency_s
        gen_id = f"gen-{int(time.time())}-{secrets.token_hex(8)}"
        created = int(time.time())
        self._record(request, 200, key.hash, model)

        if body.get("stream") is True:
            return StreamingResponse(
                _sse(gen_id, created, model, reply, usage, reasoning_only, latency_s),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        if latency_s > 0:
            await asyncio.sleep(latency_s)
        message = {
            "role": "assistant",
            "content": None if reasoning_only else reply,
            "reasoning": reply if reasoning_only else None,
        }
        return JSONResponse(
            {
                "id": gen_id,
                "provider": "Sim",
                "model": model,
                "object": "chat.completion",
                "created": created,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": "stop", "native_finish_reason": "stop"}
                ],
                "usage": usage,
            }
        )

    # ---- key endpoints --------------------------------------------------------------------

    async def _key_info(self, request: Request) -> Response:
        who = self._who(request)
        if who is _PROVISIONING:
            data = self._key_data(_label(self.provisioning_key), None, 0.0, provisioning=True)
            return self._ok(request, {"data": data})
        if not isinstance(who, KeyState):
            return self._error(request, 401, "User not found")
        # A deleted key still answers 200 here: measured upstream (specs/sssf-sandbox.md, 5).
        with self._lock:
            data = self._key_data(who.label, who.limit, who.usage, provisioning=False)
        return self._ok(request, {"data": data}, key_hash=who.hash)

    @staticmethod
    def _key_data(label: str, limit: float | None, usage: float, *, provisioning: bool) -> dict[str, Any]:
        return {
            "label": label,
            "limit": limit,
            "usage": usage,
            "limit_remaining": None if limit is None else max(0.0, limit - usage),
            "is_free_tier": False,
            "is_provisioning_key": provisioning,
            "is_management_key": provisioning,
            "rate_limit": {
                "requests": -1,
                "interval": "10s",
                "note": "This field is deprecated and safe to ignore.",
            },
            "limit_reset": None,
            "include_byok_in_limit": False,
            "usage_daily": usage,
            "usage_weekly": usage,
            "usage_monthly": usage,
            "expires_at": None,
        }

    async def _keys_root(self, request: Request) -> Response:
        denied = self._management(request)
        if denied is not None:
            return denied
        if request.method == "POST":
            return await self._create(request)
        try:
            offset = int(request.query_params.get("offset", "0"))
        except ValueError:
            return self._error(request, 400, "offset must be an integer")
        if offset < 0:
            return self._error(request, 400, "offset must be >= 0")
        include_disabled = request.query_params.get("include_disabled", "false").lower() == "true"
        with self._lock:
            visible = [
                k.meta()
                for k in self._keys.values()
                if not k.deleted and (include_disabled or not k.disabled)
            ]
        return self._ok(request, {"data": visible[offset : offset + PAGE_SIZE]})

    async def _create(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return self._error(request, 400, "Invalid JSON in request body")
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
            return self._error(request, 400, "name is required")
        limit = body.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 0):
            return self._error(request, 400, "limit must be a non-negative number or null")
        secret, key_hash = self.mint(body["name"], limit)
        with self._lock:
            meta = self._keys[key_hash].meta()
        return self._ok(request, {"key": secret, "data": meta}, status=201, key_hash=key_hash)

    async def _key_item(self, request: Request) -> Response:
        denied = self._management(request)
        if denied is not None:
            return denied
        key_hash = request.path_params["key_hash"]
        known = _HASH_RE.fullmatch(key_hash) is not None
        if request.method == "DELETE":
            if known and self.delete(key_hash):
                return self._ok(request, {"deleted": True}, key_hash=key_hash)
            return self._error(request, 404, "Key not found", key_hash if known else None)
        with self._lock:
            state = self._keys.get(key_hash)
            meta = None if state is None or state.deleted else state.meta()
        if meta is None:
            return self._error(request, 404, "Key not found", key_hash if known else None)
        return self._ok(request, {"data": meta}, key_hash=key_hash)

    def total_usage(self) -> float:
        """What every key of the account has used so far (USD)."""
        with self._lock:
            return sum(k.usage for k in self._keys.values())

    async def _credits(self, request: Request) -> Response:
        denied = self._management(request)
        if denied is not None:
            return denied
        total_usage = self.total_usage()
        return self._ok(request, {"data": {"total_credits": self.total_credits, "total_usage": total_usage}})


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def _message_texts(messages: list[Any]) -> tuple[str, str]:
    """All message text joined, and the last user message's text."""
    every: list[str] = []
    last_user = ""
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        text = _content_text(msg.get("content"))
        every.append(text)
        if msg.get("role") == "user":
            last_user = text
    return "\n".join(every), last_user


def _usage(prompt_tokens: int, completion_tokens: int, cost: float, rates: ModelRates) -> dict[str, Any]:
    """OpenRouter's usage object: token counts and what the call was billed (``cost``; ``is_byok`` false).

    As OpenRouter's usage accounting reports it (openrouter.ai/docs/use-cases/usage-accounting): pi from
    pi-ai 1.5.0 takes ``cost`` as its total when ``is_byok`` is false (``cost.totalFromProvider``).
    """
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "cost": cost,
        "is_byok": False,
        "prompt_tokens_details": {"cached_tokens": 0},
        "cost_details": {
            "upstream_inference_cost": None,
            "upstream_inference_prompt_cost": prompt_tokens * rates.input / 1e6,
            "upstream_inference_completions_cost": completion_tokens * rates.output / 1e6,
        },
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _chunk(gen_id: str, created: int, model: str, delta: dict[str, Any], **extra: Any) -> str:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None, "native_finish_reason": None}
    choice.update({k: v for k, v in extra.items() if k in ("finish_reason", "native_finish_reason")})
    body: dict[str, Any] = {
        "id": gen_id,
        "provider": "Sim",
        "model": model,
        "object": "chat.completion.chunk",
        "created": created,
        "choices": [choice],
    }
    if "usage" in extra:
        body["usage"] = extra["usage"]
    return f"data: {json.dumps(body)}\n\n"


async def _sse(
    gen_id: str,
    created: int,
    model: str,
    reply: str,
    usage: dict[str, Any],
    reasoning_only: bool,
    latency_s: float,
) -> AsyncIterator[str]:
    """OpenRouter-style SSE: a processing comment, deltas, a finish+usage chunk, ``[DONE]``."""
    yield ": OPENROUTER PROCESSING\n\n"
    if latency_s > 0:
        await asyncio.sleep(latency_s)
    for piece in re.findall(r"\S+\s*", reply) or [reply]:
        if reasoning_only:
            delta = {"role": "assistant", "content": "", "reasoning": piece}
        else:
            delta = {"role": "assistant", "content": piece, "reasoning": None}
        yield _chunk(gen_id, created, model, delta)
    yield _chunk(
        gen_id,
        created,
        model,
        {"role": "assistant", "content": ""},
        finish_reason="stop",
        native_finish_reason="stop",
        usage=usage,
    )
    yield "data: [DONE]\n\n"
