"""DGX routing checks (specs/sandboxed-sh.md, 8.13): tailscaled on agent-core, the tailnet path, SSH to the DGX.

When disk-sentinel reports only ``dgx-spark`` unreachable, the runbook checks three things on
**agent-core** before anyone touches keys or topology: ``systemctl is-enabled tailscaled``,
``systemctl is-active tailscaled`` and ``tailscale ping -c 2 100.77.4.93``. Each is one check here,
judged on its printed answer *and* its exit code. :func:`triage_dgx` turns the pattern "only the
DGX is unreachable and tailscaled is down on agent-core" into one ``infrastructure`` incident;
:func:`~sbxcheck.checks.dgx_remediate.remediate_tailscaled` is the only remediation sbxcheck ever
performs, and only when the person running the suite asked for it (``--sbx-remediate``). Nothing
here recreates a tunnel: old-agent is compute-only.
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sbxcheck.checks.base import RemoteShell, run_check, trim
from sbxcheck.errors import SbxError
from sbxcheck.redact import clip
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.transports.ssh import CommandResult

AGENT_CORE: Final = "agent-core"
DGX_HOST: Final = "dgx-spark"
DGX_TAILSCALE_IP: Final = "100.77.4.93"
TAILSCALED: Final = "tailscaled"
DGX_CAUSE: Final = "dgx-routing"
DGX_PATH_CAUSE: Final = "dgx-path"
DGX_PATH_NEXT: Final = (
    "investigate the DGX host itself (is it up? its own tailscaled?) and the network path between "
    "agent-core and the DGX; tailscaled on agent-core is fine, so not tailscaled, keys or topology"
)
DGX_RECOVERY: Final = (
    "systemctl enable --now tailscaled, then a strict-host-key SSH and a silent sentinel run"
)
REMEDIATION_COMMAND: Final = "systemctl enable --now tailscaled"

CHECK_ENABLED: Final = "tailscaled_enabled"
CHECK_ACTIVE: Final = "tailscaled_active"
CHECK_PING: Final = "tailscale_ping"
CHECK_SSH: Final = "dgx_ssh"
CHECK_TRIAGE: Final = "dgx_routing_triage"
CHECK_REMEDIATE: Final = "tailscaled_remediation"
CHECK_SENTINEL: Final = "fleet_sentinel"
DGX_FLEET_CAUSE: Final = "fleet-outage"
NO_TUNNEL: Final = "Do not recreate an old-agent tunnel: old-agent is compute-only."
FLEET_OUTAGE_NEXT: Final = (
    "several nodes are unreachable at once: look at what they share (the tailnet/DERP, the network "
    "path, the sentinel host itself, the control plane) before any one node; not tailscaled on "
    "agent-core alone, and not keys or topology"
)

#: Results with these classifications (failed or error) say "this target could not be reached".
UNREACHABLE: Final = frozenset({Classification.INFRA_UNREACHABLE, Classification.TIMEOUT})

# Every answer systemd documents for is-enabled / is-active; anything else is not an answer.
_ENABLED_STATES: Final = frozenset(
    {
        "enabled",
        "enabled-runtime",
        "linked",
        "linked-runtime",
        "alias",
        "masked",
        "masked-runtime",
        "static",
        "indirect",
        "disabled",
        "generated",
        "transient",
        "bad",
        "not-found",
        "unknown",
    }
)
_ACTIVE_STATES: Final = frozenset(
    {
        "active",
        "reloading",
        "inactive",
        "failed",
        "activating",
        "deactivating",
        "maintenance",
        "refreshing",
        "unknown",
    }
)
_VERBS: Final[dict[str, tuple[str, frozenset[str]]]] = {
    "is-enabled": ("enabled", _ENABLED_STATES),
    "is-active": ("active", _ACTIVE_STATES),
}
_UNIT_MISSING_RE: Final = re.compile(r"(?i)no such file|not[- ]found|does not exist|could not be found")
# `pong from <name> (<ip>[, <peerapi port>]) via <endpoint | DERP(xyz)> in <latency>` (cmd/tailscale ping.go)
_PONG_RE: Final = re.compile(
    r"^pong from (?P<name>\S+) \((?P<ip>[0-9A-Fa-f:.]+)(?:, \d+)?\) via (?P<via>.+?) in (?P<latency>\S+)$"
)
_TIMEOUT_EXIT: Final = 124
_NOT_FOUND_EXITS: Final = (126, 127)
_GRACE_S: Final = 10.0


# ---------------------------------------------------------------- systemctl


@dataclass(frozen=True)
class UnitAnswer:
    """What ``systemctl <verb> tailscaled`` printed, and whether that is an answer at all.

    ``state`` is the first word systemd printed (``not-found`` for a missing unit file);
    ``unreadable`` says why the output is no answer (command missing, nothing printed, noise).
    """

    verb: str
    ran: str
    exit_code: int
    state: str | None
    stdout: str
    stderr: str
    unreadable: str | None = None
    unreadable_class: Classification = Classification.BAD_RESPONSE

    @property
    def expected(self) -> str:
        return _VERBS[self.verb][0]

    @property
    def good(self) -> bool:
        """The expected state with exit 0 (is-enabled: ``enabled``; is-active: ``active``)."""
        return self.unreadable is None and self.state == self.expected and self.exit_code == 0

    def evidence(self, host: str) -> dict[str, Any]:
        return {
            "host": host,
            "ran": self.ran,
            "exit_code": self.exit_code,
            "state": self.state,
            "stdout": trim(self.stdout, 500),
            "stderr": trim(self.stderr, 500),
        }


def probe_unit(
    shell: RemoteShell, verb: str, *, unit: str = TAILSCALED, timeout_s: float = 20.0
) -> UnitAnswer:
    """Run ``systemctl <verb> <unit>`` (is-enabled or is-active) and read its answer."""
    if verb not in _VERBS:
        raise ValueError(f"verb must be one of {sorted(_VERBS)}")
    ran = f"systemctl {verb} {unit}"
    res = shell.run(ran, timeout=timeout_s)
    out, err = res.stdout.strip(), res.stderr.strip()
    states = _VERBS[verb][1]

    def answer(
        state: str | None, unreadable: str | None = None, cls: Classification | None = None
    ) -> UnitAnswer:
        return UnitAnswer(
            verb,
            ran,
            res.exit_code,
            state,
            res.stdout,
            res.stderr,
            unreadable,
            cls or Classification.BAD_RESPONSE,
        )

    if res.exit_code in _NOT_FOUND_EXITS:
        return answer(None, "systemctl is not available (command not found)", Classification.CONFIG_DEFECT)
    first = out.splitlines()[0].strip() if out else ""
    if first in states:
        return answer(first)
    if not first and _UNIT_MISSING_RE.search(err):
        return answer("not-found")  # "Failed to get unit file state for tailscaled.service: No such file ..."
    if not out and not err:
        return answer(None, f"`{ran}` printed nothing (exit {res.exit_code})")
    return answer(None, f"`{ran}` printed no recognisable state (exit {res.exit_code})")


def _judge_unit(check: str, host: str, ans: UnitAnswer) -> CheckResult:
    ev = ans.evidence(host)
    if ans.unreadable is not None:
        return CheckResult.errored(check, host, f"{host}: {ans.unreadable}", ans.unreadable_class, ev)
    if ans.state == ans.expected:
        if ans.exit_code == 0:
            return CheckResult.passed(check, host, f"{host}: `{ans.ran}` printed {ans.state!r} (exit 0)", ev)
        return CheckResult.errored(
            check,
            host,
            f"{host}: `{ans.ran}` printed {ans.state!r} but exited {ans.exit_code}: contradictory answer",
            Classification.BAD_RESPONSE,
            ev,
        )
    if ans.state == "unknown":
        why = "systemctl answers 'unknown': the tailscaled unit is not loaded (not installed?)"
    elif ans.state == "not-found":
        why = "the tailscaled unit file does not exist"
    else:
        why = f"tailscaled is {ans.state!r}, expected {ans.expected!r}"
    return CheckResult.failed(check, host, f"{host}: {why} (`{ans.ran}` exit {ans.exit_code})", ev)


def check_tailscaled_enabled(shell: RemoteShell, *, timeout_s: float = 20.0) -> CheckResult:
    """``systemctl is-enabled tailscaled`` prints ``enabled`` and exits 0 on agent-core."""
    return run_check(
        CHECK_ENABLED,
        shell.alias,
        lambda: _judge_unit(CHECK_ENABLED, shell.alias, probe_unit(shell, "is-enabled", timeout_s=timeout_s)),
    )


def check_tailscaled_active(shell: RemoteShell, *, timeout_s: float = 20.0) -> CheckResult:
    """``systemctl is-active tailscaled`` prints ``active`` and exits 0 on agent-core."""
    return run_check(
        CHECK_ACTIVE,
        shell.alias,
        lambda: _judge_unit(CHECK_ACTIVE, shell.alias, probe_unit(shell, "is-active", timeout_s=timeout_s)),
    )


# ---------------------------------------------------------------- tailscale ping


def check_tailscale_ping(
    shell: RemoteShell, dgx_ip: str = DGX_TAILSCALE_IP, count: int = 2, *, timeout_s: float = 20.0
) -> CheckResult:
    """``timeout 20 tailscale ping -c 2 <dgx_ip>`` on agent-core prints a pong from ``dgx_ip``.

    A pong relayed via DERP passes (the DGX answers; tailscale then exits 1 with "direct
    connection not established"). Exit 0 without a pong line, no output, "no reply", or the
    ``timeout`` wrapper firing (exit 124) fail.
    """
    ip = str(ipaddress.ip_address(dgx_ip))  # ValueError for anything that is not an address
    if count < 1:
        raise ValueError("count must be >= 1")
    secs = max(1, round(timeout_s))
    ran = f"timeout {secs} tailscale ping -c {count} {ip}"
    host = shell.alias

    def body() -> CheckResult:
        res = shell.run(ran, timeout=secs + _GRACE_S)
        return _judge_ping(host, ip, secs, ran, res)

    return run_check(CHECK_PING, host, body)


def _judge_ping(host: str, ip: str, secs: int, ran: str, res: CommandResult) -> CheckResult:
    lines = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    pongs = [m for m in map(_PONG_RE.match, lines) if m is not None]
    ours = [m for m in pongs if m.group("ip") == ip]
    ev: dict[str, Any] = {
        "host": host,
        "ran": ran,
        "exit_code": res.exit_code,
        "pong_lines": len(pongs),
        "pongs_from_target": len(ours),
        "stdout": trim(res.stdout, 800),
        "stderr": trim(res.stderr, 500),
    }
    check = CHECK_PING
    if ours:
        first = ours[0]
        direct = not first.group("via").startswith("DERP(")
        ev.update(
            peer=first.group("name"), via=first.group("via"), latency=first.group("latency"), direct=direct
        )
        note = (
            "" if res.exit_code == 0 else f"; exit {res.exit_code} ({error_line(res.stderr) or 'no message'})"
        )
        return CheckResult.passed(
            check,
            host,
            f"{host} reaches {ip}: pong from {first.group('name')} via {first.group('via')} "
            f"in {first.group('latency')}{note}",
            ev,
        )
    if res.exit_code in _NOT_FOUND_EXITS:
        return CheckResult.errored(
            check,
            host,
            f"{host}: tailscale is not available (exit {res.exit_code})",
            Classification.CONFIG_DEFECT,
            ev,
        )
    if pongs:
        why = f"pong lines came from {sorted({m.group('ip') for m in pongs})}, not from {ip}"
    elif res.exit_code == _TIMEOUT_EXIT:
        why = f"no pong within {secs}s: the timeout wrapper stopped tailscale ping (exit 124)"
    elif not lines and not res.stderr.strip():
        why = f"tailscale ping printed nothing (exit {res.exit_code})"
    elif res.exit_code == 0:
        why = "tailscale ping exited 0 but printed no pong line"
    elif (
        "doesn't appear to be running" in res.stderr or "failed to connect to local tailscaled" in res.stderr
    ):
        why = f"tailscaled is not running on {host}"
    else:
        why = f"no pong (exit {res.exit_code}: {error_line(res.stderr) or error_line(res.stdout)})"
    return CheckResult.failed(check, host, f"{host} -> {ip}: {why}", ev)


def error_line(text: str) -> str:
    """The last non-empty line (where tailscale prints its error), capped."""
    stripped = text.strip()
    return clip(stripped.splitlines()[-1].strip(), 200) if stripped else ""


# ---------------------------------------------------------------- SSH to the DGX


def check_dgx_ssh(probe: Callable[[], CommandResult], *, target: str = DGX_HOST) -> CheckResult:
    """SSH with strict host-key checking reaches ``target`` and ``true`` exits 0 there.

    ``probe`` opens the connection and runs ``true`` (e.g. ``lambda: pool.host("dgx-spark").run("true",
    timeout=20)``; sbxcheck's SSH transport never accepts an unknown or changed host key). A
    transport failure becomes an ``error`` with its own classification (``infra_unreachable``,
    ``host_key_mismatch``, ``host_key_unknown``, ``auth_failed``, ``timeout``).
    """
    started = time.monotonic()
    ev: dict[str, Any] = {"host": target, "ran": "true", "host_key_checking": "strict"}
    try:
        res = probe()
    except SbxError as exc:
        result = CheckResult.errored(
            CHECK_SSH,
            target,
            f"strict-host-key SSH to {target} failed: {exc.message}",
            exc.classification,
            {**ev, **exc.evidence},
        )
    else:
        ev.update(exit_code=res.exit_code, stderr=trim(res.stderr, 500))
        if res.exit_code == 0:
            result = CheckResult.passed(
                CHECK_SSH, target, f"strict-host-key SSH to {target} ran `true` (exit 0)", ev
            )
        else:
            result = CheckResult.failed(
                CHECK_SSH, target, f"SSH to {target} connected but `true` exited {res.exit_code}", ev
            )
    return result.model_copy(update={"duration_s": round(time.monotonic() - started, 3)})


# ---------------------------------------------------------------- triage


def triage_dgx(
    results: Mapping[str, CheckResult],
    *,
    dgx_targets: frozenset[str] = frozenset({DGX_HOST}),
    agent_core: str = AGENT_CORE,
    fleet_unreachable: Sequence[str] | None = None,
) -> CheckResult | None:
    """The DGX routing incident, or None: only the DGX is unreachable and tailscaled is down on agent-core.

    ``results`` maps an item id (the pytest nodeid) to its result. "Unreachable" means a failed or
    errored result classified ``infra_unreachable`` or ``timeout`` (SSH probes, remote-node items);
    every such result must target one of ``dgx_targets``. "tailscaled is down" means the
    is-enabled or is-active check *failed* on ``agent_core`` (an error there means we could not
    tell, so there is no incident). The recommendation never involves an old-agent tunnel.

    ``fleet_unreachable`` is the fleet's own view (the sentinel's report, or the offline remote
    nodes): when it names any node besides the DGX, the rule does not apply — that is a wider
    outage (:func:`fleet_outage`), never a DGX routing incident, and no tailscaled advice.
    """
    if fleet_unreachable is not None and set(fleet_unreachable) - dgx_targets:
        return fleet_outage(results, fleet_unreachable, dgx_targets=dgx_targets, agent_core=agent_core)
    routing_checks = {CHECK_ENABLED, CHECK_ACTIVE, CHECK_PING, CHECK_TRIAGE, CHECK_REMEDIATE}
    unreachable = {
        key: r
        for key, r in results.items()
        if r.check not in routing_checks
        and r.outcome in (Outcome.FAILED, Outcome.ERROR)
        and r.classification in UNREACHABLE
    }
    if any(r.target not in dgx_targets for r in unreachable.values()):
        return None
    if not unreachable:
        daemon_ok = {
            key: r
            for key, r in results.items()
            if r.check in (CHECK_ENABLED, CHECK_ACTIVE) and r.target == agent_core
        }
        ping_only = {k: r for k, r in results.items() if r.check == CHECK_PING and r.target == agent_core}
        return _path_verdict(results, {}, daemon_ok, ping_only, agent_core)
    daemon = {
        key: r
        for key, r in results.items()
        if r.check in (CHECK_ENABLED, CHECK_ACTIVE) and r.target == agent_core
    }
    down = {key: r for key, r in daemon.items() if r.outcome is Outcome.FAILED}
    ping = {key: r for key, r in results.items() if r.check == CHECK_PING and r.target == agent_core}
    if not down:
        return _path_verdict(results, unreachable, daemon, ping, agent_core)
    states = {r.check: r.evidence.get("state") for r in daemon.values()}
    supporting = sorted([*unreachable, *daemon, *ping])
    evidence: dict[str, Any] = {
        "unreachable": {key: f"{r.target}: {r.classification}" for key, r in sorted(unreachable.items())},
        "tailscaled": {
            "is_enabled": states.get(CHECK_ENABLED),
            "is_active": states.get(CHECK_ACTIVE),
        },
        "tailscale_ping": {key: r.outcome.value for key, r in sorted(ping.items())} or "not run",
        "supporting_checks": supporting,
        "old_agent_tunnel": "never (old-agent is compute-only)",
    }
    targets = ", ".join(sorted({r.target for r in unreachable.values()}))
    down_what = " and ".join(
        f"{'not enabled' if r.check == CHECK_ENABLED else 'not active'} ({r.evidence.get('state')})"
        for r in sorted(down.values(), key=lambda r: r.check)
    )
    if fleet_unreachable is not None:
        evidence["fleet_unreachable"] = sorted(fleet_unreachable)
    return CheckResult.failed(
        CHECK_TRIAGE,
        agent_core,
        f"DGX routing incident: only {targets} is unreachable and tailscaled on {agent_core} is {down_what}. "
        "Fix routing before touching keys or topology; never recreate an old-agent tunnel (old-agent is "
        "compute-only).",
        evidence,
        Classification.INFRASTRUCTURE,
        cause=DGX_CAUSE,
        recommendation=DGX_RECOVERY,
        commands=[REMEDIATION_COMMAND],
    )


def _path_verdict(
    results: Mapping[str, CheckResult],
    unreachable: Mapping[str, CheckResult],
    daemon: Mapping[str, CheckResult],
    ping: Mapping[str, CheckResult],
    agent_core: str,
) -> CheckResult | None:
    """tailscaled is enabled and active on agent-core, yet the DGX does not answer: say so, and where to look.

    None when nothing is wrong with the path (ping passed, nothing unreachable) or when tailscaled's
    state is not a clear "enabled and active" (then no cause is claimed).
    """
    ping_failed = {k: r for k, r in ping.items() if r.outcome is Outcome.FAILED}
    if not unreachable and not ping_failed:
        return None
    checks = {r.check for r in daemon.values() if r.outcome is Outcome.PASSED}
    if checks != {CHECK_ENABLED, CHECK_ACTIVE}:
        return None
    seen = [f"{r.check} on {r.target}: {r.message}" for r in (*ping_failed.values(), *unreachable.values())]
    evidence: dict[str, Any] = {
        "tailscaled": {r.check: r.evidence.get("state") for r in daemon.values()},
        "failing": seen,
        "supporting_checks": sorted([*daemon, *ping, *unreachable]),
        "not_the_cause": "tailscaled on agent-core (enabled and active), keys, topology",
    }
    what = "tailscale ping fails" if ping_failed else "the DGX is unreachable"
    if ping_failed and unreachable:
        what = "tailscale ping fails and the DGX is unreachable"
    return CheckResult.failed(
        CHECK_TRIAGE,
        agent_core,
        f"tailscaled on {agent_core} is enabled and active, yet {what}: the fault is on the DGX or the path, "
        f"not tailscaled on agent-core. {NO_TUNNEL}",
        evidence,
        Classification.INFRASTRUCTURE,
        cause=DGX_PATH_CAUSE,
        recommendation=DGX_PATH_NEXT,
    )


def fleet_outage(
    results: Mapping[str, CheckResult],
    fleet_unreachable: Sequence[str],
    *,
    dgx_targets: frozenset[str] = frozenset({DGX_HOST}),
    agent_core: str = AGENT_CORE,
) -> CheckResult:
    """More than the DGX is unreachable in the fleet's view: a path/fleet incident, not the DGX routing rule."""
    nodes = sorted(set(fleet_unreachable))
    daemon = {
        r.check: r.evidence.get("state")
        for r in results.values()
        if r.check in (CHECK_ENABLED, CHECK_ACTIVE) and r.target == agent_core
    }
    evidence: dict[str, Any] = {
        "fleet_unreachable": nodes,
        "rule": f"the DGX routing rule needs only {', '.join(sorted(dgx_targets))} unreachable; "
        f"{len(nodes)} nodes are",
        "tailscaled_on_agent_core": daemon or "not checked",
        "supporting_checks": sorted(results),
    }
    return CheckResult.failed(
        CHECK_TRIAGE,
        agent_core,
        f"{len(nodes)} nodes are unreachable ({', '.join(nodes)}): a fleet/path outage, not the DGX routing "
        f"incident (that rule needs the DGX alone unreachable). {NO_TUNNEL}",
        evidence,
        Classification.INFRASTRUCTURE,
        cause=DGX_FLEET_CAUSE,
        recommendation=FLEET_OUTAGE_NEXT,
    )


# ---------------------------------------------------------------- the fleet's view: the sentinel


_UNREACHABLE_WORD_RE: Final = re.compile(r"(?i)\bunreachable\b|\bdown\b|\bno answer\b|\boffline\b")
_NODE_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def parse_sentinel(text: str, known: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(unreachable nodes, other lines)`` from a sentinel's report.

    A line that says a node is unreachable (``unreachable``, ``down``, ``offline``, ``no answer``)
    names every known node in it; such a line naming no known node counts as an unknown node
    (``?<first word>``), so the DGX is never wrongly "the only one". Other lines are returned as-is.
    """
    known_set = set(known)
    nodes: list[str] = []
    other: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if not _UNREACHABLE_WORD_RE.search(line):
            other.append(line)
            continue
        named = [t for t in _NODE_TOKEN_RE.findall(line) if t in known_set]
        if not named:
            words = [t for t in _NODE_TOKEN_RE.findall(line.split(":", 1)[-1]) if t.lower() != "unreachable"]
            named = [f"?{words[0] if words else 'unknown'}"]
        nodes.extend(n for n in named if n not in nodes)
    return nodes, other


def check_sentinel(
    shell: RemoteShell, command: str, known: Sequence[str], *, timeout_s: float = 60.0
) -> CheckResult:
    """The configured sentinel run on its host is silent: exit 0 and nothing printed on either stream.

    ``evidence["unreachable_nodes"]`` is the fleet's view (empty when silent); a run that times out
    or cannot start is an ``error`` (the view is unknown), never "silent".
    """
    host = shell.alias

    def body() -> CheckResult:
        res = shell.run(command, timeout=timeout_s)
        nodes, other = parse_sentinel(f"{res.stdout}\n{res.stderr}", known)
        ev: dict[str, Any] = {
            "host": host,
            "ran": command,
            "exit_code": res.exit_code,
            "unreachable_nodes": nodes,
            "stdout": trim(res.stdout, 800),
            "stderr": trim(res.stderr, 500),
        }
        if res.exit_code in _NOT_FOUND_EXITS:
            return CheckResult.errored(
                CHECK_SENTINEL,
                host,
                f"{host}: the sentinel `{command}` could not run (exit {res.exit_code})",
                Classification.CONFIG_DEFECT,
                ev,
            )
        if res.exit_code == 0 and not res.stdout.strip() and not res.stderr.strip():
            return CheckResult.passed(
                CHECK_SENTINEL, host, f"{host}: `{command}` ran silent (exit 0): every node answers", ev
            )
        if nodes:
            why = f"reports {len(nodes)} unreachable: {', '.join(nodes)}"
        else:
            why = f"is not silent (exit {res.exit_code}; {len(other)} line(s): {trim(other[0], 160) if other else ''})"
        return CheckResult.failed(
            CHECK_SENTINEL, host, f"{host}: `{command}` {why}", ev, Classification.INFRASTRUCTURE
        )

    return run_check(CHECK_SENTINEL, host, body)
