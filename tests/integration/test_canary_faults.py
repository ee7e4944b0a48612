"""The canary fault matrix: each control-plane fault turns exactly its items; no mission is left behind.

Faults on different backends share a session (each session also proves the other routes stay
green). After every session, healthy, faulted or interrupted, the simulated control plane holds no
non-terminal mission that the session created.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.gate_harness import CANARY_SUITES, REPO, run_canary, run_suite
from support.next_step_harness import next_step_problems

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

ROUTES = (
    "codex-terra",
    "codex-terra-mcp",
    "codex-sol-max",
    "claudecode-opus",
    "opencode-glm",
    "opencode-minimax",
    "gemini-flash",
)
CANARIES = ("codex-verity", "opencode-verity", "claudecode-lean-lab")
ROUTE_CHECKS = ("route_dispatched", "route_record_echoes_request", "route_reaches_execution")
REST_ROUTES = tuple(r for r in ROUTES if not r.endswith("-mcp"))
AUTH = ("error", "auth_failed")

# fault -> {(test, param): (outcome, classification)}; every other item passes
EXPECTED: dict[str, dict[tuple[str, str], tuple[str, str | None]]] = {
    "cp.backend-crash": {
        ("route_reaches_execution", "opencode-glm"): ("failed", "infrastructure"),
        ("route_reaches_execution", "opencode-minimax"): ("failed", "infrastructure"),
        ("workspace_visible", "opencode-verity"): ("skipped", None),
    },
    "cp.model-not-found": {
        ("route_reaches_execution", "opencode-glm"): ("failed", "transport_failure"),
        ("route_reaches_execution", "opencode-minimax"): ("failed", "transport_failure"),
    },
    "cp.effort-reject-max": {("route_dispatched", "codex-sol-max"): ("failed", "degraded")},
    "cp.record-drops-model": {("route_record_echoes_request", "claudecode-opus"): ("failed", "check_failed")},
    "cp.stuck-pending": {("route_reaches_execution", "gemini-flash"): ("failed", "timeout")},
    "cp.no-evidence": {("route_reaches_execution", "gemini-flash"): ("failed", "transport_failure")},
    # a deploy ended it: could not tell, infrastructure (its terminal_reason), never "failed dispatch"
    "cp.server-shutdown": {("route_reaches_execution", "gemini-flash"): ("error", "infrastructure")},
    "cp.mount-missing": {("workspace_visible", "opencode-verity"): ("failed", "workspace_mount_defect")},
    "cp.mount-missing-exitcode": {
        ("workspace_visible", "opencode-verity"): ("failed", "workspace_mount_defect")
    },
    "cp.idempotency-ignored": {("route_dispatched", r): ("failed", "check_failed") for r in REST_ROUTES},
    "cp.auth-expired": {(c, r): AUTH for c in ROUTE_CHECKS for r in ROUTES}
    | {("workspace_visible", c): AUTH for c in CANARIES},
    # how the canary learns about its missions and pushback change no verdict (issue 23)
    "cp.rate-limited": {},
    "cp.stream-lags": {},
    "cp.stream-absent": {},
}
GROUPS = [
    (
        "cp.effort-reject-max",
        "cp.record-drops-model",
        "cp.stuck-pending",
        "cp.mount-missing",
        "cp.stream-absent",
    ),
    ("cp.backend-crash", "cp.no-evidence", "cp.stream-lags"),
    ("cp.model-not-found", "cp.mount-missing-exitcode", "cp.server-shutdown"),
    ("cp.idempotency-ignored",),
    ("cp.auth-expired",),
    ("cp.rate-limited",),
]


def _items(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for check in report["checks"]:
        test, param = check["nodeid"].split("::", 1)[1].split("[", 1)
        out[(test.removeprefix("test_"), param.rstrip("]"))] = check
    return out


def _expected_keys() -> list[tuple[str, str]]:
    keys = [(c, r) for c in ROUTE_CHECKS for r in ROUTES]
    keys += [("workspace_visible", c) for c in CANARIES]
    keys += [("prompt_limits", f"route-{r}") for r in ROUTES] + [
        ("prompt_limits", f"canary-{c}") for c in CANARIES
    ]
    return keys


def test_every_controlplane_fault_is_in_the_matrix() -> None:
    from sbxcheck.sim.faults import FAULTS

    # cp.create-500 and cp.cancel-slow (interrupt aids) are exercised by tests/reliability, the hostile
    # answers of issue 20 by tests/integration/test_hostile_answers.py
    hostile = ("cp.path-shaped-id", "cp.control-chars", "cp.workspace-busy")
    # a control plane that lies in well-formed answers: tests/integration/test_lying_control_plane.py
    lies = ("cp.coalesce-foreign", "cp.stream-lies", "cp.stream-endless-line", "cp.list-flood")
    lies += ("cp.record-id-mismatch", "cp.cost-nonfinite", "cp.cost-negative")
    lies += ("cp.deep-json",)  # tests/integration/test_lying_control_plane.py
    # a session's expiry in any form, a login that answers nothing: tests/integration/test_token_expiry.py
    lies += ("cp.token-expires", "cp.expiry-redirect", "cp.expiry-html", "cp.login-empty")
    # a release's own limits and clock: tests/integration/test_cp_releases.py, test_fleet_canaries.py
    lies += ("cp.slot-held", "cp.clock-behind")
    cp_faults = {
        f
        for f in FAULTS
        if f.startswith("cp.")
        and f not in ("cp.env-values-exposed", "cp.create-500", "cp.cancel-slow", *hostile, *lies)
    }
    assert sorted(EXPECTED) == sorted(cp_faults)
    assert sorted(f for g in GROUPS for f in g) == sorted(cp_faults)


@pytest.mark.parametrize("group", GROUPS, ids=["+".join(g) for g in GROUPS])
def test_fault_group_turns_exactly_its_items(
    pytester: pytest.Pytester, tmp_path: Path, group: tuple[str, ...]
) -> None:
    with SimFleet(tmp_path / "fleet", list(group)) as fleet:
        outcome = run_canary(pytester, fleet)
        assert fleet.controlplane is not None
        left = fleet.controlplane.missions_nonterminal()
        created = fleet.controlplane.mission_ids()
        log = fleet.controlplane.requests
    items = _items(outcome.report)
    assert sorted(items) == sorted(_expected_keys()), outcome.stdout[-2000:]
    want: dict[tuple[str, str], tuple[str, str | None]] = {}
    for fault in group:
        want.update(EXPECTED[fault])
    mismatches = [
        f"{key}: want {want.get(key, ('passed', None))}, got {(e['outcome'], e['classification'])}: {e['message']}"
        for key, e in sorted(items.items())
        if (e["outcome"], e["classification"]) != want.get(key, ("passed", None))
    ]
    assert not mismatches, "\n".join(mismatches)
    assert left == [], f"missions left non-terminal: {left}"
    # issue 19: every next step of every fault is a command that works as printed
    problems = next_step_problems(outcome.report, fleet.inventory_path)
    assert not problems, "\n".join(problems)
    if "cp.backend-crash" in group:  # the shared crash is one incident, and the skipped canary names it
        [incident] = [i for i in outcome.report["incidents"] if i["classification"] == "infrastructure"]
        assert len(incident["checks"]) == 2
        skipped = items[("workspace_visible", "opencode-verity")]
        assert incident["id"] in skipped["message"]
    if "cp.auth-expired" in group:
        assert len(outcome.report["incidents"]) == 1
    if "cp.idempotency-ignored" in group:  # one server-wide defect across routes: one incident
        [incident] = outcome.report["incidents"]
        assert len(incident["checks"]) == len(REST_ROUTES)
        ev = items[("route_dispatched", "codex-terra")]["evidence"]
        assert ev["retry_differs_in"] and ev["retry_mission_id"] != ev["mission_id"]
    if "cp.rate-limited" in group:  # pushed-back creates were sent again: still one mission per item
        pushed_back = [r for r in log if r.status in (429, 503)]
        assert {(r.method, r.path) for r in pushed_back} >= {("POST", "/api/control/missions")}
        assert {r.status for r in pushed_back} == {429, 503}
        assert len(created) == len(ROUTES) + len(CANARIES)
    for fault, mode in (("cp.stream-absent", "polling"), ("cp.stream-lags", "stream")):
        if fault in group:  # the verdicts above are the same; how they were followed is in the evidence
            modes = {
                items[("route_reaches_execution", r)]["evidence"]["followed_by"].split()[0] for r in ROUTES
            }
            assert modes == {mode}
    if "cp.mount-missing-exitcode" in group:  # a failed step's text is never evidence of what it read
        ev = items[("workspace_visible", "opencode-verity")]["evidence"]
        assert ev["checkout_visible"] is False and ev["pin"] is None and ev["mcp_sha256"] is None
        assert "ls" in ev["failed_steps"]


def test_healthy_control_plane_rest_and_mcp_agree(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet") as fleet:
        outcome = run_canary(pytester, fleet)
        assert fleet.controlplane is not None
        left = fleet.controlplane.missions_nonterminal()
        created = fleet.controlplane.mission_ids()
        log = fleet.controlplane.requests
    items = _items(outcome.report)
    assert sorted(items) == sorted(_expected_keys())
    assert {e["outcome"] for e in items.values()} == {"passed"}, outcome.stdout[-3000:]
    # issue 23: one stream subscription; the record and events read about once per mission, not per poll
    creates = sum(1 for r in log if (r.method, r.path) == ("POST", "/api/control/missions"))
    reads = [r for r in log if r.method == "GET" and r.path.startswith("/api/control/missions/")]
    streams = sum(1 for r in log if r.path == "/api/control/stream")
    # plus one read of its stored events at close per route (a route settles at execution evidence,
    # before its mission ends): cleanup and spend rest on the stored mission, never the stream's word
    assert streams == 1 and len(reads) + streams <= 1.5 * creates + len(ROUTES), (creates, len(reads))
    assert left == []
    # 7 routes + 3 canaries, each exactly once: the idempotent retry returned the same mission
    assert len(created) == len(ROUTES) + len(CANARIES)
    rest, mcp = (
        items[("route_record_echoes_request", r)]["evidence"] for r in ("codex-terra", "codex-terra-mcp")
    )
    assert (rest["via"], mcp["via"]) == ("rest", "mcp")
    assert rest["stored"] == mcp["stored"]
    for route in ("codex-terra", "codex-terra-mcp"):
        ev = items[("route_reaches_execution", route)]["evidence"]
        assert ev["evidence_events"] >= 1 and ev["first_evidence"]["type"] in ("tool_call", "tool_result")
    glm = items[("route_record_echoes_request", "opencode-glm")]["evidence"]
    assert glm["model_match"] == "normalised" and glm["stored"]["model_override"] == "zai/glm-5.2"
    canary = items[("workspace_visible", "codex-verity")]["evidence"]
    assert canary["mcp_sha256"] == canary["exec_sha256"] and canary["head"] == canary["expected_ref"]


def test_sigint_mid_dispatch_leaves_no_mission_running(tmp_path: Path) -> None:
    """Ctrl-C while missions are in flight: the session still cancels every mission it created."""
    suite_dir = tmp_path / "canaries"
    suite_dir.mkdir()
    for suite in CANARY_SUITES:
        (suite_dir / suite.name).write_text(suite.read_text())
    with SimFleet(tmp_path / "fleet", ["cp.stuck-pending@*"]) as fleet:
        cp = fleet.controlplane
        assert cp is not None
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-m",
                "canary",
                "-p",
                "no:cacheprovider",
                "-q",
                "--sbx-inventory",
                str(fleet.inventory_path),
                "--sbx-report",
                str(tmp_path / "report"),
                str(suite_dir),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 60
            while len(cp.mission_ids()) < len(ROUTES) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(cp.mission_ids()) >= len(ROUTES), "the session never dispatched"
            assert cp.missions_nonterminal(), "nothing was in flight to interrupt"
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode != 0
        assert cp.missions_nonterminal() == [], out.decode(errors="replace")[-2000:]


def test_every_canary_absorbs_pushback_relayed_by_mcp(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """cp.rate-limited behind the assistant MCP (workspace_bash, get_mission_health, ...): a tool that
    relays a 429 is called again, so no canary reads the pushback as an answer it cannot interpret."""
    suites = tuple(sorted((REPO / "canaries").glob("test_*.py")))
    with SimFleet(tmp_path / "fleet", ["cp.rate-limited"]) as fleet:
        outcome = run_suite(pytester, fleet, "canary", suites)
        assert fleet.controlplane is not None
        pushed_back = [r for r in fleet.controlplane.requests if r.status == 429]
    classes = {c["classification"] for c in outcome.report["checks"] if c["outcome"] != "passed"}
    assert outcome.ret == 0 and classes == set(), (classes, outcome.stdout[-3000:])
    assert {r.path for r in pushed_back} - {"/api/control/missions"}, "no tool call met pushback"


def test_a_shared_crash_reads_the_same_whichever_route_settles_first(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Only the two opencode routes selected: neither waits on other items, and the first one judged
    still sees that both crashed alike (one shared adapter crash, one incident), never a lone
    failed dispatch."""
    with SimFleet(tmp_path / "fleet", ["cp.backend-crash"]) as fleet:
        outcome = run_canary(pytester, fleet, "-k", "route_reaches_execution and opencode")
    verdicts = {c["target"]: (c["outcome"], c["classification"], c["cause"]) for c in outcome.report["checks"]}
    assert set(verdicts) == {"opencode-glm", "opencode-minimax"}, verdicts
    causes = {cause for _, _, cause in verdicts.values()}
    assert all(v[:2] == ("failed", "infrastructure") for v in verdicts.values()) and len(causes) == 1, verdicts
    assert len(outcome.report["incidents"]) == 1
