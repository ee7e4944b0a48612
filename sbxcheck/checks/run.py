"""Checks of an SSSF run that has executed or been observed: is the SDLC alive, is its
``run.log`` free of known fatal lines, do the app and the trace UI answer as the spec says.

``execute`` records a pid, which only proves a process started: the SDLC can die right after spawn
with its error only in ``~/app/run.log``. ``observe`` records ``ports`` and promises the app
(``https://<vm>/``: 200 anonymously) and the trace UI (``https://<vm>:<obs>/``: anything but 000 or
≥ 500; 307/401 is correct there). Each check is a script (or an HTTP probe) plus a pure judge, as
in :mod:`sbxcheck.checks.gate`; the record's facts come on the :class:`GateTarget` (``pid``,
``ports``, ``https_url``) and the inventory's ``[sssf] observe_probe`` says how app and trace UI are
reached: ``https`` from this host as a user would, or ``vm``: curl inside the VM on its local ports.
Ports are always the record's, never assumed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sbxcheck.checks.base import RemoteShell, trim
from sbxcheck.checks.gate import (
    _NEED_CURL,
    _PRELUDE,
    _TMPDIR,
    GateScript,
    GateTarget,
    ScriptRun,
    _script_failure,
    _section,
    run_script,
    ssh_login,
)
from sbxcheck.results import CheckResult, Classification, Outcome

__all__ = [
    "FATAL_CLASSES",
    "FatalClass",
    "HttpProbe",
    "ProcInfo",
    "RunLog",
    "check_observe_app",
    "check_observe_obs",
    "check_run_alive",
    "check_run_log_clean",
    "classify_line",
    "finish_outcome",
    "judge_observe_app",
    "judge_observe_obs",
    "judge_run_alive",
    "judge_run_log_clean",
    "observe_ports",
    "parse_ps",
    "run_precondition",
]

# The recorded pid is `nohup just --shell bash --shell-arg -c adw <ADW> …` (nohup execs just): a
# process at that pid whose command line is anything else is not the SDLC (the pid was reused).
SDLC_ARGS_RE = re.compile(r"(?:^|[\s/])just\s(?:.*\s)?adw(?:\s|$)")
# How a run says it ended: the workflow's name, then the verdict word right after it (``[adw] sdlc:
# completed``), so a prompt echoed in a start line ("… make sure it is done") never counts. The last
# such line of run.log's tail decides.
_NAMED = r"\b(?:sdlc|adw|workflow|pipeline)\b[:\s\]-]*"
FINISH_FAILED_RE = re.compile(_NAMED + r"(?:failed|aborted|crashed)\b|^error: recipe `adw` failed", re.I)
FINISH_OK_RE = re.compile(_NAMED + r"(?:completed?|finished|succeeded|done)\b", re.I)
# just's own verdict on the recipe it ran (`error: Recipe `sdlc` failed on line 69 with exit code 1`).
JUST_FAILED_RE = re.compile(r"^error: recipe `[^`]+` failed on line \d+ with exit code \d+", re.I)
# The SDLC's closing panel prints its title ("ADW complete") whichever way the run went; only its
# status row (`status   ✓ success` / `status   ✗ fail`) says how it ended.
PANEL_TITLE_RE = re.compile(r"^\W*adw complete\W*$", re.I)
STATUS_ROW_RE = re.compile(r"^[\s│|]*status\s+(?:[✓✗x]\s*)?(success|fail(?:ed|ure)?)\b", re.I)
LOG_TAIL_LINES = 30
LOG_MATCH_LINES = 40
LINE_CHARS = 400
BODY_CHARS = 1500
# A 200 that is a proxy's or server's error page is not the app (checked on the first BODY_CHARS).
ERROR_PAGE_RE = re.compile(
    r"<title>[^<]*\b(?:error|bad gateway|unavailable|not found|50[0-4])\b|\bbad gateway\b|"
    r"\bupstream connect error\b|\bno healthy upstream\b|\bconnection refused\b|\bservice unavailable\b",
    re.I,
)


@dataclass(frozen=True)
class FatalClass:
    """One known fatal ``run.log`` line: its pattern, what it means, and how it is classified."""

    name: str
    pattern: re.Pattern[str]
    classification: Classification
    meaning: str


# Order matters: OpenRouter says `User not found` with a 401, so the provisioning key is tried first.
FATAL_CLASSES: tuple[FatalClass, ...] = (
    FatalClass(
        "provisioning_key",
        re.compile(r"\buser not found\b", re.I),
        Classification.CONFIG_DEFECT,
        "OpenRouter answered `User not found`: inference ran with the provisioning key (it cannot do inference)",
    ),
    FatalClass(
        "data_policy",
        re.compile(r"no endpoints found matching your data policy", re.I),
        Classification.CONFIG_DEFECT,
        "`No endpoints found matching your data policy`: the model has no ZDR (zero data retention) endpoint",
    ),
    FatalClass(
        "credits",
        re.compile(
            r"insufficient credits|requires more credits|payment required|\b402\b.*\b(?:credits?|payment)\b", re.I
        ),
        Classification.CHECK_FAILED,
        "OpenRouter answered 402: the runtime key's credits are spent",
    ),
    FatalClass(
        "dead_key",
        re.compile(
            r"\b401\b.*\b(?:unauthori[sz]ed|invalid|revoked|disabled|expired|no auth credentials|key not found)\b"
            r"|\b(?:invalid|revoked|disabled|expired) api key\b",
            re.I,
        ),
        Classification.AUTH_FAILED,
        "OpenRouter answered 401: the runtime key is dead (revoked, disabled or invalid)",
    ),
)
# What the VM greps run.log for (a superset of every class; the classes decide in Python).
FATAL_GREP = "user not found|data policy|credits|payment required|402|401|api key"


def classify_line(line: str) -> FatalClass | None:
    """The known fatal class of one run.log line, or None."""
    return next((c for c in FATAL_CLASSES if c.pattern.search(line)), None)


def fatal_advice(fatal: FatalClass, target: GateTarget) -> str:
    """The next step for a run.log fatal line: one per class, nothing done on anyone's behalf."""
    run = target.run_id
    again = f'`just sbx lifecycle execute {run} "your prompt"`'
    if fatal.name == "credits":
        return (
            f"the runtime key sbx-{run} is out of credit: top up the OpenRouter account or raise the key's "
            f"limit (openrouter.ai, Settings, Keys, sbx-{run}), then start the SDLC again ({again}). "
            "Nothing was changed"
        )
    if fatal.name == "dead_key":
        task = re.sub(r"-\d{8}-[0-9a-f]{6}$", "", run) or run
        return (
            f"the runtime key of {run} is dead: re-mint it by ending this run and mounting a new one — "
            f"`just sbx manage harvest {run}`, then `just sbx lifecycle teardown {run}` (your decision), then "
            f"`just sbx mount {task}`, which mints a fresh key. sbxcheck mints nothing; nothing was changed"
        )
    if fatal.name == "data_policy":
        return (
            "a model the SDLC called has no ZDR endpoint (the run.log line in the evidence names the call): pin "
            f"roster models that have a zero-data-retention endpoint in {target.roster_config} on the VM's "
            f"checkout, then start the SDLC again ({again}). Nothing was changed"
        )
    return (
        f"config defect: the SDLC ran inference with the provisioning key, which never belongs on a VM. Point "
        f"it at the runtime key in ~/app/.env (`just sbx lifecycle fill {run}` rewrites that file from the "
        "run's key file on this host), remove the provisioning key from the VM (gate item test_vm_hygiene finds "
        f"it by hash; get in with `{ssh_login(target)}`), then start the SDLC again. Nothing was changed"
    )


def _fatal_cause(fatal: FatalClass, run_id: str) -> str:
    prefix = {
        "credits": "credit-exhausted",  # as gate C's 402: one incident when both see it
        "dead_key": "runtime-key-rejected",
        "data_policy": "no-zdr-endpoint",
        "provisioning_key": "provisioning-key-inference",
    }[fatal.name]
    return f"{prefix}:{run_id}"


# ---------------------------------------------------------------- the remote probe of a run


_RUN_SCRIPT = (
    _PRELUDE
    + r"""
pid=$1
app="$HOME/app"
echo "SBX_APP $app"
# ps first (procps); a ps that refuses these options (busybox) or is missing falls back to /proc
if command -v ps >/dev/null 2>&1 && line=$(ps -o pid=,stat=,etimes=,args= -p "$pid" 2>/dev/null); then
  echo "SBX_PS_BEGIN"
  printf '%s\n' "$line" | cut -c1-600 | sed 's/^/| /'
  echo "SBX_PS_END"
elif [ -d /proc/self ]; then
  echo "SBX_PS_BEGIN"
  if [ -r "/proc/$pid/stat" ]; then
    st=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
    args=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-600)
    echo "| $pid ${st:-?} - $args"
  fi
  echo "SBX_PS_END"
elif command -v ps >/dev/null 2>&1; then  # no /proc: ps's refusal means the pid is not running
  echo "SBX_PS_BEGIN"; echo "SBX_PS_END"
else
  echo "SBX_NOPS"; echo "SBX_END"; exit 0
fi
cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) && echo "SBX_CWD $cwd"
log="$app/run.log"
if [ -f "$log" ]; then
  echo "SBX_LOG $(wc -c < "$log" | tr -d ' ') $(wc -l < "$log" | tr -d ' ')"
  echo "SBX_TAIL_BEGIN"
  tail -n "$2" -- "$log" | cut -c1-"$4" | sed 's/^/| /'
  echo; echo "SBX_TAIL_END"
  echo "SBX_MATCH_BEGIN"
  grep -a -n -i -E -e "$3" -- "$log" | tail -n "$2" | cut -c1-"$4" | sed 's/^/| /'
  echo; echo "SBX_MATCH_END"
else
  echo "SBX_NOLOG"
fi
echo "SBX_END"
"""
)

_CURL_SCRIPT = (
    _PRELUDE
    + _NEED_CURL
    + _TMPDIR
    + r"""
code=$(curl -sS --noproxy '*' -o "$sbx_tmp/body" -D "$sbx_tmp/headers" --max-time "$2" -w '%{http_code}' "$1" \
       2>"$sbx_tmp/err")
rc=$?
echo "SBX_CURL_RC $rc"
echo "SBX_HTTP ${code:-000}"
loc=$(grep -i '^location:' "$sbx_tmp/headers" 2>/dev/null | head -n 1 | tr -d '\r' | cut -c1-300)
echo "SBX_LOCATION ${loc#*: }"
echo "SBX_BODY_BEGIN"
head -c "$3" "$sbx_tmp/body" 2>/dev/null | sed 's/^/| /'
echo; echo "SBX_BODY_END"
echo "SBX_ERR_BEGIN"
head -c 300 "$sbx_tmp/err" 2>/dev/null | sed 's/^/| /'
echo; echo "SBX_ERR_END"
echo "SBX_END"
"""
)


def run_probe_script(target: GateTarget) -> GateScript:
    """ps of the recorded pid, its cwd, and run.log: size, tail, and the lines that may be fatal."""
    pid = str(target.pid)
    return GateScript(
        _RUN_SCRIPT,
        (pid, str(LOG_TAIL_LINES), FATAL_GREP, str(LINE_CHARS)),
        target.command_timeout_s,
        f"ps -o pid=,stat=,etimes=,args= -p {pid}; readlink /proc/{pid}/cwd; tail and grep ~/app/run.log",
    )


@dataclass(frozen=True)
class ProcInfo:
    """One process as ps (or /proc) showed it."""

    pid: int
    stat: str
    elapsed_s: int | None
    args: str

    @property
    def zombie(self) -> bool:
        return self.stat.startswith("Z")


@dataclass(frozen=True)
class RunLog:
    """What the VM said about ~/app/run.log."""

    exists: bool
    size: int | None = None
    lines: int | None = None
    tail: tuple[str, ...] = ()
    matches: tuple[tuple[int, str], ...] = ()  # (line number, text) of the lines the VM's grep found


def _body(lines: Iterable[str]) -> list[str]:
    """Content lines of a section (the VM prefixes each with ``| ``, so content never forges a marker)."""
    return [ln[2:] for ln in lines if ln.startswith("| ")]


def parse_ps(lines: list[str], pid: int) -> ProcInfo | None:
    """The process ``pid`` from the ps section's lines (``pid stat etimes args``), or None (not running)."""
    for line in lines:
        fields = line.split(None, 3)
        if len(fields) < 3 or not fields[0].isdigit() or int(fields[0]) != pid:
            continue
        elapsed = int(fields[2]) if fields[2].isdigit() else None
        return ProcInfo(pid, fields[1], elapsed, fields[3].strip() if len(fields) > 3 else "")
    return None


def parse_run_log(lines: list[str]) -> RunLog:
    if "SBX_NOLOG" in lines:
        return RunLog(False)
    head = next((ln.split() for ln in lines if ln.startswith("SBX_LOG ")), None)
    size = int(head[1]) if head and len(head) > 1 and head[1].isdigit() else None
    count = int(head[2]) if head and len(head) > 2 and head[2].isdigit() else None
    tail = _body(_section(lines, "SBX_TAIL_BEGIN", "SBX_TAIL_END") or [])
    matches: list[tuple[int, str]] = []
    for text in _body(_section(lines, "SBX_MATCH_BEGIN", "SBX_MATCH_END") or []):
        number, sep, rest = text.partition(":")
        if sep and number.isdigit():
            matches.append((int(number), rest))
    return RunLog(True, size, count, tuple(tail), tuple(matches))


def finish_outcome(tail: Iterable[str]) -> tuple[str, str] | None:
    """``("finished" | "failed", line)`` for the last line of the tail that says how the run ended."""
    found: tuple[str, str] | None = None
    for line in tail:
        text = line.strip()
        if PANEL_TITLE_RE.match(text):
            continue
        if row := STATUS_ROW_RE.match(text):
            found = ("finished" if row.group(1).lower() == "success" else "failed", text.strip("│| "))
        elif JUST_FAILED_RE.match(text) or FINISH_FAILED_RE.search(line):
            found = ("failed", line.strip())
        elif FINISH_OK_RE.search(line):
            found = ("finished", line.strip())
    return found


def last_fatal(log: RunLog) -> tuple[FatalClass, int, str, int] | None:
    """(class, line number, line, how many fatal lines) of the last known fatal line, or None."""
    hits = [(c, n, text) for n, text in log.matches if (c := classify_line(text)) is not None]
    if not hits:
        return None
    fatal, number, text = hits[-1]
    return fatal, number, text, len(hits)


def run_precondition(target: GateTarget, check: str) -> CheckResult | None:
    """A skip when the run has not executed (no pid) or not been observed (no ports); else None."""
    run = target.run_id
    if check in ("alive", "log_clean") and target.pid is None:
        return CheckResult(
            check=check,
            target=run,
            outcome=Outcome.SKIPPED,
            message=f"not executed: the run record of {run} has no pid "
            f"(`just sbx lifecycle execute {run} PROMPT` records one)",
        )
    if check in ("observe_app", "observe_obs") and target.ports is None:
        return CheckResult(
            check=check,
            target=run,
            outcome=Outcome.SKIPPED,
            message=f"not observed: the run record of {run} has no ports (`just sbx lifecycle observe {run}` "
            "records them)",
        )
    return None


def _vm_advice(target: GateTarget, what: str) -> str:
    return (
        f"{what}; the VM is left up as evidence — read the log there "
        f"(`{ssh_login(target)} 'tail -n 50 app/run.log'`). Nothing was torn down; that stays your decision"
    )


def _log_evidence(ev: dict[str, Any], log: RunLog) -> None:
    ev["run_log"] = "~/app/run.log"
    ev["run_log_exists"] = log.exists
    if log.exists:
        ev["run_log_bytes"], ev["run_log_lines"] = log.size, log.lines
        ev["run_log_tail"] = [trim(t, 300) for t in log.tail[-8:]]


def judge_run_alive(target: GateTarget, run: ScriptRun) -> CheckResult:
    """The recorded pid is the SDLC and alive on the VM, or the run finished with an outcome in run.log."""
    check, tgt = "alive", target.run_id
    assert target.pid is not None
    pid = target.pid
    ev: dict[str, Any] = {"host": run.host, "ran": run_probe_script(target).ran, "exit_code": run.exit_code}
    ev["pid"] = pid
    if (failure := _script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if "SBX_NOPS" in lines:
        return CheckResult.errored(
            check, tgt, f"neither ps nor /proc on {run.host}: cannot tell whether pid {pid} runs",
            Classification.BAD_RESPONSE, ev,
        )  # fmt: skip
    ps_lines = _section(lines, "SBX_PS_BEGIN", "SBX_PS_END")
    if ps_lines is None:
        ev["stdout"] = trim(run.stdout, 500)
        return CheckResult.errored(check, tgt, "unexpected output from the pid probe", Classification.BAD_RESPONSE, ev)
    proc = parse_ps(_body(ps_lines), pid)
    app = next((ln[len("SBX_APP ") :] for ln in lines if ln.startswith("SBX_APP ")), "")
    cwd = next((ln[len("SBX_CWD ") :] for ln in lines if ln.startswith("SBX_CWD ")), None)
    ev["ps"] = trim(f"{proc.pid} {proc.stat} {proc.args}", 300) if proc else "(no such process)"
    if proc is not None:
        ev["elapsed_s"], ev["cwd"] = proc.elapsed_s, cwd
    log = parse_run_log(lines)
    _log_evidence(ev, log)
    is_sdlc = proc is not None and not proc.zombie and bool(SDLC_ARGS_RE.search(proc.args))
    in_app = cwd is None or cwd == app  # unreadable cwd (another user's process): the args decide
    if proc is not None and is_sdlc and in_app:
        ev["alive"] = True
        up = f", up {proc.elapsed_s}s" if proc.elapsed_s is not None else ""
        return CheckResult.passed(check, tgt, f"pid {pid} is the SDLC ({trim(proc.args, 120)}){up}", ev)
    ev["alive"] = False
    if proc is None:
        gone = f"pid {pid} is not running"
    elif proc.zombie:
        gone = f"pid {pid} is a zombie (the SDLC exited)"
    elif not is_sdlc:
        gone = f"pid {pid} is another process now ({trim(proc.args, 120)}): the SDLC is gone and its pid reused"
    else:
        gone = f"pid {pid} runs in {cwd}, not {app}: it is not this run's SDLC"
    if not log.exists:
        return CheckResult.failed(
            check, tgt, f"{gone}, and ~/app/run.log does not exist: nothing says how it ended", ev,
            recommendation=_vm_advice(target, "find out why the SDLC stopped"),
        )  # fmt: skip
    fatal = last_fatal(log)
    if fatal is not None:
        cls, number, text, _ = fatal
        ev.update(fatal_class=cls.name, fatal_line_no=number, fatal_line=trim(text.strip(), 300))
        return CheckResult.failed(
            check, tgt, f"{gone}: the SDLC died — run.log line {number}: {trim(text.strip(), 200)} ({cls.meaning})",
            ev, cls.classification, cause=_fatal_cause(cls, target.run_id), recommendation=fatal_advice(cls, target),
        )  # fmt: skip
    outcome = finish_outcome(log.tail)
    if outcome is not None and outcome[0] == "finished":
        ev["outcome_line"] = trim(outcome[1], 300)
        return CheckResult.passed(check, tgt, f"{gone}; the run finished: {trim(outcome[1], 200)}", ev)
    if outcome is not None:
        ev["outcome_line"] = trim(outcome[1], 300)
        return CheckResult.failed(
            check, tgt, f"{gone}; the run ended: {trim(outcome[1], 200)}", ev,
            recommendation=_vm_advice(target, "the SDLC reported a failure"),
        )  # fmt: skip
    last = next((t.strip() for t in reversed(log.tail) if t.strip()), "(empty)")
    return CheckResult.failed(
        check, tgt, f"{gone}, and run.log has no outcome (last line: {trim(last, 200)}): the SDLC died", ev,
        recommendation=_vm_advice(target, "find out why the SDLC stopped"),
    )  # fmt: skip


def judge_run_log_clean(target: GateTarget, run: ScriptRun) -> CheckResult:
    """No known fatal line in run.log; each known line is one classification with its next step."""
    check, tgt = "log_clean", target.run_id
    ev: dict[str, Any] = {"host": run.host, "ran": run_probe_script(target).ran, "exit_code": run.exit_code}
    ev["pid"] = target.pid
    if (failure := _script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if "SBX_NOLOG" not in lines and _section(lines, "SBX_MATCH_BEGIN", "SBX_MATCH_END") is None:
        ev["stdout"] = trim(run.stdout, 500)
        what = "unexpected output from the run.log probe"
        return CheckResult.errored(check, tgt, what, Classification.BAD_RESPONSE, ev)
    log = parse_run_log(lines)
    _log_evidence(ev, log)
    if not log.exists:
        return CheckResult.failed(
            check, tgt, f"~/app/run.log does not exist on {run.host}, though execute recorded pid {target.pid} "
            "(execute truncates and writes it): nothing to judge", ev,
            recommendation=_vm_advice(target, "find out what removed run.log"),
        )  # fmt: skip
    ev["classes_checked"] = [c.name for c in FATAL_CLASSES]
    fatal = last_fatal(log)
    if fatal is not None:
        cls, number, text, count = fatal
        ev.update(fatal_class=cls.name, fatal_line_no=number, fatal_line=trim(text.strip(), 300), fatal_lines=count)
        return CheckResult.failed(
            check, tgt, f"run.log line {number}: {trim(text.strip(), 200)} — {cls.meaning}", ev,
            cls.classification, cause=_fatal_cause(cls, target.run_id), recommendation=fatal_advice(cls, target),
        )  # fmt: skip
    note = " WARNING: run.log is empty" if not log.size else ""
    return CheckResult.passed(
        check, tgt, f"run.log ({log.size} bytes, {log.lines} lines) has no known fatal line "
        f"({', '.join(ev['classes_checked'])}){note}", ev,
    )  # fmt: skip


def _probe_run(shell: RemoteShell, target: GateTarget) -> ScriptRun:
    return run_script(shell, run_probe_script(target))


def check_run_alive(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """The recorded pid is the SDLC and alive, or the run finished with an outcome in run.log."""
    if (skip := run_precondition(target, "alive")) is not None:
        return skip
    return judge_run_alive(target, _probe_run(shell, target))


def check_run_log_clean(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """No known fatal line in ~/app/run.log."""
    if (skip := run_precondition(target, "log_clean")) is not None:
        return skip
    return judge_run_log_clean(target, _probe_run(shell, target))


# ---------------------------------------------------------------- observe: app and trace UI


@dataclass(frozen=True)
class HttpProbe:
    """One anonymous GET (no redirect followed): status 0 when nothing answered."""

    url: str
    via: str  # "https from this host" or "curl on <vm>"
    status: int
    error: str = ""
    body: str = ""
    location: str = ""


def observe_ports(ports: Any) -> tuple[int, int] | str:
    """``(app, obs)`` from the record's ``ports``, or why they cannot be used."""
    if not isinstance(ports, dict):
        return f"the record's ports is {type(ports).__name__} {trim(str(ports), 80)}, not {{\"app\": N, \"obs\": M}}"
    values = []
    for name in ("app", "obs"):
        value = ports.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
            return f"the record's ports.{name} is {trim(repr(value), 40)}, not a port number"
        values.append(value)
    return values[0], values[1]


def observe_url(target: GateTarget, which: str, port: int) -> str:
    """The URL a check probes: the public one (``observe_probe = "https"``) or the VM's local port."""
    if target.observe_probe == "vm":
        return f"http://127.0.0.1:{port}/"
    base = (target.https_url or f"https://{target.host}").rstrip("/")
    if which == "app":
        return base + "/"
    host = urlsplit(base).hostname or target.host
    return f"https://{host}:{port}/"


def curl_script(target: GateTarget, url: str) -> GateScript:
    seconds = str(max(1, int(target.observe_timeout_s)))
    return GateScript(
        _CURL_SCRIPT,
        (url, seconds, str(BODY_CHARS)),
        target.observe_timeout_s + 30,
        f"curl -sS --max-time {seconds} {url} (on the VM, no redirect followed)",
    )


def parse_curl(url: str, run: ScriptRun) -> HttpProbe | None:
    """The probe from the VM's curl script, or None when its output is not the script's."""
    lines = run.stdout.splitlines()
    rc = next((ln.split()[1] for ln in lines if re.fullmatch(r"SBX_CURL_RC \d{1,3}", ln)), None)
    code = next((ln.split()[1] for ln in lines if re.fullmatch(r"SBX_HTTP \d{3}", ln)), None)
    if rc is None or code is None:
        return None
    location = next((ln[len("SBX_LOCATION ") :] for ln in lines if ln.startswith("SBX_LOCATION ")), "")
    body = "\n".join(_body(_section(lines, "SBX_BODY_BEGIN", "SBX_BODY_END") or []))
    err = " ".join(_body(_section(lines, "SBX_ERR_BEGIN", "SBX_ERR_END") or [])).strip()
    error = f"curl exit {rc}: {err}" if rc != "0" else ""
    return HttpProbe(url, f"curl on {run.host}", int(code), error, body, location.strip())


def probe_https(url: str, timeout_s: float) -> HttpProbe:
    """An anonymous GET from this host, as a user would (no redirect followed, body capped, bounded)."""
    import httpx

    from sbxcheck.errors import CommandTimeout
    from sbxcheck.transports.http import get_start

    via = "https from this host"
    try:
        resp = get_start(url, timeout_s=timeout_s, max_bytes=BODY_CHARS)
    except (httpx.HTTPError, CommandTimeout) as exc:
        return HttpProbe(url, via, 0, f"{type(exc).__name__}: {exc}")
    body = resp.content.decode("utf-8", errors="replace")
    return HttpProbe(url, via, resp.status_code, "", body, resp.headers.get("location", "")[:300])


def _probe(shell: RemoteShell, target: GateTarget, url: str) -> HttpProbe | ScriptRun:
    if target.observe_probe != "vm":
        return probe_https(url, target.observe_timeout_s)
    run = run_script(shell, curl_script(target, url))
    return parse_curl(url, run) or run


def _probe_evidence(probe: HttpProbe, which: str, port: int) -> dict[str, Any]:
    ev: dict[str, Any] = {"url": probe.url, "via": probe.via, f"{which}_port": port, "http_status": probe.status}
    if probe.error:
        ev["error"] = trim(probe.error, 300)
    if probe.location:
        ev["location"] = trim(probe.location, 300)
    if probe.body:
        ev["body_excerpt"] = trim(probe.body.strip(), 300)
    return ev


def _observe_again(target: GateTarget, what: str, log: str) -> str:
    return (
        f"{what}: `just sbx lifecycle observe {target.run_id}` starts it again if it is down (idempotent); if it "
        f"stays down, read its log on the VM (`{ssh_login(target)} 'tail -n 50 {log}'`). Nothing was changed"
    )


def judge_observe_app(target: GateTarget, probe: HttpProbe, port: int) -> CheckResult:
    """The app answers 200, anonymously, with a page that is not an error page."""
    check, tgt = "observe_app", target.run_id
    ev = _probe_evidence(probe, "app", port)
    shown = f"{probe.url} ({probe.via})"
    advice = _observe_again(target, f"the app of {target.run_id} is not serving", "~/inkwell-app.log")
    cause = f"app-down:{target.run_id}"
    if probe.status == 0:
        why = probe.error or "no answer"
        return CheckResult.failed(
            check, tgt, f"the app does not answer at {shown}: {trim(why, 200)} (HTTP 000)", ev,
            cause=cause, recommendation=advice,
        )  # fmt: skip
    if probe.status != 200:
        where = f" (redirect to {trim(probe.location, 100)})" if probe.location else ""
        return CheckResult.failed(
            check, tgt, f"the app answered HTTP {probe.status} anonymously at {shown}{where}; it must be 200",
            ev, cause=cause, recommendation=advice,
        )  # fmt: skip
    if not probe.body.strip():
        return CheckResult.failed(
            check, tgt, f"the app answered 200 with an empty body at {shown}", ev, cause=cause, recommendation=advice
        )
    if ERROR_PAGE_RE.search(probe.body[:BODY_CHARS]):
        return CheckResult.failed(
            check, tgt, f"the app answered 200 with an error page at {shown}: {trim(probe.body.strip(), 120)}",
            ev, cause=cause, recommendation=advice,
        )  # fmt: skip
    return CheckResult.passed(check, tgt, f"the app answered 200 anonymously at {shown}", ev)


def judge_observe_obs(target: GateTarget, probe: HttpProbe, port: int) -> CheckResult:
    """The trace UI answers anything but 000 or ≥ 500 (307 or 401 is correct there)."""
    check, tgt = "observe_obs", target.run_id
    ev = _probe_evidence(probe, "obs", port)
    shown = f"{probe.url} ({probe.via})"
    advice = _observe_again(
        target,
        f"the trace UI of {target.run_id} is not serving (it exits without ~/app/adws/adw_data/sssf.db)",
        "~/sssf-visualizer.log",
    )
    if probe.status == 0 or probe.status >= 500:
        why = f": {trim(probe.error, 200)}" if probe.error else ""
        return CheckResult.failed(
            check, tgt, f"the trace UI answered HTTP {probe.status:03d} at {shown}{why}; anything but 000 or ≥ 500 "
            "passes", ev, cause=f"obs-down:{target.run_id}", recommendation=advice,
        )  # fmt: skip
    note = ""
    if probe.status in (301, 302, 303, 307, 308, 401):
        note = " (correct there: it asks for a login)"
        if target.observe_probe != "vm":  # the evidence says what this pass cannot tell
            ev["note"] = (
                "behind the VM's HTTPS proxy a login answer does not prove the trace UI runs; "
                '[sssf] observe_probe = "vm" probes its port itself'
            )
    ev["rule"] = "anything but 000 or >= 500"
    return CheckResult.passed(check, tgt, f"the trace UI answered HTTP {probe.status} at {shown}{note}", ev)


def _observe(shell: RemoteShell, target: GateTarget, which: str) -> CheckResult:
    check = f"observe_{which}"
    if (skip := run_precondition(target, check)) is not None:
        return skip
    ports = observe_ports(target.ports)
    if isinstance(ports, str):
        return CheckResult.errored(
            check, target.run_id, f"{ports}: cannot tell which port is the {which}",
            Classification.BAD_RESPONSE, {"ports": trim(str(target.ports), 200)},
            recommendation=f"`just sbx lifecycle observe {target.run_id}` records ports as {{\"app\": N, \"obs\": M}}",
        )  # fmt: skip
    port = ports[0] if which == "app" else ports[1]
    url = observe_url(target, which, port)
    probe = _probe(shell, target, url)
    if isinstance(probe, ScriptRun):
        ev: dict[str, Any] = {"host": probe.host, "url": url, "exit_code": probe.exit_code}
        if (failure := _script_failure(check, target.run_id, probe, ev)) is not None:
            return failure
        ev["stdout"] = trim(probe.stdout, 500)
        if "SBX_NOCURL" in probe.stdout.splitlines():
            return CheckResult.errored(
                check, target.run_id, f"curl is not installed on {probe.host}: cannot probe {url}",
                Classification.CONFIG_DEFECT, ev,
            )  # fmt: skip
        return CheckResult.errored(check, target.run_id, "unexpected output from the curl probe",
                                   Classification.BAD_RESPONSE, ev)  # fmt: skip
    judge = judge_observe_app if which == "app" else judge_observe_obs
    return judge(target, probe, port)


def check_observe_app(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """observe's app: HTTP 200 anonymously (over HTTPS, or the VM's local port per the inventory)."""
    return _observe(shell, target, "app")


def check_observe_obs(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """observe's trace UI: anything but 000 or ≥ 500."""
    return _observe(shell, target, "obs")

