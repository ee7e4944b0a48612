#!/usr/bin/env python3
"""sbxcheck stand-in for the pi coding agent CLI (@mariozechner/pi-coding-agent 0.73.1).

Used by the simulated fleet only where npm is absent; stdlib only, Python >= 3.8. ``--version``
prints ``0.73.1 (sbxcheck stand-in)`` so a report can tell it from the real pi.

Observed from the real pi 0.73.1 (node 20) against sbxcheck's OpenRouter double, and copied here:

* stdout takeover: unless pi is interactive (stdin a TTY, no ``-p``/``--mode``), everything it prints
  with console.log goes to **stderr**: ``--version``, the ``--list-models`` table and the
  "No models available" text. With ``stdin=/dev/null`` stdout is empty for those. Only the JSON event
  lines (``--mode json``) and the final answer (``-p`` text mode) go to the real stdout.
* ``--version`` prints ``0.73.1``, exit 0.
* ``--list-models``: header ``provider  model  context  max-out  thinking  images`` and rows, columns
  padded with padEnd and joined by two spaces (the last column padded too), sorted by provider then
  id with ICU collation (``~`` aliases first). A models.json ``openrouter`` provider with an apiKey
  makes pi's 275 built-in openrouter models available: they are listed with the custom models (a
  custom model replaces a built-in one with the same id) and use the provider's ``baseUrl``. Counts:
  ``1M``, ``1.0M``, ``262.1K``, ``65.5K``, ``128K``, ``16.4K``. Defaults without limits: 128000 /
  16384 / no / no. Exit 0.
* No models.json: ``No models available. Use /login to log into a provider via OAuth or API key.
  See:`` then two indented docs paths (``.../docs/providers.md``, ``.../docs/models.md``), exit 0.
* Invalid JSON: stderr ``Warning: errors loading models.json:`` / ``Failed to parse models.json:
  Expected property name or '}' in JSON at position 1`` / blank / ``File: <path>``, then the no-models
  text, exit 0.
* A cost block missing a key: stderr ``Warning: errors loading models.json:`` / ``Invalid models.json
  schema:`` / ``  - providers.openrouter.models.1.cost.cacheWrite: must have required properties
  cacheWrite`` / blank / ``File: <path>``, then the no-models text, exit 0. The whole file is dropped,
  apiKey included, so the built-in rows vanish too. An empty ``models`` list keeps the built-ins.
* ``-p --mode json``: lines ``session`` (version 3, id, timestamp, cwd), ``agent_start``,
  ``turn_start``, ``message_start``/``message_end`` (user), ``message_start`` (assistant, empty, zero
  usage), ``message_update`` (``text_start``, one ``text_delta`` per SSE delta, ``text_end``; each with
  ``partial`` and ``message``), ``message_end``, ``turn_end`` (``toolResults: []``), ``agent_end``;
  exit 0. ``usage`` = {input: prompt_tokens - cached, output: completion_tokens, cacheRead,
  cacheWrite, totalTokens, cost{input, output, cacheRead, cacheWrite, total}} with cost = rate x
  tokens / 1e6 from models.json; all 0 without a cost block. Text mode prints the answer + newline.
* Reasoning-only stream (``content: ""``, text in ``reasoning``): ``thinking_start``/``thinking_delta``
  /``thinking_end``, content ``[{"type": "thinking", "thinking": "pong", "thinkingSignature":
  "reasoning"}]``, stopReason ``stop``, exit 0. Text mode prints nothing, exit 0.
* HTTP errors: no ``message_update``; the assistant message has ``content: []``, ``stopReason:
  "error"`` and ``errorMessage`` ``"<status> <error.message>"``: ``402 Insufficient credits. Add more
  using https://openrouter.ai/settings/credits``, ``401 User not found`` (provisioning key),
  ``400 z-ai/glm-5.2 is not a valid model ID``. **Exit 0 in json mode**; text mode prints the
  errorMessage to stderr and exits 1. Not retried (one request).
* Connection refused: errorMessage ``Connection error.``, then auto-retry: ``auto_retry_start``
  {attempt, maxAttempts: 3, delayMs: 2000/4000/8000, errorMessage}, a fresh agent_start..agent_end per
  attempt, finally ``auto_retry_end`` {success: false, attempt: 3, finalError}; exit 0 after ~20 s.
  ``~/.pi/agent/settings.json`` ``retry.{enabled,maxRetries,baseDelayMs}`` tunes it.
* A model id unknown for a known provider: stderr ``Warning: Model "foo/x" not found for provider
  "openrouter". Using custom model id.``, and the request is sent anyway with the provider default
  model's metadata and rates (openrouter: moonshotai/kimi-k2.6).
* Unknown provider: stderr ``Error: Unknown provider "nosuch". Use --list-models to see available
  providers/models.``, exit 1. Unknown option: ``Error: Unknown option: --session-id`` (0.73.1 has no
  ``--session-id``), exit 1.
* No usable models.json with ``-p``: the session line on stdout, then stderr ``No API key found for
  openrouter.`` / blank / the /login help, exit 1.
* Request: ``POST {baseUrl}/chat/completions``, ``Authorization: Bearer <apiKey>``, body ``model``,
  ``messages`` (``developer`` role for reasoning models, else ``system``; user content as text parts),
  ``stream: true``, ``stream_options.include_usage``, ``store: false``, ``max_completion_tokens``
  (min(maxTokens, 32000)), ``reasoning.effort`` (default ``medium``) for reasoning models.
* apiKey: ``!cmd`` runs the command; otherwise an env var of that name if set; otherwise the literal.
* pi reads piped stdin to EOF before prompting (hangs on an inherited open pipe): give it /dev/null.
* pi honours ``PI_CODING_AGENT_DIR``, not ``PI_MODELS_PATH``; the stand-in honours both
  (``PI_MODELS_PATH`` first, the SSSF convention).

Not reproduced: tools, extensions (``-e`` is accepted and ignored), session files, @file arguments,
the OpenAI SDK's own retries, pi's long system prompt, and the exact text of JSON parse errors.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

VERSION = "0.73.1"
DOCS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "docs")
OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
_BUILTIN_PROVIDER_NAMES = (
    "amazon-bedrock anthropic azure-openai-responses cerebras cloudflare-ai-gateway cloudflare-workers-ai "
    "deepseek fireworks github-copilot google google-vertex groq huggingface kimi-coding minimax minimax-cn "
    "mistral moonshotai moonshotai-cn openai openai-codex opencode opencode-go openrouter vercel-ai-gateway "
    "xai xiaomi xiaomi-token-plan-ams xiaomi-token-plan-cn xiaomi-token-plan-sgp zai"
)
BUILTIN_PROVIDERS = frozenset(_BUILTIN_PROVIDER_NAMES.split())
ENV_KEYS = {"openrouter": "OPENROUTER_API_KEY", "openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
DEFAULT_MODEL = {"openrouter": "moonshotai/kimi-k2.6"}
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")

# A few of pi 0.73.1's 275 built-in openrouter models:
# (id, reasoning, images, input, output, cacheRead, cacheWrite, contextWindow, maxTokens).
BUILTIN_OPENROUTER = (
    ("~anthropic/claude-haiku-latest", True, True, 1.0, 5.0, 0.1, 1.25, 200000, 64000),
    ("~google/gemini-flash-latest", True, True, 0.5, 3.0, 0.05, 0.0833, 1048576, 65536),
    ("anthropic/claude-sonnet-4.5", True, True, 3.0, 15.0, 0.3, 3.75, 1000000, 64000),
    ("deepseek/deepseek-chat", False, False, 0.32, 0.89, 0.0, 0.0, 163840, 16384),
    ("deepseek/deepseek-v3.2", True, False, 0.252, 0.378, 0.0252, 0.0, 131072, 65536),
    ("google/gemini-2.5-flash", True, True, 0.3, 2.5, 0.03, 0.0833, 1048576, 65535),
    ("moonshotai/kimi-k2.6", True, True, 0.75, 3.5, 0.15, 0.0, 262144, 16384),
    ("openai/gpt-5-mini", True, True, 0.25, 2.0, 0.025, 0.0, 400000, 128000),
    ("x-ai/grok-4-fast", True, True, 0.2, 0.5, 0.05, 0.0, 2000000, 30000),
    ("z-ai/glm-5.1", True, False, 1.05, 3.5, 0.525, 0.0, 202752, 65535),
)

RETRYABLE = re.compile(
    r"overloaded|provider.?returned.?error|rate.?limit|too many requests|429|500|502|503|504|"
    r"service.?unavailable|server.?error|internal.?error|network.?error|connection.?error|"
    r"connection.?refused|connection.?lost|websocket.?closed|websocket.?error|other side closed|"
    r"fetch failed|upstream.?connect|reset before headers|socket hang up|ended without|"
    r"http2 request did not get a response|timed? out|timeout|terminated|retry delay",
    re.IGNORECASE,
)


class Model:
    """One model as pi's registry holds it."""

    def __init__(
        self,
        provider: str,
        mid: str,
        api: str,
        base_url: str,
        reasoning: bool,
        images: bool,
        cost: dict[str, float],
        context_window: float,
        max_tokens: float,
    ) -> None:
        self.provider = provider
        self.id = mid
        self.api = api
        self.base_url = base_url
        self.reasoning = reasoning
        self.images = images
        self.cost = cost
        self.context_window = context_window
        self.max_tokens = max_tokens

    def clone(self, mid: str) -> Model:
        return Model(
            self.provider,
            mid,
            self.api,
            self.base_url,
            self.reasoning,
            self.images,
            dict(self.cost),
            self.context_window,
            self.max_tokens,
        )


class Registry:
    """Built-in plus models.json models, the provider configs, and the load error (if any)."""

    def __init__(self) -> None:
        self.models: list[Model] = []
        self.providers: dict[str, dict[str, Any]] = {}
        self.error: str | None = None
        self.auth: dict[str, Any] = {}
        self.runtime_keys: dict[str, str] = {}

    def api_key(self, provider: str) -> str | None:
        if provider in self.runtime_keys:
            return self.runtime_keys[provider]
        entry = self.auth.get(provider)
        if isinstance(entry, dict) and isinstance(entry.get("key"), str) and entry["key"]:
            return resolve_config_value(entry["key"])
        configured = self.providers.get(provider, {}).get("apiKey")
        if isinstance(configured, str) and configured:
            return resolve_config_value(configured)
        env_name = ENV_KEYS.get(provider)
        if env_name and os.environ.get(env_name):
            return os.environ[env_name]
        return None

    def has_auth(self, provider: str) -> bool:
        if provider in self.runtime_keys or provider in self.auth:
            return True
        if self.providers.get(provider, {}).get("apiKey"):
            return True
        env_name = ENV_KEYS.get(provider)
        return bool(env_name and os.environ.get(env_name))

    def available(self) -> list[Model]:
        return [m for m in self.models if self.has_auth(m.provider)]


# ---------------------------------------------------------------------------------------------
# output


def stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):
        return False


class Out:
    """pi's streams: console output goes to stderr once stdout is taken over."""

    def __init__(self, takeover: bool) -> None:
        self.takeover = takeover

    def console(self, text: str) -> None:
        stream = sys.stderr if self.takeover else sys.stdout
        stream.write(text + "\n")
        stream.flush()

    @staticmethod
    def error(text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    @staticmethod
    def raw(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()


def login_help() -> str:
    return "\n".join(
        [
            "Use /login to log into a provider via OAuth or API key. See:",
            "  " + os.path.join(DOCS_DIR, "providers.md"),
            "  " + os.path.join(DOCS_DIR, "models.md"),
        ]
    )


# ---------------------------------------------------------------------------------------------
# arguments


class Args:
    def __init__(self) -> None:
        self.help = False
        self.version = False
        self.mode: str | None = None
        self.print = False
        self.provider: str | None = None
        self.model: str | None = None
        self.api_key: str | None = None
        self.system_prompt: str | None = None
        self.append_system_prompt: list[str] = []
        self.thinking: str | None = None
        self.list_models: Any = None
        self.messages: list[str] = []
        self.unknown_flags: list[str] = []
        self.errors: list[str] = []
        self.warnings: list[str] = []


_VALUE_FLAGS = {
    "--provider": "provider",
    "--model": "model",
    "--api-key": "api_key",
    "--system-prompt": "system_prompt",
}
_IGNORED_VALUE_FLAGS = {
    "--session",
    "--fork",
    "--session-dir",
    "--models",
    "--tools",
    "-t",
    "--extension",
    "-e",
    "--skill",
    "--prompt-template",
    "--theme",
    "--export",
}
_IGNORED_SWITCHES = {
    "--continue",
    "-c",
    "--resume",
    "-r",
    "--no-session",
    "--no-tools",
    "-nt",
    "--no-builtin-tools",
    "-nbt",
    "--no-extensions",
    "-ne",
    "--no-skills",
    "-ns",
    "--no-prompt-templates",
    "-np",
    "--no-themes",
    "--no-context-files",
    "-nc",
    "--verbose",
    "--offline",
}


def parse_args(argv: list[str]) -> Args:
    """pi 0.73.1's parseArgs, minus the features the stand-in does not model."""
    a = Args()
    i = 0
    while i < len(argv):
        arg = argv[i]
        has_next = i + 1 < len(argv)
        if arg in ("--help", "-h"):
            a.help = True
        elif arg in ("--version", "-v"):
            a.version = True
        elif arg == "--mode" and has_next:
            i += 1
            if argv[i] in ("text", "json", "rpc"):
                a.mode = argv[i]
        elif arg in _VALUE_FLAGS and has_next:
            i += 1
            setattr(a, _VALUE_FLAGS[arg], argv[i])
        elif arg == "--append-system-prompt" and has_next:
            i += 1
            a.append_system_prompt.append(argv[i])
        elif arg == "--thinking" and has_next:
            i += 1
            if argv[i] in THINKING_LEVELS:
                a.thinking = argv[i]
            else:
                a.warnings.append(
                    'Invalid thinking level "{}". Valid values: {}'.format(
                        argv[i], ", ".join(THINKING_LEVELS)
                    )
                )
        elif arg in ("--print", "-p"):
            a.print = True
            nxt = argv[i + 1] if has_next else None
            if (
                nxt is not None
                and not nxt.startswith("@")
                and (not nxt.startswith("-") or nxt.startswith("---"))
            ):
                a.messages.append(nxt)
                i += 1
        elif arg in _IGNORED_VALUE_FLAGS and has_next:
            i += 1
        elif arg in _IGNORED_SWITCHES:
            pass
        elif arg == "--list-models":
            if has_next and not argv[i + 1].startswith("-") and not argv[i + 1].startswith("@"):
                i += 1
                a.list_models = argv[i]
            else:
                a.list_models = True
        elif arg.startswith("@"):
            pass  # @file arguments are not modelled
        elif arg.startswith("--"):
            a.unknown_flags.append(arg[2:].split("=", 1)[0])
            nxt = argv[i + 1] if has_next else None
            if "=" not in arg and nxt is not None and not nxt.startswith("-") and not nxt.startswith("@"):
                i += 1
        elif arg.startswith("-"):
            a.errors.append("Unknown option: " + arg)
        else:
            a.messages.append(arg)
        i += 1
    return a


# ---------------------------------------------------------------------------------------------
# models.json


def agent_dir() -> str:
    env_dir = os.environ.get("PI_CODING_AGENT_DIR")
    if env_dir:
        return os.path.expanduser(env_dir)
    return os.path.join(os.path.expanduser("~"), ".pi", "agent")


def models_path() -> str:
    return os.environ.get("PI_MODELS_PATH") or os.path.join(agent_dir(), "models.json")


def resolve_config_value(value: str) -> str | None:
    """``!command`` → its stdout; an env var name → its value; anything else → itself."""
    if value.startswith("!"):
        try:
            out = subprocess.run(
                value[1:],
                shell=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        text = out.stdout.decode("utf-8", "replace").strip()
        return text if out.returncode == 0 and text else None
    return os.environ.get(value) or value


def strip_json_comments(text: str) -> str:
    text = re.sub(r'"(?:\\.|[^"\\])*"|//[^\n]*', lambda m: m.group(0) if m.group(0)[0] == '"' else "", text)
    return re.sub(
        r'"(?:\\.|[^"\\])*"|,(\s*[}\]])', lambda m: m.group(1) if m.group(1) is not None else m.group(0), text
    )


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_string(errors: list[str], path: str, obj: dict[str, Any], key: str) -> None:
    if key not in obj:
        return
    if not isinstance(obj[key], str):
        errors.append(f"{path}.{key}: must be string")
    elif not obj[key]:
        errors.append(f"{path}.{key}: must NOT have fewer than 1 characters")


def validate_schema(config: Any) -> list[str]:
    """The parts of pi's TypeBox schema that matter here, with TypeBox-style messages."""
    errors: list[str] = []
    if not isinstance(config, dict):
        return ["root: must be object"]
    if "providers" not in config:
        return ["providers: must have required properties providers"]
    providers = config["providers"]
    if not isinstance(providers, dict):
        return ["providers: must be object"]
    for pname, pconf in providers.items():
        ppath = f"providers.{pname}"
        if not isinstance(pconf, dict):
            errors.append(f"{ppath}: must be object")
            continue
        for key in ("name", "baseUrl", "apiKey", "api"):
            _check_string(errors, ppath, pconf, key)
        if "authHeader" in pconf and not isinstance(pconf["authHeader"], bool):
            errors.append(f"{ppath}.authHeader: must be boolean")
        if "models" not in pconf:
            continue
        models = pconf["models"]
        if not isinstance(models, list):
            errors.append(f"{ppath}.models: must be array")
            continue
        for idx, mdef in enumerate(models):
            mpath = f"{ppath}.models.{idx}"
            if not isinstance(mdef, dict):
                errors.append(f"{mpath}: must be object")
                continue
            if "id" not in mdef:
                errors.append(f"{mpath}.id: must have required properties id")
            else:
                _check_string(errors, mpath, mdef, "id")
            for key in ("name", "api", "baseUrl"):
                _check_string(errors, mpath, mdef, key)
            if "reasoning" in mdef and not isinstance(mdef["reasoning"], bool):
                errors.append(f"{mpath}.reasoning: must be boolean")
            for key in ("contextWindow", "maxTokens"):
                if key in mdef and not _is_number(mdef[key]):
                    errors.append(f"{mpath}.{key}: must be number")
            if "input" in mdef:
                inp = mdef["input"]
                if not isinstance(inp, list):
                    errors.append(f"{mpath}.input: must be array")
                else:
                    for j, item in enumerate(inp):
                        if item not in ("text", "image"):
                            errors.append(f"{mpath}.input.{j}: must match a schema in anyOf")
            if "cost" in mdef:
                cost = mdef["cost"]
                if not isinstance(cost, dict):
                    errors.append(f"{mpath}.cost: must be object")
                    continue
                for key in ("input", "output", "cacheRead", "cacheWrite"):
                    if key not in cost:
                        errors.append(f"{mpath}.cost.{key}: must have required properties {key}")
                    elif not _is_number(cost[key]):
                        errors.append(f"{mpath}.cost.{key}: must be number")
    return errors


def validate_config(config: dict[str, Any]) -> None:
    """pi's extra checks after the schema; raises ValueError with pi's message."""
    for pname, pconf in config["providers"].items():
        builtin = pname in BUILTIN_PROVIDERS
        models = pconf.get("models") or []
        if not models:
            if not (
                pconf.get("baseUrl")
                or pconf.get("headers")
                or pconf.get("compat")
                or pconf.get("modelOverrides")
            ):
                raise ValueError(
                    f'Provider {pname}: must specify "baseUrl", "headers", "compat", "modelOverrides", '
                    'or "models".'
                )
        elif not builtin:
            if not pconf.get("baseUrl"):
                raise ValueError(f'Provider {pname}: "baseUrl" is required when defining custom models.')
            if not pconf.get("apiKey"):
                raise ValueError(f'Provider {pname}: "apiKey" is required when defining custom models.')
        for mdef in models:
            if not pconf.get("api") and not mdef.get("api") and not builtin:
                raise ValueError(
                    'Provider {}, model {}: no "api" specified. Set at provider or model level.'.format(
                        pname, mdef.get("id")
                    )
                )
            if "contextWindow" in mdef and mdef["contextWindow"] <= 0:
                raise ValueError("Provider {}, model {}: invalid contextWindow".format(pname, mdef["id"]))
            if "maxTokens" in mdef and mdef["maxTokens"] <= 0:
                raise ValueError("Provider {}, model {}: invalid maxTokens".format(pname, mdef["id"]))


# Python's json messages → node's JSON.parse wording, for the common cases.
_JS_JSON_ERRORS = {
    "Expecting property name enclosed in double quotes": "Expected property name or '}'",
    "Expecting ',' delimiter": "Expected ',' or '}' after property value",
    "Expecting ':' delimiter": "Expected ':' after property name",
    "Expecting value": "Unexpected token",
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"Unexpected token '{name}'")


def load_registry() -> Registry:
    reg = Registry()
    path = models_path()
    config: dict[str, Any] | None = None
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as fh:
                parsed = json.loads(strip_json_comments(fh.read()), parse_constant=_reject_constant)
            problems = validate_schema(parsed)
            if problems:
                reg.error = "Invalid models.json schema:\n{}\n\nFile: {}".format(
                    "\n".join("  - " + p for p in problems), path
                )
            else:
                validate_config(parsed)
                config = parsed
        except json.JSONDecodeError as exc:
            msg = _JS_JSON_ERRORS.get(exc.msg, exc.msg)
            reg.error = f"Failed to parse models.json: {msg} in JSON at position {exc.pos}\n\nFile: {path}"
        except (ValueError, OSError, TypeError) as exc:
            reg.error = f"Failed to load models.json: {exc}\n\nFile: {path}"
    try:
        with open(os.path.join(agent_dir(), "auth.json"), encoding="utf-8") as fh:
            auth = json.load(fh)
        reg.auth = auth if isinstance(auth, dict) else {}
    except (OSError, ValueError):
        reg.auth = {}

    providers: dict[str, dict[str, Any]] = config["providers"] if config else {}
    reg.providers = providers
    or_base = providers.get("openrouter", {}).get("baseUrl") or OPENROUTER_BASE_URL
    models = [
        Model(
            "openrouter",
            mid,
            "openai-completions",
            or_base,
            reasoning,
            images,
            {"input": i, "output": o, "cacheRead": cr, "cacheWrite": cw},
            ctx,
            mx,
        )
        for (mid, reasoning, images, i, o, cr, cw, ctx, mx) in BUILTIN_OPENROUTER
    ]
    for pname, pconf in providers.items():
        for mdef in pconf.get("models") or []:
            api = (
                mdef.get("api")
                or pconf.get("api")
                or ("openai-completions" if pname == "openrouter" else None)
            )
            base = (
                mdef.get("baseUrl")
                or pconf.get("baseUrl")
                or (OPENROUTER_BASE_URL if pname == "openrouter" else None)
            )
            if not api or not base:
                continue
            cost = mdef.get("cost") or {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
            model = Model(
                pname,
                mdef["id"],
                api,
                base,
                bool(mdef.get("reasoning", False)),
                "image" in (mdef.get("input") or ["text"]),
                dict(cost),
                mdef.get("contextWindow", 128000),
                mdef.get("maxTokens", 16384),
            )
            same = [k for k, m in enumerate(models) if m.provider == pname and m.id == model.id]
            if same:
                models[same[0]] = model
            else:
                models.append(model)
    reg.models = models
    return reg


# ---------------------------------------------------------------------------------------------
# --list-models

_PUNCT = "_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$"


def collation_key(text: str) -> list[tuple[int, int]]:
    """Approximates ICU root collation (JS localeCompare): punctuation < digits < letters."""
    key = []
    for ch in text:
        if ch in _PUNCT:
            key.append((0, _PUNCT.index(ch)))
        elif ch.isdigit():
            key.append((1, ord(ch)))
        elif ch.isalpha():
            key.append((2, ord(ch.lower())))
        else:
            key.append((0, -1))
    return key


def format_count(count: float) -> str:
    """pi's formatTokenCount: 200000 → 200K, 1000000 → 1M, 1048576 → 1.0M, 16384 → 16.4K."""
    for size, suffix in ((1000000, "M"), (1000, "K")):
        if count >= size:
            value = count / size
            if value == int(value):
                return f"{int(value)}{suffix}"
            # JS toFixed(1) rounds half away from zero on the exact binary value.
            return "{}{}".format(Decimal(value).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP), suffix)
    return str(int(count)) if count == int(count) else str(count)


def list_models(reg: Registry, out: Out, pattern: str | None) -> None:
    if reg.error:
        out.error("Warning: errors loading models.json:\n" + reg.error)
    models = reg.available()
    if not models:
        out.console("No models available. " + login_help())
        return
    if pattern:
        needle = pattern.lower()
        models = [m for m in models if needle in (f"{m.provider} {m.id}").lower()]
        if not models:
            out.console(f'No models matching "{pattern}"')
            return
    models.sort(key=lambda m: (collation_key(m.provider), collation_key(m.id)))
    header = ["provider", "model", "context", "max-out", "thinking", "images"]
    rows = [
        [
            m.provider,
            m.id,
            format_count(m.context_window),
            format_count(m.max_tokens),
            "yes" if m.reasoning else "no",
            "yes" if m.images else "no",
        ]
        for m in models
    ]
    widths = [max(len(header[c]), *(len(r[c]) for r in rows)) for c in range(6)]
    for row in [header, *rows]:
        out.console("  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)))


# ---------------------------------------------------------------------------------------------
# model resolution


def _is_alias(mid: str) -> bool:
    return mid.endswith("-latest") or not re.search(r"-\d{8}$", mid)


def resolve_model(
    reg: Registry, provider: str | None, model: str
) -> tuple[Model | None, str | None, str | None]:
    """pi's resolveCliModel, simplified: returns (model, warning, error)."""
    known = {m.provider.lower(): m.provider for m in reg.models}
    for pname in BUILTIN_PROVIDERS:
        known.setdefault(pname, pname)
    canonical = known.get(provider.lower()) if provider else None
    if provider and not canonical:
        return (
            None,
            None,
            f'Unknown provider "{provider}". Use --list-models to see available providers/models.',
        )
    pattern = model
    if canonical and model.lower().startswith(canonical.lower() + "/"):
        pattern = model[len(canonical) + 1 :]
    elif not canonical:
        lower = model.lower()
        for m in reg.models:
            if m.id.lower() == lower or (f"{m.provider}/{m.id}").lower() == lower:
                return m, None, None
        head, sep, tail = model.partition("/")
        if sep and head.lower() in known:
            canonical, pattern = known[head.lower()], tail
    candidates = [m for m in reg.models if canonical is None or m.provider == canonical]
    for m in candidates:
        if m.id.lower() == pattern.lower():
            return m, None, None
    partial = [m for m in candidates if pattern.lower() in m.id.lower()]
    if partial:
        aliases = [m for m in partial if _is_alias(m.id)] or partial
        aliases.sort(key=lambda m: collation_key(m.id), reverse=True)
        return aliases[0], None, None
    if canonical:
        base_models = [m for m in reg.models if m.provider == canonical]
        default_id = DEFAULT_MODEL.get(canonical)
        base = next((m for m in base_models if m.id == default_id), base_models[0] if base_models else None)
        if base is None:
            base = Model(
                canonical,
                pattern,
                "openai-completions",
                OPENROUTER_BASE_URL,
                False,
                False,
                {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                128000,
                16384,
            )
        warning = f'Model "{pattern}" not found for provider "{canonical}". Using custom model id.'
        return base.clone(pattern), warning, None
    return None, None, f'Model "{model}" not found. Use --list-models to see available models.'


# ---------------------------------------------------------------------------------------------
# the agent run


def now_ms() -> int:
    return int(time.time() * 1000)


def iso_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def uuid7() -> str:
    ms = now_ms() & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (
        (ms << 80) | (0x7 << 76) | (((rand >> 62) & 0xFFF) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    )
    return str(uuid.UUID(int=value))


def zero_usage() -> dict[str, Any]:
    return {
        "input": 0,
        "output": 0,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 0,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


def parse_usage(raw: dict[str, Any], model: Model) -> dict[str, Any]:
    """pi-ai's parseChunkUsage + calculateCost."""
    prompt = raw.get("prompt_tokens") or 0
    details = raw.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    if cached is None:
        cached = raw.get("prompt_cache_hit_tokens") or 0
    cache_write = details.get("cache_write_tokens") or 0
    cache_read = max(0, cached - cache_write) if cache_write > 0 else cached
    inp = max(0, prompt - cache_read - cache_write)
    out = raw.get("completion_tokens") or 0
    cost = {
        "input": model.cost["input"] / 1e6 * inp,
        "output": model.cost["output"] / 1e6 * out,
        "cacheRead": model.cost["cacheRead"] / 1e6 * cache_read,
        "cacheWrite": model.cost["cacheWrite"] / 1e6 * cache_write,
    }
    cost["total"] = cost["input"] + cost["output"] + cost["cacheRead"] + cost["cacheWrite"]
    cost = {k: int(v) if v == 0 else v for k, v in cost.items()}  # JSON.stringify prints 0, not 0.0
    return {
        "input": inp,
        "output": out,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": inp + out + cache_read + cache_write,
        "cost": cost,
    }


def map_stop_reason(reason: Any) -> tuple[str, str | None]:
    if reason is None or reason in ("stop", "end"):
        return "stop", None
    if reason == "length":
        return "length", None
    if reason in ("function_call", "tool_calls"):
        return "toolUse", None
    return "error", f"Provider finish_reason: {reason}"


def api_error_message(status: int, body: str) -> str:
    """The OpenAI SDK's APIError message for an HTTP error."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if data is None:
        return f"{status} {body}" if body else f"{status} status code (no body)"
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and err.get("message"):
        msg = err["message"] if isinstance(err["message"], str) else json.dumps(err["message"])
        raw = (err.get("metadata") or {}).get("raw") if isinstance(err.get("metadata"), dict) else None
        return f"{status} {msg}" + (f"\n{raw}" if raw else "")
    if err:
        return f"{status} {json.dumps(err, separators=(',', ':'))}"
    return f"{status} status code (no body)"


def read_settings() -> dict[str, Any]:
    try:
        with open(os.path.join(agent_dir(), "settings.json"), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


class Agent:
    """A single-turn pi agent: streams one chat completion per attempt and emits pi's events."""

    def __init__(
        self, model: Model, api_key: str, system_prompt: str, thinking: str, mode: str, out: Out
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.thinking = thinking
        self.mode = mode
        self.out = out
        self.context: list[dict[str, Any]] = []
        self.system_prompt = system_prompt
        settings = read_settings()
        retry: dict[str, Any] = settings["retry"] if isinstance(settings.get("retry"), dict) else {}
        self.retry_enabled = retry.get("enabled", True) is not False
        self.max_retries = int(retry.get("maxRetries", 3))
        self.base_delay_ms = float(retry.get("baseDelayMs", 2000))
        provider: dict[str, Any] = retry["provider"] if isinstance(retry.get("provider"), dict) else {}
        self.timeout_s = float(provider.get("timeoutMs", 600000)) / 1000.0
        self.last: dict[str, Any] | None = None
        self.retry_attempt = 0

    def emit(self, event: dict[str, Any]) -> None:
        if self.mode == "json":
            self.out.raw(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")

    def prompt(self, text: str) -> None:
        first: dict[str, Any] = {
            "role": "user",
            "content": [{"type": "text", "text": text}],
            "timestamp": now_ms(),
        }
        self.context.append(first)
        user: dict[str, Any] | None = first  # only the first attempt announces the user message
        new_messages: list[dict[str, Any]] = [first]
        attempt = 0
        while True:
            self.emit({"type": "agent_start"})
            self.emit({"type": "turn_start"})
            if user is not None:
                self.emit({"type": "message_start", "message": user})
                self.emit({"type": "message_end", "message": user})
            assistant = self.stream_turn()
            new_messages.append(assistant)
            self.emit({"type": "turn_end", "message": assistant, "toolResults": []})
            self.emit({"type": "agent_end", "messages": new_messages})
            self.last = assistant
            error = assistant.get("errorMessage") if assistant["stopReason"] == "error" else None
            if not error or not self.retry_enabled or not RETRYABLE.search(error):
                if not error:
                    self.context.append(assistant)
                return
            attempt += 1
            if attempt > self.max_retries:
                self.emit(
                    {"type": "auto_retry_end", "success": False, "attempt": attempt - 1, "finalError": error}
                )
                return
            delay_ms = self.base_delay_ms * 2 ** (attempt - 1)
            delay_out: Any = int(delay_ms) if delay_ms == int(delay_ms) else delay_ms
            self.emit(
                {
                    "type": "auto_retry_start",
                    "attempt": attempt,
                    "maxAttempts": self.max_retries,
                    "delayMs": delay_out,
                    "errorMessage": error,
                }
            )
            time.sleep(delay_ms / 1000.0)
            user = None
            new_messages = []
            self.retry_attempt = attempt

    def request_body(self) -> dict[str, Any]:
        role = "developer" if self.model.reasoning else "system"
        messages: list[dict[str, Any]] = [{"role": role, "content": self.system_prompt}]
        for msg in self.context:
            if msg["role"] == "user":
                messages.append({"role": "user", "content": msg["content"]})
            else:
                text = "".join(b.get("text", "") for b in msg["content"] if b.get("type") == "text")
                messages.append({"role": "assistant", "content": text})
        body: dict[str, Any] = {
            "model": self.model.id,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "store": False,
            "max_completion_tokens": int(min(self.model.max_tokens, 32000)),
        }
        if self.model.reasoning and self.thinking != "off":
            body["reasoning"] = {"effort": self.thinking}
        return body

    def stream_turn(self) -> dict[str, Any]:
        msg: dict[str, Any] = {
            "role": "assistant",
            "content": [],
            "api": self.model.api,
            "provider": self.model.provider,
            "model": self.model.id,
            "usage": zero_usage(),
            "stopReason": "stop",
            "timestamp": now_ms(),
        }
        started = False
        blocks: dict[str, dict[str, Any]] = {}

        def snap() -> dict[str, Any]:
            copy: dict[str, Any] = json.loads(json.dumps(msg))
            return copy

        def update(event: dict[str, Any]) -> None:
            s = snap()
            event["partial"] = s
            self.emit({"type": "message_update", "assistantMessageEvent": event, "message": s})

        def start() -> None:
            nonlocal started
            if not started:
                started = True
                self.emit({"type": "message_start", "message": snap()})

        def add_delta(kind: str, delta: str, signature: str | None = None) -> None:
            block = blocks.get(kind)
            if block is None:
                block = (
                    {"type": "text", "text": ""}
                    if kind == "text"
                    else {"type": "thinking", "thinking": "", "thinkingSignature": signature}
                )
                blocks[kind] = block
                msg["content"].append(block)
                update({"type": kind + "_start", "contentIndex": msg["content"].index(block)})
            block[kind] += delta
            update({"type": kind + "_delta", "contentIndex": msg["content"].index(block), "delta": delta})

        try:
            url = self.model.base_url.rstrip("/") + "/chat/completions"
            request = urllib.request.Request(
                url,
                data=json.dumps(self.request_body()).encode("utf-8"),
                method="POST",
                headers={
                    "Authorization": "Bearer " + self.api_key,
                    "Content-Type": "application/json",
                    "Accept": "application/json",
                    "User-Agent": "sbxcheck-pi-standin/" + VERSION,
                    "HTTP-Referer": "https://pi.dev",
                    "X-OpenRouter-Title": "pi",
                    "X-OpenRouter-Categories": "cli-agent",
                },
            )
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                response = opener.open(request, timeout=self.timeout_s)
            except urllib.error.HTTPError as exc:
                body = exc.read().decode("utf-8", "replace")
                raise RuntimeError(api_error_message(exc.code, body)) from None
            except (TimeoutError, OSError) as exc:
                timed_out = isinstance(exc, TimeoutError) or "timed out" in str(exc)
                raise RuntimeError("Request timed out." if timed_out else "Connection error.") from None
            start()
            with response:
                for data in sse_data(response, self.timeout_s):
                    if data == "[DONE]":
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        raise RuntimeError("Could not parse message into JSON: " + data) from None
                    if not isinstance(chunk, dict):
                        continue
                    if chunk.get("error"):
                        err = chunk["error"]
                        message = err.get("message") if isinstance(err, dict) else None
                        raise RuntimeError(message if isinstance(message, str) else json.dumps(err))
                    if chunk.get("id") and "responseId" not in msg:
                        msg["responseId"] = chunk["id"]
                    if isinstance(chunk.get("usage"), dict):
                        msg["usage"] = parse_usage(chunk["usage"], self.model)
                    choices = chunk.get("choices")
                    choice = choices[0] if isinstance(choices, list) and choices else None
                    if not isinstance(choice, dict):
                        continue
                    if not isinstance(chunk.get("usage"), dict) and isinstance(choice.get("usage"), dict):
                        msg["usage"] = parse_usage(choice["usage"], self.model)
                    if choice.get("finish_reason"):
                        reason, err_msg = map_stop_reason(choice["finish_reason"])
                        msg["stopReason"] = reason
                        if err_msg:
                            msg["errorMessage"] = err_msg
                    delta = choice.get("delta")
                    if isinstance(delta, dict):
                        content = delta.get("content")
                        if isinstance(content, str) and content:
                            add_delta("text", content)
                        for field in ("reasoning_content", "reasoning", "reasoning_text"):
                            value = delta.get(field)
                            if isinstance(value, str) and value:
                                add_delta("thinking", value, field)
                                break
            for block in msg["content"]:
                kind = block["type"]
                update(
                    {
                        "type": kind + "_end",
                        "contentIndex": msg["content"].index(block),
                        "content": block[kind],
                    }
                )
            if msg["stopReason"] == "error":
                raise RuntimeError(msg.get("errorMessage") or "Provider returned an error stop reason")
        except RuntimeError as exc:
            msg["stopReason"] = "error"
            msg["errorMessage"] = str(exc)
            start()
        self.emit({"type": "message_end", "message": snap()})
        if msg["stopReason"] != "error" and self.retry_attempt > 0:
            self.emit({"type": "auto_retry_end", "success": True, "attempt": self.retry_attempt})
            self.retry_attempt = 0
        return msg


def sse_data(response: Any, timeout_s: float) -> Any:
    """Yield the data payload of each server-sent event; comment lines are skipped."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while True:
        if time.monotonic() > deadline:
            raise RuntimeError("Request timed out.")
        try:
            raw = response.readline()
        except (OSError, http.client.HTTPException) as exc:
            timed_out = isinstance(exc, TimeoutError) or "timed out" in str(exc)
            raise RuntimeError("Request timed out." if timed_out else "Connection error.") from None
        if not raw:
            break
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if lines:
                yield "\n".join(lines)
                lines = []
            continue
        if line.startswith(":"):
            continue
        if line.startswith("data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(" ") else value)
    if lines:
        yield "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# main

SYSTEM_PROMPT = (
    "You are an expert coding assistant operating inside pi, a coding agent harness. "
    "(sbxcheck stand-in: no tools are available.)"
)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    for warning in args.warnings:
        Out.error("Warning: " + warning)
    if args.errors:
        for error in args.errors:
            Out.error("Error: " + error)
        return 1
    interactive = args.mode not in ("json", "rpc") and not args.print and stdin_is_tty()
    out = Out(takeover=not interactive)
    if args.version:
        out.console(f"{VERSION} (sbxcheck stand-in)")
        return 0
    if args.unknown_flags:
        names = ", ".join("--" + n for n in args.unknown_flags)
        plural = "" if len(args.unknown_flags) == 1 else "s"
        Out.error(f"Error: Unknown option{plural}: {names}")
        return 1
    if args.help:
        out.console(
            f"pi - AI coding assistant (sbxcheck stand-in {VERSION})\n\n"
            "Usage:\n  pi [options] [messages...]\n\n"
            "Supported here: --version, --list-models [search], -p/--print, --mode text|json, "
            "--provider, --model, --api-key, --thinking, --system-prompt"
        )
        return 0
    reg = load_registry()
    if args.list_models is not None:
        list_models(reg, out, args.list_models if isinstance(args.list_models, str) else None)
        return 0
    if args.mode == "rpc" or interactive:
        Out.error("Error: the sbxcheck pi stand-in supports only print mode (-p, --mode text|json)")
        return 1
    mode = "json" if args.mode == "json" else "text"

    model: Model | None = None
    if args.model:
        model, note, problem = resolve_model(reg, args.provider, args.model)
        if problem is not None:
            Out.error("Error: " + problem)
            return 1
        if note:
            Out.error("Warning: " + note)
    elif args.provider:
        Out.error("Error: --provider requires --model in the sbxcheck stand-in")
        return 1
    if model is not None and args.api_key:
        reg.runtime_keys[model.provider] = args.api_key

    stdin_text = None
    if not stdin_is_tty():
        data = sys.stdin.read() if sys.stdin is not None else ""
        stdin_text = data.strip() or None
    prompts = list(args.messages)
    if stdin_text is not None:
        prompts = [stdin_text + (prompts[0] if prompts else ""), *prompts[1:]]

    if mode == "json":
        header = {"type": "session", "version": 3, "id": uuid7(), "timestamp": iso_now(), "cwd": os.getcwd()}
        Out.raw(json.dumps(header, separators=(",", ":")) + "\n")
    if not prompts:
        return 0
    if model is None:
        available = reg.available()
        preferred = [m for m in available if DEFAULT_MODEL.get(m.provider) == m.id]
        candidates = preferred or available
        if not candidates:
            Out.error(f"No model selected.\n\n{login_help()}\n\nThen use /model to select a model.")
            return 1
        model = candidates[0]
    api_key = reg.api_key(model.provider)
    if not api_key:
        Out.error(f"No API key found for {model.provider}.\n\n{login_help()}")
        return 1
    system_prompt = args.system_prompt or SYSTEM_PROMPT
    if args.append_system_prompt:
        system_prompt = "\n\n".join([system_prompt, *args.append_system_prompt])
    thinking = args.thinking or "medium"
    agent = Agent(model, api_key, system_prompt, thinking, mode, out)
    for text in prompts:
        agent.prompt(text)
    if mode == "text" and agent.last is not None:
        last = agent.last
        if last["stopReason"] in ("error", "aborted"):
            Out.error(last.get("errorMessage") or "Request {}".format(last["stopReason"]))
            return 1
        for block in last["content"]:
            if block.get("type") == "text":
                Out.raw(block["text"] + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)
