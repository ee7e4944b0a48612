"""What a gate script's curl answered on the VM (C's pings, E's /key): the script tail that prints it and
its reading — curl's exit, the HTTP status, the body, what curl said on stderr, and the precondition
markers every key-spending script (C, D, E) prints before it gets that far.

curl's answer is what it wrote on its own stdout; its stderr (its error, or a wrapper's talk) comes back
in a section of its own, so it is evidence, never part of a body.
"""

from __future__ import annotations

import re
from typing import Any

from sbxcheck.checks.base import trim
from sbxcheck.checks.gate import lifecycle_command
from sbxcheck.checks.script import END, ScriptRun, content_lines, script_failure, section
from sbxcheck.commands import commands
from sbxcheck.results import CheckResult, Classification

__all__ = ["CURL_TAIL", "PRECONDITION_MESSAGES", "curl_answer", "curl_stderr", "precondition", "split_http"]

# curl's answer is what it wrote on stdout (the body, then -w's status line); what it said on stderr (its
# error, or a wrapper's talk) comes back apart, prefixed. `-q` first: a person's ~/.curlrc (`include`,
# `verbose`, `write-out`) would change the answer.
CURL_TAIL = r"""
rc=$?
unset key
echo "SBX_CURL_RC $rc"
echo "SBX_CURL_STDERR_BEGIN"
head -c 2000 "$sbx_tmp/curl.stderr" | sed 's/^/| /'; echo
echo "SBX_CURL_STDERR_END"
printf '%s\n' "$resp"
echo "SBX_END"
"""


def split_http(out: str) -> tuple[int | None, int | None, str, list[str]]:
    """(curl rc, http status, body, precondition markers) from a curl script's stdout.

    The body is what follows curl's stderr section (when the script printed one), less the status line
    ``-w`` wrote last; the last status line counts, so a body cannot forge it.
    """
    lines = out.splitlines()
    markers = [ln for ln in lines if ln in PRECONDITION_MESSAGES]
    rc = next((int(ln.split()[1]) for ln in lines if re.fullmatch(r"SBX_CURL_RC \d{1,3}", ln)), None)
    after = lines[lines.index(_STDERR_END) + 1 :] if _STDERR_END in lines else lines
    statuses = [i for i, ln in enumerate(after) if re.fullmatch(r"SBX_HTTP \d{3}", ln)]
    status = int(after[statuses[-1]].split()[1]) if statuses else None
    body_lines = [
        ln
        for i, ln in enumerate(after)
        if not (statuses and i == statuses[-1]) and not ln.startswith("SBX_CURL_RC ") and ln != END
    ]
    return rc, status, "\n".join(body_lines).strip(), markers


def curl_stderr(out: str) -> str:
    """What curl (or a wrapper of it) said on stderr, from a curl script's stdout."""
    return "\n".join(content_lines(section(out.splitlines(), _STDERR_BEGIN, _STDERR_END) or []))


_STDERR_BEGIN, _STDERR_END = "SBX_CURL_STDERR_BEGIN", "SBX_CURL_STDERR_END"
PRECONDITION_MESSAGES = {
    "SBX_NOAPP": "no ~/app on this VM — FILL never ran",
    "SBX_NOCURL": "curl is not installed on the VM",
    "SBX_NOKEY": "no OPENROUTER_API_KEY line in ~/app/.env — FILL did not write the runtime key",
}


def precondition(
    check: str, tgt: str, markers: list[str], ev: dict[str, Any], run_id: str
) -> CheckResult | None:
    """The failed result for the first precondition marker a script printed (C, D and E say the same)."""
    if not markers:
        return None
    ev["precondition"] = markers[0]
    if markers[0] in ("SBX_NOAPP", "SBX_NOKEY"):
        advice = (
            f"the run cannot get its runtime key on the VM: `just sbx lifecycle fill {run_id}` clones ~/app and "
            f"writes ~/app/.env from .sandbox/runs/{run_id}.key; then re-run the gate. Nothing was changed"
        )
        return CheckResult.failed(
            check, tgt, PRECONDITION_MESSAGES[markers[0]], ev,
            recommendation=advice, commands=commands(lifecycle_command("fill", run_id)),
        )  # fmt: skip
    return CheckResult.failed(check, tgt, PRECONDITION_MESSAGES[markers[0]], ev)


def curl_answer(
    check: str, tgt: str, run: ScriptRun, ev: dict[str, Any], run_id: str, script: str
) -> tuple[int, int | None, str] | CheckResult:
    """(curl exit, HTTP status, body) of C's or E's curl script, or the result that ends the judge first.

    That is a transport failure, a missing precondition (no ~/app, curl or key), or output that is not
    the script's; ``ev`` gains ``curl_exit`` and ``http_status``.
    """
    if (failure := script_failure(check, tgt, run, ev)) is not None:
        return failure
    rc, status, text, markers = split_http(run.stdout)
    if (pre := precondition(check, tgt, markers, ev, run_id)) is not None:
        return pre
    if rc is None:
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
        return CheckResult.errored(check, tgt, f"unexpected output from the {script}", Classification.BAD_RESPONSE, ev)
    ev["curl_exit"], ev["http_status"] = rc, status
    if said := curl_stderr(run.stdout):
        ev["curl_stderr"] = trim(said, 300)
    return rc, status, text
