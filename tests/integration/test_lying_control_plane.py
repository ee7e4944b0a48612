"""A control plane that lies in well-formed answers, end to end: each fault on the embedded fleet.

Never act on another's mission (a create joined to a person's live mission), never let one stream
event decide cleanup or spend, never buffer an endless stream line, page the mission list back to
an unanswered create, never judge a record of another mission as the one asked for, and never sum
a reported cost that is not a usable number.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.gate_harness import CANARY_SUITES

from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.sim.controlplane import ControlPlaneDouble
from sbxcheck.sim.controlplane.lies import FOREIGN_ID, OTHER_RECORD_ID
from sbxcheck.sim.fleet import SimFleet
from sbxcheck.sim.httpserver import BackgroundServer

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet


def _canary(
    tmp: Path, faults: list[str], select: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], Any, Any]:
    """``pytest -m canary -k select`` against a fleet with ``faults``: (process, control plane, results)."""
    suites = tmp / "suites"
    suites.mkdir()
    for suite in CANARY_SUITES:
        shutil.copy(suite, suites / suite.name)
    with SimFleet(tmp / "fleet", faults) as fleet:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-m", "canary",
             str(suites), "-k", select, f"--sbx-inventory={fleet.inventory_path}",
             f"--sbx-report={tmp / 'report'}", f"--sbx-state={tmp / 'state'}", *extra],
            cwd=tmp, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        cp = fleet.controlplane
        assert cp is not None
        document = json.loads((tmp / "report" / "results.json").read_text(encoding="utf-8"))
    return proc, cp, document


def _checks(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["nodeid"].split("::", 1)[1]: c for c in document["checks"]}


def _session_left_open(cp: ControlPlaneDouble, foreign: set[str]) -> list[str]:
    return [m for m in cp.missions_nonterminal() if m not in foreign]


def test_a_create_joined_to_another_mission_never_touches_it(tmp_path: Path) -> None:
    proc, cp, document = _canary(tmp_path, ["cp.coalesce-foreign"], "claudecode-opus")
    # the person's mission: still live, and nothing but reads ever named it
    assert cp._missions[FOREIGN_ID].status == "active", proc.stdout[-3000:]
    named = [(r.method, r.path) for r in cp.requests if FOREIGN_ID in r.path or FOREIGN_ID in r.query]
    assert all(method == "GET" for method, _ in named), named
    assert _session_left_open(cp, {FOREIGN_ID}) == []
    dispatched = _checks(document)["test_route_dispatched[claudecode-opus]"]
    assert (dispatched["outcome"], dispatched["classification"]) == ("error", "bad_response")
    assert FOREIGN_ID in dispatched["message"] and "did not create" in dispatched["message"]
    [foreign] = [c for c in document["cleanup"] if c["ident"] == FOREIGN_ID]
    assert foreign["kind"] == "foreign mission" and foreign["action"].startswith("left alone")
    assert f"cleanup: foreign mission {FOREIGN_ID}: left alone" in proc.stdout
    assert document["spend"]["missions"] == 0  # another's mission is no spend of this run
    ledger = Ledger(tmp_path / "state")
    assert [e for e in ledger.state() if e.is_open] == []
    assert FOREIGN_ID not in {e.ident for e in ledger.state()}


def test_a_create_over_the_mcp_joined_to_another_mission_never_touches_it(tmp_path: Path) -> None:
    """The MCP's start_mission answer carries no x-coalesced-with: the stored record (another's title,
    backend and model) is what says the mission is not this session's."""
    proc, cp, document = _canary(tmp_path, ["cp.coalesce-foreign@codex"], "codex-terra-mcp")
    assert cp._missions[FOREIGN_ID].status == "active", proc.stdout[-3000:]
    named = [(r.method, r.path) for r in cp.requests if FOREIGN_ID in r.path or FOREIGN_ID in r.query]
    assert all(method == "GET" for method, _ in named), named  # read, never cancelled
    dispatched = _checks(document)["test_route_dispatched[codex-terra-mcp]"]
    assert (dispatched["outcome"], dispatched["classification"]) == ("error", "bad_response"), dispatched
    assert FOREIGN_ID in dispatched["message"] and "is not this session's" in dispatched["message"]
    [foreign] = [c for c in document["cleanup"] if c["ident"] == FOREIGN_ID]
    assert foreign["kind"] == "foreign mission" and foreign["action"].startswith("left alone")
    assert document["spend"]["missions"] == 0
    assert [e for e in Ledger(tmp_path / "state").state() if e.is_open] == []


def test_a_stream_that_says_completed_does_not_close_a_pending_mission(tmp_path: Path) -> None:
    proc, cp, document = _canary(tmp_path, ["cp.stream-lies"], "gemini-flash")
    [mission_id] = cp.mission_ids()
    # the stored record said pending: cleanup cancelled it (the stream's "completed" decided nothing)
    assert cp._missions[mission_id].status == "interrupted", proc.stdout[-3000:]
    assert ("POST", f"/api/control/missions/{mission_id}/cancel") in {(r.method, r.path) for r in cp.requests}
    [cleanup] = document["cleanup"]
    assert cleanup["action"] == "cancelled" and cleanup["ok"]
    # the $50 the stream announced was never stored: the spend is the stored record's
    assert cleanup["cost_usd"] is None and document["spend"]["total_usd"] == 0
    reached = _checks(document)["test_route_reaches_execution[gemini-flash]"]
    assert (reached["outcome"], reached["classification"]) == ("failed", "timeout")
    assert "still pending" in reached["message"]
    # the stream's unconfirmed "completed" wakes the reader at a backed-off pace, not once a second
    assert reached["evidence"]["reads"] <= 12, reached["evidence"]
    entries = Ledger(tmp_path / "state").state()
    [entry] = [e for e in entries if e.ident == mission_id]
    assert entry.state == "released" and entry.how == "cancelled"


# The child's own peak is VmHWM (its memory's high-water mark since exec): ru_maxrss also holds the
# parent's peak, which Linux carries into a child across fork/vfork + exec (a test worker at 357 MB
# read as a 357 MB stream reader).
_STREAM_CHILD = """
import json, os, sys, time
from sbxcheck.clients.sandboxed import SandboxedClient
from sbxcheck.clients.stream import ControlStream
client = SandboxedClient(sys.argv[1], password=os.environ["SBX_TEST_CP_PASSWORD"], timeout_s=10.0)
stream = ControlStream(sys.argv[1], client.auth_headers, connect_timeout_s=5.0)
stream.start(wait_s=5.0)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end and not stream.absent:
    time.sleep(0.2)
stream.close()
with open("/proc/self/status") as status:
    peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({"peak_kb": peak_kb,
                  "connects": stream.connects, "absent": stream.absent}))
"""


def test_an_endless_stream_line_is_cut_at_the_cap_while_it_is_read(tmp_path: Path) -> None:
    double = ControlPlaneDouble(tmp_path / "cp", latency_scale=0.02, seed=3)
    double.inject("cp.stream-endless-line")
    try:
        with BackgroundServer(double.app, name="controlplane") as server:
            env = {**os.environ, "SBX_TEST_CP_PASSWORD": double.password}
            started = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-c", _STREAM_CHILD, server.url, "6"],
                capture_output=True, text=True, timeout=120, check=False, env=env,
            )  # fmt: skip
            wall = time.monotonic() - started
    finally:
        double.stop()
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    peak_mb = seen["peak_kb"] / 1024
    print(f"endless stream line: peak RSS {peak_mb:.0f} MB, {seen['connects']} connects in {wall:.1f}s")
    assert peak_mb < 200, seen
    assert seen["connects"] >= 2  # each over-long line dropped the connection; the reader went on


def test_a_mission_past_the_first_page_is_found_and_cancelled(tmp_path: Path) -> None:
    proc, cp, document = _canary(tmp_path, ["cp.create-500", "cp.list-flood"], "gemini-flash")
    flood = {m for m in cp.mission_ids() if m not in cp.missions_nonterminal()}
    assert len(cp.mission_ids()) > 250
    assert cp.missions_nonterminal() == [], proc.stdout[-3000:]  # the unanswered create's mission too
    pages = [r for r in cp.requests if r.method == "GET" and r.path == "/api/control/missions"]
    assert any("offset=200" in r.query for r in pages), [r.query for r in pages]
    assert len(pages) <= 25
    found = [c for c in document["cleanup"] if "its create was never answered" in c["action"]]
    assert len(found) >= 1 and all(c["ok"] for c in found), document["cleanup"]
    assert {c["ident"] for c in found} <= flood  # cancelled: now terminal
    assert not any(c["action"] == "never created" for c in document["cleanup"])
    assert [e for e in Ledger(tmp_path / "state").state() if e.is_open] == []


def test_an_unanswered_create_is_found_on_a_control_plane_whose_clock_is_behind(tmp_path: Path) -> None:
    """The mission's created_at is on the server's clock, the intent's time on this machine's: a server
    15 minutes behind made the mission read as older than the create, so "never created", left running."""
    proc, cp, document = _canary(tmp_path, ["cp.create-500", "cp.clock-behind"], "gemini-flash")
    assert cp.mission_ids() and cp.missions_nonterminal() == [], proc.stdout[-3000:]
    found = [c for c in document["cleanup"] if "its create was never answered" in c["action"]]
    assert len(found) == 1 and found[0]["ok"], document["cleanup"]
    assert not any(c["action"] == "never created" for c in document["cleanup"])
    assert [e for e in Ledger(tmp_path / "state").state() if e.is_open] == []


def test_a_record_for_another_mission_is_a_bad_response_naming_both(tmp_path: Path) -> None:
    proc, cp, document = _canary(tmp_path, ["cp.record-id-mismatch"], "opencode-glm")
    ours = [m for m in cp.mission_ids() if m != OTHER_RECORD_ID]
    assert ours and _session_left_open(cp, set()) == [], proc.stdout[-3000:]
    checks = _checks(document)
    for name in ("route_record_echoes_request", "route_reaches_execution"):
        item = checks[f"test_{name}[opencode-glm]"]
        assert (item["outcome"], item["classification"]) == ("error", "bad_response"), item
        assert OTHER_RECORD_ID in item["message"] and ours[0] in item["message"]
        # the other record's backend and model are never judged
        assert "sonnet" not in item["message"] and "claudecode" not in item["message"]
    named = [(r.method, r.path) for r in cp.requests if OTHER_RECORD_ID in r.path]
    assert named == []


def test_a_nonfinite_cost_is_named_and_the_report_is_whole(tmp_path: Path) -> None:
    proc, cp, document = _canary(tmp_path, ["cp.cost-nonfinite"], "codex-verity")  # runs to its end
    [mission_id] = cp.mission_ids()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert {c["outcome"] for c in document["checks"]} == {"passed"}  # the routes are healthy
    spend = document["spend"]
    assert spend["total_usd"] == 0 and spend["missions"] == 1 and spend["missions_cost_unreadable"] == 1
    [cleanup] = document["cleanup"]
    assert cleanup["cost_usd"] is None
    assert cleanup["cost_unreadable"] == (
        "bad_response: assistant_message " + cleanup["cost_unreadable"].split("assistant_message ", 1)[1]
    )
    assert "cost_cents 1.7e+308" in cleanup["cost_unreadable"]
    assert f"cleanup: mission {mission_id}: " in proc.stdout and "(cost unreadable: bad_response" in proc.stdout
    assert "spend: $0.0000 on 1 mission(s) (1 with an unreadable cost, not counted: " in proc.stdout
    for name in ("junit.xml", "report.html"):
        assert (tmp_path / "report" / name).is_file()


def test_a_negative_cost_cannot_defeat_the_spend_cap(tmp_path: Path) -> None:
    proc, cp, document = _canary(
        tmp_path, ["cp.cost-negative"], "gemini-flash or opencode-glm", "--sbx-max-spend=1"
    )
    assert len(cp.mission_ids()) == 1, proc.stdout[-3000:]  # the first mission's cost could not be read
    spend = document["spend"]
    assert spend["cap_reached"] and spend["total_usd"] == 0 and spend["missions_cost_unreadable"] == 1
    held = [c for c in document["checks"] if c["classification"] == "spend_cap"]
    assert len(held) == 1 and sorted(c["nodeid"] for c in held) == spend["not_run"]
    assert all("taken as reached" in c["message"] and "is negative" in c["message"] for c in held)
    assert "$-" not in proc.stdout
    assert "cap $1.0000 taken as reached: what was spent is unknown, 1 item(s) not run" in proc.stdout


def test_json_nested_5000_deep_in_a_message_cannot_break_the_close(tmp_path: Path) -> None:
    """The cost reader parsed a message's JSON content with json.loads: RecursionError escaped the
    mission close (a traceback, no report, the ledger left open). Now the content is read bounded:
    too deep is no cost, and the close goes on."""
    proc, cp, document = _canary(tmp_path, ["cp.deep-json"], "gemini-flash")
    assert proc.returncode in (0, 1) and "RecursionError" not in proc.stdout + proc.stderr, proc.stdout[-3000:]
    [mission_id] = cp.mission_ids()
    assert any(len(e["content"]) > 10_000 for e in cp._missions[mission_id].events)  # the fault was there
    assert cp.missions_nonterminal() == []
    [cleanup] = [c for c in document["cleanup"] if c["kind"] == "mission"]
    assert cleanup["ok"] and cleanup["ident"] == mission_id, cleanup
    assert not cleanup.get("cost_unreadable")  # the deep message says no cost: nothing unreadable
    assert [e for e in Ledger(tmp_path / "state").state() if e.is_open] == []
    for name in ("junit.xml", "report.html"):
        assert (tmp_path / "report" / name).is_file()
