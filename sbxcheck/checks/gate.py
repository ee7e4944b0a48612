"""The SSSF setup gate A–E as pure checks: (remote shell, run record, settings) -> CheckResult.

Each check is two parts, so an executor can start every VM's scripts at once and judge later:
``<check>_script(target)`` builds a :class:`~sbxcheck.checks.script.GateScript` (bash for ``bash -s``, its arguments and
deadline) and ``judge_<check>(target, ScriptRun)`` turns what came back into a CheckResult with no
I/O. ``check_<check>(shell, target)`` runs one and judges it. A (git), B (pi models) and the roster
check are here; the checks that spend the runtime key (C model answers, D cost, E credit) are in
:mod:`sbxcheck.checks.gate_model`.

The runtime key never crosses the wire: scripts read it from ``~/app/.env`` on the VM, as the
SDLC run gets it, pass it to curl on stdin or to pi in its environment (never argv), and print
only HTTP status and body. Scripts never write to a fixed path in a shared directory (a file
they need lives in their own ``mktemp -d``, removed by a trap) and end with ``SBX_END``: a script
that stops before it failed itself, which is an ``error`` with its stderr, never a verdict. Traps
handled here are the ones in specs/sssf-sandbox.md, 3 (prefix sha match, content-level clean
tree, ``command -v pi`` first, "No models available" with exit 0, reasoning-only answers, pi's
own cost).
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec

from sbxcheck.checks.base import RemoteShell, trim
from sbxcheck.checks.pi_output import read_model_table
from sbxcheck.checks.script import (
    END,
    PRELUDE,
    GateScript,
    ScriptRun,
    base_evidence,
    content_lines,
    run_script,
    script_failure,
    section,
)
from sbxcheck.clients.roster import MAX_CONFIG_BYTES, RosterError, parse_roster
from sbxcheck.commands import commands, filled, on_host, shell_command
from sbxcheck.results import CheckResult, Classification, Outcome

P = ParamSpec("P")

PING_BODY: dict[str, Any] = {
    "max_tokens": 256,
    "provider": {"zdr": True, "data_collection": "deny"},
    "messages": [{"role": "user", "content": "ping - respond with pong"}],
}
COST_PROBE_PROMPT = "Write one sentence about sandboxes."
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


# git's answer, whatever the VM user's git configuration: no GIT_* from the environment (GIT_DIR,
# GIT_TRACE, ...), no discovery above $HOME (a dotfiles repository there), no hooks, no fsmonitor and no
# untracked cache (a hook's talk or a stale cache is not the tree), no pager or colour, every untracked
# file shown (status.showUntrackedFiles=no, a person's global ignores), submodules included, one NUL-
# terminated entry per path (no quoting, no renames pairing two paths). The system and global config
# stay: safe.directory lives there. What git wrote on stderr (an fsmonitor hook, advice) is not its answer.
_GIT_SCRIPT = (
    PRELUDE
    + r"""
[ -d "$HOME/app" ] || { echo "SBX_NOAPP"; echo "SBX_END"; exit 0; }
cd "$HOME/app" || { echo "SBX_NOAPP"; echo "SBX_END"; exit 0; }
unset "${!GIT_@}"
export GIT_CEILING_DIRECTORIES="$HOME" GIT_OPTIONAL_LOCKS=0 GIT_TERMINAL_PROMPT=0
sbx_git() {
  git --no-pager -c core.fsmonitor= -c core.untrackedCache=false -c core.hooksPath=/dev/null \
      -c core.excludesFile=/dev/null -c color.ui=false "$@"
}
if ! head=$(sbx_git rev-parse --verify HEAD 2>/dev/null); then
  echo "SBX_NOHEAD"; sbx_git rev-parse --verify HEAD 2>&1 >/dev/null | head -n 5 | sed 's/^/| /'
  echo "SBX_OWNER $(stat -c '%U' . 2>/dev/null || echo '?') $(id -un 2>/dev/null || echo '?')"
  echo "SBX_END"; exit 0
fi
echo "SBX_HEAD $head"
echo "SBX_STATUS_BEGIN"
sbx_git status --porcelain=v1 -z --untracked-files=all --ignore-submodules=none --no-renames \
  | { n=0
      while IFS= read -r -d '' entry; do
        n=$((n + 1))
        [ "$n" -le 20 ] && printf '| %s\n' "${entry//[$'\n\r']/?}"
      done
      echo "SBX_STATUS_COUNT $n"; }
echo "SBX_STATUS_END ${PIPESTATUS[0]}"
echo "SBX_END"
"""
)

# pi up to 0.79.0 prints its table on stderr without a TTY, later releases on stdout: both streams are
# read (checks/pi_output.py takes the table from the one with its header); markers go to stdout.
_LIST_SCRIPT = (
    PRELUDE
    + r"""
if ! command -v pi >/dev/null 2>&1; then echo "SBX_NOPI"; echo "SBX_END"; exit 0; fi
echo "SBX_PI $(command -v pi)"
pi --list-models </dev/null
rc=$?
echo; echo >&2  # a line something left open (a wrapper's start-up noise) ends before the markers
echo "SBX_PI_EXIT $rc"
echo "SBX_END"
"""
)

# The roster config, read whole up to the size a roster may have (its size says when it is larger);
# each line comes back prefixed, so no line of it can end the section.
_CONFIG_SCRIPT = (
    PRELUDE
    + r"""
cfg="$HOME/app/$1"
[ -d "$HOME/app" ] || { echo "SBX_NOAPP"; echo "SBX_END"; exit 0; }
[ -f "$cfg" ] || { echo "SBX_NOCONFIG"; echo "SBX_END"; exit 0; }
echo "SBX_CONFIG_SIZE $(wc -c <"$cfg")"
echo "SBX_CONFIG_BEGIN"
head -c "$2" -- "$cfg" | sed 's/^/| /'
sbx_rc=${PIPESTATUS[0]}
echo
echo "SBX_CONFIG_END $sbx_rc"
echo "SBX_END"
"""
)


def ssh_login_words(target: GateTarget) -> list[str]:
    """``ssh [-F CONFIG] HOST``, word by word: the login that resolves the alias as the gate's own
    connection did."""
    return ["ssh", *(["-F", target.ssh_config] if target.ssh_config else []), target.host]


def ssh_login(target: GateTarget) -> str:
    """:func:`ssh_login_words` as one command line."""
    return shlex.join(ssh_login_words(target))


def lifecycle_command(verb: str, run_id: str) -> str | None:
    """``just sbx lifecycle VERB RUN_ID`` (run in the SSSF checkout)."""
    return shell_command("just", "sbx", "lifecycle", verb, run_id)


def gate_advice(target: GateTarget) -> str:
    """What to do after a failed gate item: the VM stays up as evidence; nothing is torn down."""
    return (
        f"the VM is left up as evidence — get in: {ssh_login(target)}; diagnose, fix, then re-run "
        f"`just sbx lifecycle setup {target.run_id}`. Nothing was torn down; that stays your decision."
    )


def runtime_key_rejected_next(run_id: str) -> dict[str, Any]:
    """The next step (recommendation and commands) when OpenRouter refuses the VM's runtime key (not the
    harness's credentials)."""
    return {
        "recommendation": (
            f"OpenRouter refused the VM's runtime key (OPENROUTER_API_KEY in ~/app/.env of {run_id}), not a "
            f"credential of the inventory. If .sandbox/runs/{run_id}.key still holds a live key, rewrite "
            f"~/app/.env with `just sbx lifecycle fill {run_id}`; if the key was revoked, mount a fresh run "
            "(`just sbx mount <task>`), which mints a new one — sbxcheck mints nothing; nothing was changed"
        ),
        "commands": commands(lifecycle_command("fill", run_id)),
    }


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
        typed = commands(shell_command(*ssh_login_words(target)), lifecycle_command("setup", target.run_id))
        return result.model_copy(update={"recommendation": gate_advice(target), "commands": typed})
    return result


# ---------------------------------------------------------------- A


def git_integrity_script(target: GateTarget) -> GateScript:
    return GateScript(
        _GIT_SCRIPT,
        (),
        target.command_timeout_s,
        "cd ~/app && git rev-parse --verify HEAD && git status --porcelain=v1 -z --untracked-files=all "
        "(the user's fsmonitor, hooks, excludes, colour and GIT_* set aside)",
    )


def judge_git_integrity(target: GateTarget, run: ScriptRun) -> CheckResult:
    """A: HEAD starts with the recorded commit_sha and ``git status --porcelain`` printed nothing."""
    check, tgt = "A_git_integrity", target.run_id
    ev = base_evidence(run, git_integrity_script(target).ran)
    ev["recorded_commit_sha"] = target.commit_sha
    if (failure := script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if "SBX_NOAPP" in lines:
        return CheckResult.failed(check, tgt, "no ~/app on this VM — FILL never ran", ev)
    if "SBX_NOHEAD" in lines:
        output = content_lines(lines)  # what git said on stderr, prefixed on the VM
        ev["git_output"] = trim("\n".join(output))
        owner = next((ln.split()[1:] for ln in lines if ln.startswith("SBX_OWNER ")), [])
        if len(owner) == 2:
            ev["app_owner"], ev["ssh_user"] = owner
        return git_refusal(check, tgt, "\n".join(output), ev, target)
    head = next((ln.split(" ", 1)[1].strip() for ln in lines if ln.startswith("SBX_HEAD ")), "")
    status = section(lines, "SBX_STATUS_BEGIN", "SBX_STATUS_END")
    end = next((ln for ln in lines if re.fullmatch(r"SBX_STATUS_END \d{1,3}", ln)), None)
    count = next((ln.split()[1] for ln in status or [] if re.fullmatch(r"SBX_STATUS_COUNT \d+", ln)), None)
    if not re.fullmatch(r"[0-9A-Fa-f]{7,64}", head) or status is None or end is None or count is None:
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
        return CheckResult.errored(
            check, tgt, "unexpected output from the git probe", Classification.BAD_RESPONSE, ev
        )
    status_rc = end.split()[-1]
    ev["head"] = head
    ev["head_matches"] = bool(target.commit_sha) and head.startswith(target.commit_sha)
    ev["match"] = "full" if head == target.commit_sha else "prefix" if ev["head_matches"] else "none"
    ev["porcelain_lines"] = changes = int(count)  # entries: one per changed or untracked path
    ev["porcelain_sample"] = content_lines(status)
    if run.stderr.strip():
        ev["git_stderr"] = trim(run.stderr, 500)  # what git or its user's hooks said: not the tree
    problems = []
    if not ev["head_matches"]:
        problems.append(f"HEAD {head} does not match the recorded commit_sha {target.commit_sha}")
    if status_rc != "0":
        problems.append(f"git status --porcelain exited {status_rc}")
    elif changes:
        problems.append(f"unexpected working-tree changes (the tree must be clean): {changes} path(s)")
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
            commands=commands(
                on_host(ssh_login_words(target), filled("chown -R {user} ~/app", user=str(user))),
                on_host(ssh_login_words(target), 'git config --global --add safe.directory "$HOME/app"'),
                lifecycle_command("setup", target.run_id),
            ),
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
            commands=commands(
                lifecycle_command("fill", target.run_id), lifecycle_command("setup", target.run_id)
            ),
        )
    return CheckResult.failed(check, tgt, "git rev-parse failed — .git is damaged", ev)


@advised
def check_git_integrity(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """A: HEAD starts with the recorded commit_sha and ``git status --porcelain`` prints nothing."""
    return judge_git_integrity(target, run_script(shell, git_integrity_script(target)))


# ---------------------------------------------------------------- B


def pi_models_script(target: GateTarget) -> GateScript:
    return GateScript(
        _LIST_SCRIPT, (), target.command_timeout_s, "command -v pi && pi --list-models </dev/null"
    )


def judge_pi_models(target: GateTarget, run: ScriptRun) -> CheckResult:
    """B: ``pi`` is on PATH and ``pi --list-models`` lists every roster model (its exit code ignored)."""
    check, tgt = "B_pi_models", target.run_id
    ev = base_evidence(run, pi_models_script(target).ran)
    if (failure := script_failure(check, tgt, run, ev)) is not None:
        return failure
    out_lines = run.stdout.splitlines()
    if "SBX_NOPI" in out_lines:
        return CheckResult.failed(check, tgt, "pi is not on PATH", ev)
    ev["pi_path"] = next((ln.split(" ", 1)[1] for ln in out_lines if ln.startswith("SBX_PI ")), None)
    pi_exit = next((ln.split()[1] for ln in out_lines if re.fullmatch(r"SBX_PI_EXIT \d+", ln)), None)
    ev["pi_exit"] = int(pi_exit) if pi_exit is not None else None
    printed = [ln for ln in out_lines if not ln.startswith(("SBX_PI ", "SBX_PI_EXIT ")) and ln != END]
    table = read_model_table("\n".join(printed), run.stderr)
    rows, other = table.rows, table.other
    ev["table_stream"], ev["header_seen"] = table.stream, table.stream is not None
    ev["rows"], ev["other_lines"] = len(rows), len(other)
    ev["other_sample"] = [trim(ln, 200) for ln in other[:5]]
    if table.models_json_errors:
        ev["models_json_errors"] = table.models_json_errors
    if not rows and not other:
        return CheckResult.failed(check, tgt, "pi --list-models printed nothing", ev)
    if table.no_models:
        return CheckResult.failed(
            check, tgt, "pi says: No models available — ~/.pi/agent/models.json did not load", ev
        )
    if table.models_json_errors:  # every release then drops the custom roster; its built-in catalog stays
        reason = next((ln for ln in table.models_json_errors if ln.startswith("- ")), table.models_json_errors[0])
        built_in = sum(1 for r in rows if r.provider == "openrouter" and r.model in target.roster)
        return CheckResult.failed(
            check,
            tgt,
            f"pi rejected ~/.pi/agent/models.json ({reason.removeprefix('- ')}): none of its models loaded"
            + (f"; {built_in} roster model(s) listed only from pi's built-in catalog" if built_in else ""),
            ev,
        )
    if table.stream is None or not rows:
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


def roster_script(target: GateTarget) -> GateScript:
    return GateScript(
        _CONFIG_SCRIPT,
        (target.roster_config, str(MAX_CONFIG_BYTES)),
        target.command_timeout_s,
        f"cat ~/app/{target.roster_config} (read as YAML here)",
    )


def judge_roster_matches(target: GateTarget, run: ScriptRun) -> CheckResult:
    """C roster: the roster on the VM equals the roster the C items were collected for."""
    check, tgt = "C_roster_matches", target.run_id
    ev = base_evidence(run, roster_script(target).ran)
    if (failure := script_failure(check, tgt, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    if "SBX_NOAPP" in lines:
        return CheckResult.failed(check, tgt, "no ~/app on this VM — FILL never ran", ev)
    if "SBX_NOCONFIG" in lines:
        return CheckResult.failed(check, tgt, f"missing {target.roster_config} on the VM", ev)
    config = section(lines, "SBX_CONFIG_BEGIN", "SBX_CONFIG_END")
    size = next((ln.split()[1] for ln in lines if re.fullmatch(r"SBX_CONFIG_SIZE \d+", ln.strip())), None)
    if config is None or size is None:
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
        return CheckResult.errored(
            check, tgt, "unexpected output from the config probe", Classification.BAD_RESPONSE, ev
        )
    ev["config_bytes"] = int(size)
    ev["collected_roster"] = list(target.roster)
    try:
        if int(size) > MAX_CONFIG_BYTES:
            raise RosterError(f"{size} bytes, above the {MAX_CONFIG_BYTES // 1024} KiB a roster config may have")
        vm_roster = parse_roster("\n".join(content_lines(config)))
    except RosterError as exc:
        return CheckResult.failed(
            check,
            tgt,
            f"the VM's {target.roster_config} cannot be read as the factory reads it: {exc}",
            ev,
            Classification.CONFIG_DEFECT,
        )
    ev["vm_roster"] = vm_roster
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
