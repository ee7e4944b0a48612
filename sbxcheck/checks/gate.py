"""The SSSF setup gate A–E as pure checks: (remote shell, run record, settings) -> CheckResult.

Each check ships a small bash script to ``bash -s`` inside the VM and judges what it printed.
The runtime key never crosses the wire: scripts read it from ``~/app/.env`` on the VM, pass it
to curl on stdin (never argv), and print only HTTP status and body. Traps handled here are the
ones in specs/sssf-sandbox.md §3 (prefix sha match, content-level clean tree, ``command -v pi``
first, "No models available" with exit 0, reasoning-only answers, pi's own cost).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec

from sbxcheck.checks.base import RemoteShell, trim
from sbxcheck.clients.roster import parse_roster
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.safeio import loads_bounded

P = ParamSpec("P")

PING_BODY: dict[str, Any] = {
    "max_tokens": 256,
    "provider": {"zdr": True, "data_collection": "deny"},
    "messages": [{"role": "user", "content": "ping - respond with pong"}],
}
COST_PROBE_PROMPT = "Write one sentence about sandboxes."
NO_MODELS_RE = re.compile(r"no models available", re.IGNORECASE)
COST_FIELDS = ("input", "output", "cacheRead", "cacheWrite")
CURL_TIMEOUT_EXIT = 28


@dataclass(frozen=True)
class GateTarget:
    """What the gate needs to know about one run."""

    run_id: str
    host: str  # ssh alias, e.g. <vm>.exe.xyz
    commit_sha: str
    roster: tuple[str, ...]
    roster_config: str
    openrouter_base_url: str
    credit_floor_usd: float
    cost_probe_model: str
    ping_timeout_s: float
    pi_timeout_s: float


# Reads the runtime key from ~/app/.env into $key: the last OPENROUTER_API_KEY= line, optional
# `export`, one layer of quotes stripped. Only pipes and builtins touch the value (no argv).
_READ_KEY = r"""
cd "$HOME/app" 2>/dev/null || { echo "SBX_NOAPP"; exit 0; }
command -v curl >/dev/null 2>&1 || { echo "SBX_NOCURL"; exit 0; }
key=$(grep -E '^[[:space:]]*(export[[:space:]]+)?OPENROUTER_API_KEY=' .env 2>/dev/null | tail -n 1 \
      | sed -E 's/^[[:space:]]*(export[[:space:]]+)?OPENROUTER_API_KEY=//')
key=${key%$'\r'}
case $key in \"*\") key=${key#\"}; key=${key%\"};; \'*\') key=${key#\'}; key=${key%\'};; esac
[ -n "$key" ] || { echo "SBX_NOKEY"; exit 0; }
"""

_PING_SCRIPT = (
    "set -u\n"
    + _READ_KEY
    + r"""
resp=$(printf 'Authorization: Bearer %s\n' "$key" | curl -sS --max-time "$3" -H @- \
       -H 'Content-Type: application/json' -w '\nSBX_HTTP %{http_code}' --data-binary "$2" "$1/chat/completions" 2>&1)
rc=$?
unset key
echo "SBX_CURL_RC $rc"
printf '%s\n' "$resp"
"""
)

_KEY_SCRIPT = (
    "set -u\n"
    + _READ_KEY
    + r"""
resp=$(printf 'Authorization: Bearer %s\n' "$key" | curl -sS --max-time "$2" -H @- \
       -w '\nSBX_HTTP %{http_code}' "$1/key" 2>&1)
rc=$?
unset key
echo "SBX_CURL_RC $rc"
printf '%s\n' "$resp"
"""
)

_GIT_SCRIPT = r"""
[ -d "$HOME/app" ] || { echo "SBX_NOAPP"; exit 0; }
cd "$HOME/app" || { echo "SBX_NOAPP"; exit 0; }
if ! head=$(git rev-parse HEAD 2>&1); then echo "SBX_NOHEAD"; printf '%s\n' "$head" | head -n 5; exit 0; fi
echo "SBX_HEAD $head"
echo "SBX_STATUS_BEGIN"
git status --porcelain 2>&1
echo "SBX_STATUS_END $?"
"""

_LIST_SCRIPT = r"""
if ! command -v pi >/dev/null 2>&1; then echo "SBX_NOPI" >&2; exit 127; fi
echo "SBX_PI $(command -v pi)" >&2
exec pi --list-models </dev/null
"""

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
        for m in (prov or {}).get("models") or []:
            if isinstance(m, dict):
                out.append({"provider": pname, "id": m.get("id"), "cost": m.get("cost", None)})
print(json.dumps({"models": out, "providers": isinstance(provs, dict)}))
"""

_COST_SCRIPT = (
    "set -u\n"
    + "RATES_PY="
    + shlex.quote(_RATES_PY)
    + "\n"
    + r"""
mj="${PI_MODELS_PATH:-$HOME/.pi/agent/models.json}"
echo "SBX_RATES_BEGIN"
if [ -f "$mj" ]; then python3 -c "$RATES_PY" "$mj" 2>&1; else echo '{"missing": true}'; fi
echo "SBX_RATES_END"
if ! command -v pi >/dev/null 2>&1; then echo "SBX_NOPI"; exit 0; fi
echo "SBX_PI_BEGIN"
timeout "$2" pi -p --mode json --provider openrouter --model "$1" "$3" </dev/null 2>/tmp/.sbxcheck-d-stderr
rc=$?
echo "SBX_PI_END $rc"
echo "SBX_STDERR_BEGIN"
tail -c 2000 /tmp/.sbxcheck-d-stderr 2>/dev/null; rm -f /tmp/.sbxcheck-d-stderr
"""
)

_CONFIG_SCRIPT = r"""
cfg="$HOME/app/$1"
[ -d "$HOME/app" ] || { echo "SBX_NOAPP"; exit 0; }
[ -f "$cfg" ] || { echo "SBX_NOCONFIG"; exit 0; }
echo "SBX_CONFIG_BEGIN"
cat "$cfg"
"""


def _bash(shell: RemoteShell, script: str, *args: str, timeout: float) -> tuple[int, str, str]:
    """Run ``script`` with ``bash -s`` and positional args; return exit code, stdout, stderr."""
    command = "bash -s" + ("".join(" " + shlex.quote(a) for a in (["--", *args] if args else [])))
    result = shell.run(command, stdin=script, timeout=timeout)
    return result.exit_code, result.stdout, result.stderr


def _base_evidence(shell: RemoteShell, what: str, exit_code: int) -> dict[str, Any]:
    return {"host": shell.alias, "ran": what, "exit_code": exit_code}


def gate_advice(target: GateTarget) -> str:
    """What to do after a failed gate item: the VM stays up as evidence; nothing is torn down."""
    return (
        f"the VM is left up as evidence — get in: ssh {target.host}; diagnose, fix, then re-run "
        f"`just sbx lifecycle setup {target.run_id}`. Teardown stays your decision."
    )


def advised(
    fn: Callable[Concatenate[RemoteShell, GateTarget, P], CheckResult],
) -> Callable[Concatenate[RemoteShell, GateTarget, P], CheckResult]:
    """Give every non-passing gate result the keep-the-VM recommendation unless it has its own."""

    @functools.wraps(fn)
    def wrapper(shell: RemoteShell, target: GateTarget, *args: P.args, **kwargs: P.kwargs) -> CheckResult:
        result = fn(shell, target, *args, **kwargs)
        if result.outcome is not Outcome.PASSED and result.recommendation is None:
            result = result.model_copy(update={"recommendation": gate_advice(target)})
        return result

    return wrapper  # type: ignore[return-value]  # functools.wraps loses the ParamSpec


# ---------------------------------------------------------------- A


@advised
def check_git_integrity(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """A: HEAD starts with the recorded commit_sha and ``git status --porcelain`` prints nothing."""
    check, tgt = "A_git_integrity", target.run_id
    code, out, err = _bash(shell, _GIT_SCRIPT, timeout=60)
    ev = _base_evidence(shell, "cd ~/app && git rev-parse HEAD && git status --porcelain", code)
    ev["recorded_commit_sha"] = target.commit_sha
    lines = out.splitlines()
    if "SBX_NOAPP" in lines:
        return CheckResult.failed(check, tgt, "no ~/app on this VM — FILL never ran", ev)
    if "SBX_NOHEAD" in lines:
        ev["git_output"] = trim("\n".join(lines[1:]))
        return CheckResult.failed(check, tgt, "git rev-parse failed — .git is damaged", ev)
    head = next((ln.split(" ", 1)[1].strip() for ln in lines if ln.startswith("SBX_HEAD ")), None)
    if (
        head is None
        or "SBX_STATUS_BEGIN" not in lines
        or not any(ln.startswith("SBX_STATUS_END") for ln in lines)
    ):
        ev["stdout"], ev["stderr"] = trim(out), trim(err)
        return CheckResult.errored(
            check, tgt, "unexpected output from the git probe", Classification.BAD_RESPONSE, ev
        )
    begin = lines.index("SBX_STATUS_BEGIN")
    end = next(i for i, ln in enumerate(lines) if ln.startswith("SBX_STATUS_END"))
    status_rc = lines[end].split()[-1]
    porcelain = [ln for ln in lines[begin + 1 : end] if ln.strip()]
    ev["head"] = head
    ev["head_matches"] = head.startswith(target.commit_sha)
    ev["match"] = "full" if head == target.commit_sha else "prefix" if ev["head_matches"] else "none"
    ev["porcelain_lines"] = len(porcelain)
    ev["porcelain_sample"] = porcelain[:20]
    problems = []
    if not ev["head_matches"]:
        problems.append(f"HEAD {head} does not match the recorded commit_sha {target.commit_sha}")
    if status_rc != "0":
        problems.append(f"git status --porcelain exited {status_rc}")
    elif porcelain:
        problems.append(f"unexpected working-tree changes (the tree must be clean): {len(porcelain)} line(s)")
    if problems:
        return CheckResult.failed(check, tgt, "; ".join(problems), ev)
    return CheckResult.passed(
        check, tgt, f"HEAD {head[:12]} matches {target.commit_sha[:12]} ({ev['match']}); tree clean", ev
    )


# ---------------------------------------------------------------- B


@dataclass(frozen=True)
class ListedModel:
    provider: str
    model: str
    context: str
    max_out: str


_COUNT_RE = re.compile(r"^\d+(\.\d+)?[KM]?$")
_YES_NO = ("yes", "no")


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
        if fields[:3] == ["provider", "model", "context"]:
            header = True
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


@advised
def check_pi_models(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """B: ``pi`` is on PATH and ``pi --list-models`` lists every roster model (exit code ignored).

    pi 0.73.1 prints its table to stderr when stdin is not a TTY, so both streams are read.
    """
    check, tgt = "B_pi_models", target.run_id
    code, out, err = _bash(shell, _LIST_SCRIPT, timeout=60)
    ev = _base_evidence(shell, "command -v pi && pi --list-models </dev/null", code)
    if "SBX_NOPI" in err:
        return CheckResult.failed(check, tgt, "pi is not on PATH", ev)
    err_lines = err.splitlines()
    ev["pi_path"] = next((ln.split(" ", 1)[1] for ln in err_lines if ln.startswith("SBX_PI ")), None)
    text = "\n".join([out, *(ln for ln in err_lines if not ln.startswith("SBX_PI "))])
    header, rows, other = parse_list_models(text)
    ev["header_seen"], ev["rows"], ev["other_lines"] = header, len(rows), len(other)
    ev["other_sample"] = [trim(ln, 200) for ln in other[:5]]
    if not rows and not other:
        return CheckResult.failed(check, tgt, "pi --list-models printed nothing", ev)
    if NO_MODELS_RE.search(text):
        return CheckResult.failed(
            check, tgt, "pi says: No models available — ~/.pi/agent/models.json did not load", ev
        )
    if not header or not rows:
        return CheckResult.failed(
            check, tgt, f"pi --list-models printed no model table ({len(other)} other lines)", ev
        )
    listed = {(r.provider, r.model): r for r in rows}
    missing = [m for m in target.roster if ("openrouter", m) not in listed]
    ev["roster"] = list(target.roster)
    ev["roster_listed"] = [
        f"openrouter {m} {listed[('openrouter', m)].context} {listed[('openrouter', m)].max_out}"
        for m in target.roster
        if ("openrouter", m) in listed
    ]
    under = [
        m
        for m in target.roster
        if ("openrouter", m) in listed
        and listed[("openrouter", m)].context == "128K"
        and listed[("openrouter", m)].max_out == "16.4K"
    ]
    if under:
        ev["warning_default_limits"] = under
    if missing:
        return CheckResult.failed(
            check,
            tgt,
            f"{len(missing)} roster model(s) missing from pi --list-models: {', '.join(missing)}",
            ev,
        )
    return CheckResult.passed(
        check, tgt, f"pi lists {len(rows)} models including all {len(target.roster)} roster models", ev
    )


# ---------------------------------------------------------------- C


def _split_http(out: str) -> tuple[int | None, int | None, str, list[str]]:
    """(curl rc, http status, body, marker lines) from a curl script's stdout."""
    lines = out.splitlines()
    markers = [ln for ln in lines if ln in ("SBX_NOAPP", "SBX_NOCURL", "SBX_NOKEY")]
    rc = next((int(ln.split()[1]) for ln in lines if re.fullmatch(r"SBX_CURL_RC \d+", ln)), None)
    status = next((int(ln.split()[1]) for ln in lines if re.fullmatch(r"SBX_HTTP \d+", ln)), None)
    body_lines = [ln for ln in lines if not ln.startswith(("SBX_CURL_RC ", "SBX_HTTP "))]
    return rc, status, "\n".join(body_lines).strip(), markers


_PRECONDITION_MESSAGES = {
    "SBX_NOAPP": "no ~/app on this VM — FILL never ran",
    "SBX_NOCURL": "curl is not installed on the VM",
    "SBX_NOKEY": "no OPENROUTER_API_KEY line in ~/app/.env — FILL did not write the runtime key",
}


def _error_text(doc: Any) -> str:
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if err:
            return str(err)
    return "no content and no error field"


@advised
def check_model_answers(shell: RemoteShell, target: GateTarget, model: str) -> CheckResult:
    """C: one roster model answers a ping from inside the VM (content or reasoning, non-empty)."""
    check, tgt = "C_model_answers", f"{target.run_id}-{model}"
    body = json.dumps({"model": model, **PING_BODY}, separators=(",", ":"))
    code, out, err = _bash(
        shell,
        _PING_SCRIPT,
        target.openrouter_base_url,
        body,
        str(int(target.ping_timeout_s)),
        timeout=target.ping_timeout_s + 30,
    )
    ev = _base_evidence(
        shell, f"curl POST {target.openrouter_base_url}/chat/completions (ping, key from app/.env)", code
    )
    ev.update(run_id=target.run_id, model=model)
    rc, status, text, markers = _split_http(out)
    if markers:
        return CheckResult.failed(check, tgt, _PRECONDITION_MESSAGES[markers[0]], ev)
    if rc is None:
        ev["stdout"], ev["stderr"] = trim(out, 500), trim(err, 500)
        return CheckResult.errored(
            check, tgt, "unexpected output from the ping script", Classification.BAD_RESPONSE, ev
        )
    ev["curl_exit"], ev["http_status"] = rc, status
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
        ev["curl_error"] = trim(text, 300)
        return CheckResult.failed(
            check,
            tgt,
            f"{model}: the VM could not reach {target.openrouter_base_url} (curl exit {rc})",
            ev,
            Classification.INFRA_UNREACHABLE,
            cause=f"openrouter-unreachable:{target.run_id}",
        )
    try:
        doc = loads_bounded(text)
    except ValueError:  # not JSON, or refused as too deep or large
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
    if answer.strip() and answer.strip() != "null":
        ev["answered_in"] = "content" if content else "reasoning"
        ev["answer_excerpt"] = trim(answer.strip(), 80)
        if isinstance(doc, dict) and isinstance(doc.get("usage"), dict):
            ev["usage"] = {
                k: doc["usage"].get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
            }
        return CheckResult.passed(check, tgt, f"{model} answered (HTTP {status}, in {ev['answered_in']})", ev)
    reason = _error_text(doc)
    ev["error"] = trim(reason, 300)
    extra: dict[str, Any] = {}
    classification = Classification.CHECK_FAILED
    if status == 402:
        extra["cause"] = f"credit-exhausted:{target.run_id}"
        extra["recommendation"] = (
            f"the runtime key of {target.run_id} has no credit left; see gate E. Nothing was changed; "
            "raising the cap or tearing down is the operator's decision"
        )
    elif status == 401:
        classification = Classification.AUTH_FAILED
        extra["cause"] = f"runtime-key-rejected:{target.run_id}"
    return CheckResult.failed(
        check,
        tgt,
        f"{model} did not answer (HTTP {status}): {trim(reason, 200)}",
        ev,
        classification,
        **extra,
    )


@advised
def check_roster_matches(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """C roster: the roster on the VM equals the roster the C items were collected for."""
    check, tgt = "C_roster_matches", target.run_id
    code, out, _err = _bash(shell, _CONFIG_SCRIPT, target.roster_config, timeout=30)
    ev = _base_evidence(shell, f"cat ~/app/{target.roster_config}", code)
    lines = out.splitlines()
    if "SBX_NOAPP" in lines:
        return CheckResult.failed(check, tgt, "no ~/app on this VM — FILL never ran", ev)
    if "SBX_NOCONFIG" in lines:
        return CheckResult.failed(check, tgt, f"missing {target.roster_config} on the VM", ev)
    if "SBX_CONFIG_BEGIN" not in lines:
        return CheckResult.errored(
            check, tgt, "unexpected output from the config probe", Classification.BAD_RESPONSE, ev
        )
    vm_roster = parse_roster("\n".join(lines[lines.index("SBX_CONFIG_BEGIN") + 1 :]))
    ev["vm_roster"], ev["collected_roster"] = vm_roster, list(target.roster)
    if not vm_roster:
        return CheckResult.failed(
            check, tgt, f"parsed zero models out of {target.roster_config} on the VM", ev
        )
    if sorted(vm_roster) != sorted(target.roster):
        extra = sorted(set(vm_roster) - set(target.roster))
        gone = sorted(set(target.roster) - set(vm_roster))
        return CheckResult.failed(
            check,
            tgt,
            f"the VM's roster differs from the one gated: not pinged {extra or '-'}, pinged but absent {gone or '-'}",
            ev,
        )
    return CheckResult.passed(check, tgt, f"the VM's roster is the {len(vm_roster)} models gated by C", ev)


# ---------------------------------------------------------------- D


def _section(lines: list[str], begin: str, end_prefix: str | None) -> list[str] | None:
    if begin not in lines:
        return None
    start = lines.index(begin) + 1
    if end_prefix is None:
        return lines[start:]
    for i in range(start, len(lines)):
        if lines[i].startswith(end_prefix):
            return lines[start:i]
    return None


def _rate_problems(rates_text: str) -> tuple[int, list[str]]:
    """(models declared, problems) from the models.json summary printed by the VM."""
    try:
        doc = loads_bounded(rates_text)
    except ValueError:  # not JSON, or refused as too deep or large
        return 0, [f"could not read models.json: {trim(rates_text, 200)}"]
    if not isinstance(doc, dict):
        return 0, ["could not read models.json"]
    if doc.get("missing"):
        return 0, ["~/.pi/agent/models.json is missing"]
    if "error" in doc:
        return 0, [f"~/.pi/agent/models.json {doc['error']}"]
    models = doc.get("models") or []
    if not models:
        return 0, ["~/.pi/agent/models.json declares no models"]
    problems = []
    for m in models:
        name = m.get("id") or "(no id)"
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
        if not isinstance(value, (int, float)) or value <= 0:
            problems.append(f"{name}: cost.input is {value!r}, must be > 0")
    return len(models), problems


@advised
def check_cost_reported(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """D: a live pi call reports a non-zero cost AND every models.json model has a full rate block."""
    check, tgt = "D_cost_reported", target.run_id
    code, out, err = _bash(
        shell,
        _COST_SCRIPT,
        target.cost_probe_model,
        str(int(target.pi_timeout_s)),
        COST_PROBE_PROMPT,
        timeout=target.pi_timeout_s + 30,
    )
    ev = _base_evidence(
        shell,
        f"pi -p --mode json --provider openrouter --model {target.cost_probe_model}; read models.json rates",
        code,
    )
    lines = out.splitlines()
    rates = _section(lines, "SBX_RATES_BEGIN", "SBX_RATES_END")
    if rates is None:
        ev["stdout"], ev["stderr"] = trim(out, 500), trim(err, 500)
        return CheckResult.errored(
            check, tgt, "unexpected output from the cost probe", Classification.BAD_RESPONSE, ev
        )
    declared, problems = _rate_problems("\n".join(rates).strip())
    ev["models_json_models"] = declared
    ev["rate_problems"] = problems[:20]
    if "SBX_NOPI" in lines:
        problems.insert(0, "pi is not on PATH")
    else:
        problems[:0] = _judge_pi_call(lines, ev, target)
    if problems:
        return CheckResult.failed(
            check, tgt, "; ".join(problems[:4]) + (" …" if len(problems) > 4 else ""), ev
        )
    return CheckResult.passed(
        check,
        tgt,
        f"pi reported cost ${ev['cost_total']:.6g} for {target.cost_probe_model}; "
        f"all {declared} models.json models carry four-field rates",
        ev,
    )


def _judge_pi_call(lines: list[str], ev: dict[str, Any], target: GateTarget) -> list[str]:
    """Problems with pi's live call, from its JSON event lines; fills evidence."""
    pi_lines = _section(lines, "SBX_PI_BEGIN", "SBX_PI_END")
    end = next((ln for ln in lines if ln.startswith("SBX_PI_END ")), None)
    if pi_lines is None or end is None:
        return ["the pi call produced no parseable run (output cut off)"]
    rc = int(end.split()[1])
    stderr_tail = _section(lines, "SBX_STDERR_BEGIN", None) or []
    events, non_json, costs = 0, 0, []
    stop_reason, error_message = None, None
    for ln in pi_lines:
        if not ln.strip():
            continue
        try:
            doc = loads_bounded(ln)
        except ValueError:  # not JSON, or refused as too deep or large
            non_json += 1
            continue
        events += 1
        if isinstance(doc, dict) and doc.get("type") == "message_end":
            msg = doc.get("message") or {}
            if msg.get("role") == "assistant":
                stop_reason = msg.get("stopReason")
                error_message = msg.get("errorMessage")
                total = ((msg.get("usage") or {}).get("cost") or {}).get("total", 0)
                costs.append(float(total) if isinstance(total, (int, float)) else 0.0)
    ev.update(
        pi_exit=rc,
        pi_events=events,
        pi_non_json_lines=non_json,
        assistant_messages=len(costs),
        stop_reason=stop_reason,
        cost_total=max(costs) if costs else 0.0,
    )
    if stderr_tail:
        ev["pi_stderr_tail"] = trim("\n".join(stderr_tail), 400)
    problems = []
    if rc == 124:
        problems.append(f"pi did not finish within {target.pi_timeout_s:.0f}s")
    elif rc != 0:
        problems.append(f"pi exited {rc}")
    if error_message:
        ev["pi_error"] = trim(str(error_message), 300)
        problems.append(f"pi error: {trim(str(error_message), 160)}")
    if not costs:
        problems.append("pi printed no assistant message_end")
    elif max(costs) <= 0:
        problems.append("pi reported cost 0 — models.json has no rate table for the probe model")
    return problems


# ---------------------------------------------------------------- E


@advised
def check_credit_remaining(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """E: remaining credit (limit − usage) of the runtime key is at least the floor; null limit = uncapped."""
    check, tgt = "E_credit_remaining", target.run_id
    code, out, err = _bash(shell, _KEY_SCRIPT, target.openrouter_base_url, "30", timeout=60)
    ev = _base_evidence(shell, f"curl GET {target.openrouter_base_url}/key (key from app/.env)", code)
    ev["floor_usd"] = target.credit_floor_usd
    rc, status, text, markers = _split_http(out)
    if markers:
        return CheckResult.failed(check, tgt, _PRECONDITION_MESSAGES[markers[0]], ev)
    if rc is None:
        ev["stdout"], ev["stderr"] = trim(out, 500), trim(err, 500)
        return CheckResult.errored(
            check, tgt, "unexpected output from the /key probe", Classification.BAD_RESPONSE, ev
        )
    ev["curl_exit"], ev["http_status"] = rc, status
    if rc != 0:
        return CheckResult.errored(
            check,
            tgt,
            f"could not read /api/v1/key (curl exit {rc})",
            Classification.INFRA_UNREACHABLE,
            ev,
            cause=f"openrouter-unreachable:{target.run_id}",
        )
    try:
        doc = loads_bounded(text)
    except ValueError:  # not JSON, or refused as too deep or large
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
        classification = Classification.AUTH_FAILED if status == 401 else Classification.BAD_RESPONSE
        return CheckResult.failed(
            check, tgt, f"/api/v1/key answered HTTP {status} without data: {ev['error']}", ev, classification
        )
    limit, usage = data.get("limit"), data.get("usage") or 0
    if not isinstance(usage, (int, float)) or (limit is not None and not isinstance(limit, (int, float))):
        ev["limit_type"], ev["usage_type"] = type(limit).__name__, type(usage).__name__
        return CheckResult.errored(
            check, tgt, "/api/v1/key: limit/usage are not numbers", Classification.BAD_RESPONSE, ev
        )
    ev["usage_usd"] = usage
    if limit is None:
        ev.update(limit_usd=None, remaining_usd=None, uncapped=True)
        return CheckResult.passed(check, tgt, f"runtime key is uncapped (limit null); used ${usage:.4f}", ev)
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
            recommendation=f"the runtime key of {target.run_id} is nearly spent; raising the cap or tearing down "
            "is the operator's decision — nothing was changed",
        )
    return CheckResult.passed(
        check, tgt, f"remaining ${remaining:.2f} of ${limit:.2f} (floor ${target.credit_floor_usd:.2f})", ev
    )
