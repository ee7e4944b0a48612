"""Fleet canaries and the DGX triage runbook (specs/sandboxed-sh.md, 6 and 8.11 to 8.14; upstream's reap).

Canaries: DGX/tailscale from agent-core, control-plane and remote-node health, the machine
inventory, secret-safe workspace discovery (REST and MCP), the stored-GitHub-auth probe, and the
orphan-key audit. ``pytest -m triage`` runs the DGX checks, the routing rule and the orphan audit:
it classifies and recommends; only ``--sbx-remediate`` runs the one recovery command.
"""

from __future__ import annotations

import pytest

from sbxcheck.suite import (
    DgxSection,
    GithubProbeSpec,
    Inventory,
    Session,
    SshPool,
    Verdict,
    check_discovery_mcp,
    check_discovery_rest,
    check_expected_node,
    check_fleet_health,
    check_health,
    dgx_ssh_reachable,
    github_auth,
    machine_inventory,
    orphan_audit,
    tailscale_ping,
    tailscaled_active,
    tailscaled_enabled,
    triage_dgx_routing,
)

pytestmark = pytest.mark.canary


# ------------------------------------------------------------------ DGX routing


@pytest.mark.triage
def test_dgx_tailscaled_enabled(sbx_dgx: DgxSection, sbx_ssh_pool: SshPool, sbx_verdict: Verdict) -> None:
    """agent-core: `systemctl is-enabled tailscaled` says enabled."""
    sbx_verdict(tailscaled_enabled(sbx_dgx, sbx_ssh_pool))


@pytest.mark.triage
def test_dgx_tailscaled_active(sbx_dgx: DgxSection, sbx_ssh_pool: SshPool, sbx_verdict: Verdict) -> None:
    """agent-core: `systemctl is-active tailscaled` says active."""
    sbx_verdict(tailscaled_active(sbx_dgx, sbx_ssh_pool))


@pytest.mark.triage
def test_dgx_tailscale_ping(sbx_dgx: DgxSection, sbx_ssh_pool: SshPool, sbx_verdict: Verdict) -> None:
    """agent-core: `tailscale ping -c 2 <dgx>` prints pong lines (exit 0 alone is not enough)."""
    sbx_verdict(tailscale_ping(sbx_dgx, sbx_ssh_pool))


@pytest.mark.triage
def test_dgx_ssh_reachable(sbx_dgx: DgxSection, sbx_ssh_pool: SshPool, sbx_verdict: Verdict) -> None:
    """The DGX answers SSH with strict host-key checking."""
    sbx_verdict(dgx_ssh_reachable(sbx_dgx, sbx_ssh_pool))


@pytest.mark.triage
def test_triage_dgx_routing(
    sbx_dgx: DgxSection,
    sbx_ssh_pool: SshPool,
    sbx_session: Session,
    sbx_verdict: Verdict,
    request: pytest.FixtureRequest,
) -> None:
    """DGX routing: only the DGX unreachable + tailscaled down on agent-core = one incident and its next step."""
    sbx_verdict(triage_dgx_routing(request.node, sbx_dgx, sbx_ssh_pool, sbx_session))


# ------------------------------------------------------------------ control plane and nodes


def test_fleet_health(sbx_session: Session, sbx_verdict: Verdict) -> None:
    """`GET /api/health/fleet`: ok, control responsive, disk below warn (200 even when degraded)."""
    sbx_verdict(check_fleet_health(sbx_session.sandboxed_client()))


def test_fleet_control_plane(sbx_session: Session, sbx_verdict: Verdict) -> None:
    """`GET /api/health` (the control plane's own, public route) answers status ok."""
    sbx_verdict(check_health(sbx_session.sandboxed_client()))


def test_fleet_node(
    sbx_node: str, sbx_session: Session, sbx_inventory: Inventory, sbx_verdict: Verdict
) -> None:
    """One remote node: online, not cordoned, fresh heartbeat, lean runtime ready where labelled lean."""
    assert sbx_inventory.sandboxed is not None
    nodes = sbx_session.sandboxed_client().remote_nodes()
    sbx_verdict(check_expected_node(nodes, sbx_node, max_age_s=sbx_inventory.sandboxed.node_max_age_s))


def test_fleet_machine_inventory(
    sbx_session: Session, sbx_inventory: Inventory, sbx_ssh_pool: SshPool, sbx_verdict: Verdict
) -> None:
    """SSH-reachable machines listed separately from registered compute, each row with its check time."""
    sbx_verdict(machine_inventory(sbx_session, sbx_inventory, sbx_ssh_pool))


# ------------------------------------------------------------------ secrets and credentials


def test_workspace_discovery(sbx_discovery_via: str, sbx_session: Session, sbx_verdict: Verdict) -> None:
    """Workspaces reduced at the source to id, name, status, init scripts, skills and env NAMES."""
    if sbx_discovery_via == "mcp":
        sbx_verdict(check_discovery_mcp(sbx_session.mcp_client()))
    else:
        sbx_verdict(check_discovery_rest(sbx_session.sandboxed_client()))


def test_github_auth(sbx_github_probe: GithubProbeSpec, sbx_session: Session, sbx_verdict: Verdict) -> None:
    """Stored gh/git credentials in the workspace: API, repo view, git read — booleans only."""
    sbx_verdict(github_auth(sbx_session, sbx_github_probe))


# ------------------------------------------------------------------ orphan audit (as upstream's reap joins)


@pytest.mark.triage
def test_orphan_audit(
    sbx_session: Session, sbx_inventory: Inventory, sbx_ssh_pool: SshPool, sbx_verdict: Verdict
) -> None:
    """`sbx-*` keys joined with run records and exe.dev VMs; each orphan reported with its hash. Nothing deleted."""
    sbx_verdict(orphan_audit(sbx_session, sbx_inventory, sbx_ssh_pool))
