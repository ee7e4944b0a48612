"""Running the SSSF ``just sbx`` recipes from templates, and reading what they print.

sbxcheck never hand-rolls a mint, a ``new``, a revoke or a destroy: it runs the upstream recipes
(specs/sssf-sandbox.md, 1), configured as command templates with one placeholder, ``{run_id}``. Values are
``shlex.quote``-d into the template, which is then split with ``shlex`` and run without a shell,
so a hostile run id stays one argv element. No template may contain ``--yes``: ``reap`` is only
ever a dry run here. Teardown is the person's decision (:func:`decide_teardown` applies the
flag they chose, and a failed gate always keeps its VM).

Parsers read the recipes' printed contract (specs/sssf-sandbox.md, 1 and 8) and never raise:
unknown output gives a result with ``ok=False`` and a ``reason``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sbxcheck.clients.runrecords import RUN_ID_RE
from sbxcheck.inventory import NEEDS_RUN_ID, RecipeName, RecipeTemplates, RecipeTimeouts
from sbxcheck.redact import clip, default_redactor

__all__ = [
    "Decision",
    "HarvestResult",
    "MountInfo",
    "RecipeName",
    "RecipeResult",
    "RecipeTemplates",
    "RecipeTimeouts",
    "TeardownPolicy",
    "TeardownResult",
    "decide_teardown",
    "parse_harvest_output",
    "parse_mount_output",
    "parse_teardown_output",
    "recipe_path",
    "run_recipe",
]

MAX_OUTPUT_CHARS = 200_000
KILL_GRACE_S = 2.0


def _check_value(run_id: str) -> None:
    if not run_id:
        raise ValueError("run id is empty")
    if run_id.startswith("-"):
        raise ValueError(f"run id {run_id!r} starts with '-' and would be read as a flag")
    if len(run_id) > 200 or any(ord(c) < 32 or ord(c) == 127 for c in run_id):
        raise ValueError("run id is too long or contains control characters")


def recipe_path(path: str | None) -> str:
    """``path`` with the interpreter's own tool directories first.

    The recipes call ``just`` (and ``python3``) by name again from inside (mount runs ``just sbx
    lifecycle create``, teardown ``just sbx manage harvest``). Without an activated venv (cron, CI,
    ``venv/bin/python -m pytest``) the venv's ``bin/`` is not on PATH, so the inner call would fail
    with ``just: command not found`` although sbxcheck found ``just`` for the outer one.
    """
    from sbxcheck.tools import interpreter_bin_dirs

    first = [str(d) for d in interpreter_bin_dirs()]
    rest = [p for p in (path or os.defpath).split(os.pathsep) if p and p not in first]
    return os.pathsep.join([*first, *rest])


def build_command(templates: RecipeTemplates, name: RecipeName, run_id: str | None = None) -> list[str]:
    """The argv a recipe would run (``run_id`` quoted in, then split; no shell)."""
    template = templates.template(name)
    if name in NEEDS_RUN_ID:
        if run_id is None:
            raise ValueError(f"recipe {name!r} needs a run id")
        _check_value(run_id)
        argv = shlex.split(template.format(run_id=shlex.quote(run_id)))
    else:
        if run_id is not None:
            raise ValueError(f"recipe {name!r} takes no run id")
        argv = shlex.split(template.format())
    if any(token.lower().startswith("--yes") for token in argv):
        raise ValueError(f"recipe {name!r}: refusing a command containing --yes")
    return argv


@dataclass(frozen=True)
class RecipeResult:
    """What one recipe run did. ``stdout``/``stderr`` are redacted (and trimmed when huge)."""

    name: str
    command: list[str]
    exit_code: int | None  # None: it timed out or never started
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    error: str | None = None  # why it never started

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def text(self) -> str:
        """stdout then stderr, for the parsers (recipes print ``!!`` lines on either)."""
        return self.stdout if not self.stderr else f"{self.stdout}\n{self.stderr}"

    def evidence(self, tail_chars: int = 4000) -> dict[str, Any]:
        """A compact, redacted evidence dict for a CheckResult."""
        return {
            "command": shlex.join(self.command),
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 3),
            "stdout_tail": self.stdout[-tail_chars:],
            "stderr_tail": self.stderr[-tail_chars:],
            **({"error": self.error} if self.error else {}),
        }


def _clean(data: bytes | None) -> str:
    text = default_redactor().redact_text((data or b"").decode("utf-8", errors="replace"))
    if len(text) > MAX_OUTPUT_CHARS:  # trimmed after redaction, so no secret is cut in half
        half = MAX_OUTPUT_CHARS // 2
        text = f"{text[:half]}\n[... {len(text) - 2 * half} characters trimmed ...]\n{text[-half:]}"
    return text


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the recipe's process group, then SIGKILL after a short grace."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_recipe(
    templates: RecipeTemplates,
    name: RecipeName,
    *,
    run_id: str | None = None,
    env: Mapping[str, str] | None = None,
) -> RecipeResult:
    """Run one recipe without a shell, bounded by its timeout; ``env`` is added to os.environ.

    Raises ValueError only for a misuse (unknown recipe, missing/hostile-flag run id).
    """
    argv = build_command(templates, name, run_id)
    shown = [default_redactor().redact_text(a) for a in argv]
    if argv and os.sep not in argv[0]:
        from sbxcheck.tools import find_tool

        # the venv's own `just` (rust-just) even when the venv is not activated (cron, CI, venv/bin/python)
        argv = [find_tool(argv[0]) or argv[0], *argv[1:]]
    timeout = templates.timeout(name)
    cwd = templates.cwd
    full_env = {**os.environ, **(env or {})}
    full_env["PATH"] = recipe_path(full_env.get("PATH"))
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a timeout kills all of it
        )
    except OSError as exc:
        where = f" in {cwd}" if cwd else ""
        reason = f"cannot start {argv[0]}{where}: {exc.strerror or type(exc).__name__}"
        if (
            isinstance(exc, FileNotFoundError)
            and Path(argv[0]).name == "just"
            and (cwd is None or Path(cwd).is_dir())
        ):
            reason = "just is not installed (pip install rust-just or your package manager)"
        return RecipeResult(name, shown, None, "", "", time.monotonic() - started, False, reason)
    try:
        out, err = proc.communicate(timeout=timeout)
    except KeyboardInterrupt:  # the operator abandoned this step: it does not run on, unseen
        _kill_group(proc)
        raise
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            out, err = proc.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:  # a descendant left the group and holds the pipes
            proc.kill()
            out, err = b"", b"[output unavailable: a descendant kept the pipes open]"
        note = f"\n[sbxcheck: killed after {timeout:g}s timeout]\n".encode()
        return RecipeResult(
            name, shown, None, _clean(out), _clean(err + note), time.monotonic() - started, True
        )
    return RecipeResult(
        name, shown, proc.returncode, _clean(out), _clean(err), time.monotonic() - started, False
    )


# -- parsers --------------------------------------------------------------------------------

_MOUNT_RUN_ID = re.compile(r"^\s*run id:\s+(\S+)\s*$")
_MOUNT_VM = re.compile(r"^\s*vm:\s+(\S+)\s+->\s+(\S+)\s*$")
_MOUNTED = re.compile(r"^\s*mounted:\s+(\S+)\s*$")
_HARVESTED = re.compile(r"^\s*harvest:\s+(\d+)\s+commit\(s\)\s+->\s+(refs/sandbox/(\S+))\s*$")
_HARVEST_FAIL = re.compile(r"^\s*!!\s*harvest\b")
# `✓ teardown complete for <id>`, or `... for <id> (no key was ever minted)` for a run whose create
# stopped before its mint: nothing to revoke, and the teardown is as complete as the other.
_TEARDOWN_DONE = re.compile(r"teardown complete for\s+(\S+)(?:\s+\(([^)]*)\))?\s*$")
_NO_KEY_MINTED = re.compile(r"no key was ever minted|^\s*key:\s+none minted\b")
_GATE_FAILED = re.compile(r"!!\s*gate FAILED\b")
_HARVEST_STOP = re.compile(r"!!\s*harvest FAILED\b")
_KEY_REVOKED = re.compile(r"^\s*key:\s+revoked\b")
_KEY_GONE = re.compile(r"^\s*key:\s+already gone\b")


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in (text or "").splitlines() if line.strip()]


@dataclass(frozen=True)
class MountInfo:
    """What ``just sbx mount`` printed: the resolved run id, its VM and URL.

    ``lines`` are the ready-to-type lines printed after ``mounted:`` (execute, agent, harvest,
    teardown). ``run_id`` is set whenever an id was printed, even on a failed mount, so the
    caller can still report (and keep) what exists.
    """

    ok: bool
    run_id: str | None
    vm: str | None
    url: str | None
    lines: list[str] = field(default_factory=list)
    reason: str | None = None


def parse_mount_output(stdout: str) -> MountInfo:
    """Read ``run id:``, ``vm: <name>  ->  <url>`` and the final ``mounted: <id>``."""
    lines = _lines(stdout)
    printed = vm = url = mounted = None
    mounted_at = -1
    for index, line in enumerate(lines):
        if printed is None and (m := _MOUNT_RUN_ID.match(line)):
            printed = m.group(1)
        elif vm is None and (m := _MOUNT_VM.match(line)):
            vm, url = m.group(1), m.group(2)
        elif m := _MOUNTED.match(line):
            mounted, mounted_at = m.group(1), index
    run_id = mounted or printed
    after = lines[mounted_at + 1 :] if mounted_at >= 0 else []
    reason: str | None = None
    if run_id is None:
        reason = "no 'run id:' or 'mounted:' line in the mount output"
    elif not RUN_ID_RE.match(run_id) or len(run_id) > 63:
        reason = f"printed run id {run_id!r} is not a valid run id"
    elif printed is not None and mounted is not None and printed != mounted:
        reason = f"'run id: {printed}' and 'mounted: {mounted}' disagree"
    elif mounted is None:
        reason = f"no final 'mounted: <id>' line: mount of {run_id} did not finish"
    elif vm is None:
        reason = f"no 'vm: <name>  ->  <url>' line for {run_id}"
    return MountInfo(reason is None, run_id, vm, url, after, reason)


HarvestStatus = Literal["harvested", "norepo", "nocommits", "no_vm", "no_commit_sha", "failed", "unknown"]

# harvest's "nothing to harvest" answers, each a success with its own name (status, pattern)
_HARVEST_NOTHING: tuple[tuple[HarvestStatus, re.Pattern[str]], ...] = (
    ("no_vm", re.compile(r"\bharvest:\s+no vm_name\b")),
    ("no_commit_sha", re.compile(r"\bharvest:\s+no commit_sha\b")),
    ("norepo", re.compile(r"\bNOREPO\b|\bharvest:\s+no app/ repo\b")),
    ("nocommits", re.compile(r"\bNOCOMMITS\b|committed nothing")),
)


@dataclass(frozen=True)
class HarvestResult:
    """What ``just sbx manage harvest`` reported. ``ok``: finished and nothing left behind."""

    ok: bool
    status: HarvestStatus
    run_id: str | None = None
    count: int | None = None
    ref: str | None = None
    reason: str | None = None


def parse_harvest_output(stdout: str, *, run_id: str | None = None) -> HarvestResult:
    """Read ``harvest: <n> commit(s) -> refs/sandbox/<id>``, a named "nothing to harvest" or ``!! harvest:``."""
    lines = _lines(stdout)
    for line in lines:
        if _HARVEST_FAIL.match(line) or "BUNDLEFAIL" in line:
            return HarvestResult(False, "failed", run_id, reason=line.strip())
    for line in lines:
        if m := _HARVESTED.match(line):
            got = m.group(3)
            if run_id is not None and got != run_id:
                reason = f"harvested into {m.group(2)}, expected refs/sandbox/{run_id}"
                return HarvestResult(False, "unknown", got, int(m.group(1)), m.group(2), reason)
            return HarvestResult(True, "harvested", got, int(m.group(1)), m.group(2))
    for line in lines:
        for status, pattern in _HARVEST_NOTHING:
            if pattern.search(line):
                return HarvestResult(True, status, run_id, 0, reason=line.strip())
    snippet = clip(lines[-1], 200) if lines else "(no output)"
    return HarvestResult(False, "unknown", run_id, reason=f"no recognised harvest line; last line: {snippet}")


KeyStatus = Literal["revoked", "already_gone", "never_minted"]
GateStatus = Literal["passed", "failed", "unverified", "not_needed"]


@dataclass(frozen=True)
class TeardownResult:
    """What ``just sbx lifecycle teardown`` reported. ``ok`` only with ``teardown complete``."""

    ok: bool
    run_id: str | None
    key: KeyStatus | None
    gate: GateStatus | None
    vm_left_alive: bool = False  # harvest failed, so teardown stopped before revoke/destroy
    reason: str | None = None


def parse_teardown_output(stdout: str, *, run_id: str | None = None) -> TeardownResult:
    """Read ``key: revoked|already gone``, the final gate and ``✓ teardown complete for <id>``."""
    lines = _lines(stdout)
    key: KeyStatus | None = None
    gate: GateStatus | None = None
    done: str | None = None
    problems: list[str] = []
    harvest_stop = False
    for line in lines:
        if _KEY_REVOKED.match(line):
            key = "revoked"
        elif _KEY_GONE.match(line):
            key = "already_gone"
        elif _NO_KEY_MINTED.search(line) and key is None:
            key = "never_minted"
        if _GATE_FAILED.search(line):
            gate = "failed"
            problems.append(line.strip())
        elif "revocation UNVERIFIED" in line:
            gate = gate or "unverified"
            problems.append(line.strip())
        elif _HARVEST_STOP.search(line):
            harvest_stop = True
            problems.append(line.strip())
        elif m := _TEARDOWN_DONE.search(line):
            done = m.group(1)
    if done is not None and gate is None:
        gate = "not_needed" if key == "never_minted" else "passed"
    reason: str | None = None
    if problems:
        reason = clip(problems[0], 300)
    elif done is None:
        snippet = clip(lines[-1], 200) if lines else "(no output)"
        reason = f"no 'teardown complete for <id>' line; last line: {snippet}"
    elif run_id is not None and done != run_id:
        reason = f"teardown completed for {done!r}, expected {run_id!r}"
    return TeardownResult(reason is None, done or run_id, key, gate, harvest_stop, reason)


# -- the teardown decision ------------------------------------------------------------------

TeardownPolicy = Literal["never", "on-pass", "always"]
POLICIES: tuple[TeardownPolicy, ...] = ("never", "on-pass", "always")
NOT_RUN = "not-run"  # a selected gate item that never reported (the session was interrupted first)
_BLOCKING = frozenset({"failed", "error", "waived"})  # a waived item failed: a known failure still keeps its VM


@dataclass(frozen=True)
class Decision:
    """What to do with one run after the suite, and why (reported either way)."""

    action: Literal["teardown", "keep"]
    why: str


def decide_teardown(
    policy: TeardownPolicy, gate_outcomes: Mapping[str, Sequence[str]]
) -> dict[str, Decision]:
    """Apply the person's teardown flag; a failed or errored gate item always keeps its run.

    ``never`` keeps every run. ``on-pass`` tears down a run only when every selected gate item ran
    and passed (an outcome of ``not-run`` keeps it). ``always`` tears down every run except one
    with a failed or errored item (or an outcome we do not recognise: when unsure, keep).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown teardown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    decisions: dict[str, Decision] = {}
    for run_id, raw in gate_outcomes.items():
        outcomes = [str(o).strip().lower() for o in raw]
        bad = sorted({o for o in outcomes if o in _BLOCKING})
        unknown = sorted({o for o in outcomes if o not in _BLOCKING | {"passed", "skipped", NOT_RUN}})
        not_run = outcomes.count(NOT_RUN)
        if bad:
            n = sum(o in _BLOCKING for o in outcomes)
            why = f"{n} gate item(s) {'/'.join(bad)}: a failed gate keeps its VM for diagnosis"
            decisions[run_id] = Decision("keep", why)
        elif unknown:
            decisions[run_id] = Decision("keep", f"unrecognised gate outcome(s) {', '.join(unknown)}: kept")
        elif policy == "never":
            decisions[run_id] = Decision("keep", "teardown policy is 'never'")
        elif policy == "on-pass":
            if not outcomes:
                decisions[run_id] = Decision("keep", "no gate items ran; on-pass needs every item passed")
            elif not_run:
                decisions[run_id] = Decision(
                    "keep",
                    f"{not_run} of {len(outcomes)} selected gate item(s) never ran (interrupted); "
                    "on-pass needs every selected item run and passed",
                )
            elif all(o == "passed" for o in outcomes):
                decisions[run_id] = Decision("teardown", f"all {len(outcomes)} gate item(s) passed (on-pass)")
            else:
                skipped = outcomes.count("skipped")
                decisions[run_id] = Decision(
                    "keep", f"{skipped} gate item(s) skipped; on-pass needs all passed"
                )
        else:
            decisions[run_id] = Decision("teardown", "teardown policy is 'always' and no gate item failed")
    return decisions
