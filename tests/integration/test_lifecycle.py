"""Mount → gate → teardown through the real ``just sbx`` recipes, under each policy, with the ledger.

Every scenario ends with the simulated fleet holding nothing a test created except what the
policy keeps (and a final sweep releases that too): no VM, no ``sbx-`` key, no open ledger entry.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.gate_harness import GATE_SUITE
from support.lifecycle_harness import LEDGER_SUITE, child_argv, teardown_by_hand

from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.sim.fleet import SimFleet
from sbxcheck.sim.sssf_recipes import clear_knob, set_knob

pytestmark = [  # end-to-end: child sessions against a fleet
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("just") is None, reason="the just binary (PyPI rust-just) is missing"),
]


# Lifecycle scenarios are about mounts, policies and the ledger: the gate they run leaves out its two
# pi checks (B, D; ~3 s of CPU per VM) unless a test asks for the whole gate.
WITHOUT_PI = ("-k", "not B_pi_models and not D_cost_reported")


def gate(
    fleet: SimFleet,
    tmp: Path,
    *args: str,
    inventory: Path | None = None,
    timeout: float = 600,
    whole_gate: bool = False,
) -> dict[str, Any]:
    """Run the gate suite (and the ledger items) in a child pytest; return results.json plus the exit code."""
    if not whole_gate and "-k" not in args:
        args = (*args, *WITHOUT_PI)
    suites = tmp / "suites"
    suites.mkdir(exist_ok=True)
    for suite in (GATE_SUITE, LEDGER_SUITE):
        shutil.copy(suite, suites / suite.name)
    report = tmp / "report"
    shutil.rmtree(report, ignore_errors=True)
    proc = subprocess.run(
        child_argv(suites, inventory or fleet.inventory_path, tmp, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp,
        check=False,
    )
    data: dict[str, Any] = (
        json.loads((report / "results.json").read_text()) if (report / "results.json").exists() else {}
    )
    data["_ret"], data["_out"] = proc.returncode, proc.stdout[-4000:] + proc.stderr[-2000:]
    return data


def assert_nothing_left(fleet: SimFleet, tmp: Path, before_vms: list[str], before_keys: list[str]) -> None:
    """After a sweep, the fleet holds only what it had before the test; the ledger has no open entry."""
    swept = gate(fleet, tmp, "--sbx-sweep", "-k", "test_ledger_leaked")
    assert all(c["outcome"] == "passed" for c in swept.get("checks", [])), swept["_out"]
    assert sorted(fleet.live_vms()) == sorted(before_vms)
    assert sorted(fleet.live_keys()) == sorted(before_keys)
    assert [e for e in open_entries(tmp) if e.state != "kept"] == []


def open_entries(tmp: Path) -> list[Any]:
    return Ledger(tmp / "state").open_entries()


@pytest.fixture
def fleet(tmp_path: Path) -> Any:
    with SimFleet(tmp_path / "fleet") as f:
        yield f


@pytest.mark.parametrize("policy", ["never", "on-pass", "always"])
def test_mount_gate_teardown_by_policy(fleet: SimFleet, tmp_path: Path, policy: str) -> None:
    before_vms, before_keys = fleet.live_vms(), fleet.live_keys()
    whole = policy == "on-pass"  # one policy gates the mounted VM with every item, pi included
    result = gate(fleet, tmp_path, "--sbx-mount", "demo", "--sbx-teardown", policy, whole_gate=whole)
    [mount] = result["mounts"]
    run_id = mount["run_id"]
    assert run_id.startswith("demo-") and mount["mounted"], result["_out"]
    gated = [c for c in result["checks"] if c["target"] == run_id or c["target"].startswith(run_id + "-")]
    assert len(gated) == (10 if whole else 8), result["_out"]  # test_vm_hygiene included (issue 22)
    assert all(c["outcome"] == "passed" for c in gated), result["_out"]
    assert result["_ret"] == 0
    if policy == "never":
        assert mount["action"] == "kept" and mount["ssh"] == f"ssh {run_id}.exe.xyz"
        assert run_id in fleet.live_vms() and f"sbx-{run_id}" in fleet.live_keys()
        [entry] = Ledger(tmp_path / "state").open_entries()
        assert (entry.state, entry.ident) == ("kept", run_id)
    else:
        assert mount["action"] == "torn-down", mount
        proof = mount["teardown"]  # results.json carries the proof, not only the verdict
        assert (proof["exit_code"], proof["key"], proof["revocation"]["status"]) == (0, "revoked", "revoked"), proof
        assert "stdout_tail" not in proof
        assert run_id not in fleet.live_vms() and f"sbx-{run_id}" not in fleet.live_keys()
        assert (fleet.checkout / ".sandbox" / "runs" / f"{run_id}.json").exists()  # the record stays, closed
        assert open_entries(tmp_path) == []
    if policy == "never":  # kept on purpose: release it by hand, as the operator would
        teardown_by_hand(fleet, run_id)
    assert sorted(fleet.live_vms()) == sorted(before_vms) and sorted(fleet.live_keys()) == sorted(before_keys)


def test_failed_gate_keeps_the_vm_whatever_the_flag(fleet: SimFleet, tmp_path: Path) -> None:
    strict = tmp_path / "strict.toml"
    strict.write_text(
        fleet.inventory_path.read_text().replace("credit_floor_usd = 1.0", "credit_floor_usd = 100.0")
    )
    result = gate(fleet, tmp_path, "--sbx-mount", "demo", "--sbx-teardown", "always", inventory=strict)
    [mount] = result["mounts"]
    run_id = mount["run_id"]
    failed = [c for c in result["checks"] if c["target"] == run_id and c["outcome"] == "failed"]
    assert [c["check"] for c in failed] == ["E_credit_remaining"], result["_out"]
    assert mount["action"] == "kept" and "gate" in mount["why"]
    assert mount["ssh"] == f"ssh {run_id}.exe.xyz"
    assert f"ssh {run_id}.exe.xyz" in result["_out"]  # the terminal says how to get in
    assert run_id in fleet.live_vms()
    before = [v for v in fleet.live_vms() if v != run_id]
    keys = [k for k in fleet.live_keys() if k != f"sbx-{run_id}"]
    teardown_by_hand(fleet, run_id)
    assert sorted(fleet.live_vms()) == sorted(before) and sorted(fleet.live_keys()) == sorted(keys)


def test_a_failing_teardown_does_not_stop_the_others(fleet: SimFleet, tmp_path: Path) -> None:
    before_vms, before_keys = fleet.live_vms(), fleet.live_keys()
    set_knob(fleet.knobs_dir, "revoke-fail", "*")
    result = gate(fleet, tmp_path, "--sbx-mount", "one", "--sbx-mount", "two", "--sbx-teardown", "always")
    actions = {m["name"]: m["action"] for m in result["mounts"]}
    assert actions == {"one": "teardown-failed", "two": "teardown-failed"}, result["mounts"]
    left = {e.ident for e in open_entries(tmp_path)}
    assert left == {m["run_id"] for m in result["mounts"]}  # the ledger names exactly what is left
    (fleet.knobs_dir / "revoke-fail").write_text(result["mounts"][1]["run_id"] + "\n")
    swept = gate(fleet, tmp_path, "--sbx-sweep", "-k", "test_ledger_leaked")
    outcomes = {c["target"]: c["outcome"] for c in swept["checks"]}
    assert sorted(outcomes.values()) == ["failed", "passed"], swept["_out"]  # one released, one still refused
    (fleet.knobs_dir / "revoke-fail").unlink()
    assert_nothing_left(fleet, tmp_path, before_vms, before_keys)


# written beside the gate suite: the first gate item says it started, then waits for the signal
HOLD_GATE_CONFTEST = """
import os, pathlib, time
import pytest

@pytest.fixture(autouse=True)
def _hold_the_gate():
    pathlib.Path(os.environ["SBX_TEST_GATE_STARTED"]).touch()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.05)
    yield
"""


def start_mounted_gate(fleet: SimFleet, tmp_path: Path, *, hold_gate: bool) -> subprocess.Popen[bytes]:
    """A child ``pytest -m gate --sbx-mount demo --sbx-teardown always``; optionally held in its first item."""
    suites = tmp_path / "suites"
    suites.mkdir()
    shutil.copy(GATE_SUITE, suites / GATE_SUITE.name)
    if hold_gate:
        (suites / "conftest.py").write_text(HOLD_GATE_CONFTEST)
    env = {**os.environ, "SBX_TEST_GATE_STARTED": str(tmp_path / "gate-started")}
    argv = child_argv(
        suites, fleet.inventory_path, tmp_path, "--sbx-mount", "demo", "--sbx-teardown", "always"
    )
    return subprocess.Popen(
        [*argv, *WITHOUT_PI],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env=env,
    )


def interrupt_when(proc: subprocess.Popen[bytes], marker: Path, signals: int = 1) -> str:
    """Wait for ``marker`` (bounded), send SIGINT ``signals`` times, return the child's output."""
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not marker.exists() and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the child never reached the point to interrupt"
        for _ in range(signals):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out.decode(errors="replace")


def test_sigint_mid_gate_tears_down_what_the_policy_allows(fleet: SimFleet, tmp_path: Path) -> None:
    before_vms, before_keys = fleet.live_vms(), fleet.live_keys()
    proc = start_mounted_gate(fleet, tmp_path, hold_gate=True)
    out = interrupt_when(proc, tmp_path / "gate-started")
    assert proc.returncode == 2, out[-3000:]  # interrupted
    assert len(fleet.created_by_recipes()) == 1
    assert sorted(fleet.live_vms()) == sorted(before_vms), out[-3000:]
    assert sorted(fleet.live_keys()) == sorted(before_keys)
    assert open_entries(tmp_path) == []


def test_sigint_during_teardown_lets_it_finish(fleet: SimFleet, tmp_path: Path) -> None:
    before_vms, before_keys = fleet.live_vms(), fleet.live_keys()
    set_knob(fleet.knobs_dir, "teardown-slow", "3")
    proc = start_mounted_gate(fleet, tmp_path, hold_gate=False)
    out = interrupt_when(proc, fleet.knobs_dir / "teardown-started")
    assert "SIGINT received during teardown; letting it finish" in out, out[-3000:]
    assert "interrupted during teardown: it finished" in out
    assert proc.returncode == 2  # the run still ends as interrupted
    assert sorted(fleet.live_vms()) == sorted(before_vms), out[-3000:]
    assert sorted(fleet.live_keys()) == sorted(before_keys)
    assert open_entries(tmp_path) == []


def test_second_sigint_abandons_teardown_and_the_ledger_says_what_is_left(
    fleet: SimFleet, tmp_path: Path
) -> None:
    before_vms, before_keys = fleet.live_vms(), fleet.live_keys()
    set_knob(fleet.knobs_dir, "teardown-slow", "3")
    proc = start_mounted_gate(fleet, tmp_path, hold_gate=False)
    out = interrupt_when(proc, fleet.knobs_dir / "teardown-started", signals=2)
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "sbxcheck: teardown was abandoned." in out
    [run_id] = fleet.created_by_recipes()
    time.sleep(4.0)  # longer than the recipe's sleep: had it run on, unseen, the VM would be gone now
    assert run_id in fleet.live_vms()
    assert [(e.kind, e.ident) for e in open_entries(tmp_path)] == [("mount", run_id)]
    [mount] = json.loads((tmp_path / "report" / "results.json").read_text())["mounts"]
    assert mount["action"] == "abandoned" and run_id in mount["why"]
    assert "interrupted during teardown: abandoned at the second SIGINT" in out
    clear_knob(fleet.knobs_dir, "teardown-slow")
    assert_nothing_left(fleet, tmp_path, before_vms, before_keys)


def test_mount_once_under_xdist(fleet: SimFleet, tmp_path: Path) -> None:
    before_vms, before_keys = fleet.live_vms(), fleet.live_keys()
    result = gate(fleet, tmp_path, "--sbx-mount", "demo", "--sbx-teardown", "on-pass", "-n", "2")
    [mount] = result["mounts"]
    assert mount["action"] == "torn-down", result["_out"]
    assert len(fleet.created_by_recipes()) == 1  # the controller mounted once; workers did not
    gated = [c for c in result["checks"] if c["target"].startswith(mount["run_id"])]
    assert len(gated) == 8 and all(c["outcome"] == "passed" for c in gated)  # with test_vm_hygiene
    assert sorted(fleet.live_vms()) == sorted(before_vms) and sorted(fleet.live_keys()) == sorted(before_keys)
    assert open_entries(tmp_path) == []


def test_mounts_declared_in_the_inventory(fleet: SimFleet, tmp_path: Path) -> None:
    inventory = tmp_path / "mounts.toml"
    text = fleet.inventory_path.read_text()
    assert "mounts = []" in text
    inventory.write_text(text.replace("mounts = []", 'mounts = ["fromfile"]', 1))
    result = gate(fleet, tmp_path, "--sbx-teardown", "on-pass", inventory=inventory)
    [mount] = result["mounts"]
    assert mount["name"] == "fromfile" and mount["action"] == "torn-down", result["_out"]
    assert open_entries(tmp_path) == []


def test_a_revoke_that_did_not_take_is_caught_over_every_page(tmp_path: Path) -> None:
    """DELETE answered 200 but the key stays enabled on page 2: the recipe's one-page gate passes, GET /keys
    over every page does not — the teardown fails naming the key hash and the line to run, the entry stays open."""
    with SimFleet(tmp_path / "fleet", ["openrouter.revoke-ignored"]) as fleet:
        result = gate(fleet, tmp_path, "--sbx-mount", "demo", "--sbx-teardown", "always", "-k", "test_gate_run_record")
        [mount] = result["mounts"]
        run_id = mount["run_id"]
        record = json.loads((fleet.checkout / ".sandbox" / "runs" / f"{run_id}.json").read_text())
        assert f"sbx-{run_id}" in fleet.live_keys()  # the key really is still live
    assert mount["action"] == "teardown-failed", mount
    assert record["key_hash"] in mount["why"] and "still ENABLED on page 2" in mount["why"]
    assert f"just sbx lifecycle teardown {run_id}" in mount["why"]
    assert [e.ident for e in open_entries(tmp_path)] == [run_id]  # the ledger keeps it open
