"""The run items end to end (issue 22): ``just sbx lifecycle execute`` and ``observe`` on the embedded
fleet, then a child ``pytest -m run``: healthy, one fault per run (each failing for its reason, with its
classification and next step in the terminal, junit.xml and report.html), and a VM gone dead.

The third VM of every fleet has a lived-in shell that prints around every command.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.gate_harness import REPO, GateOutcome, run_suite
from support.next_step_harness import next_step_problems

from sbxcheck.sim.fleet import DEFAULT_SEED, SimFleet, plan_run_ids

JUST = shutil.which("just")
SSH = shutil.which("ssh")
pytestmark = [  # end-to-end: recipes and child sessions against fleets
    pytest.mark.slow,
    pytest.mark.skipif(
        JUST is None or SSH is None, reason="needs the just binary (pip install rust-just) and OpenSSH's ssh"
    ),
]

RUN_SUITE = (REPO / "gates" / "test_run.py",)
CHECKS = ("alive", "log_clean", "observe_app", "observe_obs")
SDLC_ITEMS = ("alive", "log_clean")
TEST_OF = {"alive": "test_run_alive", "log_clean": "test_run_log_clean"}  # the observe items keep their name
# fault -> {check: (outcome, classification, words of its next step)}; every other item of the run passes
EXPECTED: dict[str, dict[str, tuple[str, str, str]]] = {
    "run.sdlc-credits": dict.fromkeys(SDLC_ITEMS, ("failed", "check_failed", "top up the OpenRouter account")),
    "run.sdlc-key-dead": dict.fromkeys(SDLC_ITEMS, ("failed", "auth_failed", "re-mint it by ending this run")),
    "run.sdlc-no-zdr": dict.fromkeys(SDLC_ITEMS, ("failed", "config_defect", "zero-data-retention endpoint")),
    "run.sdlc-provisioning-key": dict.fromkeys(
        SDLC_ITEMS, ("failed", "config_defect", "ran inference with the provisioning key")
    ),
    "run.app-down": {"observe_app": ("failed", "check_failed", "starts it again if it is down")},
    "run.obs-502": {"observe_obs": ("failed", "check_failed", "starts it again if it is down")},
}
OBSERVE_FAILS = {"run.app-down": "observe: app returned 000", "run.obs-502": "observe: obs returned 502"}
GROUPS = [
    ("run.sdlc-credits", "run.sdlc-key-dead", "run.app-down"),
    ("run.sdlc-no-zdr", "run.sdlc-provisioning-key", "run.obs-502"),
]


def test_every_run_fault_is_in_the_matrix() -> None:
    from sbxcheck.sim.faults import FAULTS, is_run_fault

    assert sorted(EXPECTED) == sorted(f for f in FAULTS if is_run_fault(f))
    assert sorted(f for g in GROUPS for f in g) == sorted(EXPECTED)


def just(fleet: SimFleet, *args: str) -> subprocess.CompletedProcess[str]:
    """``just sbx lifecycle ARGS`` in the fleet's checkout (the interpreter's bin first: no pyenv shims)."""
    assert JUST is not None
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "/usr/bin:/bin")])
    return subprocess.run(
        [JUST, "sbx", "lifecycle", *args], cwd=fleet.checkout, env={**os.environ, "PATH": path},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def execute_and_observe(fleet: SimFleet, faults: dict[str, str], dead: str | None = None) -> None:
    """Execute and observe every run; the ``dead`` one's record says it was, as before its VM went down."""
    for run_id in fleet.run_ids:
        if run_id == dead:
            path = fleet.checkout / ".sandbox" / "runs" / f"{dead}.json"
            doc = json.loads(path.read_text())
            doc.update(pid=31337, ports={"app": 1, "obs": 2})
            path.write_text(json.dumps(doc, indent=2) + "\n")
            continue
        ran = just(fleet, "execute", run_id, "add a health endpoint")
        assert ran.returncode == 0 and "executing" in ran.stdout, ran.stdout + ran.stderr
        observed = just(fleet, "observe", run_id)
        fault = faults.get(run_id, "")
        if fault in OBSERVE_FAILS:  # upstream's observe records the ports, then its verification fails
            assert observed.returncode == 1 and OBSERVE_FAILS[fault] in observed.stdout, observed.stdout
        else:
            assert observed.returncode == 0, observed.stdout + observed.stderr
        ports = record(fleet, run_id)["ports"]
        assert isinstance(ports, dict) and sorted(ports) == ["app", "obs"]


def record(fleet: SimFleet, run_id: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((fleet.checkout / ".sandbox" / "runs" / f"{run_id}.json").read_text())
    return data


def run_items(pytester: pytest.Pytester, fleet: SimFleet) -> GateOutcome:
    return run_suite(pytester, fleet, "run", RUN_SUITE)


def test_healthy_fleet_skips_before_execute_and_passes_after(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet") as fleet:
        before = run_items(pytester, fleet)
        assert before.ret == 0
        for (check, run_id, _), entry in before.items().items():
            assert entry["outcome"] == "skipped", entry
            said = "not executed" if check in SDLC_ITEMS else "not observed"
            assert said in entry["message"] and run_id in entry["message"]
        assert fleet.connections(fleet.run_ids[0]) == 0  # nothing to check: no VM was even connected
        # the second run's SDLC finishes at once: its pid is gone, run.log says it completed
        finished = fleet.run_ids[1]
        (fleet.root / "vms" / finished / ".sim").mkdir(exist_ok=True)
        (fleet.root / "vms" / finished / ".sim" / "sdlc-seconds").write_text("0\n")
        execute_and_observe(fleet, {})
        for run_id in fleet.run_ids:
            assert isinstance(record(fleet, run_id)["pid"], int)
        ports = [p for r in fleet.run_ids for p in record(fleet, r)["ports"].values()]  # type: ignore[union-attr]
        assert len(set(ports)) == 6  # VMs on one machine: no two share a port, none is 4501/4600
        outcome = run_items(pytester, fleet)
    items = outcome.items()
    assert sorted(items) == sorted((c, r, None) for r in fleet.run_ids for c in CHECKS)
    assert {e["outcome"] for e in items.values()} == {"passed"}, outcome.stdout[-3000:]
    assert outcome.ret == 0 and outcome.report["incidents"] == []
    assert {c["suite"] for c in outcome.report["checks"]} == {"run"}
    alive = items[("alive", fleet.run_ids[0], None)]["evidence"]
    assert alive["alive"] is True and "adw sdlc" in alive["ps"]
    assert alive["pid"] == record(fleet, fleet.run_ids[0])["pid"]
    done = items[("alive", finished, None)]
    assert done["evidence"]["alive"] is False and "completed" in done["evidence"]["outcome_line"]
    noisy = items[("observe_app", fleet.run_ids[2], None)]  # the lived-in shell's VM
    assert noisy["evidence"]["http_status"] == 200 and noisy["evidence"]["via"].startswith("curl on")
    obs = items[("observe_obs", fleet.run_ids[0], None)]["evidence"]
    assert obs["http_status"] == 307 and obs["url"].endswith(f":{obs['obs_port']}/")
    assert '<testsuite name="run"' in (outcome.report_dir / "junit.xml").read_text()


@pytest.mark.parametrize("group", GROUPS, ids=["+".join(g) for g in GROUPS])
def test_each_fault_fails_its_items_for_its_reason(
    pytester: pytest.Pytester, tmp_path: Path, group: tuple[str, ...]
) -> None:
    runs = plan_run_ids(DEFAULT_SEED, 4)
    faulted = dict(zip(runs, group, strict=False))
    dead = runs[3]  # the first group's fourth VM was executed and observed, then went down
    faults = [f"{fault}@{run}" for run, fault in faulted.items()]
    fleet_runs = 4 if group is GROUPS[0] else 3
    if fleet_runs == 4:
        faults.append(f"vm.unreachable@{dead}")
    with SimFleet(tmp_path / "fleet", faults, runs=fleet_runs) as fleet:
        execute_and_observe(fleet, faulted, dead)
        outcome = run_items(pytester, fleet)
    items = outcome.items()
    mismatches = []
    for (check, run_id, _), entry in sorted(items.items()):
        want = ("passed", None)
        if run_id in faulted and check in EXPECTED[faulted[run_id]]:
            want = EXPECTED[faulted[run_id]][check][:2]
        if run_id == dead:
            want = ("error", "infra_unreachable")
        got = (entry["outcome"], entry["classification"])
        if got != want:
            mismatches.append(f"{entry['nodeid']}: want {want}, got {got}: {entry['message']}")
    assert not mismatches, "\n".join(mismatches) + outcome.stdout[-2000:]
    assert outcome.ret == 1
    junit = (outcome.report_dir / "junit.xml").read_text()
    page = html.unescape((outcome.report_dir / "report.html").read_text())
    for run_id, fault in faulted.items():
        for check, (_, classification, words) in EXPECTED[fault].items():
            entry = items[(check, run_id, None)]
            assert words in entry["next_step"], entry
            assert entry["evidence"], entry
            test = TEST_OF.get(check, f"test_{check}")
            assert f"{test}[{run_id}]" in outcome.stdout and words in outcome.stdout  # the terminal
            assert classification in junit and words in junit
            assert words in page
    sdlc_fault = next(r for r, f in faulted.items() if f.startswith("run.sdlc-"))
    died = items[("log_clean", sdlc_fault, None)]["evidence"]
    assert died["fatal_line_no"] > 0 and "Error: 40" in died["fatal_line"]
    # both items of a dead SDLC share one cause: one incident each, with the next step once
    shared = [i for i in outcome.report["incidents"] if i["classification"] != "infra_unreachable"]
    assert any(len(i["checks"]) == 2 for i in shared), shared
    if fleet_runs == 4:  # a dead VM: one connection attempt, its four items one incident, not a hang
        dead_items = [items[(c, dead, None)] for c in CHECKS]
        assert {e["duration_s"] < 30 for e in dead_items} == {True}
        [incident] = [i for i in outcome.report["incidents"] if i["classification"] == "infra_unreachable"]
        assert len(incident["checks"]) == 4
    problems = next_step_problems(outcome.report, fleet.inventory_path)
    assert not problems, "\n".join(problems)
