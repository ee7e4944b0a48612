"""The simulated agent-core, dgx-spark and exe.dev hosts, run for real (bash, no SSH), checked by the real checks."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from sbxcheck.checks.dgx import (
    check_tailscale_ping,
    check_tailscaled_active,
    check_tailscaled_enabled,
    triage_dgx,
)
from sbxcheck.checks.dgx_remediate import remediate_tailscaled
from sbxcheck.clients.exedev import ExeDevCommandFailed, list_vms
from sbxcheck.errors import BadResponseError, CommandTimeout
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.sim.hosts import (
    HOST_FAULTS,
    HostHome,
    exe_vm,
    fault_options,
    make_agent_core,
    make_dgx_spark,
    make_exedev,
    write_vms,
)
from sbxcheck.transports.ssh import CommandResult

BASE_PATH = "/usr/local/bin:/usr/bin:/bin"  # what SimHost puts after path_dirs


class LocalShell:
    """Runs ``bash -c command`` in a HostHome the way the sim sshd does (clean env, cwd = home)."""

    def __init__(self, host: HostHome) -> None:
        self.alias = host.name
        self._host = host

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        started = time.monotonic()
        data = stdin.encode() if isinstance(stdin, str) else stdin
        try:
            proc = subprocess.run(
                ["bash", "-c", command],
                input=data or b"",
                capture_output=True,
                cwd=self._host.home,
                env=self._host.env({"PATH": BASE_PATH, "LANG": "C.UTF-8"}),
                timeout=timeout or 30,
            )
        except subprocess.TimeoutExpired:
            raise CommandTimeout(f"{self.alias}: {command!r} outlived {timeout}s") from None
        return CommandResult(
            proc.returncode, proc.stdout.decode(), proc.stderr.decode(), round(time.monotonic() - started, 3)
        )


def sh(host: HostHome, command: str) -> tuple[int, str, str]:
    res = LocalShell(host).run(command, timeout=20)
    return res.exit_code, res.stdout, res.stderr


# ---------------------------------------------------------------- agent-core programs


def test_systemctl_exit_codes_and_enable_now_changes_state(tmp_path: Path) -> None:
    host = make_agent_core(tmp_path, tailscaled_enabled=False, tailscaled_active=False)
    assert host.sim_host().path_dirs == host.path_dirs and host.sim_host().home == host.home
    assert sh(host, "systemctl is-enabled tailscaled") == (1, "disabled\n", "")
    assert sh(host, "systemctl is-active tailscaled") == (3, "inactive\n", "")
    code, _, err = sh(host, "tailscale ping -c 2 100.77.4.93")
    assert code == 1 and "doesn't appear to be running" in err

    code, _, err = sh(host, "systemctl enable --now tailscaled")
    assert code == 0 and "Created symlink" in err
    assert host.unit_state() == ("enabled", "active")
    assert sh(host, "systemctl is-enabled tailscaled.service") == (0, "enabled\n", "")
    assert sh(host, "systemctl is-active tailscaled") == (0, "active\n", "")
    code, out, _ = sh(host, "tailscale ping -c 2 100.77.4.93")
    assert code == 0 and out == "pong from dgx-spark (100.77.4.93) via 192.168.50.20:41641 in 3ms\n"

    assert sh(host, "systemctl stop tailscaled")[0] == 0
    assert sh(host, "systemctl is-active tailscaled")[0] == 3
    assert sh(host, "systemctl is-enabled nosuchunit")[0] == 1
    assert sh(host, "systemctl is-active nosuchunit") == (3, "inactive\n", "")


def test_ping_modes(tmp_path: Path) -> None:
    derp = make_agent_core(tmp_path / "a", ping="derp")
    code, out, err = sh(derp, "tailscale ping -c 2 100.77.4.93")
    assert code == 1 and out.count("via DERP(fra)") == 2 and "direct connection not established" in err

    noreply = make_agent_core(tmp_path / "b", ping="no-reply")
    code, out, err = sh(noreply, "tailscale ping -c 2 100.77.4.93")
    assert code == 1 and out.count("timed out") == 2 and "no reply" in err

    ok = make_agent_core(tmp_path / "c")
    code, _, err = sh(ok, "tailscale ping -c 1 100.64.9.9")
    assert code == 1 and "no reply" in err

    silent = make_agent_core(tmp_path / "d", ping="silent")
    assert sh(silent, "tailscale ping -c 2 100.77.4.93") == (0, "", "")

    unknown = make_agent_core(tmp_path / "e", systemctl_unknown=True)
    assert sh(unknown, "systemctl is-enabled tailscaled") == (1, "unknown\n", "")
    assert sh(unknown, "systemctl is-active tailscaled") == (3, "unknown\n", "")
    assert sh(unknown, "systemctl enable --now tailscaled")[0] == 1


def test_ping_timeout_is_bounded_by_the_wrapper(tmp_path: Path) -> None:
    host = make_agent_core(tmp_path, ping="timeout", ping_hang_s=30)
    started = time.monotonic()
    r = check_tailscale_ping(LocalShell(host), timeout_s=1)
    assert time.monotonic() - started < 10
    assert r.outcome is Outcome.FAILED and r.evidence["exit_code"] == 124
    assert r.evidence["ran"] == "timeout 1 tailscale ping -c 2 100.77.4.93"


# ---------------------------------------------------------------- the checks against the sim host


def test_checks_and_remediation_against_a_disabled_tailscaled(tmp_path: Path) -> None:
    host = make_agent_core(
        tmp_path, **fault_options("agent-core", ["dgx.tailscaled-disabled", "exedev.ls-fails"])
    )
    shell = LocalShell(host)
    before = {
        "c::enabled": check_tailscaled_enabled(shell),
        "c::active": check_tailscaled_active(shell),
        "c::ping": check_tailscale_ping(shell),
    }
    assert [r.outcome for r in before.values()] == [Outcome.FAILED] * 3
    assert before["c::enabled"].evidence["exit_code"] == 1 and before["c::active"].evidence["exit_code"] == 3

    dgx = CheckResult.errored("dgx_ssh", "dgx-spark", "unreachable", Classification.INFRA_UNREACHABLE)
    incident = triage_dgx({**before, "c::ssh": dgx})
    assert incident is not None and incident.cause == "dgx-routing"

    fixed = remediate_tailscaled(shell)
    assert fixed.outcome is Outcome.PASSED, fixed.message
    assert (
        fixed.evidence["before"]["is_enabled"] == "disabled"
        and fixed.evidence["before"]["is_enabled_exit"] == 1
    )
    assert fixed.evidence["command"]["exit_code"] == 0
    assert fixed.evidence["after"] == {
        "is_enabled": "enabled",
        "is_enabled_exit": 0,
        "is_active": "active",
        "is_active_exit": 0,
    }
    assert host.unit_state() == ("enabled", "active")
    assert check_tailscaled_enabled(shell).outcome is Outcome.PASSED
    assert check_tailscaled_active(shell).outcome is Outcome.PASSED
    assert check_tailscale_ping(shell).outcome is Outcome.PASSED
    again = remediate_tailscaled(shell)
    assert again.outcome is Outcome.PASSED and again.evidence["command_run"] is False


def test_failed_remediation_and_unknown_answers(tmp_path: Path) -> None:
    denied = make_agent_core(
        tmp_path / "a", tailscaled_enabled=False, tailscaled_active=False, enable_denied=True
    )
    r = remediate_tailscaled(LocalShell(denied))
    assert r.outcome is Outcome.FAILED and "Access denied" in r.evidence["command"]["stderr"]
    assert denied.unit_state() == ("disabled", "inactive")

    unknown = make_agent_core(tmp_path / "b", **fault_options("agent-core", ["dgx.systemctl-unknown"]))
    r = check_tailscaled_enabled(LocalShell(unknown))
    assert r.outcome is Outcome.FAILED and "unknown" in r.message

    silent = make_agent_core(tmp_path / "c", **fault_options("agent-core", ["dgx.ping-silent"]))
    r = check_tailscale_ping(LocalShell(silent))
    assert r.outcome is Outcome.FAILED and "printed nothing" in r.message


def test_dgx_spark_host_runs_true(tmp_path: Path) -> None:
    dgx = make_dgx_spark(tmp_path)
    assert sh(dgx, "true") == (0, "", "")
    assert sh(dgx, "systemctl is-active tailscaled") == (0, "active\n", "")


# ---------------------------------------------------------------- exe.dev


def test_exedev_ls_json_and_fallthrough(tmp_path: Path) -> None:
    host = make_exedev(tmp_path, [exe_vm("alpha-20260601-aaaaaa"), exe_vm("beta-20260601-bbbbbb")])
    (host.home / "notes.txt").write_text("x")
    code, out, _ = sh(host, "ls --json")
    assert code == 0 and [v["vm_name"] for v in json.loads(out)["vms"]] == [
        "alpha-20260601-aaaaaa",
        "beta-20260601-bbbbbb",
    ]
    code, out, _ = sh(host, "ls 'alpha-*' --json")
    assert [v["vm_name"] for v in json.loads(out)["vms"]] == ["alpha-20260601-aaaaaa"]
    code, out, _ = sh(host, "ls")
    assert code == 0 and "notes.txt" in out.split()
    assert sh(host, "whoami")[0] == 0

    vms = list_vms(LocalShell(host))
    assert [v.vm_name for v in vms] == ["alpha-20260601-aaaaaa", "beta-20260601-bbbbbb"]
    assert vms[0].ssh_dest == "alpha-20260601-aaaaaa.exe.xyz"
    write_vms(host, [])
    assert list_vms(LocalShell(host)) == []


@pytest.mark.parametrize(
    ("fault", "exc"), [("exedev.ls-fails", ExeDevCommandFailed), ("exedev.ls-garbage", BadResponseError)]
)
def test_exedev_faults_raise_never_empty(tmp_path: Path, fault: str, exc: type[Exception]) -> None:
    assert HOST_FAULTS[fault].host == "exe.dev"
    host = make_exedev(tmp_path, [exe_vm("alpha-20260601-aaaaaa")], **fault_options("exe.dev", [fault]))
    with pytest.raises(exc):
        list_vms(LocalShell(host))
