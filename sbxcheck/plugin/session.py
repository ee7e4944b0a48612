"""The resources one pytest process opens for sbxcheck: where the inventory comes from, the embedded fleet,
the SSH pool, the gate fan-out, the control plane's clients, the ledger and the mounts.

The plugin keeps one ``SbxSession`` in ``config.stash`` (``get_session``); what the run learns and does
(mounts made, cleanup lines, the routes wanted, ...) is the :class:`~sbxcheck.plugin.runstate.RunState`
beside it. Nothing here knows about checks; checks never learn whether the inventory was written by the
simulator.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sbxcheck.errors import InventoryError, SbxError
from sbxcheck.fleetsource import FORCED
from sbxcheck.inventory import Inventory, load_inventory
from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.plugin.controlplane import ControlPlane
from sbxcheck.plugin.gateruns import GateRun, resolve_gate_runs
from sbxcheck.plugin.ledgermounts import LedgerMounts
from sbxcheck.transports.ssh import SshPool
from sbxcheck.transports.ssh_connect import SshSettings

if TYPE_CHECKING:  # production runs never import the simulator
    from sbxcheck.checks.catalog import CatalogSnapshot
    from sbxcheck.clients.mcp import AssistantMcpClient
    from sbxcheck.clients.openrouter import OpenRouterAdmin
    from sbxcheck.clients.sandboxed import SandboxedClient
    from sbxcheck.fleetsource import EmbeddedFleet, FleetSource
    from sbxcheck.lifecycle.ledger import LedgerEntry
    from sbxcheck.plugin.fanout import GateFanout
    from sbxcheck.plugin.review import EntryReview
    from sbxcheck.plugin.runstate import RunState
    from sbxcheck.plugin.settings import Settings


class SbxSession:
    """The run's resources, each made on first use and closed in :meth:`close`: the inventory (a file, or
    the embedded fleet), the SSH pool and gate fan-out, :attr:`control_plane` and :attr:`ledger_mounts`."""

    def __init__(
        self,
        settings: Settings,
        source: FleetSource,
        *,
        session_tag: str | None = None,
        ledger_ids: Iterable[str] | None = None,
    ) -> None:
        """``session_tag`` and ``ledger_ids``: what an xdist worker shares with its controller."""
        self.settings = settings
        self.source = source
        self.invocation_dir = settings.invocation_dir.resolve()
        self.inventory_path: Path | None = source.path
        self.session_tag = session_tag or uuid.uuid4().hex
        self.remediate = settings.remediate  # the DGX triage may run its one recovery command
        self._inventory: Inventory | None = None
        self._inventory_error: InventoryError | None = None
        self._sim: EmbeddedFleet | None = None
        self._sim_dir: Path | None = None
        self._pool: SshPool | None = None
        self._fanout: GateFanout | None = None
        self.control_plane = ControlPlane(
            self,
            self.session_tag,
            self.ledger,
            max_spend_usd=settings.max_spend_usd,
            probe_route=settings.probe,
        )
        self.ledger_mounts = LedgerMounts(
            self,
            self.control_plane,
            self.state_dir,
            self.session_tag,
            mount_names=settings.mounts,
            sweep=settings.sweep,
            ledger_ids=ledger_ids,
        )

    # --------------------------------------------------------------- inventory

    @property
    def uses_sim(self) -> bool:
        return self.inventory_path is None

    def describe_source(self) -> str:
        if self.uses_sim:
            why = "--sbx-sim" if self.source.source == FORCED else "no inventory given"
            faults = f"; faults: {', '.join(self.settings.sim_faults)}" if self.settings.sim_faults else ""
            return f"embedded simulated fleet ({why}{faults})"
        return str(self.inventory_path)

    def describe_details(self) -> dict[str, object]:
        """Facts about the fleet for the report header (never secrets)."""
        if not self.uses_sim:
            return {}
        from sbxcheck.fleetsource import pi_status

        faults = list(self.settings.sim_faults)
        details: dict[str, object] = {
            "pi": pi_status(self.session_tag, self.settings.sim_pi_version),
            "faults": faults,
        }
        if self._sim is not None and self._sim.pi is not None:
            pi = self._sim.pi
            details["pi"] = pi.describe()
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

    def _sim_fleet(self) -> EmbeddedFleet:
        if self._sim is None:
            from sbxcheck.fleetsource import open_embedded

            root = Path(tempfile.mkdtemp(prefix="sbxcheck-sim-"))
            settings = self.settings
            fleet = open_embedded(
                root, list(settings.sim_faults), seed=settings.sim_seed, sssf_checkout=settings.sim_sssf,
                install_attempt=self.session_tag,  # the session's xdist workers try npm once between them
                cp_version=settings.sim_cp_version, pi_version=settings.sim_pi_version,
            )  # fmt: skip
            self._sim_dir, self._sim = fleet.root, fleet
        return self._sim

    def ensure_live(self) -> None:
        """Make the fleet reachable: a no-op for a real inventory; starts the embedded fleet's servers."""
        self.inventory()
        if self._sim is not None:
            self._sim.serve()

    @property
    def sim(self) -> EmbeddedFleet | None:
        return self._sim

    # --------------------------------------------------------------- gate targets

    def gate_runs(self, state: RunState) -> list[GateRun]:
        """Every run the gate covers, in run-id order; resolved offline once per process (again after
        a mount adds a run) and kept in ``state``."""
        if state.gate_runs is None:
            state.gate_runs = resolve_gate_runs(self.inventory(), state.run_ids, state.mounts, state.mount_error)
        return state.gate_runs

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
                    max_sessions=inv.ssh.max_sessions,
                )
            )
        return self._pool

    def gate_fanout(self) -> GateFanout | None:
        """The gate fan-out (created on the first gate item), or None when ``[ssh] max_parallel = 0``."""
        if self._fanout is None:
            ssh = self.inventory().ssh
            chosen = self.settings.max_parallel  # else the inventory's [ssh] max_parallel
            max_parallel = ssh.max_parallel if chosen is None else chosen
            if max_parallel <= 0:
                return None
            from sbxcheck.plugin.fanout import GateFanout

            self._fanout = GateFanout(self.ssh_pool(), max_parallel, ssh.max_sessions)
        return self._fanout

    def cancel_fanout(self) -> None:
        """Interrupted: cancel the gate checks still queued or in flight (the report names them)."""
        if self._fanout is not None:
            self._fanout.cancel()

    @property
    def fanout(self) -> GateFanout | None:
        """The fan-out if one was started in this process."""
        return self._fanout

    # --------------------------------------------------------------- ledger and control plane

    def state_dir(self) -> Path:
        """Where the ledger lives; never depends on pytest's rootdir or on how a path was spelled.

        In order: ``--sbx-state DIR`` (relative to the directory pytest was started in); the
        inventory's ``[state] dir`` (relative to the inventory file); ``.sbxcheck/state`` beside a
        real inventory file (its resolved location); the embedded fleet's own directory; else
        ``.sbxcheck/state`` in the directory pytest was started in.
        """
        if self.settings.state:
            option = Path(self.settings.state).expanduser()
            return option if option.is_absolute() else self.invocation_dir / option
        inv = self.inventory()
        if inv.state.dir is not None:
            return inv.state.dir
        if self.inventory_path is not None:
            return self.inventory_path.resolve().parent / ".sbxcheck" / "state"
        if self._sim_dir is not None:
            return self._sim_dir / "state"
        return self.invocation_dir / ".sbxcheck" / "state"

    def ledger(self) -> Ledger:
        return self.ledger_mounts.ledger()

    def review_entry(self, entry: LedgerEntry) -> EntryReview:
        """Decide about one entry another session left (:meth:`LedgerMounts.review_entry`)."""
        return self.ledger_mounts.review_entry(entry)

    def sandboxed_client(self) -> SandboxedClient:
        """The REST client for the inventory's control plane (:meth:`ControlPlane.sandboxed_client`)."""
        return self.control_plane.sandboxed_client()

    def mcp_client(self) -> AssistantMcpClient:
        """The assistant MCP server, started once for the session."""
        return self.control_plane.mcp_client()

    def openrouter_admin(self) -> OpenRouterAdmin:
        """Provisioning-side OpenRouter client (list keys)."""
        return self.control_plane.openrouter_admin()

    def catalog_snapshot(self) -> CatalogSnapshot:
        """What the control plane says of workspaces, agents, backends and models (read once a session)."""
        return self.control_plane.catalog_snapshot()

    # --------------------------------------------------------------- close

    def close(self) -> None:
        """Close the control plane's clients, the ledger's owner locks, the SSH pool, and stop the embedded
        fleet (each step runs). The plugin cancels the missions before (:meth:`ControlPlane.close_missions`),
        so their end is reported."""
        try:
            self.control_plane.close()
        finally:
            self.ledger_mounts.close()
            self._close_transport_and_sim()

    def _close_transport_and_sim(self) -> None:
        if self._fanout is not None:
            self._fanout.close()
            self._fanout = None
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
