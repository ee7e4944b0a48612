"""The gate's targets: every run record of the inventory's SSSF checkout, and the VM each one can be gated on.

Resolved offline (run records and one ``git show`` of the roster per commit), once per process: see
:meth:`sbxcheck.plugin.session.SbxSession.gate_runs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sbxcheck.checks.gate import GateTarget
from sbxcheck.clients.roster import RosterSource, roster_from_checkout
from sbxcheck.clients.runrecords import RunEntry, gate_problem, select_runs

if TYPE_CHECKING:
    from sbxcheck.inventory import Inventory
    from sbxcheck.lifecycle.mounts import Mounted


@dataclass(frozen=True)
class GateRun:
    """One run as the gate suite sees it: its record entry, and its target when it can be gated."""

    entry: RunEntry
    target: GateTarget | None
    problem: str | None

    @property
    def run_id(self) -> str:
        return self.entry.run_id


def resolve_gate_runs(
    inv: Inventory, run_ids: Sequence[str], mounts: Sequence[Mounted], mount_error: str | None
) -> list[GateRun]:
    """Every run the gate covers (``run_ids``, else every one), in run-id order, with one problem item
    per mount that failed (``mount_error``: the mounts could not even start)."""
    sssf = inv.sssf
    if sssf is None:
        return []
    runs = []
    if mount_error:  # the mounts could not even start: one item says why
        entry = RunEntry("mount", sssf.runs_path, None, f"--sbx-mount failed: {mount_error}")
        runs.append(GateRun(entry, None, entry.problem))
    for mounted in mounts:
        if not mounted.ok and mounted.run_id is None:
            path = sssf.runs_path / f"{mounted.name}.json"
            entry = RunEntry(
                f"mount-{mounted.name}", path, None, f"mount {mounted.name!r} failed: {mounted.reason}"
            )
            runs.append(GateRun(entry, None, entry.problem))
    failed_mounts = {m.run_id: m for m in mounts if m.run_id and not m.ok}
    rosters: dict[str, RosterSource] = {}
    for entry in select_runs(sssf.runs_path, list(run_ids)):
        if entry.run_id in failed_mounts:
            reason = failed_mounts[entry.run_id].reason
            entry = RunEntry(entry.run_id, entry.path, entry.record, f"mount failed: {reason}")
        record = entry.record
        problem = entry.problem or (gate_problem(record, entry.path) if record is not None else None)
        if record is None or problem is not None:
            runs.append(GateRun(entry, None, problem or f"{entry.path}: unreadable run record"))
            continue
        assert record.vm_name is not None and record.commit_sha is not None
        if record.commit_sha not in rosters:  # one `git show` per commit, not per run
            rosters[record.commit_sha] = roster_from_checkout(
                sssf.checkout, sssf.roster_config, record.commit_sha
            )
        roster = rosters[record.commit_sha]
        target = GateTarget(
            run_id=record.run_id,
            host=f"{record.vm_name}{sssf.vm_host_suffix}",
            commit_sha=record.commit_sha,
            roster=roster.models,
            roster_config=sssf.roster_config,
            openrouter_base_url=sssf.openrouter_base_url,
            credit_floor_usd=sssf.credit_floor_usd,
            cost_probe_model=sssf.cost_probe_model,
            ping_timeout_s=sssf.ping_timeout_s,
            pi_timeout_s=sssf.pi_timeout_s,
            command_timeout_s=inv.ssh.command_timeout_s,
            ssh_config=str(inv.ssh.config) if inv.ssh.config else None,
            pid=record.pid,
            ports=record.ports,
            https_url=record.https_url or "",
            observe_probe=sssf.observe_probe,
            observe_timeout_s=sssf.observe_timeout_s,
        )
        runs.append(GateRun(entry, target, roster.problem))
    return runs
