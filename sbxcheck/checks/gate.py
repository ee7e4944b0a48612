"""The SSSF setup gate A–E as pure checks: (remote shell, run record, settings) -> CheckResult.

Each check is two parts, so an executor can start every VM's scripts at once and judge later:
``<check>_script(target)`` builds a :class:`GateScript` (bash for ``bash -s``, its arguments and
deadline) and ``judge_<check>(target, ScriptRun)`` turns what came back into a CheckResult with no
I/O. ``check_<check>(shell, target)`` runs one and judges it.

The runtime key never crosses the wire: scripts read it from ``~/app/.env`` on the VM, as the
SDLC run gets it, pass it to curl on stdin or to pi in its environment (never argv), and print
only HTTP status and body. Scripts never write to a fixed path in a shared directory (a file
they need lives in their own ``mktemp -d``, removed by a trap) and end with ``SBX_END``: a script
that stops before it failed itself, which is an ``error`` with its stderr, never a verdict. Traps
handled here are the ones in specs/sssf-sandbox.md §3 (prefix sha match, content-level clean
tree, ``command -v pi`` first, "No models available" with exit 0, reasoning-only answers, pi's
own cost).
"""

from __future__ import annotations

import functools
import json
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
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
    command_timeout_s: float = 240.0  # [ssh] command_timeout_s: the deadline of A, B, the roster and E
    ssh_config: str | None = None  # [ssh] config: the next step's ssh resolves the alias through it
    # the run items (checks/run.py): what execute and observe recorded, and how app/obs are reached
    pid: int | None = None
    ports: Any = None
    https_url: str = ""
    observe_probe: str = "https"  # [sssf] observe_probe: "https" from this host, "vm" curl inside the VM
    observe_timeout_s: float = 20.0


# Every script announces its end with SBX_END on stdout; a script that stops without it failed
# itself (setup error, a redirect that could not be opened, bash missing), and its item is an
# ``error`` ("the check could not run") with the script's stderr as evidence, never a verdict.
END = "SBX_END"
SCRIPT_ERROR = "SBX_SCRIPT_ERROR"
_PRELUDE = r"""set -u
sbx_script_error() { echo "SBX_SCRIPT_ERROR $*"; exit 0; }
"""
# A private temp directory (mktemp, removed by a trap), for scripts that need a file: never a fixed
# path in a shared directory, which another user, an earlier run or a concurrent check may own.
_TMPDIR = r"""
sbx_tmp=$(mktemp -d "${TMPDIR:-/tmp}/sbxcheck.XXXXXXXX") || sbx_script_error "mktemp -d failed in ${TMPDIR:-/tmp}"
trap 'rm -rf -- "$sbx_tmp"' EXIT
"""
# Reads the runtime key from ~/app/.env into $key, as the SDLC run gets it: the last
# OPENROUTER_API_KEY= line, optional `export`, one layer of quotes stripped. Only pipes and
# builtins touch the value (never argv); the script runs on in ~/app.
_READ_KEY = r"""
cd "$HOME/app" 2>/dev/null || { echo "SBX_NOAPP"; echo "SBX_END"; exit 0; }
key=$(grep -E '^[[:space:]]*(export[[:space:]]+)?OPENROUTER_API_KEY=' .env 2>/dev/null | tail -n 1 \
      | sed -E 's/^[[:space:]]*(export[[:space:]]+)?OPENROUTER_API_KEY=//')
key=${key%$'\r'}
case $key in \"*\") key=${key#\"}; key=${key%\"};; \'*\') key=${key#\'}; key=${key%\'};; esac
[ -n "$key" ] || { echo "SBX_NOKEY"; echo "SBX_END"; exit 0; }
"""
_NEED_CURL = r"""
command -v curl >/dev/null 2>&1 || { echo "SBX_NOCURL"; echo "SBX_END"; exit 0; }
"""

_PING_SCRIPT = (
    _PRELUDE
    + _READ_KEY
    + _NEED_CURL
    + r"""
resp=$(printf 'Authorization: Bearer %s\n' "$key" | curl -sS --max-time "$3" -H @- \
       -H 'Content-Type: application/json' -w '\nSBX_HTTP %{http_code}' --data-binary "$2" "$1/chat/completions" 2>&1)
rc=$?
unset key
echo "SBX_CURL_RC $rc"
printf '%s\n' "$resp"
echo "SBX_END"
"""
)

_KEY_SCRIPT = (
    _PRELUDE
    + _READ_KEY
    + _NEED_CURL
    + r"""
resp=$(printf 'Authorization: Bearer %s\n' "$key" | curl -sS --max-time "$2" -H @- \
       -w '\nSBX_HTTP %{http_code}' "$1/key" 2>&1)
rc=$?
unset key
echo "SBX_CURL_RC $rc"
printf '%s\n' "$resp"
echo "SBX_END"
"""
)

_GIT_SCRIPT = (
    _PRELUDE
    + r"""
[ -d "$HOME/app" ] || { echo "SBX_NOAPP"; echo "SBX_END"; exit 0; }
cd "$HOME/app" || { echo "SBX_NOAPP"; echo "SBX_END"; exit 0; }
if ! head=$(git rev-parse HEAD 2>&1); then
  echo "SBX_NOHEAD"; printf '%s\n' "$head" | head -n 5
  echo "SBX_OWNER $(stat -c '%U' . 2>/dev/null || echo '?') $(id -un 2>/dev/null || echo '?')"
  echo "SBX_END"; exit 0
fi
echo "SBX_HEAD $head"
echo "SBX_STATUS_BEGIN"
git status --porcelain 2>&1
echo "SBX_STATUS_END $?"
echo "SBX_END"
"""
)

# pi 0.73.1 prints its table on stderr without a TTY: both streams are read; markers go to stdout.
_LIST_SCRIPT = (
    _PRELUDE
    + r"""
if ! command -v pi >/dev/null 2>&1; then echo "SBX_NOPI"; echo "SBX_END"; exit 0; fi
echo "SBX_PI $(command -v pi)"
pi --list-models </dev/null
echo "SBX_PI_EXIT $?"
echo "SBX_END"
"""
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
    _PRELUDE
    + "RATES_PY="
    + shlex.quote(_RATES_PY)
    + "\n"
    + _READ_KEY
    + _TMPDIR
    + r"""
mj="${PI_MODELS_PATH:-$HOME/.pi/agent/models.json}"
echo "SBX_RATES_BEGIN"
if [ -f "$mj" ]; then python3 -c "$RATES_PY" "$mj" 2>&1; else echo '{"missing": true}'; fi
echo "SBX_RATES_END"
if ! command -v pi >/dev/null 2>&1; then echo "SBX_NOPI"; echo "SBX_END"; exit 0; fi
: >"$sbx_tmp/pi.stderr" || sbx_script_error "cannot write $sbx_tmp/pi.stderr"
echo "SBX_PI_BEGIN"
OPENROUTER_API_KEY=$key timeout "$2" pi -p --mode json --provider openrouter --model "$1" "$3" \
  </dev/null 2>"$sbx_tmp/pi.stderr"
rc=$?
unset key
echo "SBX_PI_END $rc"
echo "SBX_STDERR_BEGIN"
tail -c 2000 "$sbx_tmp/pi.stderr"
echo "SBX_STDERR_END"
echo "SBX_END"
"""
)

_CONFIG_SCRIPT = (
    _PRELUDE
    + r"""
cfg="$HOME/app/$1"
[ -d "$HOME/app" ] || { echo "SBX_NOAPP"; echo "SBX_END"; exit 0; }
[ -f "$cfg" ] || { echo "SBX_NOCONFIG"; echo "SBX_END"; exit 0; }
echo "SBX_CONFIG_BEGIN"
cat -- "$cfg"
echo
echo "SBX_CONFIG_END $?"
echo "SBX_END"
"""
)


@dataclass(frozen=True)
class GateScript:
    """One gate item's remote work: a bash script for ``bash -s``, its arguments and its deadline.

    The runtime key is never an argument: scripts read it inside the VM.
    """

    script: str
    args: tuple[str, ...]
    timeout_s: float
    ran: str  # what the evidence says was run

    @property
    def command(self) -> str:
        return "bash -s" + "".join(" " + shlex.quote(a) for a in (["--", *self.args] if self.args else []))


@dataclass(frozen=True)
class ScriptRun:
    """What a gate script produced on one host (the input of a judge)."""

    host: str
    exit_code: int
    stdout: str
    stderr: str


def run_script(shell: RemoteShell, script: GateScript) -> ScriptRun:
    """Send ``script`` to ``shell``; transport errors propagate (the plugin maps them)."""
    result = shell.run(script.command, stdin=script.script, timeout=script.timeout_s)
    return ScriptRun(shell.alias, result.exit_code, result.stdout, result.stderr)


def _base_evidence(run: ScriptRun, what: str) -> dict[str, Any]:
    return {"host": run.host, "ran": what, "exit_code": run.exit_code}


def _script_failure(check: str, tgt: str, run: ScriptRun, ev: dict[str, Any]) -> CheckResult | None:
    """An ``error`` when the script itself failed (it said so, or it never reached its end)."""
    lines = run.stdout.splitlines()
    said = next((ln[len(SCRIPT_ERROR) :].strip() for ln in lines if ln.startswith(SCRIPT_ERROR)), None)
    if said is None and END in lines:
        return None
    ev["script_stdout"], ev["script_stderr"] = trim(run.stdout, 500), trim(run.stderr, 1000)
    why = said or (
        f"the remote script stopped before its end (exit {run.exit_code})"
        + (f": {_last_line(run.stderr)}" if run.stderr.strip() else "")
    )
    return CheckResult.errored(
        check,
        tgt,
        f"the check could not run on {run.host}: {trim(why, 200)}",
        Classification.BAD_RESPONSE,
        ev,
        recommendation=f"read script_stderr in the evidence, fix what stopped the script on {run.host} "
        "(nothing about the gated system is known yet), then re-run; nothing was changed",
    )


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def ssh_login(target: GateTarget) -> str:
    """``ssh [-F CONFIG] HOST``: the login that resolves the alias as the gate's own connection did."""
    import shlex

    config = f"-F {shlex.quote(target.ssh_config)} " if target.ssh_config else ""
    return f"ssh {config}{shlex.quote(target.host)}"


def gate_advice(target: GateTarget) -> str:
    """What to do after a failed gate item: the VM stays up as evidence; nothing is torn down."""
    return (
        f"the VM is left up as evidence — get in: {ssh_login(target)}; diagnose, fix, then re-run "
        f"`just sbx lifecycle setup {target.run_id}`. Nothing was torn down; that stays your decision."
    )


def runtime_key_rejected_advice(run_id: str) -> str:
    """Next step when OpenRouter refuses the VM's runtime key (not the harness's credentials)."""
    return (
        f"OpenRouter refused the VM's runtime key (OPENROUTER_API_KEY in ~/app/.env of {run_id}), not a "
        f"credential of the inventory. If .sandbox/runs/{run_id}.key still holds a live key, rewrite "
        f"~/app/.env with `just sbx lifecycle fill {run_id}`; if the key was revoked, mount a fresh run "
        "(`just sbx mount <task>`), which mints a new one — sbxcheck mints nothing; nothing was changed"
    )


def credit_exhausted_advice(run_id: str) -> str:
    return (
        f"the runtime key of {run_id} has no credit left (see gate E). Raising its cap or ending the run "
        "is the operator's decision; nothing was changed"
    )


def advised(
    fn: Callable[Concatenate[RemoteShell, GateTarget, P], CheckResult],
) -> Callable[Concatenate[RemoteShell, GateTarget, P], CheckResult]:
    """Give every non-passing gate result the keep-the-VM recommendation unless it has its own."""

    @functools.wraps(fn)
    def wrapper(shell: RemoteShell, target: GateTarget, *args: P.args, **kwargs: P.kwargs) -> CheckResult:
        return with_advice(fn(shell, target, *args, **kwargs), target)

    return wrapper  # type: ignore[return-value]  # functools.wraps loses the ParamSpec


def with_advice(result: CheckResult, target: GateTarget) -> CheckResult:
    """``result`` with the keep-the-VM advice when it did not pass and has no next step of its own."""
    if result.outcome is not Outcome.PASSED and result.recommendation is None:
        return result.model_copy(update={"recommendation": gate_advice(target)})
    return result


# ---------------------------------------------------------------- A


def git_integrity_script(target: GateTarget) -> GateScript:
    return GateScript(
        _GIT_SCRIPT, (), target.command_timeout_s, "cd ~/app && git rev-parse HEAD && git status --porcelain"
    )


def judge_git_integrity(target: GateTarget, run: ScriptRun) -> CheckResult:
    """A: HEAD starts with the recorded commit_sha and ``git status --porcelain`` printed nothing."""
    check, tgt = "A_git_integrity", target.run_id
    ev = _base_evidence(run, git_integrity_script(target).ran)
    ev["recorded_commit_sha"] = target.commit_sha
    if (failure := _script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if "SBX_NOAPP" in lines:
        return CheckResult.failed(check, tgt, "no ~/app on this VM — FILL never ran", ev)
    if "SBX_NOHEAD" in lines:
        output = [ln for ln in lines if ln not in ("SBX_NOHEAD", END) and not ln.startswith("SBX_OWNER ")]
        ev["git_output"] = trim("\n".join(output))
        owner = next((ln.split()[1:] for ln in lines if ln.startswith("SBX_OWNER ")), [])
        if len(owner) == 2:
            ev["app_owner"], ev["ssh_user"] = owner
        return git_refusal(check, tgt, "\n".join(output), ev, target)
    head = next((ln.split(" ", 1)[1].strip() for ln in lines if ln.startswith("SBX_HEAD ")), "")
    status = _section(lines, "SBX_STATUS_BEGIN", "SBX_STATUS_END")
    end = next((ln for ln in lines if ln.startswith("SBX_STATUS_END ")), None)
    if not re.fullmatch(r"\S+", head) or status is None or end is None:
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
        return CheckResult.errored(
            check, tgt, "unexpected output from the git probe", Classification.BAD_RESPONSE, ev
        )
    status_rc = end.split()[-1]
    porcelain = [ln for ln in status if ln.strip()]
    ev["head"] = head
    ev["head_matches"] = bool(target.commit_sha) and head.startswith(target.commit_sha)
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


def git_refusal(check: str, tgt: str, output: str, ev: dict[str, Any], target: GateTarget) -> CheckResult:
    """A failed ``git rev-parse HEAD``: git's known refusals named as what they are, with their fix."""
    text = output.lower()
    if "dubious ownership" in text:
        owner, user = ev.get("app_owner", "another user"), ev.get("ssh_user", "the SSH user")
        ev["git_refusal"] = "dubious_ownership"
        return CheckResult.failed(
            check,
            tgt,
            f"git refuses ~/app: detected dubious ownership (owned by {owner}, the SSH user is {user}); "
            "the clone is intact, git will not read it",
            ev,
            Classification.CONFIG_DEFECT,
            recommendation=f"on {target.host}: `chown -R {user} ~/app` if the clone should be this user's, "
            'or trust it as it is: `git config --global --add safe.directory "$HOME/app"`; then re-run '
            f"`just sbx lifecycle setup {target.run_id}`. Nothing was changed",
        )
    if "not a git repository" in text:
        ev["git_refusal"] = "not_a_repository"
        return CheckResult.failed(
            check,
            tgt,
            "git says ~/app is not a git repository — .git is damaged or missing (FILL's clone was replaced?)",
            ev,
            recommendation=f"re-clone with `just sbx lifecycle fill {target.run_id}`, then re-run "
            f"`just sbx lifecycle setup {target.run_id}`. Nothing was changed",
        )
    return CheckResult.failed(check, tgt, "git rev-parse failed — .git is damaged", ev)


@advised
def check_git_integrity(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """A: HEAD starts with the recorded commit_sha and ``git status --porcelain`` prints nothing."""
    return judge_git_integrity(target, run_script(shell, git_integrity_script(target)))


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
        if fields == ["provider", "model", "context", "max-out", "thinking", "images"]:
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


def pi_models_script(target: GateTarget) -> GateScript:
    return GateScript(
        _LIST_SCRIPT, (), target.command_timeout_s, "command -v pi && pi --list-models </dev/null"
    )


def judge_pi_models(target: GateTarget, run: ScriptRun) -> CheckResult:
    """B: ``pi`` is on PATH and ``pi --list-models`` lists every roster model (its exit code ignored)."""
    check, tgt = "B_pi_models", target.run_id
    ev = _base_evidence(run, pi_models_script(target).ran)
    if (failure := _script_failure(check, tgt, run, ev)) is not None:
        return failure
    out_lines = run.stdout.splitlines()
    if "SBX_NOPI" in out_lines:
        return CheckResult.failed(check, tgt, "pi is not on PATH", ev)
    ev["pi_path"] = next((ln.split(" ", 1)[1] for ln in out_lines if ln.startswith("SBX_PI ")), None)
    pi_exit = next((ln.split()[1] for ln in out_lines if re.fullmatch(r"SBX_PI_EXIT \d+", ln)), None)
    ev["pi_exit"] = int(pi_exit) if pi_exit is not None else None
    printed = [ln for ln in out_lines if not ln.startswith(("SBX_PI ", "SBX_PI_EXIT ")) and ln != END]
    text = "\n".join([*printed, run.stderr])
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
    if not target.roster:
        return CheckResult.failed(check, tgt, "the roster is empty: no model to look for in pi's list", ev)
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


@advised
def check_pi_models(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """B: ``pi`` is on PATH and ``pi --list-models`` lists every roster model."""
    return judge_pi_models(target, run_script(shell, pi_models_script(target)))


# ---------------------------------------------------------------- C


def split_http(out: str) -> tuple[int | None, int | None, str, list[str]]:
    """(curl rc, http status, body, precondition markers) from a curl script's stdout."""
    lines = out.splitlines()
    markers = [ln for ln in lines if ln in _PRECONDITION_MESSAGES]
    rc = next((int(ln.split()[1]) for ln in lines if re.fullmatch(r"SBX_CURL_RC \d{1,3}", ln)), None)
    status = next((int(ln.split()[1]) for ln in lines if re.fullmatch(r"SBX_HTTP \d{3}", ln)), None)
    body_lines = [ln for ln in lines if not ln.startswith(("SBX_CURL_RC ", "SBX_HTTP ")) and ln != END]
    return rc, status, "\n".join(body_lines).strip(), markers


_PRECONDITION_MESSAGES = {
    "SBX_NOAPP": "no ~/app on this VM — FILL never ran",
    "SBX_NOCURL": "curl is not installed on the VM",
    "SBX_NOKEY": "no OPENROUTER_API_KEY line in ~/app/.env — FILL did not write the runtime key",
}


def _precondition(
    check: str, tgt: str, markers: list[str], ev: dict[str, Any], run_id: str
) -> CheckResult | None:
    """The failed result for the first precondition marker a script printed (C, D and E say the same)."""
    if not markers:
        return None
    ev["precondition"] = markers[0]
    advice = None
    if markers[0] in ("SBX_NOAPP", "SBX_NOKEY"):
        advice = (
            f"the run cannot get its runtime key on the VM: `just sbx lifecycle fill {run_id}` clones ~/app and "
            f"writes ~/app/.env from .sandbox/runs/{run_id}.key; then re-run the gate. Nothing was changed"
        )
    return CheckResult.failed(check, tgt, _PRECONDITION_MESSAGES[markers[0]], ev, recommendation=advice)


def _error_text(doc: Any) -> str:
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if err:
            return str(err)
    return "no content and no error field"


def _json_or_none(text: str) -> Any:
    """The parsed document, or None for anything that is not strict JSON (NaN/Infinity included)."""
    try:
        return loads_bounded(text, parse_constant=_reject_constant)
    except ValueError:  # not JSON, a NaN/Infinity, or refused as too deep or large
        return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


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
    ev = _base_evidence(run, model_answers_script(target, model).ran)
    ev.update(run_id=target.run_id, model=model)
    if (failure := _script_failure(check, tgt, run, ev)) is not None:
        return failure
    rc, status, text, markers = split_http(run.stdout)
    if (pre := _precondition(check, tgt, markers, ev, target.run_id)) is not None:
        return pre
    if rc is None:
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
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
    doc = _json_or_none(text)
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
        extra["recommendation"] = runtime_key_rejected_advice(target.run_id)
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


def roster_script(target: GateTarget) -> GateScript:
    return GateScript(
        _CONFIG_SCRIPT, (target.roster_config,), target.command_timeout_s, f"cat ~/app/{target.roster_config}"
    )


def judge_roster_matches(target: GateTarget, run: ScriptRun) -> CheckResult:
    """C roster: the roster on the VM equals the roster the C items were collected for."""
    check, tgt = "C_roster_matches", target.run_id
    ev = _base_evidence(run, roster_script(target).ran)
    if (failure := _script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if "SBX_NOAPP" in lines:
        return CheckResult.failed(check, tgt, "no ~/app on this VM — FILL never ran", ev)
    if "SBX_NOCONFIG" in lines:
        return CheckResult.failed(check, tgt, f"missing {target.roster_config} on the VM", ev)
    config = _section(lines, "SBX_CONFIG_BEGIN", "SBX_CONFIG_END")
    if config is None:
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
        return CheckResult.errored(
            check, tgt, "unexpected output from the config probe", Classification.BAD_RESPONSE, ev
        )
    vm_roster = parse_roster("\n".join(config))
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


@advised
def check_roster_matches(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """C roster: the roster on the VM equals the roster the C items were collected for."""
    return judge_roster_matches(target, run_script(shell, roster_script(target)))


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


def _positive_finite(value: Any) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def rate_problems(rates_text: str) -> tuple[int, list[str]]:
    """(models declared, problems) from the models.json summary printed by the VM."""
    doc = _json_or_none(rates_text)
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
        if not _positive_finite(value):
            problems.append(f"{name}: cost.input is {value!r}, must be a finite number > 0")
    return len(models), problems


def cost_script(target: GateTarget) -> GateScript:
    return GateScript(
        _COST_SCRIPT,
        (target.cost_probe_model, str(max(1, int(target.pi_timeout_s))), COST_PROBE_PROMPT),
        target.pi_timeout_s + 30,
        f"cd ~/app && OPENROUTER_API_KEY=<from ~/app/.env> pi -p --mode json --provider openrouter "
        f"--model {target.cost_probe_model}; read models.json rates",
    )


def judge_cost_reported(target: GateTarget, run: ScriptRun) -> CheckResult:
    """D: a live pi call, run as the SDLC runs it, reports a non-zero cost AND models.json has full rates."""
    check, tgt = "D_cost_reported", target.run_id
    ev = _base_evidence(run, cost_script(target).ran)
    if (failure := _script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if (
        pre := _precondition(
            check, tgt, [ln for ln in lines if ln in _PRECONDITION_MESSAGES], ev, target.run_id
        )
    ) is not None:
        return pre
    rates = _section(lines, "SBX_RATES_BEGIN", "SBX_RATES_END")
    if rates is None:
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
        return CheckResult.errored(
            check, tgt, "unexpected output from the cost probe", Classification.BAD_RESPONSE, ev
        )
    declared, problems = rate_problems("\n".join(rates).strip())
    ev["models_json_models"] = declared
    ev["rate_problems"] = problems[:20]
    extra: dict[str, Any] = {}
    classification = Classification.CHECK_FAILED
    if "SBX_NOPI" in lines:
        problems.insert(0, "pi is not on PATH")
    else:
        call = judge_pi_call(lines, target)
        ev.update(call.evidence)
        problems[:0] = call.problems
        if call.http_status == 402:
            extra["cause"] = f"credit-exhausted:{target.run_id}"
            extra["recommendation"] = credit_exhausted_advice(target.run_id)
        elif call.http_status == 401:
            classification = Classification.AUTH_FAILED
            extra["cause"] = f"runtime-key-rejected:{target.run_id}"
            extra["recommendation"] = runtime_key_rejected_advice(target.run_id)
    if problems:
        return CheckResult.failed(
            check,
            tgt,
            "; ".join(problems[:4]) + (" …" if len(problems) > 4 else ""),
            ev,
            classification,
            **extra,
        )
    return CheckResult.passed(
        check,
        tgt,
        f"pi, run from ~/app with the key from ~/app/.env, reported cost ${ev['cost_total']:.6g} for "
        f"{target.cost_probe_model}; all {declared} models.json models carry four-field rates",
        ev,
    )


@advised
def check_cost_reported(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """D: a live pi call reports a non-zero cost AND every models.json model has a full rate block."""
    return judge_cost_reported(target, run_script(shell, cost_script(target)))


@dataclass
class PiCall:
    """What one ``pi --mode json`` call showed: problems, evidence, and the HTTP status its error names."""

    problems: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    http_status: int | None = None


_HTTP_IN_ERROR_RE = re.compile(r"\b(40[0-9]|4[1-9][0-9]|5[0-9][0-9])\b")
_CREDIT_RE = re.compile(r"insufficient credits|credit|payment required|key limit", re.IGNORECASE)


def parse_pi_events(pi_lines: list[str]) -> tuple[int, int, list[float], str | None, str | None]:
    """(JSON events, non-JSON lines, assistant costs, last stopReason, last errorMessage) of pi's output.

    A cost that is missing, not a number, or not finite counts as 0: it never makes a pass.
    """
    events, non_json, costs = 0, 0, []
    stop_reason: str | None = None
    error_message: str | None = None
    for ln in pi_lines:
        if not ln.strip():
            continue
        doc = _json_or_none(ln)
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
        usage = msg.get("usage")
        cost = usage.get("cost") if isinstance(usage, dict) else None
        total = cost.get("total", 0) if isinstance(cost, dict) else 0
        costs.append(float(total) if _positive_finite(total) else 0.0)
    return events, non_json, costs, stop_reason, error_message


def judge_pi_call(lines: list[str], target: GateTarget) -> PiCall:
    """Problems with pi's live call, from its JSON event lines (an error message naming 402/401 says so)."""
    call = PiCall()
    pi_lines = _section(lines, "SBX_PI_BEGIN", "SBX_PI_END")
    end = next((ln for ln in lines if re.fullmatch(r"SBX_PI_END \d{1,3}", ln)), None)
    if pi_lines is None or end is None:
        call.problems.append("the pi call produced no parseable run (output cut off)")
        return call
    rc = int(end.split()[1])
    stderr_tail = _section(lines, "SBX_STDERR_BEGIN", "SBX_STDERR_END") or []
    events, non_json, costs, stop_reason, error_message = parse_pi_events(pi_lines)
    call.evidence.update(
        pi_exit=rc,
        pi_events=events,
        pi_non_json_lines=non_json,
        assistant_messages=len(costs),
        stop_reason=stop_reason,
        cost_total=max(costs) if costs else 0.0,
    )
    if stderr_tail:
        call.evidence["pi_stderr_tail"] = trim("\n".join(stderr_tail), 400)
    said = " ".join(filter(None, [error_message, "\n".join(stderr_tail)]))
    status_match = _HTTP_IN_ERROR_RE.search(error_message or "")
    if status_match:
        call.http_status = int(status_match.group(1))
    elif _CREDIT_RE.search(said):
        call.http_status = 402
    if rc == 124:
        call.problems.append(f"pi did not finish within {target.pi_timeout_s:.0f}s")
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
    if not costs:
        call.problems.append("pi printed no assistant message_end")
    elif max(costs) <= 0 and not error_message:
        call.problems.append("pi reported cost 0 — models.json has no rate table for the probe model")
    return call


# ---------------------------------------------------------------- E


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
    ev = _base_evidence(run, credit_script(target).ran)
    ev["floor_usd"] = target.credit_floor_usd
    if (failure := _script_failure(check, tgt, run, ev)) is not None:
        return failure
    rc, status, text, markers = split_http(run.stdout)
    if (pre := _precondition(check, tgt, markers, ev, target.run_id)) is not None:
        return pre
    if rc is None:
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
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
    doc = _json_or_none(text)
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
                recommendation=runtime_key_rejected_advice(target.run_id),
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
