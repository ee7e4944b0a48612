"""What the xdist controller hands each worker (settings, session tag, mounts, ledger ids, scope dir).

Kept apart from :mod:`sbxcheck.plugin.xdist` (the scheduler), which imports xdist.scheduler: that is
imported only when the per-VM scheduler is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sbxcheck.plugin.params import CONTROL_PLANE_GROUP
from sbxcheck.plugin.settings import settings_of
from sbxcheck.plugin.stash import SESSION_KEY, SESSION_TAG_KEY, get_session, run_state


class XdistNodes:
    """Hands every worker what it must share with the controller.

    The settings, whole (the simulator seed gives identical ids), the session tag (same idempotency
    keys), the mounted runs, and
    where workers leave their items' groups for the per-VM scheduler (``scope_dir``, when it is used).
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._ledger_ids: list[str] | None = None
        self.scope_dir: Path | None = None

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """``-n``/``--tx`` with load or loadgroup: one unit per VM / control plane, plain node ids."""
        if self.scope_dir is None:
            return None
        from sbxcheck.plugin.xdist import ChosenAtCollection, GroupScopeScheduling

        scope_dir = self.scope_dir
        others = config.pluginmanager.subset_hook_caller("pytest_xdist_make_scheduler", remove_plugins=[self])
        return ChosenAtCollection(
            lambda: GroupScopeScheduling(config, log, scope_dir, self._groups_from_node_ids),
            lambda: others(config=config, log=log),
            lambda node, collection: self._selects_sbxcheck(scope_dir, node, collection),
        )

    def _selects_sbxcheck(self, scope_dir: Path, node: Any, collection: Sequence[str]) -> bool:
        """Whether a worker's collection has sbxcheck items (its flag file, or for a remote worker the
        groups sbxcheck would give its node ids)."""
        from sbxcheck.plugin.xdist import scope_file, suites_file

        worker_id = str(node.workerinput.get("workerid", node.gateway.id))
        if suites_file(scope_dir, worker_id).exists():
            return True
        if scope_file(scope_dir, worker_id).exists():
            return False  # the worker wrote its groups and no flag: no sbxcheck item
        return bool(self._groups_from_node_ids(collection))

    def _groups_from_node_ids(self, nodeids: Sequence[str]) -> dict[str, str]:
        """For workers on other hosts: sbxcheck's groups from the node ids and the inventory."""
        from sbxcheck.errors import SbxError
        from sbxcheck.plugin.xdist import groups_by_parameter

        if not any(n.endswith("]") for n in nodeids):
            return {}
        session = get_session(self.config)
        try:
            runs = [r.run_id for r in session.gate_runs(run_state(self.config))]
            section = session.inventory().sandboxed
        except SbxError:
            return {}
        labels = {r.label for r in section.routes} | {c.label for c in section.canaries} if section else set()
        return groups_by_parameter(nodeids, runs, labels, str(CONTROL_PLANE_GROUP.kwargs["name"]))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["sbxcheck_settings"] = settings_of(self.config).to_wire()  # the same settings, whole
        node.workerinput["sbxcheck_session_tag"] = self.config.stash[SESSION_TAG_KEY]
        if self.scope_dir is not None:
            node.workerinput["sbxcheck_scope_dir"] = str(self.scope_dir)
        session = self.config.stash.get(SESSION_KEY, None)
        if session is None:
            return
        state = run_state(self.config)
        node.workerinput["sbxcheck_mounted"] = [m.run_id for m in state.mounts if m.run_id]
        if state.mounts and session.uses_sim and session.sim is not None:
            # workers gate the fleet the controller mounted on, not fleets of their own
            node.workerinput["sbxcheck_inventory"] = str(session.sim.inventory_path)
        if not session.uses_sim or state.mounts:
            # every worker collects the same ledger items: the entries the controller saw
            if self._ledger_ids is None:
                self._ledger_ids = [e.id for e in session.ledger_mounts.ledger_entries(state)]
            node.workerinput["sbxcheck_ledger_ids"] = self._ledger_ids
