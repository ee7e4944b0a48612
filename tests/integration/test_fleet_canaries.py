"""Fleet canaries and triage: the fault matrix, the DGX triage incident, remediation, and secret safety."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support.gate_harness import REPO, run_suite
from support.next_step_harness import next_step_problems

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

FLEET_SUITE = (REPO / "canaries" / "test_fleet.py",)
F = "failed"

# fault -> {(test, param): (outcome, classification)}; every other fleet item passes
EXPECTED: dict[str, dict[tuple[str, str], tuple[str, str]]] = {
    "dgx.tailscaled-disabled": {
        ("dgx_tailscaled_enabled", "dgx-spark"): (F, "check_failed"),
        ("dgx_tailscaled_active", "dgx-spark"): (F, "check_failed"),
        ("dgx_tailscale_ping", "dgx-spark"): (F, "check_failed"),
        ("dgx_ssh_reachable", "dgx-spark"): ("error", "infra_unreachable"),
        ("triage_dgx_routing", "dgx-spark"): (F, "infrastructure"),
        ("fleet_node", "dgx-spark"): (F, "infra_unreachable"),
    },
    "dgx.tailscaled-inactive": {
        ("dgx_tailscaled_active", "dgx-spark"): (F, "check_failed"),
        ("dgx_tailscale_ping", "dgx-spark"): (F, "check_failed"),
        ("dgx_ssh_reachable", "dgx-spark"): ("error", "infra_unreachable"),
        ("triage_dgx_routing", "dgx-spark"): (F, "infrastructure"),
        ("fleet_node", "dgx-spark"): (F, "infra_unreachable"),
    },
    # tailscaled is fine: the triage item says so and points at the DGX and the path
    "dgx.ping-timeout": {
        ("dgx_tailscale_ping", "dgx-spark"): (F, "check_failed"),
        ("triage_dgx_routing", "dgx-spark"): (F, "infrastructure"),
    },
    "dgx.unreachable": {
        ("dgx_tailscale_ping", "dgx-spark"): (F, "check_failed"),
        ("triage_dgx_routing", "dgx-spark"): (F, "infrastructure"),
        ("dgx_ssh_reachable", "dgx-spark"): ("error", "infra_unreachable"),
        ("fleet_node", "dgx-spark"): (F, "infra_unreachable"),
    },
    "fleet.node-offline": {("fleet_node", "dgx-spark"): (F, "infra_unreachable")},
    "fleet.node-cordoned": {("fleet_node", "babylon"): (F, "check_failed")},
    "fleet.degraded-disk": {("fleet_health", ""): (F, "infrastructure")},
    "cp.env-values-exposed": {("workspace_discovery", "rest"): (F, "security_exposure")},
    "gh.no-auth": {("github_auth", "verity-rest"): (F, "check_failed")},
    "openrouter.orphan-key": {("orphan_audit", ""): (F, "check_failed")},
    # the control plane's clock 15 minutes behind: every heartbeat is still fresh on its own clock
    "cp.clock-behind": {},
}


def _items(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for check in report["checks"]:
        name = check["nodeid"].split("::", 1)[1]
        test, _, param = name.partition("[")
        out[(test.removeprefix("test_"), param.rstrip("]"))] = check
    return out


# faults on different targets share a session (each session also shows the other items stay green);
# the DGX faults, and the DGX node going offline, each get a session of their own
GROUPS: list[tuple[str, ...]] = [
    (),
    (
        "dgx.tailscaled-disabled",
        "fleet.node-cordoned",
        "fleet.degraded-disk",
        "cp.env-values-exposed",
        "gh.no-auth",
        "openrouter.orphan-key",
        "cp.clock-behind",
    ),
    ("dgx.tailscaled-inactive",),
    ("dgx.ping-timeout",),
    ("dgx.unreachable",),
    ("fleet.node-offline",),
]


def test_every_fleet_fault_is_in_a_group() -> None:
    assert sorted(f for group in GROUPS for f in group) == sorted(EXPECTED)


@pytest.mark.parametrize("group", GROUPS, ids=["+".join(g) or "healthy" for g in GROUPS])
def test_fault_turns_exactly_its_items(
    pytester: pytest.Pytester, tmp_path: Path, group: tuple[str, ...]
) -> None:
    with SimFleet(tmp_path / "fleet", list(group)) as fleet:
        outcome = run_suite(pytester, fleet, "canary", FLEET_SUITE)
    items = _items(outcome.report)
    assert len(items) == 17, sorted(items)
    want: dict[tuple[str, str], tuple[str, str]] = {}
    for fault in group:
        want.update(EXPECTED[fault])
    mismatches = [
        f"{key}: want {want.get(key, ('passed', None))}, got {(e['outcome'], e['classification'])}: {e['message']}"
        for key, e in sorted(items.items())
        if (e["outcome"], e["classification"]) != want.get(key, ("passed", None))
    ]
    assert not mismatches, "\n".join(mismatches)
    # issue 19: every next step of every fault is a command that works as printed
    problems = next_step_problems(outcome.report, fleet.inventory_path)
    assert not problems, "\n".join(problems)
    if not group:
        machines = outcome.report["machine_inventory"]
        assert {row["name"] for row in machines} >= {"agent-core", "dgx-spark", "exe.dev", "babylon"}
        assert all(row.get("checked_at") for row in machines)


def test_triage_yields_one_incident_only_for_the_dgx_routing_fault(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    with SimFleet(tmp_path / "healthy") as fleet:
        healthy = run_suite(pytester, fleet, "triage", FLEET_SUITE)
    assert healthy.report["incidents"] == [] and healthy.ret == 0
    with SimFleet(tmp_path / "faulted", ["dgx.tailscaled-disabled"]) as fleet:
        faulted = run_suite(pytester, fleet, "triage", FLEET_SUITE)
        state = fleet.hosts["agent-core"].unit_state()
    [incident] = faulted.report["incidents"]
    assert incident["classification"] == "infrastructure"
    assert (
        incident["recommendation"]
        == "systemctl enable --now tailscaled, then a strict-host-key SSH and a silent sentinel run"
    )
    assert "old-agent" not in incident["recommendation"]
    assert len(incident["checks"]) == 5
    assert state == ("disabled", "inactive"), "triage without --sbx-remediate must change nothing"


@pytest.mark.parametrize("fault", ["dgx.tailscaled-disabled", "dgx.sudo-refused"])
def test_remediate_runs_only_the_one_recovery_command(
    pytester: pytest.Pytester, tmp_path: Path, fault: str
) -> None:
    with SimFleet(tmp_path / "fleet", [fault]) as fleet:
        outcome = run_suite(pytester, fleet, "triage", FLEET_SUITE, "--sbx-remediate", "-k", "triage_dgx")
        state = fleet.hosts["agent-core"].unit_state()
    [triage] = outcome.report["checks"]
    evidence = triage["evidence"]
    # the sim's SSH user is not root: the command ran through sudo -n
    assert evidence["remediation"]["command"]["ran"] == "sudo -n systemctl enable --now tailscaled"
    if fault == "dgx.sudo-refused":
        assert triage["outcome"] == "failed"  # the incident was real; the report says what was done about it
        assert evidence["remediation_outcome"] == "error" and "sudo refused" in triage["message"]
        assert state == ("disabled", "inactive")
        return
    assert evidence["remediation_outcome"] == "passed"
    assert (
        evidence["remediation"]["before_after"]
        == "is-enabled disabled → enabled, is-active inactive → active"
    )
    assert evidence["recheck"]  # re-checked after the command
    # issue 22: remediate -> strict SSH -> a silent sentinel: only then resolved (it was "failed" before)
    assert triage["outcome"] == "passed" and triage["message"].startswith("DGX routing incident resolved")
    assert evidence["incident"] == "resolved" and outcome.report["incidents"] == []
    assert state == ("enabled", "active")


def test_secret_env_values_reach_no_artifact(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet", ["cp.env-values-exposed"]) as fleet:
        assert fleet.controlplane is not None
        secrets = fleet.secrets()
        exposed = [v for v in secrets if v.startswith(("ghp_", "sk-ant-", "sim-secret-"))]
        outcome = run_suite(
            pytester, fleet, "canary", FLEET_SUITE, "-l", "-rA", "--alluredir", str(tmp_path / "allure")
        )
    assert exposed, "the fleet must hold workspace secrets for this test to mean anything"
    texts = [outcome.artifacts_text()]
    texts += [p.read_text(errors="replace") for p in (tmp_path / "allure").rglob("*") if p.is_file()]
    blob = "\n".join(texts)
    leaked = [i for i, value in enumerate(secrets) if value in blob]
    assert not leaked, f"secret #{leaked} found in an artifact"
    assert not re.search(r"ghp_[A-Za-z0-9]{20,}|sk-ant-api03-", blob)
    assert "security_exposure" in blob  # the exposure itself is reported, by class and endpoint only
