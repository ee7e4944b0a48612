"""The session's ledger and the mounts booked in it: where the ledger lives, what other sessions left, the runs
this one mounts (``--sbx-mount``) and their teardown.

:class:`LedgerMounts` is a resource of :class:`~sbxcheck.plugin.session.SbxSession`; what it records about
the run (the mounts made, an unreadable ledger, interrupted teardowns) goes to the
:class:`~sbxcheck.plugin.runstate.RunState` it is handed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sbxcheck.errors import InventoryError, SbxError
from sbxcheck.lifecycle.ledger import Ledger, LedgerEntry, default_owner, release_owner_locks
from sbxcheck.lifecycle.mounts import Mounted, MountManager
from sbxcheck.plugin.controlplane import ControlPlane, Fleet
from sbxcheck.plugin.interrupts import finish_before_interrupt
from sbxcheck.plugin.review import EntryReview, review_entry

if TYPE_CHECKING:
    from sbxcheck.clients.openrouter import OpenRouterKey
    from sbxcheck.clients.sandboxed import SandboxedClient
    from sbxcheck.inventory import Inventory
    from sbxcheck.plugin.runstate import RunState


class LedgerMounts:
    """The ledger (made on first use in ``state_dir()``) and the mount manager of one session."""

    def __init__(
        self,
        fleet: Fleet,
        control_plane: ControlPlane,
        state_dir: Callable[[], Path],
        session_tag: str,
        *,
        mount_names: Sequence[str] = (),
        sweep: bool = False,
        ledger_ids: Iterable[str] | None = None,
    ) -> None:
        """``mount_names``: empty takes the inventory's ``[sssf] mounts``; ``ledger_ids``: an xdist worker
        reviews only the entries its controller saw."""
        self.fleet = fleet
        self.control_plane = control_plane
        self.state_dir = state_dir
        self.session_tag = session_tag
        self.mount_names = list(mount_names)
        self.sweep = sweep  # --sbx-sweep: release what dead sessions left
        self.ledger_ids = None if ledger_ids is None else set(ledger_ids)
        self._ledger: Ledger | None = None
        self._mount_manager: MountManager | None = None

    # --------------------------------------------------------------- the ledger

    @property
    def in_use(self) -> bool:
        return self._ledger is not None

    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger(self.state_dir(), session=self.session_tag)
        return self._ledger

    def ledger_entries(self, state: RunState) -> list[LedgerEntry]:
        """Open entries of other sessions (kept ones too: they are shown, never swept); an unreadable
        ledger is ``state.ledger_problem`` and no entry."""
        try:
            entries = self.ledger().open_entries()
        except SbxError as exc:
            state.ledger_problem = exc  # a FIFO, a symlink, ...: one error item says it
            return []
        mine = default_owner()
        others = [
            e
            for e in entries
            if (e.session != self.session_tag if e.session is not None else e.owner != mine)
        ]
        if self.ledger_ids is not None:  # a worker collects what the controller saw, nothing more
            others = [e for e in others if e.id in self.ledger_ids]
        return others

    def review_entry(self, entry: LedgerEntry) -> EntryReview:
        """Decide about one entry another session left (:func:`sbxcheck.plugin.review.review_entry`)."""
        return review_entry(self, entry)

    def inventory(self) -> Inventory:
        """The session's inventory (what a review reads the run records from)."""
        return self.fleet.inventory()

    def sandboxed_client(self) -> SandboxedClient:
        """The control plane's REST client (what a review asks about a mission)."""
        return self.control_plane.sandboxed_client()

    # --------------------------------------------------------------- mounts

    def mount_manager(self) -> MountManager:
        if self._mount_manager is None:
            sssf = self.fleet.inventory().sssf
            if sssf is None:
                raise InventoryError("--sbx-mount needs an [sssf] section (the checkout the recipes run in)")
            self._mount_manager = MountManager(
                sssf.recipe_templates(), self.ledger(), vm_suffix=sssf.vm_host_suffix
            )
            from sbxcheck.checks.revocation import RevocationVerifier

            self._mount_manager.revocation = RevocationVerifier(sssf.runs_path, self._list_keys)  # proves revokes
        return self._mount_manager

    def _list_keys(self) -> list[OpenRouterKey]:
        """Every key on the account, all pages (the proof of a teardown's revoke)."""
        with self.control_plane.openrouter_admin() as admin:
            return admin.list_keys()

    def mount_all(self, state: RunState) -> None:
        """Mount every --sbx-mount name (else the inventory's [sssf] mounts), once, into ``state``: their
        runs are gated."""
        if not self.mount_names:
            sssf = self.fleet.inventory().sssf
            self.mount_names = list(sssf.mounts) if sssf is not None else []
        if not self.mount_names or state.mounts:
            return
        self.fleet.ensure_live()
        manager = self.mount_manager()
        for name in self.mount_names:
            with finish_before_interrupt(f"the mount of {name}", reraise=True):
                mounted = manager.mount(name)
            state.add_mount(mounted)

    def finish_mounts(self, state: RunState, policy: str, gate_outcomes: dict[str, list[str]]) -> list[Mounted]:
        """Apply the teardown policy once (sessionfinish, or unconfigure after an interrupt).

        Returns every mount the manager started, an interrupted one included.
        """
        manager = self._mount_manager
        if state.mounts_finished or manager is None:
            return state.mounts
        state.mounts_finished = True
        finished = state.finish_step(
            "teardown",
            lambda: manager.finish(policy, gate_outcomes),  # type: ignore[arg-type]
        )
        return finished if finished is not None else list(manager.mounts)

    def close(self) -> None:
        """Release this process's owner locks, so they do not pile up one per session."""
        if self._ledger is not None:
            with contextlib.suppress(OSError):
                release_owner_locks(self._ledger.state_dir)
