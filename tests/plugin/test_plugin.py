"""The plugin seen from the command line: markers, selection, ids, collection, bad input, xdist."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from support.gate_harness import GATE_SUITE, expected_items, run_gate

from sbxcheck.sim.fleet import SimFleet


@pytest.fixture
def live_fleet(healthy_fleet: SimFleet) -> SimFleet:
    """The session's shared healthy fleet (these tests only read it)."""
    return healthy_fleet


def _suite(pytester: pytest.Pytester) -> Path:
    shutil.copy(GATE_SUITE, pytester.path / "test_gate.py")
    pytester.makepyfile(test_other="def test_plain():\n    assert 1 + 1 == 2\n")
    return pytester.path


def _collected_ids(result: pytest.RunResult) -> list[str]:
    """Collected node ids, relative to the test file (pytester's rootdir varies)."""
    return [re.sub(r"^\S*?(test_\w+\.py::)", r"\1", line) for line in result.outlines if "::" in line]


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.gate:*", "@pytest.mark.canary:*", "@pytest.mark.triage:*"])


def test_m_gate_selects_only_gate_items_and_collect_only_opens_no_connection(
    pytester: pytest.Pytester, live_fleet: SimFleet
) -> None:
    _suite(pytester)
    before = {r: live_fleet.connections(r) for r in live_fleet.run_ids}
    result = pytester.runpytest_subprocess(
        "--collect-only", "-q", "-m", "gate", "--sbx-inventory", str(live_fleet.inventory_path)
    )
    ids = _collected_ids(result)
    assert len(ids) == len(expected_items(live_fleet)) == 31  # 30 open-run items + 1 closed-run skip
    assert all(i.startswith(("test_gate.py::test_gate_", "test_gate.py::test_vm_hygiene[")) for i in ids)
    assert "test_other.py::test_plain" not in result.stdout.str()
    assert {r: live_fleet.connections(r) for r in live_fleet.run_ids} == before


@pytest.mark.slow  # children that build the embedded fleet (or collect the whole repository)
def test_ids_are_readable_and_stable_across_runs(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    first = _collected_ids(pytester.runpytest_subprocess("--collect-only", "-q", "-m", "gate"))
    second = _collected_ids(pytester.runpytest_subprocess("--collect-only", "-q", "-m", "gate"))
    assert first == second and len(first) == 31  # 30 for the open runs, 1 skip for the closed one
    run = first[0].split("[", 1)[1].split("]")[0]
    assert f"test_gate.py::test_gate_A_git_integrity[{run}]" in first
    assert f"test_gate.py::test_gate_C_model_answers[{run}-google/gemini-3.6-flash]" in first


@pytest.mark.slow  # children that build the embedded fleet (or collect the whole repository)
def test_header_says_which_fleet(pytester: pytest.Pytester, live_fleet: SimFleet) -> None:
    _suite(pytester)
    sim = pytester.runpytest_subprocess("--collect-only", "-q", "-m", "gate", "-p", "no:xdist")
    sim_header = pytester.runpytest_subprocess("--collect-only", "-m", "gate")
    sim_header.stdout.fnmatch_lines(
        [
            "sbxcheck: inventory: embedded simulated fleet (no inventory given)",
            "sbxcheck: simulated VMs run *pi*",
        ]
    )
    assert sim.ret == 0
    real = pytester.runpytest_subprocess("--collect-only", "--sbx-inventory", str(live_fleet.inventory_path))
    real.stdout.fnmatch_lines([f"sbxcheck: inventory: {live_fleet.inventory_path}"])


def test_bad_inventory_is_one_usage_error_before_collection(pytester: pytest.Pytester) -> None:
    """Issue 18 changed this on purpose: an invalid or missing inventory is exit 4 with one message
    (file, field, what was expected, the fix), not an error item and exit 1 (a fleet outage's code)."""
    _suite(pytester)
    inv = pytester.path / "bad.toml"
    inv.write_text('[ssh]\nconnect_timeout_s = "soon"\nport_knocking = true\n[sssf]\ncheckout = "x"\n')
    result = pytester.runpytest_subprocess("-m", "gate", f"--sbx-inventory={inv}", "--sbx-report", "r")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "Traceback" not in result.stdout.str() + err
    result.stderr.fnmatch_lines(
        [f"ERROR: sbxcheck: inventory (from --sbx-inventory): {inv}: field 'ssh.connect_timeout_s'*"
         "unknown field 'ssh.port_knocking'*; fix the file*"]
    )  # fmt: skip
    assert "collected" not in result.stdout.str() and not (pytester.path / "r").exists()  # nothing ran
    missing = pytester.runpytest_subprocess("-m", "gate", f"--sbx-inventory={pytester.path / 'nope.toml'}")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*nope.toml: cannot read inventory (No such file or directory)*"])


@pytest.mark.slow
def test_bad_run_records_become_config_defect_items(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet") as fleet:
        runs_dir = fleet.checkout / ".sandbox" / "runs"
        good = json.loads((runs_dir / f"{fleet.run_ids[0]}.json").read_text())
        (runs_dir / "zulu-20261130-aaaaaa.json").write_text(
            json.dumps({**good, "run_id": "zulu-20261130-aaaaaa", "owner": "x"})
        )
        (runs_dir / "yankee-20261130-bbbbbb.json").write_text('{"run_id": "yankee-20261130-bbbbbb",')
        nofill = {**good, "run_id": "xray-20261130-cccccc", "commit_sha": None}
        (runs_dir / "xray-20261130-cccccc.json").write_text(json.dumps(nofill))
        outcome = run_gate(pytester, fleet, "-k", "test_gate_run_record or test_gate_A_git")
    by_run = {
        c["nodeid"].split("[")[1].rstrip("]"): c
        for c in outcome.report["checks"]
        if c["check"] == "run_record"
    }
    # an unknown field deviates from upstream's schema but is not one the gate uses: reported, still gated
    zulu = by_run["zulu-20261130-aaaaaa"]
    assert "unknown field(s) 'owner'" in zulu["message"]
    assert (zulu["outcome"], zulu["classification"]) == ("failed", "config_defect")
    assert "not valid JSON" in by_run["yankee-20261130-bbbbbb"]["message"]
    assert "FILL never ran" in by_run["xray-20261130-cccccc"]["message"]
    for bad in ("yankee-20261130-bbbbbb", "xray-20261130-cccccc"):
        assert (by_run[bad]["outcome"], by_run[bad]["classification"]) == ("error", "config_defect")
    for run in fleet.run_ids:  # the good runs are gated as usual; the closed run is a skip
        assert by_run[run]["outcome"] == "passed"
    [closed] = fleet.closed_run_ids
    assert by_run[closed]["outcome"] == "skipped" and "closed at" in by_run[closed]["message"]
    a_items = [c for c in outcome.report["checks"] if c["check"] == "A_git_integrity"]
    assert sorted(c["target"] for c in a_items) == sorted([*fleet.run_ids, "zulu-20261130-aaaaaa"])
    assert all(c["outcome"] == "passed" for c in a_items)


@pytest.mark.slow
def test_named_runs_closed_or_missing(pytester: pytest.Pytester, live_fleet: SimFleet) -> None:
    runs_dir = live_fleet.checkout / ".sandbox" / "runs"
    closed = next(p.stem for p in runs_dir.glob("*.json") if p.stem not in live_fleet.run_ids)
    outcome = run_gate(
        pytester,
        live_fleet,
        "--sbx-run-id",
        closed,
        "--sbx-run-id",
        "ghost-20261130-000000",
        "--sbx-run-id",
        live_fleet.run_ids[2],
        "-k",
        "run_record or E_credit",
    )
    checks = {(c["check"], c["target"]): c for c in outcome.report["checks"]}
    assert checks[("run_record", closed)]["outcome"] == "skipped"  # named or not, a closed run is a skip
    assert "closed at" in checks[("run_record", closed)]["message"]
    assert "no run record" in checks[("run_record", "ghost-20261130-000000")]["message"]
    assert checks[("run_record", live_fleet.run_ids[2])]["outcome"] == "passed"
    assert [t for (c, t) in checks if c == "E_credit_remaining"] == [live_fleet.run_ids[2]]


@pytest.mark.slow
def test_fanout_xdist_and_one_by_one_give_the_same_results_over_one_connection_per_vm(
    pytester: pytest.Pytester, live_fleet: SimFleet
) -> None:
    """Speed never changes an outcome, and each VM is reached over exactly one connection, in every mode.

    Without the two pi checks (B, D: the same scripts, ~3 s of CPU per VM per mode); the gate fault
    matrix and the healthy-fleet test run them in fan-out.
    """

    def essence(report: dict[str, object]) -> list[tuple[object, ...]]:
        checks = report["checks"]
        assert isinstance(checks, list)
        return [
            (c["nodeid"], c["suite"], c["check"], c["target"], c["outcome"], c["classification"])
            for c in checks
        ]

    runs: dict[str, dict[str, object]] = {}
    connections: dict[str, dict[str, int]] = {}
    for mode, args in {
        "fan-out": (),
        "xdist -n 2 (fan-out per worker)": ("-n", "2"),
        "one by one": ("--sbx-max-parallel", "0", "-p", "no:xdist"),
    }.items():
        before = {r: live_fleet.connections(r) for r in live_fleet.run_ids}
        outcome = run_gate(pytester, live_fleet, *args, "-k", "not B_pi_models and not D_cost_reported")
        connections[mode] = {r: live_fleet.connections(r) - before[r] for r in live_fleet.run_ids}
        runs[mode] = outcome.report
        shutil.rmtree(outcome.report_dir)
    serial = runs["one by one"]
    assert len(essence(serial)) == 25  # 24 open-run items (31 less B and D on 3 VMs) + the closed run's skip
    for mode, report in runs.items():
        assert essence(report) == essence(serial), mode
        assert report["incidents"] == [], mode
        assert connections[mode] == dict.fromkeys(live_fleet.run_ids, 1), mode
    c_item = next(c for c in runs["fan-out"]["checks"] if c["check"] == "C_model_answers")  # type: ignore[union-attr]
    assert c_item["duration_s"] == c_item["evidence"]["remote_s"] > 0 and c_item["evidence"]["wait_s"] >= 0


def test_an_item_judged_from_fan_out_work_reports_that_works_time(
    pytester: pytest.Pytester, live_fleet: SimFleet
) -> None:
    """test_vm_hygiene judges on the host what its scan found in the fan-out: its junit time and
    results.json duration are the scan's own remote time, never 0.000, whether fanned out or run inline."""
    import xml.etree.ElementTree as ET

    for args in ((), ("--sbx-max-parallel", "0")):
        outcome = run_gate(pytester, live_fleet, *args, "-k", "vm_hygiene")
        items = [c for c in outcome.report["checks"] if c["check"] == "vm_hygiene"]
        assert len(items) == len(live_fleet.run_ids), args
        times = {
            case.get("name"): float(case.get("time") or 0)
            for case in ET.parse(outcome.report_dir / "junit.xml").getroot().iter("testcase")
        }
        for item in items:
            assert item["outcome"] == "passed", item["message"]
            assert item["duration_s"] == item["evidence"]["remote_s"] > 0, (args, item["evidence"])
            name = item["nodeid"].split("::")[-1]
            assert times[name] == pytest.approx(item["duration_s"], abs=0.001) and times[name] > 0, (args, name)
        shutil.rmtree(outcome.report_dir)


@pytest.mark.slow
def test_execnet_gateways_merge_one_report_on_the_controller(
    pytester: pytest.Pytester, live_fleet: SimFleet
) -> None:
    """Workers on execnet gateways (loopback popen here; ssh=… or socket=… across machines) gate their
    VMs over one connection each; the controller writes one report with every worker's results."""
    before = {r: live_fleet.connections(r) for r in live_fleet.run_ids}
    outcome = run_gate(
        pytester,
        live_fleet,
        "--tx",
        "2*popen",
        "--dist",
        "loadgroup",
        "-k",
        "run_record or A_git or E_credit",
    )
    closed = set(live_fleet.closed_run_ids)
    assert all(c["outcome"] == "skipped" for c in outcome.report["checks"] if c["target"] in closed)
    checks = [c for c in outcome.report["checks"] if c["target"] not in closed]
    assert outcome.ret == 0, outcome.stdout[-2000:]
    assert sorted((c["check"], c["target"]) for c in checks) == sorted(
        (check, run)
        for run in live_fleet.run_ids
        for check in ("run_record", "A_git_integrity", "E_credit_remaining")
    )
    assert all(c["outcome"] == "passed" and c["evidence"] for c in checks)
    assert "2 workers" in outcome.stdout or "gw1" in outcome.stdout
    assert {r: live_fleet.connections(r) - before[r] for r in live_fleet.run_ids} == dict.fromkeys(
        live_fleet.run_ids, 1
    )
    junit = (outcome.report_dir / "junit.xml").read_text(encoding="utf-8")
    assert all(run in junit for run in live_fleet.run_ids)


@pytest.mark.slow  # children that build the embedded fleet (or collect the whole repository)
def test_readme_main_job_collects_from_the_repository_root() -> None:
    """`pytest -m gate` from the root collects the shipped suites only (gates/, canaries/): not tests/,
    whose modules import the [test] extra, which the quick start's base install does not have."""
    import subprocess
    import sys

    from support.gate_harness import REPO

    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gate", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    gate_items = [line for line in proc.stdout.splitlines() if line.startswith("gates/test_gate.py::")]
    assert len(gate_items) == 31  # 28 + test_vm_hygiene per open run (issue 22)


def test_sbx_vm_is_the_connected_vm_of_the_items_run(pytester: pytest.Pytester, live_fleet: SimFleet) -> None:
    """A user's own gate check gets the VM of its item's run (one item per gateable run)."""
    pytester.makepyfile(
        test_own_check="""
import pytest

@pytest.mark.gate
def test_home_is_the_runs(sbx_gate_run, sbx_vm):
    assert sbx_vm.run("echo $HOME", timeout=20).stdout.strip().endswith("/" + sbx_gate_run.run_id)
"""
    )
    result = pytester.runpytest_subprocess(
        "-m", "gate", "-p", "no:randomly", f"--sbx-inventory={live_fleet.inventory_path}",
        f"--sbx-report={pytester.path / 'r'}",
    )  # fmt: skip
    assert result.parseoutcomes() == {"passed": len(live_fleet.run_ids)}, result.outlines[-20:]
