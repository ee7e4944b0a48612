"""Checks of an SSSF run that has executed: is the SDLC alive, is its ``run.log`` free of known fatal lines.

``execute`` records a pid, which only proves a process started: the SDLC can die right after spawn
with its error only in ``~/app/run.log``. Each check is a script plus a pure judge, as in
:mod:`sbxcheck.checks.gate`; the record's facts come on the :class:`GateTarget` (``pid``). The
checks of an observed run (the app and the trace UI answer) are in :mod:`sbxcheck.checks.observe`;
this module re-exports them, so a suite imports the run items from one place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sbxcheck.checks.base import RemoteShell, trim
from sbxcheck.checks.gate import GateTarget, lifecycle_command, ssh_login, ssh_login_words
from sbxcheck.checks.observe import (
    HttpProbe,
    check_observe_app,
    check_observe_obs,
    judge_observe_app,
    judge_observe_obs,
    observe_ports,
    observe_precondition,
)
from sbxcheck.checks.script import (
    PRELUDE,
    GateScript,
    ScriptRun,
    content_lines,
    run_script,
    script_failure,
    section,
)
from sbxcheck.commands import commands, on_host, shell_command
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


def fatal_advice(fatal: FatalClass, target: GateTarget) -> dict[str, Any]:
    """The next step (recommendation and commands) for a run.log fatal line: one per class, nothing done on
    anyone's behalf (a teardown is named as the person's decision, never offered to copy)."""
    run = target.run_id
    again = f'`just sbx lifecycle execute {run} "your prompt"`'
    if fatal.name == "credits":
        return {
            "recommendation": (
                f"the runtime key sbx-{run} is out of credit: top up the OpenRouter account or raise the key's "
                f"limit (openrouter.ai, Settings, Keys, sbx-{run}), then start the SDLC again ({again}). "
                "Nothing was changed"
            )
        }
    if fatal.name == "dead_key":
        task = re.sub(r"-\d{8}-[0-9a-f]{6}$", "", run) or run
        return {
            "recommendation": (
                f"the runtime key of {run} is dead: re-mint it by ending this run and mounting a new one — "
                f"`just sbx manage harvest {run}`, then `just sbx lifecycle teardown {run}` (your decision), "
                f"then `just sbx mount {task}`, which mints a fresh key. sbxcheck mints nothing; nothing was changed"
            ),
            "commands": commands(
                shell_command("just", "sbx", "manage", "harvest", run), shell_command("just", "sbx", "mount", task)
            ),
        }
    if fatal.name == "data_policy":
        return {
            "recommendation": (
                "a model the SDLC called has no ZDR endpoint (the run.log line in the evidence names the call): "
                f"pin roster models that have a zero-data-retention endpoint in {target.roster_config} on the "
                f"VM's checkout, then start the SDLC again ({again}). Nothing was changed"
            )
        }
    return {
        "recommendation": (
            f"config defect: the SDLC ran inference with the provisioning key, which never belongs on a VM. "
            f"Point it at the runtime key in ~/app/.env (`just sbx lifecycle fill {run}` rewrites that file from "
            "the run's key file on this host), remove the provisioning key from the VM (gate item "
            f"test_vm_hygiene finds it by hash; get in with `{ssh_login(target)}`), then start the SDLC again. "
            "Nothing was changed"
        ),
        "commands": commands(lifecycle_command("fill", run), shell_command(*ssh_login_words(target))),
    }


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
    PRELUDE
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
    tail = content_lines(section(lines, "SBX_TAIL_BEGIN", "SBX_TAIL_END") or [])
    matches: list[tuple[int, str]] = []
    for text in content_lines(section(lines, "SBX_MATCH_BEGIN", "SBX_MATCH_END") or []):
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
    return observe_precondition(target, check)


def _vm_advice(target: GateTarget, what: str) -> dict[str, Any]:
    return {
        "recommendation": (
            f"{what}; the VM is left up as evidence — read the log there "
            f"(`{ssh_login(target)} 'tail -n 50 app/run.log'`). Nothing was torn down; that stays your decision"
        ),
        "commands": commands(on_host(ssh_login_words(target), "tail -n 50 app/run.log")),
    }


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
    if (failure := script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if "SBX_NOPS" in lines:
        return CheckResult.errored(
            check, tgt, f"neither ps nor /proc on {run.host}: cannot tell whether pid {pid} runs",
            Classification.BAD_RESPONSE, ev,
        )  # fmt: skip
    ps_lines = section(lines, "SBX_PS_BEGIN", "SBX_PS_END")
    if ps_lines is None:
        ev["stdout"] = trim(run.stdout, 500)
        return CheckResult.errored(check, tgt, "unexpected output from the pid probe", Classification.BAD_RESPONSE, ev)
    proc = parse_ps(content_lines(ps_lines), pid)
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
            **_vm_advice(target, "find out why the SDLC stopped"),
        )  # fmt: skip
    fatal = last_fatal(log)
    if fatal is not None:
        cls, number, text, _ = fatal
        ev.update(fatal_class=cls.name, fatal_line_no=number, fatal_line=trim(text.strip(), 300))
        return CheckResult.failed(
            check, tgt, f"{gone}: the SDLC died — run.log line {number}: {trim(text.strip(), 200)} ({cls.meaning})",
            ev, cls.classification, cause=_fatal_cause(cls, target.run_id), **fatal_advice(cls, target),
        )  # fmt: skip
    outcome = finish_outcome(log.tail)
    if outcome is not None and outcome[0] == "finished":
        ev["outcome_line"] = trim(outcome[1], 300)
        return CheckResult.passed(check, tgt, f"{gone}; the run finished: {trim(outcome[1], 200)}", ev)
    if outcome is not None:
        ev["outcome_line"] = trim(outcome[1], 300)
        return CheckResult.failed(
            check, tgt, f"{gone}; the run ended: {trim(outcome[1], 200)}", ev,
            **_vm_advice(target, "the SDLC reported a failure"),
        )  # fmt: skip
    last = next((t.strip() for t in reversed(log.tail) if t.strip()), "(empty)")
    return CheckResult.failed(
        check, tgt, f"{gone}, and run.log has no outcome (last line: {trim(last, 200)}): the SDLC died", ev,
        **_vm_advice(target, "find out why the SDLC stopped"),
    )  # fmt: skip


def judge_run_log_clean(target: GateTarget, run: ScriptRun) -> CheckResult:
    """No known fatal line in run.log; each known line is one classification with its next step."""
    check, tgt = "log_clean", target.run_id
    ev: dict[str, Any] = {"host": run.host, "ran": run_probe_script(target).ran, "exit_code": run.exit_code}
    ev["pid"] = target.pid
    if (failure := script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if "SBX_NOLOG" not in lines and section(lines, "SBX_MATCH_BEGIN", "SBX_MATCH_END") is None:
        ev["stdout"] = trim(run.stdout, 500)
        what = "unexpected output from the run.log probe"
        return CheckResult.errored(check, tgt, what, Classification.BAD_RESPONSE, ev)
    log = parse_run_log(lines)
    _log_evidence(ev, log)
    if not log.exists:
        return CheckResult.failed(
            check, tgt, f"~/app/run.log does not exist on {run.host}, though execute recorded pid {target.pid} "
            "(execute truncates and writes it): nothing to judge", ev,
            **_vm_advice(target, "find out what removed run.log"),
        )  # fmt: skip
    ev["classes_checked"] = [c.name for c in FATAL_CLASSES]
    fatal = last_fatal(log)
    if fatal is not None:
        cls, number, text, count = fatal
        ev.update(fatal_class=cls.name, fatal_line_no=number, fatal_line=trim(text.strip(), 300), fatal_lines=count)
        return CheckResult.failed(
            check, tgt, f"run.log line {number}: {trim(text.strip(), 200)} — {cls.meaning}", ev,
            cls.classification, cause=_fatal_cause(cls, target.run_id), **fatal_advice(cls, target),
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
