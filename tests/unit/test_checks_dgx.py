"""DGX routing checks (§8.13) against scripted answers: systemctl, tailscale ping, SSH, triage, remediation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from sbxcheck.checks.dgx import (
    DGX_CAUSE,
    DGX_PATH_CAUSE,
    DGX_RECOVERY,
    REMEDIATION_COMMAND,
    check_dgx_ssh,
    check_tailscale_ping,
    check_tailscaled_active,
    check_tailscaled_enabled,
    triage_dgx,
)
from sbxcheck.checks.dgx_remediate import remediate_tailscaled, report_remediation
from sbxcheck.errors import CommandTimeout, HostKeyMismatch, HostUnreachable
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.transports.ssh import CommandResult

PING = "timeout 20 tailscale ping -c 2 100.77.4.93"
Answer = tuple[int, str, str] | Exception | Callable[[], tuple[int, str, str]]


@dataclass
class ScriptedShell:
    """Answers each exact command from a table (exit, stdout, stderr); records what was sent."""

    answers: dict[str, Answer]
    alias: str = "agent-core"
    sent: list[tuple[str, float | None]] = field(default_factory=list)

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        self.sent.append((command, timeout))
        answer = self.answers[command]
        if isinstance(answer, Exception):
            raise answer
        code, out, err = answer() if callable(answer) else answer
        return CommandResult(code, out, err, 0.01)


def enabled(answer: Answer) -> ScriptedShell:
    return ScriptedShell({"systemctl is-enabled tailscaled": answer})


def active(answer: Answer) -> ScriptedShell:
    return ScriptedShell({"systemctl is-active tailscaled": answer})


# ---------------------------------------------------------------- systemctl


def test_enabled_passes_on_enabled_exit_0() -> None:
    shell = enabled((0, "enabled\n", ""))
    r = check_tailscaled_enabled(shell)
    assert r.outcome is Outcome.PASSED, r.message
    assert r.target == "agent-core"
    assert r.evidence["ran"] == "systemctl is-enabled tailscaled"
    assert r.evidence["state"] == "enabled" and r.evidence["exit_code"] == 0
    assert shell.sent[0][1] is not None  # bounded


@pytest.mark.parametrize(
    ("answer", "state", "words"),
    [
        ((1, "disabled\n", ""), "disabled", "'disabled'"),
        ((0, "static\n", ""), "static", "'static'"),
        ((1, "unknown\n", ""), "unknown", "unknown"),
        (
            (1, "", "Failed to get unit file state for tailscaled.service: No such file or directory\n"),
            "not-found",
            "does not exist",
        ),
    ],
)
def test_enabled_fails_on_other_states(answer: tuple[int, str, str], state: str, words: str) -> None:
    r = check_tailscaled_enabled(enabled(answer))
    assert r.outcome is Outcome.FAILED
    assert r.classification is Classification.CHECK_FAILED
    assert r.evidence["state"] == state
    assert words in r.message


@pytest.mark.parametrize(
    ("answer", "classification", "words"),
    [
        ((0, "", ""), Classification.BAD_RESPONSE, "printed nothing"),
        (
            (127, "", "bash: line 1: systemctl: command not found\n"),
            Classification.CONFIG_DEFECT,
            "not available",
        ),
        ((1, "enabled\n", ""), Classification.BAD_RESPONSE, "contradictory"),
        (
            (1, "System has not been booted with systemd as init system (PID 1). Can't operate.\n", ""),
            Classification.BAD_RESPONSE,
            "no recognisable state",
        ),
    ],
)
def test_enabled_unclear_answers_are_errors(
    answer: tuple[int, str, str], classification: Classification, words: str
) -> None:
    r = check_tailscaled_enabled(enabled(answer))
    assert r.outcome is Outcome.ERROR
    assert r.classification is classification
    assert words in r.message
    assert "exit_code" in r.evidence and "stdout" in r.evidence


def test_enabled_transport_timeout_is_an_error() -> None:
    r = check_tailscaled_enabled(enabled(CommandTimeout("agent-core: no answer within 20s")))
    assert r.outcome is Outcome.ERROR and r.classification is Classification.TIMEOUT


def test_active_passes_and_fails() -> None:
    assert check_tailscaled_active(active((0, "active\n", ""))).outcome is Outcome.PASSED
    r = check_tailscaled_active(active((3, "inactive\n", "")))
    assert r.outcome is Outcome.FAILED and r.evidence["exit_code"] == 3
    assert "'inactive'" in r.message
    r = check_tailscaled_active(active((3, "unknown\n", "")))
    assert r.outcome is Outcome.FAILED and "unknown" in r.message


# ---------------------------------------------------------------- tailscale ping


def ping(answer: Answer) -> ScriptedShell:
    return ScriptedShell({PING: answer})


def test_ping_passes_on_a_direct_pong() -> None:
    shell = ping((0, "pong from dgx-spark (100.77.4.93) via 192.168.50.20:41641 in 3ms\n", ""))
    r = check_tailscale_ping(shell)
    assert r.outcome is Outcome.PASSED, r.message
    assert shell.sent == [(PING, 30.0)]
    assert r.evidence["direct"] is True and r.evidence["pongs_from_target"] == 1
    assert r.evidence["latency"] == "3ms"


def test_ping_passes_on_relayed_pongs_even_with_exit_1() -> None:
    out = "pong from dgx-spark (100.77.4.93, 41641) via DERP(fra) in 23ms\n" * 2
    r = check_tailscale_ping(ping((1, out, "direct connection not established\n")))
    assert r.outcome is Outcome.PASSED, r.message
    assert r.evidence["direct"] is False and r.evidence["pong_lines"] == 2
    assert "direct connection not established" in r.message


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ((0, "", ""), "printed nothing"),
        ((0, "hello from tailscale\n", ""), "exited 0 but printed no pong line"),
        ((124, "", ""), "timeout wrapper stopped"),
        ((1, 'ping "100.77.4.93" timed out\n' * 2, "no reply\n"), "no reply"),
        ((1, "", "failed to connect to local tailscaled; it doesn't appear to be running\n"), "not running"),
        ((0, "pong from other (100.64.9.9) via DERP(fra) in 5ms\n", ""), "not from 100.77.4.93"),
    ],
)
def test_ping_failures(answer: tuple[int, str, str], words: str) -> None:
    r = check_tailscale_ping(ping(answer))
    assert r.outcome is Outcome.FAILED, r.message
    assert words in r.message
    assert r.evidence["ran"] == PING


def test_ping_without_tailscale_is_an_error() -> None:
    r = check_tailscale_ping(
        ping((127, "", "timeout: failed to run command 'tailscale': No such file or directory"))
    )
    assert r.outcome is Outcome.ERROR and r.classification is Classification.CONFIG_DEFECT


def test_ping_refuses_a_non_address() -> None:
    with pytest.raises(ValueError):
        check_tailscale_ping(ping((0, "", "")), "100.77.4.93; rm -rf /")


# ---------------------------------------------------------------- SSH to the DGX


def test_dgx_ssh_pass_and_transport_errors() -> None:
    ok = check_dgx_ssh(lambda: CommandResult(0, "", "", 0.01))
    assert ok.outcome is Outcome.PASSED and ok.target == "dgx-spark"
    assert ok.evidence["host_key_checking"] == "strict"

    def unreachable() -> CommandResult:
        raise HostUnreachable("dgx-spark: connection timed out", evidence={"alias": "dgx-spark"})

    def mismatch() -> CommandResult:
        raise HostKeyMismatch("dgx-spark: host key mismatch")

    r = check_dgx_ssh(unreachable)
    assert r.outcome is Outcome.ERROR and r.classification is Classification.INFRA_UNREACHABLE
    assert r.evidence["alias"] == "dgx-spark" and "strict-host-key" in r.message
    r = check_dgx_ssh(mismatch)
    assert r.outcome is Outcome.ERROR and r.classification is Classification.HOST_KEY_MISMATCH
    r = check_dgx_ssh(lambda: CommandResult(1, "", "oops", 0.01))
    assert r.outcome is Outcome.FAILED


# ---------------------------------------------------------------- triage


def res(
    check: str, target: str, outcome: Outcome, cls: Classification | None = None, **ev: object
) -> CheckResult:
    return CheckResult(check=check, target=target, outcome=outcome, classification=cls, evidence=dict(ev))


def base_results(**overrides: CheckResult) -> dict[str, CheckResult]:
    results = {
        "c::ssh[dgx-spark]": res("dgx_ssh", "dgx-spark", Outcome.ERROR, Classification.INFRA_UNREACHABLE),
        "c::ssh[babylon]": res("dgx_ssh", "babylon", Outcome.PASSED),
        "c::node[dgx-spark]": res(
            "remote_node", "dgx-spark", Outcome.FAILED, Classification.INFRA_UNREACHABLE
        ),
        "c::enabled": res(
            "tailscaled_enabled", "agent-core", Outcome.FAILED, Classification.CHECK_FAILED, state="disabled"
        ),
        "c::active": res(
            "tailscaled_active", "agent-core", Outcome.FAILED, Classification.CHECK_FAILED, state="inactive"
        ),
        "c::ping": res("tailscale_ping", "agent-core", Outcome.FAILED, Classification.CHECK_FAILED),
        "c::health": res("fleet_health", "control-plane", Outcome.PASSED),
    }
    results.update(overrides)
    return results


def test_triage_only_dgx_unreachable_and_tailscaled_down_is_one_incident() -> None:
    incident = triage_dgx(base_results())
    assert incident is not None
    assert incident.outcome is Outcome.FAILED
    assert incident.classification is Classification.INFRASTRUCTURE
    assert incident.cause == DGX_CAUSE == "dgx-routing"
    assert incident.recommendation == DGX_RECOVERY
    assert incident.recommendation == (
        "systemctl enable --now tailscaled, then a strict-host-key SSH and a silent sentinel run"
    )
    assert "tunnel" not in incident.recommendation
    assert "never recreate an old-agent tunnel" in incident.message
    assert incident.evidence["tailscaled"] == {"is_enabled": "disabled", "is_active": "inactive"}
    assert set(incident.evidence["supporting_checks"]) >= {
        "c::ssh[dgx-spark]",
        "c::node[dgx-spark]",
        "c::enabled",
    }


def test_triage_also_fires_when_only_inactive() -> None:
    results = base_results(
        **{"c::enabled": res("tailscaled_enabled", "agent-core", Outcome.PASSED, state="enabled")}
    )
    incident = triage_dgx(results)
    assert incident is not None and "not active (inactive)" in incident.message


@pytest.mark.parametrize(
    "override",
    [
        # another host is unreachable too: not "only the DGX"
        {"c::ssh[babylon]": res("dgx_ssh", "babylon", Outcome.ERROR, Classification.INFRA_UNREACHABLE)},
        # we could not tell tailscaled's state: no incident claimed
        {
            "c::enabled": res("tailscaled_enabled", "agent-core", Outcome.ERROR, Classification.TIMEOUT),
            "c::active": res("tailscaled_active", "agent-core", Outcome.ERROR, Classification.TIMEOUT),
        },
        # the DGX is reachable
        {
            "c::ssh[dgx-spark]": res("dgx_ssh", "dgx-spark", Outcome.PASSED),
            "c::node[dgx-spark]": res("remote_node", "dgx-spark", Outcome.PASSED),
        },
    ],
)
def test_triage_does_not_fire(override: dict[str, CheckResult]) -> None:
    assert triage_dgx(base_results(**override)) is None


def test_triage_host_key_mismatch_is_not_a_routing_incident() -> None:
    results = base_results(
        **{
            "c::ssh[dgx-spark]": res("dgx_ssh", "dgx-spark", Outcome.ERROR, Classification.HOST_KEY_MISMATCH),
            "c::node[dgx-spark]": res("remote_node", "dgx-spark", Outcome.PASSED),
        }
    )
    assert triage_dgx(results) is None


# ---------------------------------------------------------------- remediation


class FakeSystemd:
    """A stateful systemctl for one unit; ``enable --now`` changes what is-enabled/is-active print."""

    def __init__(
        self,
        enabled: str = "disabled",
        active: str = "inactive",
        deny: bool = False,
        uid: int = 0,
        sudo_refused: bool = False,
    ) -> None:
        self.enabled, self.active, self.deny = enabled, active, deny
        self.sudo_refused = sudo_refused
        self.shell = ScriptedShell(
            {
                "id -u": (0, f"{uid}\n", ""),
                f"sudo -n {REMEDIATION_COMMAND}": self._sudo,
                "systemctl is-enabled tailscaled": lambda: (
                    0 if self.enabled == "enabled" else 1,
                    self.enabled + "\n",
                    "",
                ),
                "systemctl is-active tailscaled": lambda: (
                    0 if self.active == "active" else 3,
                    self.active + "\n",
                    "",
                ),
                REMEDIATION_COMMAND: self._enable_now,
            }
        )

    def _sudo(self) -> tuple[int, str, str]:
        if self.sudo_refused:
            return 1, "", "sudo: a password is required\n"
        return self._enable_now()

    def _enable_now(self) -> tuple[int, str, str]:
        if self.deny:
            return 1, "", "Failed to enable unit: Access denied\n"
        self.enabled, self.active = "enabled", "active"
        return 0, "", "Created symlink ...\n"


def test_remediation_enables_and_reports_before_and_after() -> None:
    fake = FakeSystemd()
    r = remediate_tailscaled(fake.shell)
    assert r.outcome is Outcome.PASSED, r.message
    assert r.evidence["before"] == {
        "is_enabled": "disabled",
        "is_enabled_exit": 1,
        "is_active": "inactive",
        "is_active_exit": 3,
    }
    assert r.evidence["command"]["ran"] == "systemctl enable --now tailscaled"
    assert r.evidence["command"]["exit_code"] == 0
    assert r.evidence["after"]["is_enabled"] == "enabled" and r.evidence["after"]["is_active"] == "active"
    assert [c for c, _ in fake.shell.sent].count(REMEDIATION_COMMAND) == 1
    assert all(t is not None for _, t in fake.shell.sent)


def test_remediation_does_nothing_when_already_up() -> None:
    fake = FakeSystemd("enabled", "active")
    r = remediate_tailscaled(fake.shell)
    assert r.outcome is Outcome.PASSED and r.evidence["command_run"] is False
    assert REMEDIATION_COMMAND not in [c for c, _ in fake.shell.sent]


def test_remediation_failure_is_reported_not_retried() -> None:
    fake = FakeSystemd(deny=True)
    r = remediate_tailscaled(fake.shell)
    assert r.outcome is Outcome.FAILED
    assert "Access denied" in r.evidence["command"]["stderr"]
    assert r.evidence["after"]["is_enabled"] == "disabled"
    assert r.recommendation is not None and "old-agent tunnel" in r.recommendation


def test_remediation_runs_nothing_when_state_is_unreadable() -> None:
    shell = ScriptedShell(
        {
            "systemctl is-enabled tailscaled": (0, "", ""),
            "systemctl is-active tailscaled": (3, "inactive\n", ""),
        }
    )
    r = remediate_tailscaled(shell)
    assert r.outcome is Outcome.ERROR and r.evidence["command_run"] is False
    assert REMEDIATION_COMMAND not in [c for c, _ in shell.sent]


def test_remediation_uses_sudo_n_when_the_ssh_user_is_not_root() -> None:
    fake = FakeSystemd(uid=1000)
    r = remediate_tailscaled(fake.shell)
    assert r.outcome is Outcome.PASSED, r.message
    assert r.evidence["command"]["ran"] == f"sudo -n {REMEDIATION_COMMAND}"
    assert "uid 1000" in r.evidence["privilege"]
    assert "is-enabled disabled → enabled" in r.message and "is-active inactive → active" in r.message


def test_a_refused_sudo_is_a_clear_error_and_changes_nothing() -> None:
    fake = FakeSystemd(uid=1000, sudo_refused=True)
    r = remediate_tailscaled(fake.shell)
    assert r.outcome is Outcome.ERROR and r.classification is Classification.CONFIG_DEFECT
    assert "sudo refused" in r.message and "nothing was changed" in r.message
    assert (fake.enabled, fake.active) == ("disabled", "inactive")
    assert r.recommendation is not None and "passwordless sudo" in r.recommendation


def test_remediation_sudo_never_runs_the_bare_command() -> None:
    fake = FakeSystemd(uid=1000)
    r = remediate_tailscaled(fake.shell, sudo="never")
    assert r.evidence["command"]["ran"] == REMEDIATION_COMMAND and "id -u" not in [
        c for c, _ in fake.shell.sent
    ]


def test_after_remediation_the_incident_reports_what_ran_and_never_recommends_it_again() -> None:
    incident = triage_dgx(base_results())
    assert incident is not None
    fix = remediate_tailscaled(FakeSystemd().shell)
    recheck = {
        "c::enabled": res("tailscaled_enabled", "agent-core", Outcome.PASSED),
        "c::active": res("tailscaled_active", "agent-core", Outcome.PASSED),
        "c::ping": res("tailscale_ping", "agent-core", Outcome.PASSED),
        "c::ssh": res("dgx_ssh", "dgx-spark", Outcome.PASSED),
    }
    done = report_remediation(incident, fix, recheck)
    assert done.recommendation is not None and "systemctl enable" not in done.recommendation
    assert "Remediated" in done.message and "→" in done.message and "Re-check" in done.message
    assert done.evidence["remediation_outcome"] == "passed" and len(done.evidence["recheck"]) == 4
    still_down = {
        **recheck,
        "c::ssh": res("dgx_ssh", "dgx-spark", Outcome.ERROR, Classification.INFRA_UNREACHABLE),
    }
    path = report_remediation(incident, fix, still_down)
    assert path.recommendation is not None and "not tailscaled, keys or topology" in path.recommendation
    assert "systemctl enable" not in path.recommendation


@pytest.mark.parametrize("unreachable", [True, False])
def test_tailscaled_fine_but_no_pong_points_at_the_dgx_and_the_path(unreachable: bool) -> None:
    fine = {
        "c::enabled": res("tailscaled_enabled", "agent-core", Outcome.PASSED, state="enabled"),
        "c::active": res("tailscaled_active", "agent-core", Outcome.PASSED, state="active"),
    }
    if not unreachable:
        fine |= {
            "c::ssh[dgx-spark]": res("dgx_ssh", "dgx-spark", Outcome.PASSED),
            "c::node[dgx-spark]": res("remote_node", "dgx-spark", Outcome.PASSED),
        }
    verdict = triage_dgx(base_results(**fine))
    assert verdict is not None and verdict.outcome is Outcome.FAILED
    assert verdict.cause == DGX_PATH_CAUSE and verdict.classification is Classification.INFRASTRUCTURE
    assert verdict.recommendation is not None
    assert "not tailscaled, keys or topology" in verdict.recommendation
    assert "systemctl" not in verdict.recommendation and "enabled and active" in verdict.message


def test_all_healthy_is_no_verdict() -> None:
    healthy = {
        k: r.model_copy(update={"outcome": Outcome.PASSED, "classification": None})
        for k, r in base_results().items()
    }
    assert triage_dgx(healthy) is None
