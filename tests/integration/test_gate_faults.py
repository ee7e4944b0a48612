"""The gate fault matrix: each named fault turns exactly its items, with its classification.

Three faults run per child session, one per run, so every session also proves the other runs'
items stay green. A healthy fleet passes every item.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from support.gate_harness import ROSTER, expected_items, run_gate
from support.next_step_harness import next_step_problems

from sbxcheck.sim.fleet import DEFAULT_SEED, SimFleet, plan_run_ids
from sbxcheck.sim.sshd import private_tmp_supported

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

ALL_C = "*"
FAILED = ("failed", "check_failed")
DOWN_MODEL = "google/gemini-3.6-flash"
SSH_CHECKS = (
    "A_git_integrity",
    "B_pi_models",
    "C_roster_matches",
    "D_cost_reported",
    "E_credit_remaining",
    "vm_hygiene",
)
EXPOSED = ("failed", "security_exposure")

# fault -> {(check, model or None or "*"): (outcome, classification)}; every other item passes
EXPECTED: dict[str, dict[tuple[str, str | None], tuple[str, str]]] = {
    "vm.dirty-tree": {("A_git_integrity", None): FAILED},
    "vm.head-mismatch": {("A_git_integrity", None): FAILED},
    "vm.truncated-file": {("A_git_integrity", None): FAILED},
    "vm.no-app": {
        ("A_git_integrity", None): FAILED,
        ("C_roster_matches", None): FAILED,
        ("C_model_answers", ALL_C): FAILED,
        ("D_cost_reported", None): FAILED,
        ("E_credit_remaining", None): FAILED,
    },
    "vm.no-runtime-key": {
        ("C_model_answers", ALL_C): FAILED,
        ("D_cost_reported", None): FAILED,
        ("E_credit_remaining", None): FAILED,
    },
    "vm.foreign-tmp": {},
    "vm.bash-env": {},  # its noise (forged markers, a JSON body, an EXIT trap) is not the scripts' output
    "vm.ports-list": {},
    "vm.no-pi": {("B_pi_models", None): FAILED, ("D_cost_reported", None): FAILED},
    "vm.no-models": {("B_pi_models", None): FAILED, ("D_cost_reported", None): FAILED},
    "vm.partial-cost": {("B_pi_models", None): FAILED, ("D_cost_reported", None): FAILED},
    "vm.zero-cost": {("D_cost_reported", None): FAILED},
    "openrouter.model-down": {("C_model_answers", DOWN_MODEL): FAILED},
    "openrouter.reasoning-only": {},
    "openrouter.key-exhausted": {
        ("C_model_answers", ALL_C): FAILED,
        ("D_cost_reported", None): FAILED,
        ("E_credit_remaining", None): FAILED,
    },
    "openrouter.key-uncapped": {},
    "vm.unreachable": {(c, None): ("error", "infra_unreachable") for c in SSH_CHECKS}
    | {("C_model_answers", ALL_C): ("error", "infra_unreachable")},
    "vm.host-key-changed": {(c, None): ("error", "host_key_mismatch") for c in SSH_CHECKS}
    | {("C_model_answers", ALL_C): ("error", "host_key_mismatch")},
    # issue 22: a lived-in shell changes no verdict; a foreign-owned clone is git's refusal, not damage
    "vm.noisy-shell": {},
    "vm.foreign-clone": {("A_git_integrity", None): ("failed", "config_defect")},
    "vm.wide-modes": {("vm_hygiene", None): EXPOSED},
    "vm.provisioning-key-planted": {("vm_hygiene", None): EXPOSED},
    "vm.control-chars": {("C_model_answers", DOWN_MODEL): FAILED},  # issue 20: and every text neutralised
}
GROUPS = [
    ("vm.dirty-tree", "vm.no-pi", "openrouter.model-down"),
    ("vm.head-mismatch", "vm.no-models", "openrouter.reasoning-only"),
    ("vm.truncated-file", "vm.partial-cost", "openrouter.key-exhausted"),
    ("vm.no-app", "vm.zero-cost", "openrouter.key-uncapped"),
    ("vm.unreachable", "vm.host-key-changed", "vm.provisioning-key-planted"),
    # every text the fleet returns is neutralised; a BASH_ENV that prints inside the gate's own bash -s
    ("vm.control-chars", "vm.bash-env"),
    ("vm.no-runtime-key", "vm.foreign-tmp", "vm.ports-list"),
    ("vm.foreign-clone", "vm.noisy-shell", "vm.wide-modes"),  # the third run's VM is lived-in anyway
]


def test_every_fault_is_in_the_matrix() -> None:
    from sbxcheck.sim.faults import (
        FAULTS,
        is_controlplane_fault,
        is_fleet_host_fault,
        is_personal_fault,
        is_run_fault,
    )

    # run.* faults bend only what execute and observe start: tests/integration/test_run_items.py has them;
    # a person's VM (shell, git config, locale, ...) alone and with a defect: tests/integration/test_vm_personal.py
    others = (is_controlplane_fault, is_fleet_host_fault, is_run_fault, is_personal_fault)
    gate_faults = [f for f in FAULTS if not any(kind(f) for kind in others)]
    assert sorted(EXPECTED) == sorted(gate_faults)
    assert sorted(f for g in GROUPS for f in g) == sorted(gate_faults)


def _expectation(fault: str | None, check: str, model: str | None) -> tuple[str, str | None]:
    if fault is None:
        return ("passed", None)
    table = EXPECTED[fault]
    for key in ((check, model), (check, ALL_C if model else None)):
        if key in table:
            return table[key]
    return ("passed", None)


@pytest.mark.parametrize("group", GROUPS, ids=["+".join(g) for g in GROUPS])
def test_fault_group_turns_exactly_its_items(
    pytester: pytest.Pytester, tmp_path: Path, group: tuple[str, ...]
) -> None:
    if "vm.foreign-tmp" in group and private_tmp_supported() is not None:  # no mount namespaces here
        group = tuple(f for f in group if f != "vm.foreign-tmp")
    faulted = dict(zip(plan_run_ids(DEFAULT_SEED, 3), group, strict=False))
    fleet = SimFleet(tmp_path / "fleet", [f"{fault}@{run}" for run, fault in faulted.items()])
    with fleet:
        outcome = run_gate(pytester, fleet)
    items = outcome.items()
    assert sorted(items) == sorted(expected_items(fleet)), outcome.stdout[-3000:]
    mismatches = []
    for (check, run_id, model), entry in sorted(items.items()):
        want = _expectation(faulted.get(run_id), check, model)
        if run_id in fleet.closed_run_ids:  # a closed run is accounted for as a skip
            want = ("skipped", None)
        got = (entry["outcome"], entry["classification"])
        if got != want:
            mismatches.append(f"{entry['nodeid']}: want {want}, got {got}: {entry['message']}")
        assert entry["evidence"] or entry["outcome"] == "error", f"{entry['nodeid']} has no evidence"
    assert not mismatches, "\n".join(mismatches)
    assert outcome.ret == (1 if any(EXPECTED[f] for f in group) else 0)
    if "vm.provisioning-key-planted" in group:  # found by hashes only: the key never travelled, never printed
        key = fleet.openrouter.provisioning_key
        planted_run = next(r for r, f in faulted.items() if f == "vm.provisioning-key-planted")
        finding = items[("vm_hygiene", planted_run, None)]
        assert ".config/openrouter/credentials" in finding["message"], finding["message"]
        assert key not in outcome.artifacts_text()
        sent = b"".join(
            fleet.received_log(r).read_bytes() for r in fleet.run_ids if fleet.received_log(r).exists()
        )
        assert sent and key.encode() not in sent
    if "vm.foreign-clone" in group:  # git's refusal named, with its fix, never "damaged"
        refused = items[("A_git_integrity", next(iter(faulted)), None)]
        assert "detected dubious ownership" in refused["message"] and "damaged" not in refused["message"]
        assert "safe.directory" in outcome.stdout and "chown -R" in outcome.stdout
    # issue 19: every next step of every fault is a command that works as printed
    problems = next_step_problems(outcome.report, fleet.inventory_path)
    assert not problems, "\n".join(problems)
    if "vm.unreachable" in group:  # the terminal gives the error's own line, not sbxcheck's frames
        assert "E   sbxcheck.errors.HostUnreachable: cannot reach" in outcome.stdout
        assert "sbxcheck/transports/" not in outcome.stdout


def test_healthy_fleet_passes_every_item_with_evidence(
    pytester: pytest.Pytester, healthy_fleet: SimFleet
) -> None:
    fleet = healthy_fleet
    before = {run: fleet.connections(run) for run in fleet.run_ids}
    outcome = run_gate(pytester, fleet)
    connections = {run: fleet.connections(run) - before[run] for run in fleet.run_ids}
    items = outcome.items()
    assert sorted(items) == sorted(expected_items(fleet))
    outcomes = {key: e["outcome"] for key, e in items.items()}
    assert {o for (_, run, _), o in outcomes.items() if run not in fleet.closed_run_ids} == {"passed"}
    [closed] = fleet.closed_run_ids
    assert outcomes == {**outcomes, ("run_record", closed, None): "skipped"}, outcome.stdout[-3000:]
    assert outcome.ret == 0
    assert outcome.report["incidents"] == []
    # one SSH connection per VM for the whole session, shared by its 8 items
    assert connections == dict.fromkeys(fleet.run_ids, 1)
    run = fleet.run_ids[1]  # records a 12-char sha: A passes by prefix
    a_item = items[("A_git_integrity", run, None)]
    assert a_item["evidence"]["match"] == "prefix"
    d_item = items[("D_cost_reported", fleet.run_ids[0], None)]
    assert d_item["evidence"]["cost_total"] > 0
    assert d_item["evidence"]["models_json_models"] >= 3
    for model in ROSTER:
        c_item = items[("C_model_answers", run, model)]
        assert c_item["evidence"]["http_status"] == 200
        assert c_item["evidence"]["answered_in"] == "content"


def test_sim_fault_option_targets_the_first_run(pytester: pytest.Pytester) -> None:
    """--sbx-sim-fault without an inventory: the embedded fleet is built by the plugin itself."""
    suite = pytester.path / "test_gate.py"
    suite.write_text((Path(__file__).resolve().parents[2] / "gates" / "test_gate.py").read_text())
    result = pytester.runpytest_subprocess(
        "-m",
        "gate",
        "--sbx-sim-fault",
        "vm.dirty-tree",
        "--sbx-report",
        str(pytester.path / "r"),
        "-k",
        "A_git or run_record",
        timeout=300,
    )
    result.stdout.fnmatch_lines(["*inventory: embedded simulated fleet (--sbx-sim; faults: vm.dirty-tree)*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed") == 5, result.outlines[-30:]
    result.stdout.fnmatch_lines(
        ["*FAILED*test_gate_A_git_integrity[[]alpha-*unexpected working-tree changes*"]
    )


def test_inventory_ports_are_served_and_an_unreachable_vm_keeps_its_port(tmp_path: Path) -> None:
    """Ports written to the inventory before serving stay reserved: nothing else can take them."""
    unreachable = plan_run_ids(DEFAULT_SEED, 3)[0]
    with SimFleet(tmp_path / "fleet", [f"vm.unreachable@{unreachable}"]) as fleet:
        for run in fleet.runs:
            if run.run_id == unreachable:
                with pytest.raises(ConnectionRefusedError):
                    socket.create_connection(("127.0.0.1", run.ssh_port), timeout=2).close()
                squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                with squatter, pytest.raises(OSError):
                    squatter.bind(("127.0.0.1", run.ssh_port))
            else:
                socket.create_connection(("127.0.0.1", run.ssh_port), timeout=2).close()
