"""What a shipped item does beyond handing one check's result on: the glue of session, inventory and checks.

The suites call these through :mod:`sbxcheck.suite`, so an item stays one call and a test of the glue
imports it instead of running a suite module. Each returns a :class:`CheckResult` (a skip is a
result with outcome ``skipped``; ``sbx_verdict`` skips the item with its message).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sbxcheck.checks import fleet, github, hygiene, orphans
from sbxcheck.checks.vm_hygiene import host_secrets, judge_hygiene
from sbxcheck.clients.exedev import list_vms
from sbxcheck.clients.mcp_auth import auth_refusal
from sbxcheck.clients.sandboxed_models import IN_FLIGHT_STATUSES
from sbxcheck.errors import BadResponseError, SbxError
from sbxcheck.results import CheckResult, Classification, Outcome

if TYPE_CHECKING:
    from sbxcheck.inventory import GithubProbeSpec, Inventory, SandboxedSection
    from sbxcheck.lifecycle.ledger import LedgerEntry
    from sbxcheck.plugin.gateruns import GateRun
    from sbxcheck.plugin.session import SbxSession
    from sbxcheck.transports.ssh import SshPool


def skipped(check: str, reason: str) -> CheckResult:
    """A result that skips its (unparametrized) item, saying why."""
    return CheckResult(check=check, target="", outcome=Outcome.SKIPPED, message=reason)


def vm_hygiene_verdict(run: GateRun, on_vm: CheckResult, inventory: Inventory) -> CheckResult:
    """The VM's secret-file modes and the host's key file, judged together with the run's own key hash."""
    sssf = inventory.sssf
    assert sssf is not None and run.target is not None  # a gate run exists only with [sssf]
    host = host_secrets(
        sssf.runs_path / f"{run.run_id}.key",
        env_name=sssf.provisioning_key_env,
        key_path=sssf.provisioning_key_file,
    )
    record = run.entry.record
    own_hash = (record.key_hash or "") if record is not None else ""
    return judge_hygiene(run.target, on_vm, host, own_hash)


def ledger_verdict(session: SbxSession, entry: LedgerEntry) -> CheckResult:
    """An entry another session left open: left alone, reconciled, released (--sbx-sweep) or reported."""
    review = session.review_entry(entry)
    target = f"{entry.kind}-{entry.ident}"
    if review.outcome == "passed":
        return CheckResult.passed("ledger_leaked", target, review.message, review.evidence)
    if review.outcome == "skipped":
        return CheckResult(
            check="ledger_leaked",
            target=target,
            outcome=Outcome.SKIPPED,
            message=review.message,
            evidence=review.evidence,
        )
    return CheckResult.failed(
        "ledger_leaked",
        target,
        review.message,
        review.evidence,
        Classification.CHECK_FAILED,
        recommendation=review.recommendation,
        commands=list(review.commands),
    )


def machine_inventory(session: SbxSession, inventory: Inventory, pool: SshPool | None) -> CheckResult:
    """SSH-reachable machines listed separately from registered compute, each row with its check time."""
    rows = []
    for alias in inventory.ssh.machines:
        checked_at = fleet.utc_now_iso()
        assert pool is not None  # the fixture always gives one; a test without machines may pass None
        try:
            pool.host(alias).run("true", timeout=20)
            rows.append(fleet.SshReach(alias, True, checked_at))
        except SbxError as exc:
            rows.append(fleet.SshReach(alias, False, checked_at, exc.classification.value))
    live = fleet.read_compute_live(session.sandboxed_client()) if inventory.sandboxed else None
    nodes = live.nodes if live is not None else []
    table = fleet.machine_inventory(
        rows,
        nodes,
        nodes_checked_at=live.nodes_checked_at if live else None,
        fleet_health_checked_at=live.fleet_health_checked_at if live else None,
    )
    if not table:
        return skipped("fleet_machine_inventory", "the inventory lists no machines and no control plane")
    ssh_up = sum(1 for r in rows if r.reachable)
    message = f"{ssh_up}/{len(rows)} SSH-reachable machines; {len(nodes)} registered compute nodes"
    evidence: dict[str, object] = {"machine_inventory": table}
    if live is not None:
        evidence.update(live.evidence())
    return CheckResult.passed("fleet_machine_inventory", "fleet", message, evidence)


def github_auth(session: SbxSession, probe: GithubProbeSpec) -> CheckResult:
    """Stored gh/git credentials in the probe's workspace: API, repo view, git read — booleans only."""
    client = session.sandboxed_client()
    ws_ids = {w.name: w.id for w in client.list_workspaces()}
    ws_id = ws_ids.get(probe.workspace, probe.workspace)
    run = (
        github.mcp_exec(session.mcp_client(), ws_id)
        if probe.via == "mcp"
        else github.rest_exec(client, ws_id)
    )
    return github.check_github_auth(
        run,
        workspace=probe.workspace,
        repo=probe.repo,
        via=probe.via,
        host=probe.host,
        remote_url=probe.remote_url,
    )


def orphan_audit(session: SbxSession, inventory: Inventory, pool: SshPool) -> CheckResult:
    """`sbx-*` keys joined with run records and exe.dev VMs; each orphan reported with its hash. Nothing deleted."""
    sssf = inventory.sssf
    if sssf is None:
        return skipped("orphan_audit", "the inventory has no [sssf] section")
    admin = session.openrouter_admin()
    results = orphans.audit_orphans(
        admin.list_keys, lambda: list_vms(pool.host(sssf.exedev_alias)), sssf.runs_path
    )
    return orphans.orphan_summary(results)


def mission_signal_scan(session: SbxSession, section: SandboxedSection) -> hygiene.SignalScan | SbxError:
    """`get_mission_health` for each in-flight mission, asked once for every signal item.

    The assistant MCP is reached first: a release without it skips the items whether or not a
    mission happens to be in flight at that moment."""
    client = session.sandboxed_client()
    try:
        session.mcp_client()
    except SbxError as exc:
        return exc

    def in_flight() -> list[str]:
        missions, _ = client.list_missions_paged(max_missions=section.hygiene.max_missions)
        return [m.id for m in missions if m.status in IN_FLIGHT_STATUSES]

    def health(mission_id: str) -> dict[str, Any]:
        result = session.mcp_client().get_mission_health(mission_id)
        refused = auth_refusal(result)
        if refused is not None:
            raise refused
        if result.is_error:
            raise BadResponseError(f"get_mission_health {mission_id[:8]} failed: {result.text[:160]}")
        doc = result.json()
        if not isinstance(doc, dict):
            raise BadResponseError(f"get_mission_health {mission_id[:8]}: expected a JSON object")
        return doc

    try:
        return hygiene.scan_signals(in_flight, health, limit=section.hygiene.signal_scan_limit)
    except SbxError as exc:
        return exc
