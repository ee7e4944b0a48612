"""DGX remediation, only on request (``--sbx-remediate``): the one recovery command
(``systemctl enable --now tailscaled`` on agent-core), its report, and closing the loop with the re-check.
The checks it follows are in :mod:`sbxcheck.checks.dgx`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from sbxcheck.checks.base import RemoteShell, run_check, trim
from sbxcheck.checks.dgx import (
    CHECK_PING,
    CHECK_REMEDIATE,
    CHECK_SSH,
    DGX_PATH_NEXT,
    NO_TUNNEL,
    REMEDIATION_COMMAND,
    UnitAnswer,
    error_line,
    probe_unit,
)
from sbxcheck.results import CheckResult, Classification, Outcome

#: After ``systemctl enable --now tailscaled`` the DGX's route takes a few seconds to come back.
ROUTE_SETTLE_S = 15.0


ROUTE_SETTLE_STEP_S = 1.0


def route_still_settling(recheck: Mapping[str, CheckResult]) -> bool:
    """The re-check after the fix shows tailscaled up but strict SSH to the DGX not (yet) through:
    worth another look within :data:`ROUTE_SETTLE_S`. Any other failure is final."""
    others = [r for r in recheck.values() if r.check != CHECK_SSH]
    ssh = [r for r in recheck.values() if r.check == CHECK_SSH]
    return (
        bool(ssh)
        and all(r.outcome is Outcome.PASSED for r in others)
        and any(r.outcome is not Outcome.PASSED for r in ssh)
    )


def close_dgx_loop(
    remediated: CheckResult,
    fix: CheckResult,
    recheck: Mapping[str, CheckResult],
    sentinel: CheckResult | None,
) -> CheckResult:
    """After ``--sbx-remediate``: the incident is ``resolved`` only when the command ran and worked, the
    re-check (strict-host-key SSH to the DGX included) passed, and then the sentinel ran silent.

    Otherwise it stays open (failed) with what is still wrong; ``remediated`` is
    :func:`report_remediation`'s result.
    """
    bad = {k: r for k, r in recheck.items() if r.outcome is not Outcome.PASSED}
    ssh = [r for r in recheck.values() if r.check == CHECK_SSH]
    steps: dict[str, Any] = {
        "remediation": fix.outcome.value,
        "strict_ssh": ssh[0].outcome.value if ssh else "not run",
        "sentinel": sentinel.outcome.value if sentinel is not None else "not run",
    }
    evidence = {**remediated.evidence, "closed_loop": steps}
    if sentinel is not None:
        evidence["sentinel"] = {"message": sentinel.message, **sentinel.evidence}
    ran = isinstance(fix.evidence.get("command"), dict)
    if fix.outcome is Outcome.PASSED and ran and recheck and not bad and ssh and sentinel is not None:
        if sentinel.outcome is Outcome.PASSED:
            evidence["incident"] = "resolved"
            return remediated.model_copy(
                update={
                    "outcome": Outcome.PASSED,
                    "message": f"DGX routing incident resolved: {fix.message}; strict-host-key SSH to "
                    f"{ssh[0].target} ok; {sentinel.message}",
                    "evidence": evidence,
                    "recommendation": None,
                }
            )
        evidence["incident"] = "open"
        still = sentinel.evidence.get("unreachable_nodes") or []
        return remediated.model_copy(
            update={
                "message": f"{_sentence(remediated.message)} Still open: the sentinel is not silent after the fix "
                f"({sentinel.message}). {NO_TUNNEL}",
                "evidence": evidence,
                "recommendation": (
                    f"tailscaled is up and SSH works, yet the sentinel still reports {', '.join(still)}: "
                    "read its output in the evidence (a stale sentinel state, or the sentinel host's own view); "
                    "do not re-run the fix"
                    if still
                    else "read the sentinel's output in the evidence; do not re-run the fix"
                ),
            }
        )
    evidence["incident"] = "open"
    why = []
    if fix.outcome is not Outcome.PASSED:
        why.append(f"remediation {fix.outcome.value}")
    why.extend(f"{r.check} {r.outcome.value}" for r in bad.values())
    if sentinel is None and fix.outcome is Outcome.PASSED:
        why.append("sentinel not run (SSH to the DGX must pass first)")
    return remediated.model_copy(
        update={
            "message": f"{_sentence(remediated.message)} Still open: {', '.join(why) or 'not re-checked'}. {NO_TUNNEL}",
            "evidence": evidence,
        }
    )


def _sentence(text: str) -> str:
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


SudoMode = Literal["auto", "always", "never"]


_SUDO_REFUSED_RE: Final = re.compile(
    r"(?i)sudo: (?:a password is required|a terminal is required|.*not in the sudoers|.*may not run sudo|"
    r"sorry, user .* is not allowed|.*command not found)|sudo: not found|not allowed to execute"
)


def remediation_command(shell: RemoteShell, sudo: SudoMode, timeout_s: float) -> tuple[str | None, str]:
    """``(command, why)``: the command to run (``sudo -n`` unless the SSH user is root), or None and why not."""
    if sudo == "never":
        return REMEDIATION_COMMAND, "as the SSH user ([dgx] remediation_sudo = never)"
    if sudo == "always":
        return f"sudo -n {REMEDIATION_COMMAND}", "with sudo -n ([dgx] remediation_sudo = always)"
    res = shell.run("id -u", timeout=timeout_s)
    uid = res.stdout.strip()
    if res.exit_code != 0 or not uid.isdigit():
        return (
            None,
            f"cannot tell whether the SSH user is root (`id -u` exit {res.exit_code}: {trim(uid, 40)!r})",
        )
    if uid == "0":
        return REMEDIATION_COMMAND, "as root (uid 0)"
    return f"sudo -n {REMEDIATION_COMMAND}", f"with sudo -n (the SSH user is uid {uid}, not root)"


def remediate_tailscaled(
    shell: RemoteShell, *, timeout_s: float = 60.0, sudo: SudoMode = "auto"
) -> CheckResult:
    """The only remediation: ``systemctl enable --now tailscaled`` on agent-core, state before and after.

    Run it only when the person running the suite passed ``--sbx-remediate``. It acts only when
    the state before is a clear "not enabled" or "not active"; an unreadable state is reported
    and nothing is run. Not root: ``sudo -n`` (never a password prompt); a refused sudo is an
    ``error`` that says nothing changed. It never touches keys, topology or tunnels.
    """
    host = shell.alias

    def body() -> CheckResult:
        before = _states(shell, timeout_s)
        ev: dict[str, Any] = {"host": host, "before": _state_evidence(before)}
        unreadable = [a for a in before if a.unreadable is not None]
        if unreadable:
            ev["command_run"] = False
            first = unreadable[0]
            return CheckResult.errored(
                CHECK_REMEDIATE,
                host,
                f"{host}: cannot read tailscaled's state ({first.unreadable}); nothing was run",
                first.unreadable_class,
                ev,
            )
        if all(a.good for a in before):
            ev["command_run"] = False
            return CheckResult.passed(
                CHECK_REMEDIATE, host, f"{host}: tailscaled already enabled and active; nothing was run", ev
            )
        command, how = remediation_command(shell, sudo, timeout_s)
        ev["privilege"] = how
        if command is None:
            ev["command_run"] = False
            return CheckResult.errored(
                CHECK_REMEDIATE,
                host,
                f"{host}: {how}; nothing was run",
                Classification.BAD_RESPONSE,
                ev,
                recommendation="set [dgx] remediation_sudo to always or never, or run "
                f"`{REMEDIATION_COMMAND}` on {host} by hand",
                commands=[REMEDIATION_COMMAND],
            )
        res = shell.run(command, timeout=timeout_s)
        ev["command_run"] = True
        ev["command"] = {
            "ran": command,
            "exit_code": res.exit_code,
            "stdout": trim(res.stdout, 500),
            "stderr": trim(res.stderr, 500),
        }
        if command.startswith("sudo ") and res.exit_code != 0 and _SUDO_REFUSED_RE.search(res.stderr):
            return CheckResult.errored(
                CHECK_REMEDIATE,
                host,
                f"{host}: sudo refused `{command}` ({error_line(res.stderr)}); nothing was changed",
                Classification.CONFIG_DEFECT,
                ev,
                recommendation=f"give the SSH user on {host} passwordless sudo for `{REMEDIATION_COMMAND}` "
                "(or set [dgx] remediation_sudo), or run it there by hand",
                commands=[REMEDIATION_COMMAND],
            )
        after = _states(shell, timeout_s)
        ev["after"] = _state_evidence(after)
        change = transition(before, after)
        ev["before_after"] = change
        if all(a.good for a in after):
            return CheckResult.passed(
                CHECK_REMEDIATE, host, f"{host}: ran `{command}` (exit {res.exit_code}): {change}", ev
            )
        return CheckResult.failed(
            CHECK_REMEDIATE,
            host,
            f"{host}: ran `{command}` (exit {res.exit_code}); tailscaled is still not up: {change}",
            ev,
            recommendation="read the command's output in the evidence and fix tailscaled by hand; do not "
            "change keys or topology, and never recreate an old-agent tunnel",
        )

    return run_check(CHECK_REMEDIATE, host, body)


def transition(before: tuple[UnitAnswer, ...], after: tuple[UnitAnswer, ...]) -> str:
    """``is-enabled disabled → enabled, is-active inactive → active``."""
    return ", ".join(f"{b.verb} {b.state} → {a.state}" for b, a in zip(before, after, strict=True))


def report_remediation(
    incident: CheckResult, fix: CheckResult, recheck: Mapping[str, CheckResult]
) -> CheckResult:
    """The incident after ``--sbx-remediate``: what ran, before → after, the re-check, and a next step
    that never again recommends the command that already ran."""
    ran = (
        fix.evidence.get("command", {}).get("ran") if isinstance(fix.evidence.get("command"), dict) else None
    )
    rechecked = {key: f"{r.outcome.value}: {r.message}" for key, r in sorted(recheck.items())}
    evidence = {
        **incident.evidence,
        "remediation": fix.evidence,
        "remediation_outcome": fix.outcome.value,
        "recheck": rechecked,
    }
    bad = [r for r in recheck.values() if r.outcome is not Outcome.PASSED]
    if fix.outcome is not Outcome.PASSED:
        message = f"{incident.message} Remediation did not succeed: {fix.message}"
        recommendation = fix.recommendation or "see the remediation evidence; nothing else was changed"
    elif not ran:
        message = f"{incident.message} Remediation: {fix.message}"
        recommendation = "re-run the triage; tailscaled was already up when remediation looked"
    else:
        states = " ".join(f"{r.check} {r.outcome.value};" for r in recheck.values()).rstrip(";")
        found = incident.message.split(" Fix routing")[0]
        message = f"{found} Remediated: {fix.message}. Re-check: {states or 'none'}."
        if not bad:
            recommendation = "nothing more to run: confirm with a silent sentinel run"
        elif all(r.check in (CHECK_PING, CHECK_SSH) for r in bad):
            recommendation = f"tailscaled is up now, yet the DGX still does not answer: {DGX_PATH_NEXT}"
        else:
            recommendation = "tailscaled is still not healthy after remediation: read the re-check evidence"
    return incident.model_copy(
        update={"message": message, "evidence": evidence, "recommendation": recommendation}
    )


def _states(shell: RemoteShell, timeout_s: float) -> tuple[UnitAnswer, UnitAnswer]:
    return (
        probe_unit(shell, "is-enabled", timeout_s=timeout_s),
        probe_unit(shell, "is-active", timeout_s=timeout_s),
    )


def _state_evidence(answers: tuple[UnitAnswer, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in answers:
        key = a.verb.replace("-", "_")
        out[key] = a.state if a.unreadable is None else f"unreadable: {a.unreadable}"
        out[f"{key}_exit"] = a.exit_code
    return out
