"""What pi prints, read the same way on every release: the ``--list-models`` table (gate B) and the JSON
events of ``pi -p --mode json`` (gate D). Pure functions, no I/O.

Releases differ in where and what (sbxcheck/sim/pi_releases.py has the table and its sources): up to 0.79.0
``--list-models`` prints on stderr without a TTY and from 0.79.1 on stdout, so the table is read from the
stream that holds its header and the other stream is noise, never rows; every release prints
``Warning: errors loading models.json`` on stderr when it rejects the file (and then drops every custom
model, while its built-in catalog may still list some of the same ids). In JSON mode 0.83 adds
``agent_settled`` and ``usage.reasoning``, 1.6 a ``message_end`` of role ``system`` and ``message_update``
events without a ``message``; only assistant ``message_end`` events are read. From pi-ai 1.5.0 (pi 1.5.0,
and 1.0.3 as installed today) ``usage.cost.total`` is OpenRouter's billed cost (``totalFromProvider``)
whatever models.json says, while ``cost.input``/``output``/``cacheRead``/``cacheWrite`` stay rate × tokens:
what proves the rate table is those components, never the total.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from sbxcheck.checks.base import json_or_none, trim

COST_FIELDS = ("input", "output", "cacheRead", "cacheWrite")
NO_MODELS_RE = re.compile(r"no models available", re.IGNORECASE)
#: What every pi release prints on stderr when it rejects ~/.pi/agent/models.json (dist/cli/list-models.js).
MODELS_JSON_ERRORS_RE = re.compile(r"errors loading models\.json", re.IGNORECASE)
LIST_HEADER_RE = re.compile(r"provider\s+model\s+context\s+max-out\s+thinking\s+images\s*$")
_COUNT_RE = re.compile(r"^\d+(\.\d+)?[KM]?$")
_YES_NO = ("yes", "no")
#: A relative difference above this between pi's cost component and models.json's rate × tokens is another rate.
RATE_TOLERANCE = 1e-6


def positive_finite(value: Any) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def _non_negative(value: Any) -> float | None:
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if finite and value >= 0 else None


# ---------------------------------------------------------------- B: pi --list-models


@dataclass(frozen=True)
class ListedModel:
    provider: str
    model: str
    context: str
    max_out: str


def parse_list_models(text: str) -> tuple[bool, list[ListedModel], list[str]]:
    """(header seen, model rows, other non-empty lines) from ``pi --list-models`` output.

    A row has six columns: provider, model, context, max-out, thinking, images. Anything else
    (extension noise such as ``reflection fetch failed: …``) is returned separately.
    """
    header = False
    rows: list[ListedModel] = []
    other: list[str] = []
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if LIST_HEADER_RE.search(line) and (fields[0] == "provider" or not header):
            header = True  # the first line may follow noise that did not end its own line
        elif (
            len(fields) == 6
            and _COUNT_RE.match(fields[2])
            and _COUNT_RE.match(fields[3])
            and fields[4] in _YES_NO
            and fields[5] in _YES_NO
        ):
            rows.append(ListedModel(fields[0], fields[1], fields[2], fields[3]))
        else:
            other.append(line)
    return header, rows, other


@dataclass(frozen=True)
class ModelTable:
    """``pi --list-models`` read from both streams: the table from the one that printed its header."""

    stream: str | None  # "stdout", "stderr", or None when neither printed a header
    rows: list[ListedModel]
    other: list[str]  # every other non-empty line of both streams (the table stream's noise, the other stream)
    no_models: bool  # pi said "No models available" (on either stream)
    models_json_errors: list[str]  # pi's lines after "errors loading models.json" (empty: none)


def read_model_table(stdout: str, stderr: str) -> ModelTable:
    """The table pi printed on whichever stream (0.73.1: stderr; 0.79.1 on: stdout); noise on the other is not rows.

    When both streams carry a header (a wrapper printing the table twice), the one with more rows wins.
    """
    parsed = {name: parse_list_models(text) for name, text in (("stdout", stdout), ("stderr", stderr))}
    with_header = [name for name, (header, _, _) in parsed.items() if header]
    stream = max(with_header, key=lambda name: len(parsed[name][1])) if with_header else None
    rows = parsed[stream][1] if stream is not None else []
    other = [
        line
        for name, (_, found, lines) in parsed.items()
        for line in (lines if name == stream else [*lines, *(_row_text(r) for r in found)])
    ]
    text = f"{stdout}\n{stderr}"
    return ModelTable(stream, rows, other, bool(NO_MODELS_RE.search(text)), models_json_errors(stderr + "\n" + stdout))


def _row_text(row: ListedModel) -> str:
    return f"{row.provider} {row.model} {row.context} {row.max_out}"


def models_json_errors(text: str) -> list[str]:
    """pi's own account of why it rejected models.json: the lines after its warning, up to ``File:``."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if MODELS_JSON_ERRORS_RE.search(line)), None)
    if start is None:
        return []
    said: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("File:") or LIST_HEADER_RE.search(line) or len(said) >= 8:
            break
        if line.strip():
            said.append(trim(line.strip(), 200))
    return said or ["(pi gave no reason)"]


# ---------------------------------------------------------------- D: pi -p --mode json


@dataclass(frozen=True)
class PricedMessage:
    """One assistant ``message_end``: what pi reported it cost, and what models.json's rates make of it."""

    total: float  # usage.cost.total (0 when missing, not a number, or not finite)
    at_rates: float  # the four components' sum (rate × tokens); without any, total unless provider-billed
    from_provider: bool  # usage.cost.totalFromProvider: total is OpenRouter's bill, not the rate table's
    tokens: dict[str, float] = field(default_factory=dict)  # input/output/cacheRead/cacheWrite counts
    components: dict[str, float] = field(default_factory=dict)  # cost.input/output/cacheRead/cacheWrite


@dataclass(frozen=True)
class PiEvents:
    """What ``pi -p --mode json`` printed: event counts, the priced assistant messages, the last stop and error."""

    events: int = 0
    non_json: int = 0
    messages: tuple[PricedMessage, ...] = ()
    stop_reason: str | None = None
    error_message: str | None = None

    @property
    def costs(self) -> list[float]:
        """Each assistant message's cost at models.json's rates (never a non-finite number)."""
        return [m.at_rates for m in self.messages]


def _priced(usage: Any) -> PricedMessage:
    cost = usage.get("cost") if isinstance(usage, dict) else None
    cost = cost if isinstance(cost, dict) else {}
    total = float(cost["total"]) if positive_finite(cost.get("total")) else 0.0
    from_provider = cost.get("totalFromProvider") is True
    components = {f: v for f in COST_FIELDS if f in cost and (v := _non_negative(cost[f])) is not None}
    tokens = {f: v for f in COST_FIELDS if isinstance(usage, dict) and (v := _non_negative(usage.get(f))) is not None}
    # without any component (an older or stranger shape): the total, unless it is the provider's bill
    has_components = any(f in cost for f in COST_FIELDS)
    at_rates = sum(components.values()) if has_components else 0.0 if from_provider else total
    return PricedMessage(total, at_rates, from_provider, tokens, components)


def parse_pi_events(pi_lines: list[str]) -> PiEvents:
    """The JSON events of pi's output (any release's shapes); noise lines are counted, never read as events.

    A cost that is missing, not a number, or not finite counts as 0: it never makes a pass.
    """
    events, non_json = 0, 0
    messages: list[PricedMessage] = []
    stop_reason: str | None = None
    error_message: str | None = None
    for ln in pi_lines:
        if not ln.strip():
            continue
        doc = json_or_none(ln)
        if doc is None and "{" in ln:  # an event glued to noise that did not end its line
            glued = json_or_none(ln[ln.index("{") :])
            doc = glued if isinstance(glued, dict) else None
        if doc is None:
            non_json += 1
            continue
        events += 1
        if not (isinstance(doc, dict) and doc.get("type") == "message_end"):
            continue
        msg = doc.get("message")
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        stop_reason = str(msg["stopReason"]) if msg.get("stopReason") is not None else None
        error_message = str(msg["errorMessage"]) if msg.get("errorMessage") else None
        messages.append(_priced(msg.get("usage")))
    return PiEvents(events, non_json, tuple(messages), stop_reason, error_message)


def rate_mismatch(message: PricedMessage, rates: dict[str, Any] | None) -> str | None:
    """How pi's cost components disagree with models.json's per-million ``rates`` for the model, or None.

    None also when there is nothing to compare (no tokens, no component, no rate, or pricing tiers).
    """
    if not isinstance(rates, dict) or "tiers" in rates:
        return None
    for part in ("input", "output"):
        tokens, paid, rate = message.tokens.get(part), message.components.get(part), _non_negative(rates.get(part))
        if not tokens or paid is None or rate is None:
            continue
        expected = rate * tokens / 1e6
        if abs(paid - expected) > RATE_TOLERANCE * max(abs(expected), abs(paid)) + 1e-15:
            return (
                f"pi priced {part} at ${paid / tokens * 1e6:.6g} per million tokens, models.json says "
                f"${rate:.6g}: pi is not using models.json's rate table for the probe model"
            )
    return None


@dataclass
class PiCall:
    """What one ``pi --mode json`` call showed: problems, evidence, and the HTTP status its error names."""

    problems: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    http_status: int | None = None


_HTTP_IN_ERROR_RE = re.compile(r"\b(40[0-9]|4[1-9][0-9]|5[0-9][0-9])\b")
_CREDIT_RE = re.compile(r"insufficient credits|credit|payment required|key limit", re.IGNORECASE)


def judge_pi_call(
    pi_lines: list[str] | None, rc: int | None, stderr_tail: list[str], pi_timeout_s: float,
    rates: dict[str, Any] | None = None,
) -> PiCall:  # fmt: skip
    """Problems with pi's live call, from its JSON event lines (an error message naming 402/401 says so).

    ``rates``: models.json's cost block of the probe model, to check pi priced the call with it.
    """
    call = PiCall()
    if pi_lines is None or rc is None:
        call.problems.append("the pi call produced no parseable run (output cut off)")
        return call
    seen = parse_pi_events(pi_lines)
    costs = seen.costs
    provider_billed = [m.total for m in seen.messages if m.from_provider]
    call.evidence.update(
        pi_exit=rc,
        pi_events=seen.events,
        pi_non_json_lines=seen.non_json,
        assistant_messages=len(seen.messages),
        stop_reason=seen.stop_reason,
        cost_total=max((m.total for m in seen.messages), default=0.0),
        cost_at_rates=max(costs, default=0.0),
        cost_from_provider=bool(provider_billed),
    )
    if stderr_tail:
        call.evidence["pi_stderr_tail"] = trim("\n".join(stderr_tail), 400)
    error_message = seen.error_message
    said = " ".join(filter(None, [error_message, "\n".join(stderr_tail)]))
    status_match = _HTTP_IN_ERROR_RE.search(error_message or "")
    if status_match:
        call.http_status = int(status_match.group(1))
    elif _CREDIT_RE.search(said):
        call.http_status = 402
    if rc == 124:
        call.problems.append(f"pi did not finish within {pi_timeout_s:.0f}s")
    elif rc != 0:
        call.problems.append(f"pi exited {rc}")
    if error_message:
        call.evidence["pi_error"] = trim(error_message, 300)
    if call.http_status == 402:
        call.problems.append(
            "the runtime key is out of credit (HTTP 402): pi could not make the call, so no cost was reported"
            + (f" — pi error: {trim(error_message, 120)}" if error_message else "")
        )
        return call
    if call.http_status == 401:
        call.problems.append(
            "OpenRouter refused the runtime key from ~/app/.env (HTTP 401)"
            + (f" — pi error: {trim(error_message, 120)}" if error_message else "")
        )
        return call
    if error_message:
        call.problems.append(f"pi error: {trim(error_message, 160)}")
    if not seen.messages:
        call.problems.append("pi printed no assistant message_end")
    elif error_message:
        return call
    elif max(m.total for m in seen.messages) <= 0:  # what the SDLC records is 0
        call.problems.append("pi reported cost 0 — models.json has no rate table for the probe model")
    elif max(costs) <= 0:  # a total, but not from the rate table
        where = "from OpenRouter's bill (cost.totalFromProvider)" if provider_billed else "as its total"
        call.problems.append(
            f"pi reported ${call.evidence['cost_total']:.6g} {where}, but at models.json's rates the call cost 0 "
            "— models.json has no rate table for the probe model"
        )
    elif (mismatch := next(filter(None, (rate_mismatch(m, rates) for m in seen.messages)), None)) is not None:
        call.problems.append(mismatch)
    return call
