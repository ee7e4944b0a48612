"""The interruption matrix: SIGINT (once, twice), SIGTERM and SIGKILL at the mount, the gate, the
teardown, the mission dispatch and the cancel, and two sessions sharing one state directory.

One simulated fleet serves the whole module; the gate is a stand-in of three quick items (the
real gate is tested elsewhere), so each child session costs its mount and little more. After
every scenario, plus a sweep where the policy says so, the fleet holds no VM, key or mission the
scenario created, and the ledger says exactly what is open.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gate_harness import CANARY_SUITES
from support.lifecycle_harness import (
    child_argv,
    interrupt,
    kill,
    open_entries,
    read_report,
    run_child,
    start_child,
    suites_dir,
    sweep,
    teardown_by_hand,
    wait_for,
    wait_until_no_process,
)

from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.sim.fleet import SimFleet

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("just") is None, reason="the just binary (PyPI rust-just) is missing"),
]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    with SimFleet(tmp_path_factory.mktemp("fleet")) as shared:
        yield shared


@pytest.fixture
def clean(fleet: SimFleet) -> Iterator[SimFleet]:
    """The fleet, checked afterwards: nothing this scenario made is left (VMs, keys, live missions)."""
    vms, keys = sorted(fleet.live_vms()), sorted(fleet.live_keys())
    yield fleet
    for knob in ("mount-slow", "teardown-slow"):
        fleet.clear_knob(knob)
    for marker in ("mount-started", "teardown-started"):
        (fleet.knobs_dir / marker).unlink(missing_ok=True)
    assert fleet.controlplane is not None
    fleet.controlplane.clear_faults()
    assert sorted(fleet.live_vms()) == vms
    assert sorted(fleet.live_keys()) == keys
    assert fleet.controlplane.missions_nonterminal() == []


def mounted_gate(
    fleet: SimFleet,
    tmp: Path,
    name: str,
    policy: str,
    *,
    hold_at: str | None = None,
    state: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a child that mounts ``name`` and runs the quick gate (held at ``hold_at``)."""
    argv = child_argv(
        suites_dir(tmp, quick_gate=True),
        fleet.inventory_path,
        tmp,
        "--sbx-mount",
        name,
        "--sbx-teardown",
        policy,
        *(["--sbx-state", str(state)] if state else []),
    )
    env = {
        "SBX_TEST_HOLD_AT": hold_at or "",
        "SBX_TEST_MARKER": str(tmp / "gate-held"),
        "SBX_TEST_RELEASE": str(tmp / "release"),
    }
    return start_child(argv, tmp, env)


def released_all(state: Path) -> None:
    assert open_entries(state) == [], [(e.kind, e.ident, e.state) for e in open_entries(state)]


def test_mount_interrupted_sigkill_and_second_sigint_then_one_sweep_releases_both(
    clean: SimFleet, tmp_path: Path
) -> None:
    fleet, state = clean, tmp_path / "state"
    fleet.set_knob("mount-slow", "30")
    # SIGKILL while the mount recipe runs (its VM, key and record exist): the intent knows only "killed"
    proc = mounted_gate(fleet, tmp_path / "a", "killed", "always", state=state)
    wait_for(fleet.knobs_dir / "mount-started", proc)
    kill(proc)
    (fleet.knobs_dir / "mount-started").unlink()
    [killed] = open_entries(state)
    assert (killed.kind, killed.ident, killed.state) == ("mount", "killed", "open")
    # a second SIGINT during the mount abandons it: the entry stays open, the report says so
    proc = mounted_gate(fleet, tmp_path / "b", "twice", "always", state=state)
    wait_for(fleet.knobs_dir / "mount-started", proc)
    out = interrupt(proc, signal.SIGINT, times=2)
    assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
    report = read_report(tmp_path / "b")
    assert report["interrupted"] is True, out[-3000:]
    [mount] = report["mounts"]
    assert mount["action"] == "abandoned" and "ledger" in mount["why"]
    assert [(e["kind"], e["ident"], e["state"]) for e in report["left"]] == [("mount", "twice", "abandoned")]
    assert sorted((e.ident, e.state) for e in open_entries(state)) == [
        ("killed", "open"),
        ("twice", "abandoned"),
    ]
    made = [v for v in fleet.created_by_recipes() if v.startswith(("killed-", "twice-"))]
    assert len(made) == 2 and all(v in fleet.live_vms() for v in made)
    # one sweep matches each intent to the run its mount made (name prefix, time window), then releases it
    fleet.clear_knob("mount-slow")
    ret, swept, out = sweep(fleet, tmp_path, state)
    checks = {c["target"]: c for c in swept["checks"]}
    assert ret == 0 and sorted(checks) == ["mount-killed", "mount-twice"], out[-3000:]
    for target, check in checks.items():
        run_id = check["evidence"]["ident"]
        assert run_id.startswith(target.removeprefix("mount-") + "-") and run_id in made
        assert check["outcome"] == "passed" and "released by --sbx-sweep" in check["message"]
    released_all(state)


def test_sigterm_mid_gate_with_on_pass_keeps_the_run_then_a_later_session_sees_it_released(
    clean: SimFleet, tmp_path: Path
) -> None:
    fleet, state = clean, tmp_path / "state"
    proc = mounted_gate(fleet, tmp_path, "term", "on-pass", hold_at="two")
    wait_for(tmp_path / "gate-held", proc)
    out = interrupt(proc, signal.SIGTERM)
    assert proc.returncode == 2, out[-3000:]
    report = read_report(tmp_path)
    [mount] = report["mounts"]
    run_id = mount["run_id"]
    # on-pass: 1 of 3 selected items passed, 2 never ran -> kept, not torn down
    assert mount["action"] == "kept" and "2 of 3 selected gate item(s) never ran" in mount["why"], mount
    assert report["interrupted"] is True
    assert sorted(n.split("::")[1] for n in report["not_run"]) == [
        f"test_quick_three[{run_id}]",
        f"test_quick_two[{run_id}]",
    ]
    assert [(e["ident"], e["state"]) for e in report["left"]] == [(run_id, "kept")]
    assert run_id in fleet.live_vms()
    # kept runs stay visible: a sweep shows it (skipped, never swept), the operator releases it by
    # hand, and the next session finds its record closed and closes the ledger entry
    _, swept, out = sweep(fleet, tmp_path, state)
    [check] = swept["checks"]
    assert check["outcome"] == "skipped" and "kept on purpose" in check["message"], out[-3000:]
    assert run_id in fleet.live_vms()
    teardown_by_hand(fleet, run_id)
    _ret, swept, out = sweep(fleet, tmp_path, state)
    [check] = swept["checks"]
    assert check["outcome"] == "passed" and "already torn down" in check["message"], out[-3000:]
    released_all(state)


def test_two_sessions_on_one_state_dir_then_sigkill_mid_gate(clean: SimFleet, tmp_path: Path) -> None:
    fleet, state = clean, tmp_path / "state"
    # session A mounts and is held in its gate
    a = mounted_gate(fleet, tmp_path / "a", "conc-a", "always", hold_at="one", state=state)
    wait_for(tmp_path / "a" / "gate-held", a)
    # session B mounts its own, sweeps, tears down its own: A's live entry is skipped, not touched
    b_dir = tmp_path / "b"
    suites = suites_dir(b_dir, Path(__file__).parents[2] / "gates" / "test_gate_ledger.py", quick_gate=True)
    argv = child_argv(suites, fleet.inventory_path, b_dir, "--sbx-mount", "conc-b", "--sbx-teardown", "always",
                      "--sbx-sweep", "--sbx-state", str(state))  # fmt: skip
    ret, out = run_child(argv, b_dir)
    report = read_report(b_dir)
    [skip] = [c for c in report["checks"] if c["check"] == "ledger_leaked"]
    assert ret == 0 and skip["outcome"] == "skipped", out[-3000:]
    assert "live session" in skip["message"] and skip["evidence"]["owner_alive"] is True
    assert report["mounts"][0]["action"] == "torn-down"
    [alpha] = open_entries(state)
    assert alpha.ident.startswith("conc-a-") and alpha.ident in fleet.live_vms()
    # SIGKILL A mid-gate: its entry stays "created"; now its owner is dead, a sweep releases it
    kill(a)
    assert [(e.ident, e.state) for e in open_entries(state)] == [(alpha.ident, "created")]
    ret, swept, out = sweep(fleet, tmp_path, state)
    [check] = swept["checks"]
    assert ret == 0 and check["outcome"] == "passed", out[-3000:]
    released_all(state)


def test_sigkill_during_teardown_then_the_next_session_reconciles(clean: SimFleet, tmp_path: Path) -> None:
    fleet, state = clean, tmp_path / "state"
    fleet.set_knob("teardown-slow", "2")
    proc = mounted_gate(fleet, tmp_path, "dying", "always")
    wait_for(fleet.knobs_dir / "teardown-started", proc)
    kill(proc)
    [entry] = open_entries(state)
    assert entry.state == "created"  # the ledger never heard how the teardown ended
    fleet.clear_knob("teardown-slow")
    # the recipe runs on in its own process group (or dies of SIGPIPE at its next line): let it end
    wait_until_no_process(entry.ident)
    # whichever it was, the sweep reads the run record: closed -> released in the ledger; open -> torn down
    ret, swept, out = sweep(fleet, tmp_path, state)
    [check] = swept["checks"]
    assert ret == 0 and check["outcome"] == "passed", out[-3000:]
    assert check["evidence"]["ident"] == entry.ident
    released_all(state)


def canary_child(fleet: SimFleet, tmp: Path, route: str, *args: str) -> list[str]:
    suites = suites_dir(tmp, *CANARY_SUITES)
    return child_argv(suites, fleet.inventory_path, tmp, "-k", route, *args, marks="canary")


def test_create_answered_500_is_found_by_title_and_cancelled_before_the_report(
    clean: SimFleet, tmp_path: Path
) -> None:
    fleet, state = clean, tmp_path / "state"
    assert fleet.controlplane is not None
    fleet.controlplane.inject("cp.create-500", "gemini")
    fleet.controlplane.inject("cp.stuck-pending", "gemini")  # left alone, the mission would stay pending
    _ret, out = run_child(canary_child(fleet, tmp_path, "gemini-flash and dispatched"), tmp_path)
    report = read_report(tmp_path)
    [dispatched] = report["checks"]
    assert dispatched["outcome"] == "error", out[-3000:]
    [cleanup] = [c for c in report["cleanup"] if c["kind"] == "mission"]
    assert cleanup["ok"] and cleanup["action"].startswith("cancelled"), report["cleanup"]
    assert "never answered" in cleanup["action"]
    assert "cleanup: mission" in out
    released_all(state)


def test_sigkill_at_mission_dispatch_then_sweep_cancels_by_id(clean: SimFleet, tmp_path: Path) -> None:
    fleet, state = clean, tmp_path / "state"
    assert fleet.controlplane is not None
    fleet.controlplane.inject("cp.stuck-pending", "gemini")  # the route waits: a mission stays live
    proc = start_child(canary_child(fleet, tmp_path, "gemini-flash and dispatched"), tmp_path)
    deadline = time.monotonic() + 120

    def settled() -> bool:
        # the mission is created and its keyed retry (an intent of its own until answered) has coalesced
        states = [e.state for e in Ledger(state).state()]
        return "created" in states and "open" not in states

    while time.monotonic() < deadline and not settled():
        time.sleep(0.05)
    kill(proc)
    [entry] = open_entries(state)
    assert entry.kind == "mission" and entry.ident in fleet.controlplane.missions_nonterminal()
    ret, swept, out = sweep(fleet, tmp_path, state)
    [check] = swept["checks"]
    assert ret == 0 and check["outcome"] == "passed" and "cancelled" in check["message"], out[-3000:]
    released_all(state)


def test_sigint_at_mission_dispatch_cancels_and_reports_it(clean: SimFleet, tmp_path: Path) -> None:
    fleet, state = clean, tmp_path / "state"
    assert fleet.controlplane is not None
    fleet.controlplane.inject("cp.stuck-pending", "gemini")
    proc = start_child(canary_child(fleet, tmp_path, "gemini-flash"), tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(e.state == "created" for e in Ledger(state).state()):
        time.sleep(0.05)
    out = interrupt(proc, signal.SIGINT)
    assert proc.returncode == 2, out[-3000:]
    report = read_report(tmp_path)
    assert report["interrupted"] is True and len(report["not_run"]) == 4, out[
        -3000:
    ]  # 3 route items + prompt
    [cleanup] = report["cleanup"]
    assert cleanup["kind"] == "mission" and cleanup["action"] == "cancelled" and cleanup["ok"]
    assert report["left"] == []
    released_all(state)


def test_second_sigint_during_the_cancel_leaves_the_mission_open_then_sweep_settles_it(
    clean: SimFleet, tmp_path: Path
) -> None:
    fleet, state = clean, tmp_path / "state"
    cp = fleet.controlplane
    assert cp is not None
    cp.inject("cp.stuck-pending", "gemini")
    proc = start_child(canary_child(fleet, tmp_path, "gemini-flash and dispatched"), tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(e.state == "created" for e in Ledger(state).state()):
        time.sleep(0.05)
    cp.inject("cp.cancel-slow")
    started = cp.cancels_started
    proc.send_signal(signal.SIGINT)  # the session ends: the cancel starts, and is slow
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and cp.cancels_started == started and proc.poll() is None:
        time.sleep(0.02)
    # a Ctrl-C during the cancel lets it finish; a second one abandons it
    out = interrupt(proc, signal.SIGINT, times=2)
    assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
    report = read_report(tmp_path)
    assert report["interrupted"] is True, out[-3000:]
    assert [c["ok"] for c in report["cleanup"]] == [False], report["cleanup"]
    [left] = report["left"]
    [entry] = open_entries(state)
    assert (left["kind"], left["ident"]) == ("mission", entry.ident) and entry.state == "created"
    cp.clear_faults("cp.cancel-slow")
    ret, swept, out = sweep(fleet, tmp_path, state)
    [check] = swept["checks"]
    assert ret == 0 and check["outcome"] == "passed", out[-3000:]
    released_all(state)


def _interrupted_artifacts(tmp: Path, out: str) -> dict[str, Any]:
    """results.json, after asserting that every artifact and the terminal say INTERRUPTED, never HEALTHY."""
    report = read_report(tmp)
    assert report["interrupted"] is True and "during cleanup" in report["interrupted_reason"], out[-3000:]
    html = (tmp / "report" / "report.html").read_text()
    assert 'data-verdict="interrupted"' in html and "HEALTHY" not in html
    junit = ET.fromstring((tmp / "report" / "junit.xml").read_text())
    props = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert props["sbxcheck.verdict"] == "interrupted"
    assert "verdict: INTERRUPTED" in out and "HEALTHY" not in out, out[-3000:]
    return report


@pytest.mark.parametrize("times", [1, 2], ids=["one-sigterm-lets-it-finish", "a-second-abandons-it"])
def test_a_sigterm_during_the_cleanup_makes_every_artifact_say_interrupted(
    clean: SimFleet, tmp_path: Path, times: int
) -> None:
    """Every item ran and passed; the TERM arrives while the session cancels its mission at the end."""
    fleet, state = clean, tmp_path / "state"
    cp = fleet.controlplane
    assert cp is not None
    cp.inject("cp.stuck-pending", "gemini")  # the mission is still pending at the end: it is cancelled
    cp.inject("cp.cancel-slow")
    started = cp.cancels_started
    proc = start_child(canary_child(fleet, tmp_path, "gemini-flash and dispatched"), tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and cp.cancels_started == started and proc.poll() is None:
        time.sleep(0.02)
    out = interrupt(proc, signal.SIGTERM, times=times)
    assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
    report = _interrupted_artifacts(tmp_path, out)
    assert [c["outcome"] for c in report["checks"]] == ["passed"] and report["not_run"] == []
    assert "SIGTERM" in report["interrupted_reason"]
    if times == 1:
        assert [c["action"] for c in report["cleanup"]] == ["cancelled"] and report["left"] == []
        released_all(state)
        return
    [left] = report["left"]  # the abandoned cancel: named in every artifact, kept by the ledger
    assert left["kind"] == "mission" and left["ident"] in (tmp_path / "report" / "report.html").read_text()
    cp.clear_faults("cp.cancel-slow")
    ret, _swept, out = sweep(fleet, tmp_path, state)
    assert ret == 0, out[-3000:]
    released_all(state)


def test_one_sigint_during_the_mount_lets_it_finish_then_the_policy_applies(
    clean: SimFleet, tmp_path: Path
) -> None:
    fleet, state = clean, tmp_path / "state"
    fleet.set_knob("mount-slow", "2")
    proc = mounted_gate(fleet, tmp_path, "once", "always")
    wait_for(fleet.knobs_dir / "mount-started", proc)
    out = interrupt(proc, signal.SIGINT)
    assert proc.returncode == 2 and "SIGINT received during the mount of once" in out, out[-3000:]
    report = read_report(tmp_path)
    [mount] = report["mounts"]
    assert report["interrupted"] is True and mount["action"] == "torn-down", out[
        -3000:
    ]  # always: no item failed
    assert report["left"] == []
    released_all(state)
