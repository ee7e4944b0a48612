"""One VM (and the control plane) per xdist worker, without touching node ids.

xdist's ``loadgroup`` groups items by appending ``@<group>`` to their node ids, so a failure printed
under ``-n`` cannot be pasted back, ``--lf`` without ``-n`` does not find it, and pytest >= 9.2 (which
derives node ids from ``Node._id``) stops grouping at all. Instead sbxcheck answers xdist's own
``pytest_xdist_make_scheduler`` hook with :class:`GroupScopeScheduling`, a ``LoadScopeScheduling``
whose scope is an item's ``xdist_group`` name (sbxcheck puts one on every item of a VM and of the
control plane; user tests keep theirs), and the node id itself for every other item (scheduled one by
one, as ``load`` would).

The controller never collects, so each worker writes the groups of the items it collected to a file
in a directory the controller names (``workerinput``), before it reports its collection; the
scheduler reads it when that collection arrives. A worker whose file is missing (a remote ``--tx``
host) still runs every item, ungrouped.

Only a run that selects sbxcheck items gets this scheduler: :class:`ChosenAtCollection` waits for the
first collection and then becomes either it or the scheduler xdist (or another plugin) would have
made, so an unrelated project's ``-n`` run is scheduled exactly as without sbxcheck.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

__all__ = [
    "SCOPE_DIR_KEY",
    "ChosenAtCollection",
    "GroupScopeScheduling",
    "WorkerGroups",
    "groups_by_parameter",
    "item_groups",
    "scope_file",
    "write_groups",
]

#: The ``workerinput`` key naming the directory where workers leave their item groups.
SCOPE_DIR_KEY = "sbxcheck_scope_dir"


def scope_file(directory: Path, worker_id: str) -> Path:
    return directory / f"groups-{worker_id}.json"


def item_groups(items: Sequence[pytest.Item]) -> dict[str, str]:
    """``{nodeid: group}`` of every item carrying an ``xdist_group`` mark (by name or first argument)."""
    groups: dict[str, str] = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            continue
        name = mark.kwargs.get("name", mark.args[0] if mark.args else None)
        if name:
            groups[item.nodeid] = str(name)
    return groups


def write_groups(path: Path, groups: dict[str, str]) -> None:
    """Write the groups atomically: the controller reads the file only after the worker reported."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(groups), encoding="utf-8")
    os.replace(tmp, path)


def read_groups(path: Path) -> dict[str, str] | None:
    """The groups a worker left, or None when it left none (or an unreadable file)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): str(v) for k, v in data.items()}


class GroupScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """Items of one ``xdist_group`` go to one worker as one unit; every other item is its own unit."""

    def __init__(
        self,
        config: pytest.Config,
        log: Any,
        directory: Path,
        fallback: Callable[[Sequence[str]], dict[str, str]] | None = None,
    ) -> None:
        super().__init__(config, log)
        self.directory = directory
        self.fallback = fallback
        self.groups: dict[str, str] = {}
        self.ungrouped_workers: list[str] = []

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        worker_id = str(node.workerinput.get("workerid", node.gateway.id))
        groups = read_groups(scope_file(self.directory, worker_id))
        if groups is None:
            # a worker on another host cannot leave a file here: the controller groups sbxcheck's
            # own items by what it knows (run ids, the control plane's routes); user marks are lost
            self.ungrouped_workers.append(worker_id)
            groups = self.fallback(collection) if self.fallback is not None else {}
        # every worker collects the same items with the same marks: the first answer is kept
        for nodeid, group in groups.items():
            self.groups.setdefault(nodeid, group)
        super().add_node_collection(node, collection)

    def _split_scope(self, nodeid: str) -> str:
        group = self.groups.get(nodeid)
        # a group's scope cannot collide with a node id: node ids always contain "::"
        return f"group:{group}" if group is not None else nodeid


def suites_file(directory: Path, worker_id: str) -> Path:
    """Present when the worker collected sbxcheck items (the controller then uses its own scheduler)."""
    return directory / f"sbxcheck-items-{worker_id}"


class ChosenAtCollection:
    """The scheduler, chosen when the first worker's collection arrives.

    Until then it only remembers the workers that came up (all xdist asks of a scheduler before a
    collection); then it becomes :class:`GroupScopeScheduling` when that worker collected sbxcheck
    items, else ``default()`` (what xdist would have made), and forwards everything to it. It reports
    the chosen one's class, so ``-v``'s "scheduling tests via ..." names the scheduler at work.
    """

    def __init__(
        self,
        sbxcheck: Callable[[], GroupScopeScheduling],
        default: Callable[[], Any],
        selected: Callable[[Any, Sequence[str]], bool],
    ) -> None:
        self._make_sbxcheck, self._make_default, self._selected = sbxcheck, default, selected
        self._nodes: list[Any] = []
        self.chosen: Any = None

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self.chosen) if self.chosen is not None else ChosenAtCollection

    @property
    def nodes(self) -> list[Any]:
        return self.chosen.nodes if self.chosen is not None else list(self._nodes)

    @property
    def collection_is_completed(self) -> bool:
        return bool(self.chosen is not None and self.chosen.collection_is_completed)

    @property
    def tests_finished(self) -> bool:
        return bool(self.chosen is not None and self.chosen.tests_finished)

    @property
    def has_pending(self) -> bool:
        return bool(self.chosen is None or self.chosen.has_pending)

    def add_node(self, node: Any) -> None:
        if self.chosen is not None:
            self.chosen.add_node(node)
        else:
            self._nodes.append(node)

    def remove_node(self, node: Any) -> str | None:
        if self.chosen is not None:
            return self.chosen.remove_node(node)  # type: ignore[no-any-return]
        self._nodes.remove(node)
        return None

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        if self.chosen is None:
            self.chosen = self._make_sbxcheck() if self._selected(node, collection) else self._make_default()
            for earlier in self._nodes:
                self.chosen.add_node(earlier)
        self.chosen.add_node_collection(node, collection)

    def __getattr__(self, name: str) -> Any:
        """Everything else xdist calls after the collection (schedule, mark_test_complete, ...)."""
        chosen = self.__dict__.get("chosen")
        if chosen is None:
            raise AttributeError(name)
        return getattr(chosen, name)


class WorkerGroups:
    """Worker-side: leaves the groups of the collected items where the controller's scheduler reads them."""

    def __init__(self, directory: Path, worker_id: str, is_sbxcheck: Callable[[pytest.Item], bool]) -> None:
        self.path = scope_file(directory, worker_id)
        self.flag = suites_file(directory, worker_id)
        self.is_sbxcheck = is_sbxcheck

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker appends "@<group>" to node ids (loadgroup)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if any(self.is_sbxcheck(item) for item in items):
            # sbxcheck's scheduler groups by VM itself: node ids stay plain even under --dist loadgroup
            config.option.loadgroup = False

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker reports its collection to the controller
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        write_groups(self.path, item_groups(session.items))
        if any(self.is_sbxcheck(item) for item in session.items):
            self.flag.parent.mkdir(parents=True, exist_ok=True)
            self.flag.touch()


def groups_by_parameter(
    nodeids: Sequence[str], run_ids: Sequence[str], control_plane: set[str], control_plane_group: str
) -> dict[str, str]:
    """Groups from node ids alone: a parameter that is (or starts with) a run id goes with that VM, one
    that is a route or canary label with the control plane. Over-grouping only costs parallelism."""
    groups: dict[str, str] = {}
    for nodeid in nodeids:
        if not nodeid.endswith("]") or "[" not in nodeid:
            continue
        param = nodeid[nodeid.index("[") + 1 : -1]
        run = next((r for r in run_ids if param == r or param.startswith(f"{r}-")), None)
        if run is not None:
            groups[nodeid] = run
        elif param in control_plane:
            groups[nodeid] = control_plane_group
    return groups
