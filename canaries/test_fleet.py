"""Fleet canaries and the DGX triage runbook (specs/sandboxed-sh.md, 6 and 8.11 to 8.14; upstream's reap).

Canaries: DGX/tailscale from agent-core, control-plane and remote-node health, the machine
inventory, secret-safe workspace discovery (REST and MCP), the stored-GitHub-auth probe, and the
orphan-key audit. ``pytest -m triage`` runs the DGX checks, the routing rule and the orphan audit:
it classifies and recommends; only ``--sbx-remediate`` runs the one recovery command.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import pytest

from sbxcheck.checks import dgx, dgx_remediate, discovery, fleet, github, orphans
from sbxcheck.clients.exedev import list_vms
from sbxcheck.errors import SbxError
from sbxcheck.inventory import DgxSection, GithubProbeSpec, Inventory
from sbxcheck.plugin.session import SbxSession
from sbxcheck.results import CheckResult
from sbxcheck.transports.ssh import SshPool

pytestmark = pytest.mark.canary

Verdict = Callable[[CheckResult], None]


# ------------------------------------------------------------------ DGX routing


@pytest.mark.triage
def test_dgx_tailscaled_enabled(sbx_dgx: DgxSection, sbx_ssh_pool: SshPool, sbx_verdict: Verdict) -> None:
    """agent-core: `systemctl is-enabled tailscaled` says enabled."""
    shell = sbx_ssh_pool.host(sbx_dgx.core)
    sbx_verdict(dgx.check_tailscaled_enabled(shell, timeout_s=sbx_dgx.command_timeout_s))


@pytest.mark.triage
def test_dgx_tailscaled_active(sbx_dgx: DgxSection, sbx_ssh_pool: SshPool, sbx_verdict: Verdict) -> None:
    """agent-core: `systemctl is-active tailscaled` says active."""
    shell = sbx_ssh_pool.host(sbx_dgx.core)
    sbx_verdict(dgx.check_tailscaled_active(shell, timeout_s=sbx_dgx.command_timeout_s))


@pytest.mark.triage
def test_dgx_tailscale_ping(sbx_dgx: DgxSection, sbx_ssh_pool: SshPool, sbx_verdict: Verdict) -> None:
    """agent-core: `tailscale ping -c 2 <dgx>` prints pong lines (exit 0 alone is not enough)."""
    shell = sbx_ssh_pool.host(sbx_dgx.core)
    sbx_verdict(
        dgx.check_tailscale_ping(
            shell, sbx_dgx.tailscale_ip, sbx_dgx.ping_count, timeout_s=sbx_dgx.command_timeout_s
        )
    )


@pytest.mark.triage
def test_dgx_ssh_reachable(sbx_dgx: DgxSection, sbx_ssh_pool: SshPool, sbx_verdict: Verdict) -> None:
    """The DGX answers SSH with strict host-key checking."""
    sbx_verdict(
        dgx.check_dgx_ssh(
            lambda: sbx_ssh_pool.host(sbx_dgx.dgx_host).run("true", timeout=20), target=sbx_dgx.dgx_host
        )
    )


@pytest.mark.triage
def test_triage_dgx_routing(
    sbx_dgx: DgxSection,
    sbx_ssh_pool: SshPool,
    sbx_session: SbxSession,
    sbx_verdict: Verdict,
    request: pytest.FixtureRequest,
) -> None:
    """DGX routing: only the DGX unreachable + tailscaled down on agent-core = one incident and its next step."""
    shell = sbx_ssh_pool.host(sbx_dgx.core)
    module = request.node.nodeid.split("::")[0]
    wait = sbx_dgx.command_timeout_s
    probes = {
        "test_dgx_tailscaled_enabled": lambda: dgx.check_tailscaled_enabled(shell, timeout_s=wait),
        "test_dgx_tailscaled_active": lambda: dgx.check_tailscaled_active(shell, timeout_s=wait),
        "test_dgx_tailscale_ping": lambda: dgx.check_tailscale_ping(
            shell, sbx_dgx.tailscale_ip, sbx_dgx.ping_count, timeout_s=wait
        ),
        "test_dgx_ssh_reachable": lambda: dgx.check_dgx_ssh(
            lambda: sbx_ssh_pool.host(sbx_dgx.dgx_host).run("true", timeout=20), target=sbx_dgx.dgx_host
        ),
    }
    param = request.node.callspec.id

    def run_probes() -> dict[str, CheckResult]:
        return {f"{module}::{name}[{param}]": probe() for name, probe in probes.items()}

    results = run_probes()
    view, sentinel = _fleet_view(sbx_dgx, sbx_ssh_pool, sbx_session)
    incident = dgx.triage_dgx(
        results, dgx_targets=frozenset({sbx_dgx.dgx_host}), agent_core=sbx_dgx.core, fleet_unreachable=view
    )
    if incident is None:
        states = {k.split("::")[1].split("[")[0]: r.outcome.value for k, r in results.items()}
        sbx_verdict(
            CheckResult.passed(
                "triage_dgx_routing",
                sbx_dgx.dgx_host,
                "no DGX routing incident (the rule is not met): "
                + ", ".join(f"{k.removeprefix('test_')} {v}" for k, v in states.items()),
                {"checked": states},
            )
        )
        return
    if sentinel is not None:
        incident = incident.model_copy(
            update={"evidence": {**incident.evidence, "sentinel": sentinel.message}}
        )
    if sbx_session.remediate and incident.cause == dgx.DGX_CAUSE:
        fix = dgx_remediate.remediate_tailscaled(shell, sudo=sbx_dgx.remediation_sudo)
        recheck: dict[str, CheckResult] = {}
        if fix.evidence.get("command_run"):
            # the route comes back some seconds after tailscaled starts: re-check within a bounded settle
            settle_until = time.monotonic() + dgx_remediate.ROUTE_SETTLE_S
            while True:
                sbx_ssh_pool.forget(sbx_dgx.dgx_host)  # the DGX was unreachable before: connect afresh
                recheck = run_probes()
                if not dgx_remediate.route_still_settling(recheck) or time.monotonic() >= settle_until:
                    break
                time.sleep(dgx_remediate.ROUTE_SETTLE_STEP_S)
        incident = dgx_remediate.report_remediation(incident, fix, recheck)
        ssh_ok = any(r.check == dgx.CHECK_SSH and r.outcome.value == "passed" for r in recheck.values())
        after = (
            _fleet_view(sbx_dgx, sbx_ssh_pool, sbx_session)[1]
            if ssh_ok and sbx_dgx.sentinel_command
            else None
        )
        if sbx_dgx.sentinel_command:  # remediate -> strict SSH -> a silent sentinel run -> resolved
            incident = dgx_remediate.close_dgx_loop(incident, fix, recheck, after)
    sbx_verdict(incident)


def _fleet_view(
    section: DgxSection, pool: SshPool, session: SbxSession
) -> tuple[list[str] | None, CheckResult | None]:
    """The fleet's unreachable nodes: the configured sentinel's report, else the offline remote nodes.

    None when neither can be read (the rule then judges from the DGX checks alone, as before).
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
        if result.outcome.value == "error":
            return None, result
        return list(result.evidence.get("unreachable_nodes", [])), result
    if session.inventory().sandboxed is None:
        return None, None
    try:
        nodes = session.sandboxed_client().remote_nodes().nodes
    except SbxError:
        return None, None
    return [n.id for n in nodes if n.status.lower() == "offline"], None


# ------------------------------------------------------------------ control plane and nodes


def test_fleet_health(sbx_session: SbxSession, sbx_verdict: Verdict) -> None:
    """`GET /api/health/fleet`: ok, control responsive, disk below warn (200 even when degraded)."""
    sbx_verdict(fleet.check_fleet_health(sbx_session.sandboxed_client()))


def test_fleet_control_plane(sbx_session: SbxSession, sbx_verdict: Verdict) -> None:
    """`GET /api/health` (the control plane's own, public route) answers status ok."""
    sbx_verdict(fleet.check_health(sbx_session.sandboxed_client()))


def test_fleet_node(
    sbx_node: str, sbx_session: SbxSession, sbx_inventory: Inventory, sbx_verdict: Verdict
) -> None:
    """One remote node: online, not cordoned, fresh heartbeat, lean runtime ready where labelled lean."""
    assert sbx_inventory.sandboxed is not None
    nodes = sbx_session.sandboxed_client().remote_nodes()
    now = dt.datetime.now(dt.UTC)
    sbx_verdict(
        fleet.check_expected_node(nodes, sbx_node, now=now, max_age_s=sbx_inventory.sandboxed.node_max_age_s)
    )


def test_fleet_machine_inventory(
    sbx_session: SbxSession, sbx_inventory: Inventory, sbx_ssh_pool: SshPool, sbx_verdict: Verdict
) -> None:
    """SSH-reachable machines listed separately from registered compute, each row with its check time."""
    rows = []
    for alias in sbx_inventory.ssh.machines:
        checked_at = fleet.utc_now_iso()
        try:
            sbx_ssh_pool.host(alias).run("true", timeout=20)
            rows.append(fleet.SshReach(alias, True, checked_at))
        except SbxError as exc:
            rows.append(fleet.SshReach(alias, False, checked_at, exc.classification.value))
    live = fleet.read_compute_live(sbx_session.sandboxed_client()) if sbx_inventory.sandboxed else None
    nodes = live.nodes if live is not None else []
    table = fleet.machine_inventory(
        rows,
        nodes,
        nodes_checked_at=live.nodes_checked_at if live else None,
        fleet_health_checked_at=live.fleet_health_checked_at if live else None,
    )
    ssh_up = sum(1 for r in rows if r.reachable)
    message = f"{ssh_up}/{len(rows)} SSH-reachable machines; {len(nodes)} registered compute nodes"
    if not table:
        pytest.skip("the inventory lists no machines and no control plane")
    evidence: dict[str, object] = {"machine_inventory": table}
    if live is not None:
        evidence.update(live.evidence())
    sbx_verdict(CheckResult.passed("fleet_machine_inventory", "fleet", message, evidence))


# ------------------------------------------------------------------ secrets and credentials


def test_workspace_discovery(sbx_discovery_via: str, sbx_session: SbxSession, sbx_verdict: Verdict) -> None:
    """Workspaces reduced at the source to id, name, status, init scripts, skills and env NAMES."""
    if sbx_discovery_via == "mcp":
        sbx_verdict(discovery.check_discovery_mcp(sbx_session.mcp_client()))
    else:
        sbx_verdict(discovery.check_discovery_rest(sbx_session.sandboxed_client()))


def test_github_auth(
    sbx_github_probe: GithubProbeSpec, sbx_session: SbxSession, sbx_verdict: Verdict
) -> None:
    """Stored gh/git credentials in the workspace: API, repo view, git read — booleans only."""
    client = sbx_session.sandboxed_client()
    ws_ids = {w.name: w.id for w in client.list_workspaces()}
    ws_id = ws_ids.get(sbx_github_probe.workspace, sbx_github_probe.workspace)
    if sbx_github_probe.via == "mcp":
        run = github.mcp_exec(sbx_session.mcp_client(), ws_id)
    else:
        run = github.rest_exec(client, ws_id)
    sbx_verdict(
        github.check_github_auth(
            run,
            workspace=sbx_github_probe.workspace,
            repo=sbx_github_probe.repo,
            via=sbx_github_probe.via,
            host=sbx_github_probe.host,
            remote_url=sbx_github_probe.remote_url,
        )
    )


# ------------------------------------------------------------------ orphan audit (as upstream's reap joins)


@pytest.mark.triage
def test_orphan_audit(
    sbx_session: SbxSession, sbx_inventory: Inventory, sbx_ssh_pool: SshPool, sbx_verdict: Verdict
) -> None:
    """`sbx-*` keys joined with run records and exe.dev VMs; each orphan reported with its hash. Nothing deleted."""
    sssf = sbx_inventory.sssf
    if sssf is None:
        pytest.skip("the inventory has no [sssf] section")
    admin = sbx_session.openrouter_admin()
    results = orphans.audit_orphans(
        admin.list_keys, lambda: list_vms(sbx_ssh_pool.host(sssf.exedev_alias)), sssf.runs_path
    )
    sbx_verdict(orphans.orphan_summary(results))
