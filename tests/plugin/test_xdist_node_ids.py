"""Under ``-n`` node ids stay plain: a printed failure can be pasted back, ``--lf`` works without ``-n``.

sbxcheck groups a VM's items on one worker with xdist's scheduler hook (``sbxcheck.plugin.xdist``),
not with loadgroup's ``@group`` suffix.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.gate_harness import GATE_SUITE

from sbxcheck.plugin.xdist import (
    GroupScopeScheduling,
    groups_by_parameter,
    item_groups,
    scope_file,
    write_groups,
)
from sbxcheck.sim.fleet import DEFAULT_SEED, SimFleet, plan_run_ids

pytestmark = pytest.mark.slow  # child sessions against a fleet of its own


def _gate(pytester: pytest.Pytester, fleet: SimFleet, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-m", "gate", "-p", "no:randomly", f"--sbx-inventory={fleet.inventory_path}",
        f"--sbx-report={pytester.path / 'report'}", *args, timeout=300,
    )  # fmt: skip


def test_a_failing_vms_printed_id_pastes_back_and_lf_reruns_it_without_n(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    bad = plan_run_ids(DEFAULT_SEED, 3)[0]
    (pytester.path / "gates").mkdir()
    shutil.copy(GATE_SUITE, pytester.path / "gates" / GATE_SUITE.name)
    with SimFleet(tmp_path / "fleet", [f"vm.dirty-tree@{bad}"]) as fleet:
        first = _gate(pytester, fleet, "-n", "2", "-k", "A_git_integrity or E_credit", "gates")
        assert first.ret == 1, "\n".join(first.outlines[-40:])
        failed = sorted(set(re.findall(r"^FAILED (\S+)", "\n".join(first.outlines), re.M)))
        # the short summary and the sbxcheck section print the same plain id
        assert failed == [f"gates/test_gate.py::test_gate_A_git_integrity[{bad}]"]
        assert not any("@" in line.split("::", 1)[-1] for line in first.outlines if "test_gate_" in line)
        # the id as printed, pasted back (no -n): it is found and runs that one item
        pasted = _gate(pytester, fleet, failed[0])
        assert pasted.ret == 1, "\n".join(pasted.outlines[-30:])
        pasted.assert_outcomes(failed=1)
        # --lf without -n reruns exactly the failure, not everything
        last_failed = _gate(pytester, fleet, "--lf", "gates")
        out = "\n".join(last_failed.outlines)
        assert "not in selected tests" not in out and "run-last-failure: rerun previous 1 failure" in out
        last_failed.assert_outcomes(failed=1)


class _Node:
    def __init__(self, worker: str) -> None:
        self.workerinput = {"workerid": worker}
        self.gateway = SimpleNamespace(id=worker)
        self.shutting_down = False
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.append(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_scheduler_sends_a_group_to_one_worker_and_ungrouped_items_one_by_one(tmp_path: Path) -> None:
    ids = [f"t.py::test_vm[{vm}-{n}]" for vm in ("alpha", "beta") for n in range(3)] + [
        "t.py::test_plain[1]",
        "t.py::test_plain[2]",
    ]
    groups = {i: i.split("[")[1].split("-")[0] for i in ids if "test_vm" in i}
    for worker in ("gw0", "gw1"):
        write_groups(scope_file(tmp_path, worker), groups)
    config: Any = SimpleNamespace(
        option=SimpleNamespace(loadscopereorder=True),
        getvalue=lambda name: ["2*popen"] if name == "tx" else None,
    )
    sched = GroupScopeScheduling(config, None, tmp_path)
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, ids)
    sched.schedule()
    done: set[tuple[int, int]] = set()
    while sched.workqueue:  # workers finish what they were sent; the rest is handed out as they do
        for n, node in enumerate(nodes):
            for index in [i for batch in node.sent for i in batch if (n, i) not in done]:
                done.add((n, index))
                sched.mark_test_complete(node, index)
    assert sched.ungrouped_workers == []
    sent = [{ids[i] for batch in node.sent for i in batch} for node in nodes]
    assert set().union(*sent) == set(ids) and not sent[0] & sent[1]
    for vm in ("alpha", "beta"):  # every item of one VM on one worker
        assert sum(1 for s in sent if any(f"[{vm}-" in i for i in s)) == 1
    # a worker that left no groups (a remote --tx host): its items still run, ungrouped
    lone = GroupScopeScheduling(config, None, tmp_path / "missing")
    node = _Node("gw9")
    lone.add_node(node)
    lone.add_node_collection(node, ids)
    assert lone.ungrouped_workers == ["gw9"] and lone._split_scope(ids[0]) == ids[0]


def test_item_groups_reads_xdist_group_by_name_or_argument(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        "import pytest\n"
        "@pytest.mark.xdist_group(name='vm1')\ndef test_a(): pass\n"
        "@pytest.mark.xdist_group('vm2')\ndef test_b(): pass\n"
        "def test_c(): pass\n"
    )
    items, _ = pytester.inline_genitems()
    assert item_groups(items) == {
        "test_item_groups_reads_xdist_group_by_name_or_argument.py::test_a": "vm1",
        "test_item_groups_reads_xdist_group_by_name_or_argument.py::test_b": "vm2",
    }


def test_groups_from_node_ids_for_workers_on_other_hosts() -> None:
    ids = [
        "g.py::test_gate_A[demo-20261202-abc123]",
        "g.py::test_gate_C[demo-20261202-abc123-google/gemini-3.6-flash]",
        "c.py::test_route[opencode-glm]",
        "c.py::test_discovery[rest]",
        "t.py::test_plain",
    ]
    groups = groups_by_parameter(ids, ["demo-20261202-abc123"], {"opencode-glm"}, "cp")
    assert groups == {ids[0]: "demo-20261202-abc123", ids[1]: "demo-20261202-abc123", ids[2]: "cp"}
