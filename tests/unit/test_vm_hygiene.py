"""VM hygiene: modes and the provisioning key proven absent by hashes, the script run for real in a temp home."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from sbxcheck.checks.gate import GateTarget
from sbxcheck.checks.script import ScriptRun
from sbxcheck.checks.vm_hygiene import check_vm_hygiene, host_secrets, judge_hygiene, judge_vm_scan
from sbxcheck.results import Classification, Outcome
from sbxcheck.transports.ssh import CommandResult

PROV = "sk-or-v1-" + "ab" * 32
RUNTIME = "sk-or-v1-" + "cd" * 32
TARGET = GateTarget(
    run_id="alpha-20261202-abcdef",
    host="alpha-20261202-abcdef.exe.xyz",
    commit_sha="0" * 40,
    roster=("m/one",),
    roster_config="cfg.yaml",
    openrouter_base_url="http://127.0.0.1:1/api/v1",
    credit_floor_usd=1.0,
    cost_probe_model="m/one",
    ping_timeout_s=5,
    pi_timeout_s=5,
    command_timeout_s=30,
)


class HomeShell:
    """Runs the command with bash in a temp HOME (what the VM half would see over SSH)."""

    alias = "vm"

    def __init__(self, home: Path) -> None:
        self.home = home
        self.received = b""

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        self.received += command.encode() + data
        started = time.monotonic()
        env = {"HOME": str(self.home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        proc = subprocess.run(["bash", "-c", command], input=data, capture_output=True, env=env, timeout=60)
        return CommandResult(
            proc.returncode, proc.stdout.decode(), proc.stderr.decode(), time.monotonic() - started
        )


def _vm(tmp_path: Path, *, mode: int = 0o600, plant: bool = False) -> Path:
    home = tmp_path / "home"
    (home / "app").mkdir(parents=True)
    (home / ".pi" / "agent").mkdir(parents=True)
    env, models = home / "app" / ".env", home / ".pi" / "agent" / "models.json"
    env.write_text(f"OPENROUTER_API_KEY={RUNTIME}\n")
    models.write_text(f'{{"apiKey": "{RUNTIME}"}}\n')
    env.chmod(mode)
    models.chmod(mode)
    (home / "app" / ".git").mkdir()
    (home / "app" / ".git" / "packed").write_text(PROV)  # .git is skipped: never read
    if plant:
        (home / "notes").mkdir()
        (home / "notes" / "todo.txt").write_text(f"remember {PROV} for later\n")
    return home


def _host(tmp_path: Path, key_mode: int = 0o600) -> Path:
    key = tmp_path / "runs" / f"{TARGET.run_id}.key"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text(RUNTIME + "\n")
    key.chmod(key_mode)
    (tmp_path / "host.env").write_text(f"# host\nOPENROUTER_PROVISIONING_KEY={PROV}\n")
    return key


def _judge(tmp_path: Path, home: Path, key: Path) -> tuple[object, HomeShell]:
    shell = HomeShell(home)
    scan = check_vm_hygiene(shell, TARGET)
    secrets = host_secrets(key, env_name="NOT_SET_HERE", key_path=tmp_path / "host.env", environ={})
    return judge_hygiene(TARGET, scan, secrets, hashlib.sha256(RUNTIME.encode()).hexdigest()), shell


def test_clean_vm_passes_and_says_what_it_compared(tmp_path: Path) -> None:
    result, shell = _judge(tmp_path, _vm(tmp_path), _host(tmp_path))
    assert result.outcome is Outcome.PASSED, result.message
    assert "no provisioning key on the VM" in result.message and "2 key-shaped token" not in result.message
    assert result.evidence["runtime_key_in"] == [".pi/agent/models.json", "app/.env"]
    assert result.evidence["provisioning_key_in"] == [] and "_tokens" not in result.evidence
    assert PROV.encode() not in shell.received and RUNTIME.encode() not in shell.received


def test_planted_provisioning_key_is_a_security_exposure_naming_the_path_never_the_value(
    tmp_path: Path,
) -> None:
    result, shell = _judge(tmp_path, _vm(tmp_path, plant=True), _host(tmp_path))
    assert (result.outcome, result.classification) == (Outcome.FAILED, Classification.SECURITY_EXPOSURE)
    assert "~/notes/todo.txt" in result.message and "rotate" in (result.recommendation or "")
    dumped = result.model_dump_json()
    assert PROV not in dumped and hashlib.sha256(PROV.encode()).hexdigest() not in dumped
    assert PROV.encode() not in shell.received


@pytest.mark.parametrize("where", ["vm", "host"])
def test_wide_modes_fail_with_the_chmod_that_fixes_them(tmp_path: Path, where: str) -> None:
    home = _vm(tmp_path, mode=0o644 if where == "vm" else 0o600)
    key = _host(tmp_path, key_mode=0o640 if where == "host" else 0o600)
    result, _ = _judge(tmp_path, home, key)
    assert (result.outcome, result.classification) == (Outcome.FAILED, Classification.SECURITY_EXPOSURE)
    if where == "vm":
        assert "~/app/.env is 0644" in result.message and "chmod 600 ~/app/.env" in (
            result.recommendation or ""
        )
    else:
        assert "0640 on this host" in result.message and f"chmod 600 {key}" in (result.recommendation or "")


def test_no_provisioning_key_on_the_host_passes_with_a_warning_not_silently(tmp_path: Path) -> None:
    home, key = _vm(tmp_path), _host(tmp_path)
    scan = check_vm_hygiene(HomeShell(home), TARGET)
    result = judge_hygiene(TARGET, scan, host_secrets(key, env_name=None, key_path=None, environ={}), "")
    assert (
        result.outcome is Outcome.PASSED
        and "WARNING: the provisioning key was not compared" in result.message
    )


def test_env_var_wins_over_the_file_and_a_bare_file_works(tmp_path: Path) -> None:
    digest = hashlib.sha256(PROV.encode()).hexdigest()
    assert (
        host_secrets(
            tmp_path / "k", env_name="P", key_path=None, environ={"P": f" {PROV} "}
        ).provisioning_sha256
        == digest
    )
    (tmp_path / "bare").write_text(PROV + "\n")
    assert (
        host_secrets(
            tmp_path / "k", env_name=None, key_path=tmp_path / "bare", environ={}
        ).provisioning_sha256
        == digest
    )
    missing = host_secrets(tmp_path / "k", env_name=None, key_path=tmp_path / "nope", environ={})
    assert missing.provisioning_sha256 is None and "unreadable" in missing.provisioning_source


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "SBX_SCAN_BEGIN\nnot json\nSBX_SCAN_END 0\nSBX_END\n",
        "SBX_SCRIPT_ERROR python3 is not on the VM's PATH\n",
    ],
)
def test_a_scan_that_did_not_run_is_an_error_not_a_pass(stdout: str) -> None:
    result = judge_vm_scan(TARGET, ScriptRun("vm", 0, stdout, ""))
    assert result.outcome is Outcome.ERROR
    assert (
        judge_hygiene(
            TARGET, result, host_secrets(Path("/nonexistent"), env_name=None, key_path=None, environ={}), ""
        ).outcome
        is Outcome.ERROR
    )


def test_a_symlinked_host_key_is_judged_as_a_link_and_never_advised_a_chmod_through_it(tmp_path: Path) -> None:
    """A .key that links to a 0600 file elsewhere: said to be a link, with its target; no advice follows it."""
    real = _host(tmp_path)
    elsewhere = tmp_path / "shared" / "team.key"
    elsewhere.parent.mkdir()
    real.rename(elsewhere)
    real.symlink_to(elsewhere)
    elsewhere.chmod(0o644)  # the target is wide: following the link would blame (and chmod) the shared file
    result, _ = _judge(tmp_path, _vm(tmp_path), real)
    assert (result.outcome, result.classification) == (Outcome.FAILED, Classification.CONFIG_DEFECT)
    assert f"{real} is a symlink to {elsewhere}" in result.message and "0644" not in result.message
    advice = result.recommendation or ""
    assert "chmod 600" not in advice and f"ls -l {real}" in advice and str(elsewhere) in advice
    assert result.evidence["host_key_kind"] == "symlink" and result.evidence["host_key_target"] == str(elsewhere)
    assert elsewhere.stat().st_mode & 0o777 == 0o644  # nothing was changed


def test_symlinked_secret_files_on_the_vm_are_reported_as_links(tmp_path: Path) -> None:
    """The scan runs for real: an lstat'ed link is neither 'mode 0777' nor advised a chmod that follows it."""
    home = _vm(tmp_path)
    dotfiles = home / "dotfiles" / "pi-models.json"
    dotfiles.parent.mkdir()
    models = home / ".pi" / "agent" / "models.json"
    models.rename(dotfiles)
    models.symlink_to(dotfiles)
    result, _ = _judge(tmp_path, home, _host(tmp_path))
    assert (result.outcome, result.classification) == (Outcome.FAILED, Classification.CONFIG_DEFECT)
    assert f"~/.pi/agent/models.json is a symlink to {dotfiles}" in result.message
    assert "0777" not in result.message and "chmod 600 ~/.pi" not in (result.recommendation or "")
    assert result.evidence["vm_links"] == {".pi/agent/models.json": str(dotfiles)}
    assert result.evidence["vm_modes"][".pi/agent/models.json"] is None


def test_a_fifo_where_the_key_file_belongs_is_named_and_never_opened(tmp_path: Path) -> None:
    key = _host(tmp_path)
    key.unlink()
    os.mkfifo(key)
    result, _ = _judge(tmp_path, _vm(tmp_path), key)
    assert result.outcome is Outcome.FAILED and f"{key} is a FIFO on this host" in result.message
