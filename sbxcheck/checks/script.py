"""What every remote gate script shares: the bash pieces it is built from, the script and its run, the
script runner, and the judges' reading of what came back (the end marker, ``SBX_SCRIPT_ERROR``, sections).

A check in :mod:`sbxcheck.checks.gate`, :mod:`sbxcheck.checks.gate_model`, :mod:`sbxcheck.checks.run` or
:mod:`sbxcheck.checks.vm_hygiene` is a script built from these pieces plus a judge that starts with
:func:`script_failure`: a script that stopped before its end failed itself, which is an ``error``, never
a verdict.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sbxcheck.checks.base import RemoteShell, trim
from sbxcheck.results import CheckResult, Classification
from sbxcheck.transports.framing import frame_command, new_frame, unframe

# Every script announces its end with SBX_END on stdout; a script that stops without it failed
# itself (setup error, a redirect that could not be opened, bash missing), and its item is an
# ``error`` ("the check could not run") with the script's stderr as evidence, never a verdict.
END = "SBX_END"
SCRIPT_ERROR = "SBX_SCRIPT_ERROR"
PRELUDE = r"""set -u
sbx_script_error() { echo "SBX_SCRIPT_ERROR $*"; exit 0; }
"""
# A private temp directory (mktemp, removed by a trap), for scripts that need a file: never a fixed
# path in a shared directory, which another user, an earlier run or a concurrent check may own.
MAKE_TMPDIR = r"""
sbx_tmp=$(mktemp -d "${TMPDIR:-/tmp}/sbxcheck.XXXXXXXX") || sbx_script_error "mktemp -d failed in ${TMPDIR:-/tmp}"
trap 'rm -rf -- "$sbx_tmp"' EXIT
"""
# Reads the runtime key from ~/app/.env into $key, as the SDLC run gets it: the last
# OPENROUTER_API_KEY= line, optional `export`, one layer of quotes stripped. Only pipes and
# builtins touch the value (never argv); the script runs on in ~/app.
READ_KEY = r"""
cd "$HOME/app" 2>/dev/null || { echo "SBX_NOAPP"; echo "SBX_END"; exit 0; }
key=$(grep -E '^[[:space:]]*(export[[:space:]]+)?OPENROUTER_API_KEY=' .env 2>/dev/null | tail -n 1 \
      | sed -E 's/^[[:space:]]*(export[[:space:]]+)?OPENROUTER_API_KEY=//')
key=${key%$'\r'}
case $key in \"*\") key=${key#\"}; key=${key%\"};; \'*\') key=${key#\'}; key=${key%\'};; esac
[ -n "$key" ] || { echo "SBX_NOKEY"; echo "SBX_END"; exit 0; }
"""
NEED_CURL = r"""
command -v curl >/dev/null 2>&1 || { echo "SBX_NOCURL"; echo "SBX_END"; exit 0; }
"""
# How every gate script is started (POSIX sh, run by the transport's /bin/sh whatever the login shell):
# /bin/bash by its absolute path, with no start-up file, by /usr/bin/env without what would make that
# bash or its tools answer otherwise — BASH_ENV and ENV (a file every bash reads first), exported bash
# functions (a `BASH_FUNC_git%%` would answer for git), SHELLOPTS/BASHOPTS/POSIXLY_CORRECT, CDPATH (`cd`
# prints), GLOBIGNORE — and with LC_ALL=C, so that what the judges parse (git's refusals, tools' output)
# reads the same in every locale. The rest of the login environment stays as the person's own `ssh vm
# CMD` gets it, which is the SDLC's: PATH with its version manager's shims, proxies, pi's variables.
NEUTRAL_BASH = (
    "set -f; sbx_funcs=$(command -p env | command -p sed -n 's/^\\(BASH_FUNC_[^=]*\\)=.*/-u \\1/p')\n"
    "exec /usr/bin/env -u BASH_ENV -u ENV -u SHELLOPTS -u BASHOPTS -u POSIXLY_CORRECT -u CDPATH -u GLOBIGNORE "
    "$sbx_funcs LC_ALL=C /bin/bash --noprofile --norc -s"
)


@dataclass(frozen=True)
class GateScript:
    """One gate item's remote work: a bash script for ``bash -s``, its arguments and its deadline.

    The runtime key is never an argument: scripts read it inside the VM. :attr:`command` starts the
    script's bash in a neutral environment (:data:`NEUTRAL_BASH`).
    """

    script: str
    args: tuple[str, ...]
    timeout_s: float
    ran: str  # what the evidence says was run

    @property
    def command(self) -> str:
        return NEUTRAL_BASH + "".join(" " + shlex.quote(a) for a in (["--", *self.args] if self.args else []))


@dataclass(frozen=True)
class ScriptRun:
    """What a gate script produced on one host (the input of a judge)."""

    host: str
    exit_code: int
    stdout: str
    stderr: str


def run_script(shell: RemoteShell, script: GateScript) -> ScriptRun:
    """Send ``script`` to ``shell``; transport errors propagate (the plugin maps them).

    The script is framed inside its own bash too (:mod:`sbxcheck.transports.framing`), which starts
    without ``BASH_ENV`` (:data:`NEUTRAL_BASH`): should anything still print before or after the script
    (and change bash's exit status with an ``EXIT`` trap), the judges see only what the script itself
    printed, and its exit status is the one the script ended with; a bash that printed no frame is
    taken as it came.
    """
    frame = new_frame()
    result = shell.run(script.command, stdin=frame_command(script.script, frame), timeout=script.timeout_s)
    stdout = unframe(result.stdout, frame, with_status=True)  # an unframed stream comes back whole
    stderr = unframe(result.stderr, frame).text if stdout.framed else result.stderr
    own = stdout.exit_code if stdout.complete else None  # an EXIT trap may change bash's own status
    return ScriptRun(shell.alias, result.exit_code if own is None else own, stdout.text, stderr)


def base_evidence(run: ScriptRun, what: str) -> dict[str, Any]:
    """The evidence every judge starts from: where it ran, what ran, how it exited."""
    return {"host": run.host, "ran": what, "exit_code": run.exit_code}


def script_failure(check: str, tgt: str, run: ScriptRun, ev: dict[str, Any]) -> CheckResult | None:
    """An ``error`` when the script itself failed (it said so, or it never reached its end)."""
    lines = run.stdout.splitlines()
    said = next((ln[len(SCRIPT_ERROR) :].strip() for ln in lines if ln.startswith(SCRIPT_ERROR)), None)
    if said is None and END in lines:
        return None
    ev["script_stdout"], ev["script_stderr"] = trim(run.stdout, 500), trim(run.stderr, 1000)
    why = said or (
        f"the remote script stopped before its end (exit {run.exit_code})"
        + (f": {last_line(run.stderr)}" if run.stderr.strip() else "")
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


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (where a failing command says why), stripped."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def section(lines: list[str], begin: str, end_prefix: str | None) -> list[str] | None:
    """The lines between the line ``begin`` and the first line starting with ``end_prefix`` (to the end when
    ``end_prefix`` is None); None when either marker is missing."""
    if begin not in lines:
        return None
    start = lines.index(begin) + 1
    if end_prefix is None:
        return lines[start:]
    for i in range(start, len(lines)):
        if lines[i].startswith(end_prefix):
            return lines[start:i]
    return None


def content_lines(lines: Iterable[str]) -> list[str]:
    """The content lines of a section (the VM prefixes each with ``| ``, so content never forges a marker)."""
    return [ln[2:] for ln in lines if ln.startswith("| ")]
