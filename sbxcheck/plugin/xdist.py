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


class WorkerGroups:
    """Worker-side: leaves the groups of the collected items where the controller's scheduler reads them."""

    def __init__(self, directory: Path, worker_id: str) -> None:
        self.path = scope_file(directory, worker_id)

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker reports its collection to the controller
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        write_groups(self.path, item_groups(session.items))


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
