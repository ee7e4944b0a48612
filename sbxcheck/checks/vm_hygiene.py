"""VM hygiene (specs/sssf-sandbox.md): secret files 0600, and the provisioning key never on a VM.

Two halves, like every gate check. On the VM, :func:`check_vm_hygiene` reads the modes of
``~/app/.env`` and ``~/.pi/agent/models.json`` and hashes (sha256) every key-shaped token
(``sk-or-…``) in the files under the VM user's home; only hashes and paths come back. On the host,
:func:`judge_hygiene` compares those hashes with the provisioning key's own hash, computed here from
the inventory's env var or file (the key is never sent anywhere), and checks the mode of the run's
``.sandbox/runs/<id>.key``. A finding is ``security_exposure`` with the file path, never the value.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbxcheck.checks.base import RemoteShell, trim
from sbxcheck.checks.gate import GateTarget, ssh_login_words, with_advice
from sbxcheck.checks.script import END, GateScript, ScriptRun, run_script, script_failure, section
from sbxcheck.commands import commands, on_host, shell_command
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.safeio import loads_bounded, path_state

__all__ = [
    "HostSecrets",
    "check_vm_hygiene",
    "host_secrets",
    "judge_hygiene",
    "judge_vm_scan",
    "vm_hygiene_script",
]

CHECK = "vm_hygiene"
TOKEN_PATTERN = r"sk-or-[A-Za-z0-9_-]{16,}"  # OpenRouter keys: sk-or-v1-<64 hex>; looser on purpose
MAX_FILES = 20_000
MAX_FILE_BYTES = 2_000_000
SECRET_FILES = ("app/.env", ".pi/agent/models.json")  # under the VM user's home; the scan reports their modes
SKIPPED_DIRS = (".git", "node_modules", ".npm", ".cache", ".bun", ".nvm", ".rustup", ".cargo")

# Runs in the VM: stdlib only, bounded (files, bytes per file), symlinks never followed; prints one
# JSON line. The secret files it must see are read in full; a token leaves only as its sha256.
_SCAN_PY = r"""
import hashlib, json, os, re, stat, sys
home = os.path.expanduser("~")
pattern = re.compile(sys.argv[1].encode())
max_files, max_bytes = int(sys.argv[2]), int(sys.argv[3])
skipped = set(sys.argv[4].split(","))
modes, links, odd = {}, {}, {}
for rel in ("app/.env", ".pi/agent/models.json"):
    modes[rel] = None
    try:
        st = os.lstat(os.path.join(home, rel))
    except OSError:
        continue
    if stat.S_ISLNK(st.st_mode):
        try:
            links[rel] = os.readlink(os.path.join(home, rel))
        except OSError:
            links[rel] = "?"
    elif not stat.S_ISREG(st.st_mode):
        odd[rel] = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
    else:
        modes[rel] = "%04o" % stat.S_IMODE(st.st_mode)
found, files, big, capped = {}, 0, 0, False
for top, dirs, names in os.walk(home, followlinks=False):
    dirs[:] = sorted(d for d in dirs if d not in skipped)
    for name in sorted(names):
        path = os.path.join(top, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if files >= max_files:
            capped = True
            break
        files += 1
        if st.st_size > max_bytes:
            big += 1
            continue
        try:
            with open(path, "rb") as fh:
                data = fh.read(max_bytes + 1)
        except OSError:
            continue
        for m in pattern.finditer(data):
            digest = hashlib.sha256(m.group(0)).hexdigest()
            found.setdefault(digest, set()).add(os.path.relpath(path, home))
    if capped:
        break
print(json.dumps({"modes": modes, "links": links, "odd": odd, "files_scanned": files, "files_too_big": big,
                  "capped": capped, "tokens": [{"sha256": h, "paths": sorted(p)} for h, p in sorted(found.items())]}))
"""

_SCRIPT = (
    "set -u\n"
    + "SCAN_PY="
    + shlex.quote(_SCAN_PY)
    + "\n"
    + r"""
command -v python3 >/dev/null 2>&1 || { echo "SBX_SCRIPT_ERROR python3 is not on the VM's PATH"; exit 0; }
echo "SBX_SCAN_BEGIN"
python3 -I -c "$SCAN_PY" "$@"
echo "SBX_SCAN_END $?"
echo "SBX_END"
"""
)


def vm_hygiene_script(target: GateTarget) -> GateScript:
    return GateScript(
        _SCRIPT,
        (TOKEN_PATTERN, str(MAX_FILES), str(MAX_FILE_BYTES), ",".join(SKIPPED_DIRS)),
        target.command_timeout_s,
        "stat ~/app/.env ~/.pi/agent/models.json; sha256 of every key-shaped token under ~ (python3)",
    )


def judge_vm_scan(target: GateTarget, run: ScriptRun) -> CheckResult:
    """The VM half: modes and token hashes as evidence (``_tokens`` is consumed by :func:`judge_hygiene`)."""
    ev: dict[str, Any] = {"host": run.host, "ran": vm_hygiene_script(target).ran, "exit_code": run.exit_code}
    if (failure := script_failure(CHECK, target.run_id, run, ev)) is not None:
        return failure
    lines = run.stdout.splitlines()
    body = section(lines, "SBX_SCAN_BEGIN", "SBX_SCAN_END")
    doc: Any = None
    if body is not None:
        try:
            doc = loads_bounded("\n".join(body))
        except ValueError:  # not JSON, or too large or deep (UnsafeInput)
            doc = None
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("modes"), dict)
        or not isinstance(doc.get("tokens"), list)
    ):
        ev["stdout"], ev["stderr"] = trim(run.stdout, 500), trim(run.stderr, 500)
        return CheckResult.errored(
            CHECK, target.run_id, "unexpected output from the hygiene scan", Classification.BAD_RESPONSE, ev
        )
    ev["vm_modes"] = doc["modes"]
    ev["vm_links"] = _strings(doc.get("links"))  # secret files that are symlinks: judged as links
    ev["vm_not_regular"] = _strings(doc.get("odd"))
    ev["files_scanned"] = doc.get("files_scanned")
    ev["files_too_big"] = doc.get("files_too_big")
    ev["scan_capped"] = bool(doc.get("capped"))
    ev["skipped_dirs"] = list(SKIPPED_DIRS)
    ev["_tokens"] = [
        (str(t.get("sha256")), [str(p) for p in t.get("paths", [])])
        for t in doc["tokens"]
        if isinstance(t, dict)
    ]
    return CheckResult.passed(CHECK, target.run_id, "scanned", ev)


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def check_vm_hygiene(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """The VM half of the hygiene item (run by the gate fan-out like A–E)."""
    _ = END  # the script ends with the gate's end marker
    return judge_vm_scan(target, run_script(shell, vm_hygiene_script(target)))


@dataclass(frozen=True)
class HostSecrets:
    """What the host knows: the provisioning key's sha256 (or why not), and the run's key file."""

    provisioning_sha256: str | None
    provisioning_source: str  # where it came from, or why there is none
    key_file: Path


def host_secrets(
    key_file: Path, *, env_name: str | None, key_path: Path | None, environ: dict[str, str] | None = None
) -> HostSecrets:
    """Hash the provisioning key on the host (env var first, then the file, bare or a dotenv line)."""
    env = dict(os.environ) if environ is None else environ
    value = ""
    source = "none configured (sssf.provisioning_key_env / sssf.provisioning_key_file)"
    if env_name and env.get(env_name, "").strip():
        value, source = env[env_name].strip(), f"${env_name}"
    elif key_path is not None:
        try:
            text = key_path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            source = f"{key_path}: unreadable ({exc.strerror})"
        else:
            value, source = _dotenv_value(text, "OPENROUTER_PROVISIONING_KEY"), str(key_path)
    digest = hashlib.sha256(value.encode()).hexdigest() if value else None
    return HostSecrets(digest, source, key_file)


def _dotenv_value(text: str, name: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for line in reversed(lines):
        bare = line.removeprefix("export ").strip()
        if bare.startswith(f"{name}="):
            return bare.split("=", 1)[1].strip().strip("\"'")
    return lines[0] if len(lines) == 1 and "=" not in lines[0] else ""


def judge_hygiene(
    target: GateTarget, scan: CheckResult, host: HostSecrets, runtime_key_hash: str
) -> CheckResult:
    """Modes 0600 (VM .env, models.json; host .key) and no provisioning key on the VM, from hashes only."""
    if scan.outcome is not Outcome.PASSED:
        return with_advice(scan, target)
    ev = {k: v for k, v in scan.evidence.items() if k != "_tokens"}
    tokens: list[tuple[str, list[str]]] = scan.evidence.get("_tokens", [])
    problems: list[str] = []
    fixes: list[str] = []
    typed: list[str | None] = []
    login = ssh_login_words(target)
    wide = {  # only the two files the scan was asked about: a key the VM added names nothing here
        rel: mode
        for rel, mode in ev["vm_modes"].items()
        if rel in SECRET_FILES and isinstance(mode, str) and re.fullmatch(r"[0-7]{3,4}", mode) and int(mode, 8) & 0o077
    }
    if wide:
        problems.append("readable beyond its owner on the VM: " + ", ".join(f"~/{r} is {m}" for r, m in wide.items()))
        chmod = "chmod 600 " + " ".join(f"~/{r}" for r in SECRET_FILES if r in wide)
        fixes.append(f"on {target.host}: `{chmod}`")
        typed.append(on_host(login, chmod))
    links = {r: t for r, t in ev.get("vm_links", {}).items() if r in SECRET_FILES}
    odd = {r: w for r, w in ev.get("vm_not_regular", {}).items() if r in SECRET_FILES}
    for rel, where in links.items():
        problems.append(f"~/{rel} is a symlink to {where} on the VM (a secret file is judged as itself)")
    for rel, what in odd.items():
        problems.append(f"~/{rel} is {what} on the VM, not a secret file")
    if links or odd:
        look = "ls -ld " + " ".join(f"~/{r}" for r in SECRET_FILES if r in links or r in odd)
        fixes.append(
            f"on {target.host}: look with `{look}` and make each a regular file of mode 0600 in its place "
            "(chmod on a link changes what it points to)"
        )
        typed.append(on_host(login, look))
    key = path_state(host.key_file)
    ev["host_key_file"] = str(host.key_file)
    ev["host_key_kind"] = key.kind
    ev["host_key_mode"] = f"{key.mode:04o}" if key.kind == "file" and key.mode is not None else None
    quoted = shlex.quote(str(host.key_file))
    if key.kind == "symlink":
        ev["host_key_target"] = key.target
        problems.append(
            f"the runtime key file {host.key_file} is {key.describe()} on this host (judged as a link, not "
            "through it)"
        )
        fixes.append(
            f"here: look with `ls -l {quoted}`, then put the key file itself in its place, mode 0600 (chmod "
            f"on the link would change {key.target})"
        )
        typed.append(shell_command("ls", "-l", str(host.key_file)))
    elif key.kind not in ("file", "missing"):
        problems.append(f"the runtime key file {host.key_file} is {key.describe()} on this host, not a key file")
        fixes.append(f"here: look with `ls -ld {quoted}`")
        typed.append(shell_command("ls", "-ld", str(host.key_file)))
    elif key.mode is not None and key.mode & 0o077:
        problems.append(f"the runtime key file {host.key_file} is {key.mode:04o} on this host")
        fixes.append(f"here: `chmod 600 {quoted}`")
        typed.append(shell_command("chmod", "600", str(host.key_file)))
    ev["provisioning_key_from"] = host.provisioning_source
    ev["key_shaped_tokens"] = len(tokens)
    own = [paths for digest, paths in tokens if runtime_key_hash and digest == runtime_key_hash]
    ev["runtime_key_in"] = sorted({p for paths in own for p in paths})
    ev["other_token_paths"] = sorted(
        {
            p
            for digest, paths in tokens
            if digest not in (runtime_key_hash, host.provisioning_sha256)
            for p in paths
        }
    )[:20]
    exposed = sorted(
        {
            p
            for digest, paths in tokens
            if host.provisioning_sha256 and digest == host.provisioning_sha256
            for p in paths
        }
    )
    ev["provisioning_key_in"] = exposed
    if exposed:
        problems.insert(0, "the provisioning key is on the VM in " + ", ".join(f"~/{p}" for p in exposed))
        fixes.insert(
            0,
            f"the provisioning key has left the host: rotate it (OpenRouter settings), remove it from "
            f"{', '.join(exposed)} on {target.host}, and find what copied it there",
        )
    if problems:
        exposed_or_wide = bool(exposed or wide) or (key.kind == "file" and key.mode is not None and key.mode & 0o077)
        return CheckResult.failed(
            CHECK,
            target.run_id,
            "; ".join(problems),
            ev,
            Classification.SECURITY_EXPOSURE if exposed_or_wide else Classification.CONFIG_DEFECT,
            recommendation="; ".join(fixes) + ". The VM is left up; nothing was changed",
            commands=commands(*typed),
        )
    checked = f"compared sha256 of {len(tokens)} key-shaped token(s) in {ev['files_scanned']} file(s)"
    if host.provisioning_sha256 is None:
        message = (
            f"modes 0600; WARNING: the provisioning key was not compared (no key on this host: "
            f"{host.provisioning_source}); {checked} with none"
        )
    else:
        message = f"modes 0600 (.env, models.json, host .key); no provisioning key on the VM ({checked})"
    if ev["scan_capped"]:
        message += f"; WARNING: the scan stopped at {MAX_FILES} files"
    return CheckResult.passed(CHECK, target.run_id, message, ev)
