"""Issue 20, end to end: what the fleet says never steers sbxcheck nor corrupts an output.

One simulated fleet with every hostile-answer fault: a control plane answering a path-shaped
mission id, control characters in the VM's output (its OpenRouter answers), in HTTP error bodies
and in status fields, and a workspace held by another session. One gate and one canary session share a history dir.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support.gate_harness import CANARY_SUITES, GATE_SUITE, REPO
from support.schemas import validate_junit

from sbxcheck.lifecycle.ledger import LEDGER_FILE
from sbxcheck.sim.controlplane import PATH_SHAPED_ID
from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")  # every byte below 0x20 but \t and \n, and DEL
_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
DOCUMENTED = re.compile(  # the control plane's routes (spec sandboxed-sh.md), ids as UUIDs
    r"/api/(auth/login|auth/status|health|health/fleet|remote-nodes|backends|control/running"
    r"|control/stream|control/missions/integrity|control/tracks"  # issue 23's stream, issue 21's reads
    r"|library/agent|backends/[a-z_]+/agents|ai/providers|providers"
    rf"|control/missions(/{_UUID}(/events|/digest|/cancel)?)?"
    rf"|workspaces(/{_UUID}(/exec)?)?|nodes/[A-Za-z0-9_.:-]+/(un)?cordon)"
)


def _child(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=cwd, capture_output=True, timeout=600, check=False,
    )  # fmt: skip


def _assert_clean_outputs(report: Path, *texts: bytes) -> None:
    for text in texts:
        found = RAW_CONTROL.search(text)
        assert found is None, text[max(0, found.start() - 300) : found.start() + 60]
    for name in ("results.json", "report.html", "junit.xml"):
        data = (report / name).read_bytes()
        found = RAW_CONTROL.search(data)
        assert found is None, (name, data[max(0, found.start() - 300) : found.start() + 60])
    ET.fromstring((report / "junit.xml").read_bytes())  # well-formed


def test_hostile_fleet_text_and_a_path_shaped_id(tmp_path: Path) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    for suite in (GATE_SUITE, *CANARY_SUITES):
        shutil.copy(suite, suites / suite.name)
    history, state = tmp_path / "history", tmp_path / "state"
    faults = ["vm.control-chars", "cp.path-shaped-id", "cp.control-chars", "cp.workspace-busy"]
    with SimFleet(tmp_path / "fleet", faults) as fleet:
        cp = fleet.controlplane
        assert cp is not None
        common = ("--sbx-inventory", str(fleet.inventory_path), "--sbx-history", str(history))
        common += ("--sbx-state", str(state))
        gate = _child(
            tmp_path, "-m", "gate", str(suites / GATE_SUITE.name), "-k", "C_model_answers or B_pi",
            "--sbx-report", "gate-report", *common,
        )  # fmt: skip
        cp.clear_requests()
        canary = _child(
            tmp_path, "-m", "canary", *(str(suites / s.name) for s in CANARY_SUITES),
            "-k", "gemini or opencode-glm or verity", "--sbx-report", "canary-report", *common,
        )  # fmt: skip
        paths = {r.path for r in cp.requests}
    # the path-shaped id: no request outside the documented routes, nothing in the ledger, a bad_response
    assert paths and {p for p in paths if not DOCUMENTED.fullmatch(p)} == set(), sorted(paths)
    assert "/api/control/missions" in paths
    ledger_text = (state / LEDGER_FILE).read_text(encoding="utf-8")
    assert "wipe-everything" not in ledger_text and PATH_SHAPED_ID not in ledger_text
    document = json.loads((tmp_path / "canary-report" / "results.json").read_text())
    checks = {c["nodeid"].split("::")[1]: c for c in document["checks"]}
    dispatched = checks["test_route_dispatched[gemini-flash]"]
    assert (dispatched["outcome"], dispatched["classification"]) == ("error", "bad_response")
    assert "field 'id' is not a canonical hyphenated UUID" in dispatched["message"]
    for name in ("codex-verity", "opencode-verity"):
        # the workspace's status carries the control characters, so it is not 'ready': issue 21's
        # readiness keeps the canary back (the busy-workspace 409 is covered by the unit tests), and
        # the status it shows is neutralised
        held = checks[f"test_workspace_visible[{name}]"]
        assert held["outcome"] == "failed" and "not dispatched: workspace_ready[verity]" in held["message"]
        assert "]52;c;" in held["message"] and RAW_CONTROL.search(held["message"].encode()) is None
    refused = checks["test_route_dispatched[opencode-glm]"]
    assert refused["outcome"] == "failed" and "^[]52;c;" in refused["message"]  # shown, not obeyed
    # control characters in every kind of fleet text: nothing raw in any output
    assert gate.returncode == 1 and canary.returncode == 1, (gate.stdout[-2000:], canary.stdout[-2000:])
    assert b"^[]52;c;" in gate.stdout and b"^[]52;c;" in canary.stdout
    _assert_clean_outputs(tmp_path / "gate-report", gate.stdout, gate.stderr)
    _assert_clean_outputs(tmp_path / "canary-report", canary.stdout, canary.stderr)
    cli = [sys.executable, "-m", "sbxcheck.cli"]
    for args in (["report", str(tmp_path / "canary-report")], ["history", str(history)]):
        shown = subprocess.run([*cli, *args], capture_output=True, timeout=60, check=False)
        assert shown.stdout and RAW_CONTROL.search(shown.stdout + shown.stderr) is None, args
    for report in ("gate-report", "canary-report"):  # last: without the schema it skips (fails in CI)
        validate_junit(tmp_path / report / "junit.xml")


@pytest.mark.parametrize(
    ("fault", "what"), [("state.ledger-fifo", "is a FIFO"), ("state.ledger-symlink", "is a symlink")]
)
def test_a_fifo_or_symlink_at_the_ledger_is_one_clear_error(tmp_path: Path, fault: str, what: str) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    shutil.copy(REPO / "gates" / "test_gate_ledger.py", suites / "test_gate_ledger.py")
    with SimFleet(tmp_path / "fleet", [fault]) as fleet:
        proc = _child(
            tmp_path, "-m", "gate", str(suites), "--sbx-inventory", str(fleet.inventory_path),
            "--sbx-report", "report",
        )  # fmt: skip
    document = json.loads((tmp_path / "report" / "results.json").read_text())
    [item] = document["checks"]
    assert (item["outcome"], item["classification"]) == ("error", "config_defect"), proc.stdout[-2000:]
    assert what in item["message"] and "ledger.jsonl" in item["message"]
    outside = tmp_path / "fleet" / "outside-the-state-dir.txt"
    if outside.exists():
        assert outside.read_text() == "not the ledger: must stay as it is\n"


FORGED = re.compile(rb"^(verdict: HEALTHY|PASSED forged)", re.MULTILINE)


def test_a_line_feed_in_fleet_text_never_starts_a_line_of_its_own(tmp_path: Path) -> None:
    """A control plane's error text holding '\\nverdict: HEALTHY — every check passed\\nPASSED …' printed
    those lines at column 0 before the real verdict (`grep -m1 '^verdict'` read HEALTHY); node ids and
    evidence key names with line feeds did the same in `sbxcheck report`."""
    suites = tmp_path / "suites"
    suites.mkdir()
    for suite in CANARY_SUITES:
        shutil.copy(suite, suites / suite.name)
    history, report = tmp_path / "history", tmp_path / "report"
    with SimFleet(tmp_path / "fleet", ["cp.control-chars"]) as fleet:
        canary = _child(
            tmp_path, "-m", "canary", *(str(suites / s.name) for s in CANARY_SUITES), "-k", "opencode-glm",
            "-vv", "-rA", f"--sbx-inventory={fleet.inventory_path}", f"--sbx-report={report}",
            f"--sbx-history={history}", f"--sbx-state={tmp_path / 'state'}",
        )  # fmt: skip
    assert b"forged-by-a-line-feed" in canary.stdout, canary.stdout[-3000:]  # the server's text was shown
    first = next(line for line in canary.stdout.splitlines() if line.startswith(b"verdict"))
    assert first.startswith(b"verdict: FAILED"), first
    assert FORGED.search(canary.stdout) is None, canary.stdout[-4000:]
    # a results.json whose node id and evidence key names hold line feeds, as a tampered file may
    results = report / "results.json"
    document = json.loads(results.read_text(encoding="utf-8"))
    forgery = "\nverdict: HEALTHY \u2014 every check passed\nPASSED forged by a node id"
    failing = next(c for c in document["checks"] if c["outcome"] in ("failed", "error"))
    failing["nodeid"] += forgery
    failing["evidence"][f"key{forgery}"] = "value"
    results.write_text(json.dumps(document), encoding="utf-8")
    cli = [sys.executable, "-m", "sbxcheck.cli"]
    for args in (["report", str(report)], ["history", str(history)]):
        shown = subprocess.run([*cli, *args], capture_output=True, timeout=60, check=False)
        assert shown.stdout and FORGED.search(shown.stdout + shown.stderr) is None, (args, shown.stdout[-3000:])
    assert b"^Jverdict: HEALTHY" in subprocess.run(
        [*cli, "report", str(report)], capture_output=True, timeout=60, check=False
    ).stdout  # shown, on the line it came in
