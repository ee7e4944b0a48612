"""The DGX probes and the routing triage of the canary suite: the runbook's loop, out of the suite.

Each probe item runs one of :data:`PROBES`. The triage item runs all four again itself, keyed by the
node ids of the probe items beside it (so its incident names the items it stands on), judges the
routing rule with the fleet's view (sentinel, else the offline remote nodes) and, only when the run
may remediate and the cause is tailscaled on agent-core, runs the one recovery command, re-checks
within a bounded settle and closes the loop through the sentinel.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from sbxcheck.checks import dgx, dgx_remediate
from sbxcheck.errors import SbxError
from sbxcheck.results import CheckResult, Outcome

if TYPE_CHECKING:
    from sbxcheck.inventory import DgxSection
    from sbxcheck.plugin.session import SbxSession
    from sbxcheck.transports.ssh import SshPool

Probe = Callable[["DgxSection", "SshPool"], CheckResult]


def tailscaled_enabled(section: DgxSection, pool: SshPool) -> CheckResult:
    """agent-core: `systemctl is-enabled tailscaled` says enabled."""
    return dgx.check_tailscaled_enabled(pool.host(section.core), timeout_s=section.command_timeout_s)


def tailscaled_active(section: DgxSection, pool: SshPool) -> CheckResult:
    """agent-core: `systemctl is-active tailscaled` says active."""
    return dgx.check_tailscaled_active(pool.host(section.core), timeout_s=section.command_timeout_s)


def tailscale_ping(section: DgxSection, pool: SshPool) -> CheckResult:
    """agent-core: `tailscale ping -c N <dgx>` prints pong lines (exit 0 alone is not enough)."""
    return dgx.check_tailscale_ping(
        pool.host(section.core), section.tailscale_ip, section.ping_count, timeout_s=section.command_timeout_s
    )


def dgx_ssh_reachable(section: DgxSection, pool: SshPool) -> CheckResult:
    """The DGX answers SSH with strict host-key checking."""
    return dgx.check_dgx_ssh(
        lambda: pool.host(section.dgx_host).run("true", timeout=20), target=section.dgx_host
    )


#: the probe items of the canary suite, by test name: what the triage item runs again
PROBES: dict[str, Probe] = {
    "test_dgx_tailscaled_enabled": tailscaled_enabled,
    "test_dgx_tailscaled_active": tailscaled_active,
    "test_dgx_tailscale_ping": tailscale_ping,
    "test_dgx_ssh_reachable": dgx_ssh_reachable,
}


def _probe_item_ids(item: pytest.Item) -> dict[str, str]:
    """Probe test name -> the node id of that probe's item beside ``item`` (same module, same DGX)."""
    module = item.nodeid.split("::")[0]
    param = item.callspec.id if isinstance(item, pytest.Function) and hasattr(item, "callspec") else ""
    suffix = f"[{param}]" if param else ""
    return {name: f"{module}::{name}{suffix}" for name in PROBES}


def triage_dgx_routing(
    item: pytest.Item, section: DgxSection, pool: SshPool, session: SbxSession
) -> CheckResult:
    """Only the DGX unreachable + tailscaled down on agent-core = one incident and its next step."""
    ids = _probe_item_ids(item)

    def run_probes() -> dict[str, CheckResult]:
        return {ids[name]: probe(section, pool) for name, probe in PROBES.items()}

    results = run_probes()
    view, sentinel = fleet_view(section, pool, session)
    incident = dgx.triage_dgx(
        results, dgx_targets=frozenset({section.dgx_host}), agent_core=section.core, fleet_unreachable=view
    )
    if incident is None:
        states = {name: results[ids[name]].outcome.value for name in PROBES}
        return CheckResult.passed(
            "triage_dgx_routing",
            section.dgx_host,
            "no DGX routing incident (the rule is not met): "
            + ", ".join(f"{name.removeprefix('test_')} {state}" for name, state in states.items()),
            {"checked": states},
        )
    if sentinel is not None:
        incident = incident.model_copy(
            update={"evidence": {**incident.evidence, "sentinel": sentinel.message}}
        )
    if session.remediate and incident.cause == dgx.DGX_CAUSE:
        incident = _remediate(incident, section, pool, session, run_probes)
    return incident


def _remediate(
    incident: CheckResult,
    section: DgxSection,
    pool: SshPool,
    session: SbxSession,
    run_probes: Callable[[], dict[str, CheckResult]],
) -> CheckResult:
    """Run the one recovery command, re-check within ROUTE_SETTLE_S, then close the loop via the sentinel."""
    fix = dgx_remediate.remediate_tailscaled(pool.host(section.core), sudo=section.remediation_sudo)
    recheck: dict[str, CheckResult] = {}
    if fix.evidence.get("command_run"):
        # the route comes back some seconds after tailscaled starts: re-check within a bounded settle
        settle_until = time.monotonic() + dgx_remediate.ROUTE_SETTLE_S
        while True:
            pool.forget(section.dgx_host)  # the DGX was unreachable before: connect afresh
            recheck = run_probes()
            if not dgx_remediate.route_still_settling(recheck) or time.monotonic() >= settle_until:
                break
            time.sleep(dgx_remediate.ROUTE_SETTLE_STEP_S)
    incident = dgx_remediate.report_remediation(incident, fix, recheck)
    if not section.sentinel_command:
        return incident
    ssh_ok = any(r.check == dgx.CHECK_SSH and r.outcome is Outcome.PASSED for r in recheck.values())
    after = fleet_view(section, pool, session)[1] if ssh_ok else None
    # remediate -> strict SSH -> a silent sentinel run -> resolved
    return dgx_remediate.close_dgx_loop(incident, fix, recheck, after)


def fleet_view(
    section: DgxSection, pool: SshPool, session: SbxSession
) -> tuple[list[str] | None, CheckResult | None]:
    """The fleet's unreachable nodes: the configured sentinel's report, else the offline remote nodes.

    None when neither can be read (the rule then judges from the DGX checks alone).
    """
    if section.sentinel_command:
        inv = session.inventory()
        known = [section.dgx_host, *section.agent_cores, *inv.ssh.machines]
        if inv.sandboxed is not None:
            known.extend(inv.sandboxed.expected_nodes)
        try:
            host = pool.host(section.sentinel_host or section.core)
        except SbxError:
            return None, None
        result = dgx.check_sentinel(
            host, section.sentinel_command, known, timeout_s=section.command_timeout_s * 3
        )
        if result.outcome is Outcome.ERROR:
            return None, result
        return list(result.evidence.get("unreachable_nodes", [])), result
    if session.inventory().sandboxed is None:
        return None, None
    try:
        nodes = session.sandboxed_client().remote_nodes().nodes
    except SbxError:
        return None, None
    return [n.id for n in nodes if n.status.lower() == "offline"], None
