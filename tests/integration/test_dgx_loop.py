"""The DGX runbook to its end (issue 22): only-DGX rule, remediate, strict SSH, a silent sentinel, resolved.

The end-to-end story and its variants run child triage sessions against the embedded fleet (slow);
the no-tunnel rule is proven for every DGX fault with the sim's own host programs run directly.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.gate_harness import REPO, run_suite

from sbxcheck.checks import dgx, dgx_remediate
from sbxcheck.errors import HostUnreachable
from sbxcheck.results import CheckResult, Outcome
from sbxcheck.sim.faults import FAULTS
from sbxcheck.sim.fleet import SimFleet
from sbxcheck.sim.hosts import HostHome, fault_options, make_agent_core
from sbxcheck.transports.ssh import CommandResult

FLEET_SUITE = (REPO / "canaries" / "test_fleet.py",)
# a positive suggestion to (re)create / open / restore an old-agent tunnel ("never recreate ..." is fine)
TUNNEL_ADVICE = re.compile(
    r"(?i)(?<!never )(?<!not )\b(recreate|re-create|open|start|bring up|restore|use)\s+(an?\s+|the\s+)?"
    r"old-agent\s+tunnel"
)


def _triage(outcome: Any) -> dict[str, Any]:
    [item] = [c for c in outcome.report["checks"] if "::test_triage_dgx_routing[" in c["nodeid"]]
    return dict(item)


@pytest.mark.slow
def test_the_dgx_story_end_to_end(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """tailscaled disabled -> triage fails with the rule -> remediate -> SSH ok -> sentinel silent -> resolved."""
    with SimFleet(tmp_path / "fleet", ["dgx.tailscaled-disabled"]) as fleet:
        found = run_suite(pytester, fleet, "triage", FLEET_SUITE, "-k", "test_dgx or test_triage_dgx")
        triage = _triage(found)
        assert (triage["outcome"], triage["classification"]) == ("failed", "infrastructure")
        assert triage["message"].startswith("DGX routing incident: only dgx-spark is unreachable")
        assert triage["evidence"]["fleet_unreachable"] == ["dgx-spark"]  # the sentinel's view: the DGX alone
        assert triage["recommendation"] == dgx.DGX_RECOVERY
        assert fleet.hosts["agent-core"].unit_state() == ("disabled", "inactive")  # triage changed nothing

        fixed = run_suite(pytester, fleet, "triage", FLEET_SUITE, "-k", "triage_dgx", "--sbx-remediate")
        done = _triage(fixed)
        assert done["outcome"] == "passed", done["message"]
        assert done["evidence"]["closed_loop"] == {
            "remediation": "passed",
            "strict_ssh": "passed",
            "sentinel": "passed",
        }
        assert done["evidence"]["incident"] == "resolved" and "ran silent" in done["message"]
        assert fixed.report["incidents"] == []
        assert fleet.hosts["agent-core"].unit_state() == ("enabled", "active")

        # and it stays fixed
        after = run_suite(pytester, fleet, "triage", FLEET_SUITE, "-k", "test_dgx or test_triage_dgx")
        assert after.ret == 0 and _triage(after)["message"].startswith("no DGX routing incident")


@pytest.mark.slow
def test_two_nodes_down_is_not_the_dgx_incident(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """tailscaled is disabled on agent-core too, yet with babylon also unreachable the rule does not apply."""
    with SimFleet(tmp_path / "fleet", ["dgx.two-nodes-down"]) as fleet:
        outcome = run_suite(pytester, fleet, "triage", FLEET_SUITE, "-k", "triage_dgx", "--sbx-remediate")
        state = fleet.hosts["agent-core"].unit_state()
    triage = _triage(outcome)
    assert (triage["outcome"], triage["classification"]) == ("failed", "infrastructure")
    assert "2 nodes are unreachable (babylon, dgx-spark)" in triage["message"]
    assert "not the DGX routing incident" in triage["message"] and dgx.NO_TUNNEL in triage["message"]
    assert triage["recommendation"] == dgx.FLEET_OUTAGE_NEXT and "systemctl" not in triage["recommendation"]
    assert "remediation" not in triage["evidence"] and state == ("disabled", "inactive")  # nothing was run
    [incident] = outcome.report["incidents"]
    assert "systemctl" not in incident["recommendation"]


@pytest.mark.slow
def test_a_sentinel_that_still_reports_keeps_the_incident_open(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    with SimFleet(tmp_path / "fleet", ["dgx.sentinel-stuck"]) as fleet:
        outcome = run_suite(pytester, fleet, "triage", FLEET_SUITE, "-k", "triage_dgx", "--sbx-remediate")
    triage = _triage(outcome)
    assert triage["outcome"] == "failed" and triage["evidence"]["incident"] == "open"
    assert triage["evidence"]["closed_loop"] == {
        "remediation": "passed",
        "strict_ssh": "passed",
        "sentinel": "failed",
    }
    assert "the sentinel is not silent after the fix" in triage["message"]
    assert (
        "still reports dgx-spark" in triage["recommendation"]
        and "do not re-run the fix" in triage["recommendation"]
    )


# ---------------------------------------------------------------- every DGX fault, no tunnel advice (fast)


class LocalShell:
    """Runs a command in a sim HostHome with bash, as the sim sshd does (no SSH: fast)."""

    def __init__(self, host: HostHome) -> None:
        self.alias = host.name
        self._host = host

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        started = time.monotonic()
        proc = subprocess.run(
            ["bash", "-c", command],
            input=b"",
            capture_output=True,
            cwd=self._host.home,
            env=self._host.env({"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}),
            timeout=timeout or 30,
        )
        return CommandResult(
            proc.returncode, proc.stdout.decode(), proc.stderr.decode(), time.monotonic() - started
        )


DGX_FAULTS = sorted(f for f in FAULTS if f.startswith("dgx."))


@pytest.mark.parametrize("fault", DGX_FAULTS)
def test_no_dgx_fault_ever_recommends_an_old_agent_tunnel(tmp_path: Path, fault: str) -> None:
    options = fault_options("agent-core", [fault])
    if fault == "dgx.unreachable":
        options["ping"] = "no-reply"
    options["ping_hang_s"] = 1.0
    core = make_agent_core(tmp_path, **options)
    shell = LocalShell(core)
    dgx_down = fault == "dgx.unreachable"

    def ssh_probe() -> CommandResult:
        if dgx_down or core.unit_state()[1] != "active":
            raise HostUnreachable("cannot reach dgx-spark (127.0.0.1:22): connection refused")
        return CommandResult(0, "", "", 0.01)

    def probes() -> dict[str, CheckResult]:
        return {
            "enabled": dgx.check_tailscaled_enabled(shell, timeout_s=5),
            "active": dgx.check_tailscaled_active(shell, timeout_s=5),
            "ping": dgx.check_tailscale_ping(shell, timeout_s=3),
            "ssh": dgx.check_dgx_ssh(ssh_probe),
        }

    known = ["dgx-spark", "agent-core", "babylon"]
    seen: list[CheckResult] = []
    results = probes()
    sentinel = dgx.check_sentinel(shell, "disk-sentinel --once", known)
    seen += [*results.values(), sentinel]
    incident = dgx.triage_dgx(results, fleet_unreachable=sentinel.evidence.get("unreachable_nodes"))
    if incident is not None:
        seen.append(incident)
        if incident.cause == dgx.DGX_CAUSE:
            fix = dgx_remediate.remediate_tailscaled(shell, timeout_s=10)
            recheck = probes() if fix.evidence.get("command_run") else {}
            after = dgx.check_sentinel(shell, "disk-sentinel --once", known)
            reported = dgx_remediate.report_remediation(incident, fix, recheck)
            closed = dgx_remediate.close_dgx_loop(reported, fix, recheck, after)
            seen += [fix, *recheck.values(), after, closed]
    for result in seen:
        for text in (result.message, result.recommendation or ""):
            assert not TUNNEL_ADVICE.search(text), f"{fault}: {result.check}: {text}"
        assert "old-agent" not in (result.recommendation or "") or "never" in (result.recommendation or "")
    dgx_unreachable_incidents = [
        r for r in seen if r.check == dgx.CHECK_TRIAGE and r.outcome is not Outcome.PASSED
    ]
    for result in dgx_unreachable_incidents:  # where a tired operator would reach for the tunnel, it says no
        assert "old-agent tunnel" in result.message and "compute-only" in result.message, (
            fault,
            result.message,
        )
