"""Per-process session state: where the inventory comes from, the embedded fleet, the gate targets.

The plugin keeps one ``SbxSession`` in ``config.stash``. Nothing here knows about checks; checks
never learn whether the inventory was written by the simulator.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sbxcheck.checks.gate import GateTarget
from sbxcheck.clients.roster import roster_from_checkout
from sbxcheck.clients.runrecords import RunEntry, gate_problem, select_runs
from sbxcheck.errors import InventoryError, SbxError
from sbxcheck.inventory import Inventory, find_inventory, load_inventory
from sbxcheck.transports.ssh import SshPool, SshSettings

if TYPE_CHECKING:  # production runs never import the simulator
    from sbxcheck.sim.fleet import SimFleet


@dataclass(frozen=True)
class GateRun:
    """One run as the gate suite sees it: its record entry, and its target when it can be gated."""

    entry: RunEntry
    target: GateTarget | None
    problem: str | None

    @property
    def run_id(self) -> str:
        return self.entry.run_id


class SbxSession:
    """Lazily resolves the inventory (a file, or the embedded fleet) and owns the SSH pool."""

    def __init__(
        self,
        *,
        rootdir: Path,
        inventory_option: str | None,
        force_sim: bool,
        faults: list[str],
        run_ids: list[str],
        sim_seed: int | None,
    ) -> None:
        self.rootdir = rootdir
        self.force_sim = force_sim or bool(faults)
        self.faults = faults
        self.run_ids = run_ids
        self.sim_seed = sim_seed
        self.inventory_path: Path | None = (
            None if self.force_sim else find_inventory(inventory_option, rootdir)
        )
        self._inventory: Inventory | None = None
        self._inventory_error: InventoryError | None = None
        self._sim: SimFleet | None = None
        self._sim_dir: Path | None = None
        self._pool: SshPool | None = None
        self._gate_runs: list[GateRun] | None = None

    # --------------------------------------------------------------- inventory

    @property
    def uses_sim(self) -> bool:
        return self.inventory_path is None

    def describe_source(self) -> str:
        if self.uses_sim:
            why = "--sbx-sim" if self.force_sim else "no inventory given"
            faults = f"; faults: {', '.join(self.faults)}" if self.faults else ""
            return f"embedded simulated fleet ({why}{faults})"
        return str(self.inventory_path)

    def describe_details(self) -> dict[str, object]:
        """Facts about the fleet for the report header (never secrets)."""
        if not self.uses_sim:
            return {}
        from sbxcheck.sim.pi import pi_status

        details: dict[str, object] = {"pi": pi_status(), "faults": list(self.faults)}
        if self._sim is not None and self._sim.pi is not None:
            pi = self._sim.pi
            details["pi"] = f"{pi.kind} pi {pi.version}" + (f" ({pi.reason})" if pi.reason else "")
        return details

    def inventory(self) -> Inventory:
        """The validated inventory; raises InventoryError (cached) when it cannot be had."""
        if self._inventory is not None:
            return self._inventory
        if self._inventory_error is not None:
            raise self._inventory_error
        try:
            if self.inventory_path is not None:
                self._inventory = load_inventory(self.inventory_path)
            else:
                self._inventory = load_inventory(self._sim_fleet().materialize())
        except InventoryError as exc:
            self._inventory_error = exc
            raise
        except SbxError as exc:
            self._inventory_error = InventoryError(f"embedded fleet: {exc.message}")
            raise self._inventory_error from None
        return self._inventory

    def _sim_fleet(self) -> SimFleet:
        if self._sim is None:
            from sbxcheck.sim.fleet import SimFleet

            self._sim_dir = Path(tempfile.mkdtemp(prefix="sbxcheck-sim-"))
            self._sim = SimFleet(self._sim_dir, self.faults, seed=self.sim_seed)
        return self._sim

    def ensure_live(self) -> None:
        """Make the fleet reachable: a no-op for a real inventory; starts the embedded fleet's servers."""
        self.inventory()
        if self._sim is not None:
            self._sim.serve()

    @property
    def sim(self) -> SimFleet | None:
        return self._sim

    # --------------------------------------------------------------- gate targets

    def gate_runs(self) -> list[GateRun]:
        """Every run the gate covers, in run-id order; resolved once per process, offline."""
        if self._gate_runs is not None:
            return self._gate_runs
        inv = self.inventory()
        sssf = inv.sssf
        if sssf is None:
            self._gate_runs = []
            return self._gate_runs
        runs = []
        for entry in select_runs(sssf.runs_path, self.run_ids):
            record = entry.record
            problem = entry.problem or (gate_problem(record, entry.path) if record is not None else None)
            if record is None or problem is not None:
                runs.append(GateRun(entry, None, problem or f"{entry.path}: unreadable run record"))
                continue
            assert record.vm_name is not None and record.commit_sha is not None
            roster = roster_from_checkout(sssf.checkout, sssf.roster_config, record.commit_sha)
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
            )
            runs.append(GateRun(entry, target, roster.problem))
        self._gate_runs = runs
        return runs

    # --------------------------------------------------------------- transport

    def ssh_pool(self) -> SshPool:
        if self._pool is None:
            inv = self.inventory()
            self.ensure_live()
            self._pool = SshPool(
                SshSettings(
                    config_file=inv.ssh.config,
                    known_hosts=tuple(inv.ssh.known_hosts),
                    identity_file=inv.ssh.identity,
                    connect_timeout_s=inv.ssh.connect_timeout_s,
                    command_timeout_s=inv.ssh.command_timeout_s,
                )
            )
        return self._pool

    def close(self) -> None:
        """Close connections and stop the embedded fleet; each step runs even if another fails."""
        if self._pool is not None:
            try:
                self._pool.close()
            finally:
                self._pool = None
        if self._sim is not None:
            try:
                self._sim.stop()
            finally:
                self._sim = None
                if self._sim_dir is not None:
                    shutil.rmtree(self._sim_dir, ignore_errors=True)
