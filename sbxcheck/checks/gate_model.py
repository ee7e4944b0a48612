"""The SSSF setup gate, checks C–E: what the run's runtime key buys — the roster's models answer (C), pi reports
the cost of a call (D), the key has credit left (E). Same shape as :mod:`sbxcheck.checks.gate` (script, judge,
check), whose target, script runner and advice they share."""

from __future__ import annotations

import json
import math
import re
import shlex
from typing import Any

from sbxcheck.checks.base import RemoteShell, json_or_none, trim
from sbxcheck.checks.curl_answer import (
    CURL_TAIL,
    PRECONDITION_MESSAGES,
    curl_answer,
    curl_stderr,
    precondition,
)
from sbxcheck.checks.gate import (
    COST_PROBE_PROMPT,
    CURL_TIMEOUT_EXIT,
    PING_BODY,
    GateTarget,
    advised,
    credit_exhausted_advice,
    runtime_key_rejected_next,
)
from sbxcheck.checks.pi_output import COST_FIELDS, judge_pi_call, positive_finite
from sbxcheck.checks.script import (
    MAKE_TMPDIR,
    NEED_CURL,
    PRELUDE,
    READ_KEY,
    GateScript,
    ScriptRun,
    base_evidence,
    run_script,
    script_failure,
    section,
)
from sbxcheck.results import CheckResult, Classification

_PING_SCRIPT = (
    PRELUDE
    + READ_KEY
    + NEED_CURL
    + MAKE_TMPDIR
    + r"""
resp=$(printf 'Authorization: Bearer %s\n' "$key" | curl -q -sS --max-time "$3" -H @- \
       -H 'Content-Type: application/json' -w '\nSBX_HTTP %{http_code}' --data-binary "$2" "$1/chat/completions" \
       2>"$sbx_tmp/curl.stderr")"""
    + CURL_TAIL
)


_KEY_SCRIPT = (
    PRELUDE
    + READ_KEY
    + NEED_CURL
    + MAKE_TMPDIR
    + r"""
resp=$(printf 'Authorization: Bearer %s\n' "$key" | curl -q -sS --max-time "$2" -H @- \
       -w '\nSBX_HTTP %{http_code}' "$1/key" 2>"$sbx_tmp/curl.stderr")"""
    + CURL_TAIL
)


_RATES_PY = r"""
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except OSError as e:
    print(json.dumps({"error": "unreadable: %s" % e.strerror})); sys.exit(0)
except ValueError as e:
    print(json.dumps({"error": "invalid JSON: %s" % e})); sys.exit(0)
provs = doc.get("providers") if isinstance(doc, dict) else None
out = []
if isinstance(provs, dict):
    for pname, prov in provs.items():
        for m in ((prov if isinstance(prov, dict) else {}).get("models") or []):
            if isinstance(m, dict):
                out.append({"provider": pname, "id": m.get("id"), "cost": m.get("cost", None)})
print(json.dumps({"models": out, "providers": isinstance(provs, dict)}))
"""


# D runs pi the way the SDLC does: from ~/app, with the runtime key from ~/app/.env in its
# environment (an env assignment, never argv), stderr into a private temp file.
_COST_SCRIPT = (
    PRELUDE
    + "RATES_PY="
    + shlex.quote(_RATES_PY)
    + "\n"
    + READ_KEY
    + MAKE_TMPDIR
    + r"""
mj="${PI_MODELS_PATH:-$HOME/.pi/agent/models.json}"
echo "SBX_RATES_BEGIN"
if [ -f "$mj" ]; then python3 -I -c "$RATES_PY" "$mj"; else echo '{"missing": true}'; fi
echo "SBX_RATES_END"
if ! command -v pi >/dev/null 2>&1; then echo "SBX_NOPI"; echo "SBX_END"; exit 0; fi
: >"$sbx_tmp/pi.stderr" || sbx_script_error "cannot write $sbx_tmp/pi.stderr"
echo "SBX_PI_BEGIN"
OPENROUTER_API_KEY=$key timeout "$2" pi -p --mode json --provider openrouter --model "$1" "$3" \
  </dev/null 2>"$sbx_tmp/pi.stderr"
rc=$?
unset key
echo  # a line something left open ends before the marker
echo "SBX_PI_END $rc"
echo "SBX_STDERR_BEGIN"
tail -c 2000 "$sbx_tmp/pi.stderr"
echo "SBX_STDERR_END"
echo "SBX_END"
"""
)


def _error_text(doc: Any) -> str:
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if err:
            return str(err)
    return "no content and no error field"


def model_answers_script(target: GateTarget, model: str) -> GateScript:
    body = json.dumps({"model": model, **PING_BODY}, separators=(",", ":"))
    return GateScript(
        _PING_SCRIPT,
        (target.openrouter_base_url, body, str(max(1, int(target.ping_timeout_s)))),
        target.ping_timeout_s + 30,
        f"curl POST {target.openrouter_base_url}/chat/completions (ping, key from ~/app/.env)",
    )


def judge_model_answers(target: GateTarget, model: str, run: ScriptRun) -> CheckResult:
    """C: one roster model answered the ping (content or reasoning, non-empty)."""
    check, tgt = "C_model_answers", f"{target.run_id}-{model}"
    ev = base_evidence(run, model_answers_script(target, model).ran)
    ev.update(run_id=target.run_id, model=model)
    curl = curl_answer(check, tgt, run, ev, target.run_id, "ping script")
    if isinstance(curl, CheckResult):
        return curl
    rc, status, text = curl
    if rc == CURL_TIMEOUT_EXIT:
        return CheckResult.failed(
            check,
            tgt,
            f"{model}: no answer within {target.ping_timeout_s:.0f}s",
            ev,
            Classification.TIMEOUT,
            cause=f"openrouter-timeout:{target.run_id}",
        )
    if rc != 0:
        ev["curl_error"] = trim(curl_stderr(run.stdout) or text, 300)
        return CheckResult.failed(
            check,
            tgt,
            f"{model}: the VM could not reach {target.openrouter_base_url} (curl exit {rc})",
            ev,
            Classification.INFRA_UNREACHABLE,
            cause=f"openrouter-unreachable:{target.run_id}",
        )
    doc = json_or_none(text)
    if doc is None:
        ev["body_excerpt"] = trim(text, 300)
        return CheckResult.failed(
            check, tgt, f"{model}: unparseable response (HTTP {status})", ev, Classification.BAD_RESPONSE
        )
    message: dict[str, Any] = {}
    if isinstance(doc, dict) and isinstance(doc.get("choices"), list) and doc["choices"]:
        first = doc["choices"][0]
        if isinstance(first, dict) and isinstance(first.get("message"), dict):
            message = first["message"]
            ev["finish_reason"] = first.get("finish_reason")
    content = message.get("content") or ""
    reasoning = message.get("reasoning") or ""
    answer = f"{content}{reasoning}" if isinstance(content, str) and isinstance(reasoning, str) else ""
    if status == 200 and answer.strip() and answer.strip() != "null":
        ev["answered_in"] = "content" if content else "reasoning"
        ev["answer_excerpt"] = trim(answer.strip(), 80)
        if isinstance(doc, dict) and isinstance(doc.get("usage"), dict):
            ev["usage"] = {
                k: doc["usage"].get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
            }
        return CheckResult.passed(check, tgt, f"{model} answered (HTTP {status}, in {ev['answered_in']})", ev)
    reason = _error_text(doc) if not answer.strip() else f"an answer came with HTTP {status}"
    ev["error"] = trim(reason, 300)
    extra: dict[str, Any] = {}
    classification = Classification.CHECK_FAILED
    if status == 402:
        extra["cause"] = f"credit-exhausted:{target.run_id}"
        extra["recommendation"] = credit_exhausted_advice(target.run_id)
    elif status == 401:
        classification = Classification.AUTH_FAILED
        extra["cause"] = f"runtime-key-rejected:{target.run_id}"
        extra.update(runtime_key_rejected_next(target.run_id))
    return CheckResult.failed(
        check,
        tgt,
        f"{model} did not answer (HTTP {status}): {trim(reason, 200)}",
        ev,
        classification,
        **extra,
    )


@advised
def check_model_answers(shell: RemoteShell, target: GateTarget, model: str) -> CheckResult:
    """C: one roster model answers a ping from inside the VM (content or reasoning, non-empty)."""
    return judge_model_answers(target, model, run_script(shell, model_answers_script(target, model)))


def rate_problems(rates_text: str) -> tuple[int, list[str]]:
    """(models declared, problems) from the models.json summary printed by the VM."""
    doc = json_or_none(rates_text)
    if not isinstance(doc, dict):
        return 0, [f"could not read models.json: {trim(rates_text, 200)}"]
    if doc.get("missing"):
        return 0, ["~/.pi/agent/models.json is missing"]
    if "error" in doc:
        return 0, [f"~/.pi/agent/models.json {trim(str(doc['error']), 200)}"]
    models = doc.get("models")
    if not isinstance(models, list) or not models:
        return 0, ["~/.pi/agent/models.json declares no models"]
    problems = []
    for m in models:
        if not isinstance(m, dict):
            problems.append("a models.json entry is not an object")
            continue
        name = str(m.get("id") or "(no id)")
        cost = m.get("cost")
        if not isinstance(cost, dict):
            problems.append(f"{name}: no cost block (pi prices it at $0)")
            continue
        absent = [f for f in COST_FIELDS if f not in cost]
        if absent:
            problems.append(
                f"{name}: partial cost block, missing {', '.join(absent)} (pi drops the whole roster)"
            )
        value = cost.get("input", 0)
        if not positive_finite(value):
            problems.append(f"{name}: cost.input is {value!r}, must be a finite number > 0")
    return len(models), problems


def probe_rates(rates_text: str, model: str) -> dict[str, Any] | None:
    """models.json's cost block for ``model`` under the openrouter provider (D's probe), or None."""
    doc = json_or_none(rates_text)
    models = doc.get("models") if isinstance(doc, dict) else None
    for m in models if isinstance(models, list) else []:
        if isinstance(m, dict) and m.get("id") == model and m.get("provider") in ("openrouter", None):
            cost = m.get("cost")
            return cost if isinstance(cost, dict) else None
    return None


def cost_script(target: GateTarget) -> GateScript:
    return GateScript(
        _COST_SCRIPT,
        (target.cost_probe_model, str(max(1, int(target.pi_timeout_s))), COST_PROBE_PROMPT),
        target.pi_timeout_s + 30,
        f"cd ~/app && OPENROUTER_API_KEY=<from ~/app/.env> pi -p --mode json --provider openrouter "
        f"--model {target.cost_probe_model}; read models.json rates",
    )


def judge_cost_reported(target: GateTarget, run: ScriptRun) -> CheckResult:
    """D: a live pi call, run as the SDLC runs it, costs more than 0 at models.json's rates AND models.json
    has full rates. pi's total alone proves nothing from pi-ai 1.5.0 on: it is OpenRouter's bill
    (``cost.totalFromProvider``) whatever models.json says; the per-component costs are rate × tokens."""
    check, tgt = "D_cost_reported", target.run_id
    ev = base_evidence(run, cost_script(target).ran)
    if (failure := script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if (
        pre := precondition(
            check, tgt, [ln for ln in lines if ln in PRECONDITION_MESSAGES], ev, target.run_id
        )
    ) is not None:
        return pre
    rates = section(lines, "SBX_RATES_BEGIN", "SBX_RATES_END")
    if rates is None:
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
        return CheckResult.errored(
            check, tgt, "unexpected output from the cost probe", Classification.BAD_RESPONSE, ev
        )
    rates_text = "\n".join(rates).strip()
    declared, problems = rate_problems(rates_text)
    ev["models_json_models"] = declared
    ev["rate_problems"] = problems[:20]
    extra: dict[str, Any] = {}
    classification = Classification.CHECK_FAILED
    if "SBX_NOPI" in lines:
        problems.insert(0, "pi is not on PATH")
    else:
        end = next((ln for ln in lines if re.fullmatch(r"SBX_PI_END \d{1,3}", ln)), None)
        call = judge_pi_call(
            section(lines, "SBX_PI_BEGIN", "SBX_PI_END"),
            int(end.split()[1]) if end is not None else None,
            section(lines, "SBX_STDERR_BEGIN", "SBX_STDERR_END") or [],
            target.pi_timeout_s,
            probe_rates(rates_text, target.cost_probe_model),
        )
        ev.update(call.evidence)
        problems[:0] = call.problems
        if call.http_status == 402:
            extra["cause"] = f"credit-exhausted:{target.run_id}"
            extra["recommendation"] = credit_exhausted_advice(target.run_id)
        elif call.http_status == 401:
            classification = Classification.AUTH_FAILED
            extra["cause"] = f"runtime-key-rejected:{target.run_id}"
            extra.update(runtime_key_rejected_next(target.run_id))
    if problems:
        return CheckResult.failed(
            check,
            tgt,
            "; ".join(problems[:4]) + (" …" if len(problems) > 4 else ""),
            ev,
            classification,
            **extra,
        )
    billed = " (OpenRouter's bill)" if ev.get("cost_from_provider") else ""
    return CheckResult.passed(
        check,
        tgt,
        f"pi, run from ~/app with the key from ~/app/.env, reported cost ${ev['cost_total']:.6g}{billed} for "
        f"{target.cost_probe_model}, ${ev['cost_at_rates']:.6g} at models.json's rates; all {declared} "
        "models.json models carry four-field rates",
        ev,
    )


@advised
def check_cost_reported(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """D: a live pi call reports a non-zero cost AND every models.json model has a full rate block."""
    return judge_cost_reported(target, run_script(shell, cost_script(target)))


def credit_script(target: GateTarget) -> GateScript:
    curl_s = max(1, int(min(target.ping_timeout_s, max(1.0, target.command_timeout_s - 5))))
    return GateScript(
        _KEY_SCRIPT,
        (target.openrouter_base_url, str(curl_s)),
        target.command_timeout_s,
        f"curl GET {target.openrouter_base_url}/key (key from ~/app/.env)",
    )


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def judge_credit_remaining(target: GateTarget, run: ScriptRun) -> CheckResult:
    """E: remaining credit (limit − usage) of the runtime key is at least the floor; null limit = uncapped."""
    check, tgt = "E_credit_remaining", target.run_id
    ev = base_evidence(run, credit_script(target).ran)
    ev["floor_usd"] = target.credit_floor_usd
    curl = curl_answer(check, tgt, run, ev, target.run_id, "/key probe")
    if isinstance(curl, CheckResult):
        return curl
    rc, status, text = curl
    if rc != 0:
        return CheckResult.errored(
            check,
            tgt,
            f"could not read /api/v1/key (curl exit {rc})",
            Classification.INFRA_UNREACHABLE,
            ev,
            cause=f"openrouter-unreachable:{target.run_id}",
        )
    doc = json_or_none(text)
    if doc is None:
        ev["body_excerpt"] = trim(text, 200)
        return CheckResult.errored(
            check,
            tgt,
            f"could not read /api/v1/key: unparseable body (HTTP {status})",
            Classification.BAD_RESPONSE,
            ev,
        )
    data = doc.get("data") if isinstance(doc, dict) else None
    if status != 200 or not isinstance(data, dict):
        ev["error"] = trim(_error_text(doc), 200)
        if status == 401:
            return CheckResult.failed(
                check,
                tgt,
                f"/api/v1/key answered HTTP 401: OpenRouter refused the runtime key from ~/app/.env: {ev['error']}",
                ev,
                Classification.AUTH_FAILED,
                cause=f"runtime-key-rejected:{target.run_id}",
                **runtime_key_rejected_next(target.run_id),
            )
        return CheckResult.failed(
            check,
            tgt,
            f"/api/v1/key answered HTTP {status} without data: {ev['error']}",
            ev,
            Classification.BAD_RESPONSE,
        )
    limit, usage = data.get("limit"), data.get("usage", 0)
    usage = 0 if usage is None else usage
    if not _finite_number(usage) or (limit is not None and not _finite_number(limit)):
        ev["limit_type"], ev["usage_type"] = type(limit).__name__, type(usage).__name__
        return CheckResult.errored(
            check, tgt, "/api/v1/key: limit/usage are not finite numbers", Classification.BAD_RESPONSE, ev
        )
    ev["usage_usd"] = usage
    if limit is None:
        warning = (
            "the runtime key is uncapped (limit null): nothing bounds what this run can spend — "
            "upstream mints sbx- keys with a cap; check how this key was made"
        )
        ev.update(limit_usd=None, remaining_usd=None, uncapped=True, warning=warning)
        return CheckResult.passed(check, tgt, f"WARNING: {warning}; used ${usage:.4f} so far", ev)
    remaining = float(limit) - float(usage)
    ev.update(limit_usd=limit, remaining_usd=round(remaining, 6), uncapped=False)
    if remaining < target.credit_floor_usd:
        return CheckResult.failed(
            check,
            tgt,
            f"remaining credit ${remaining:.2f} (limit ${limit:.2f} − used ${usage:.2f}) is below the floor "
            f"${target.credit_floor_usd:.2f}",
            ev,
            cause=f"credit-exhausted:{target.run_id}",
            recommendation=credit_exhausted_advice(target.run_id),
        )
    return CheckResult.passed(
        check, tgt, f"remaining ${remaining:.2f} of ${limit:.2f} (floor ${target.credit_floor_usd:.2f})", ev
    )


@advised
def check_credit_remaining(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """E: remaining credit (limit − usage) of the runtime key is at least the floor; null limit = uncapped."""
    return judge_credit_remaining(target, run_script(shell, credit_script(target)))
