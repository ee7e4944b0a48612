"""A VM is a person's machine: whatever its login shell, start-up files, git configuration, locale, roster
spelling and tool wrappers, a healthy one passes every gate item and a broken one fails for its reason.

Each dimension is a fault of the embedded fleet (sim/personal.py) realised on one run's VM; the sim's
sshd runs every command through that VM's login shell as OpenSSH does (``$SHELL -c``). The healthy
sessions run the whole gate (real pi on every VM); the combined ones select only the items a defect
turns, so they stay cheap.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.gate_harness import ROSTER, expected_items, run_gate

from sbxcheck.sim.faults import PERSONAL_FAULTS
from sbxcheck.sim.fleet import DEFAULT_SEED, SimFleet, plan_run_ids

pytestmark = pytest.mark.slow  # end-to-end: child gate sessions against a fleet

RUNS = plan_run_ids(DEFAULT_SEED, 3)
FAILED = ("failed", "check_failed")
DOWN_MODEL = "google/gemini-3.6-flash"  # openrouter.model-down: the second model of the roster

# one dimension per VM; the last session also has two VMs with every dimension a login shell can carry
HEALTHY: list[tuple[tuple[str, ...], ...]] = [
    (("vm.shell-fish",), ("vm.shell-zsh",), ("vm.shell-tcsh",)),
    (("vm.shell-dash",), ("vm.git-fsmonitor",), ("vm.git-config",)),
    (("vm.git-hooks",), ("vm.locale",), ("vm.tool-shims",)),
    (
        ("vm.roster-flow",),
        ("vm.shell-fish", "vm.git-fsmonitor", "vm.git-config", "vm.git-hooks", "vm.locale", "vm.tool-shims"),
        ("vm.shell-tcsh", "vm.git-fsmonitor", "vm.git-config", "vm.git-hooks", "vm.locale", "vm.tool-shims"),
    ),
]

# (dimension, defect) per VM, the items the session selects, and what each defect turns:
# {(check, model or None or "*"): (outcome, classification, words its message must say)}
Expected = dict[tuple[str, str | None], tuple[str, str, str]]
A = ("A_git_integrity", None)
TWO_PATHS = (*FAILED, "unexpected working-tree changes (the tree must be clean): 2 path(s)")
NO_KEY = (*FAILED, "no OPENROUTER_API_KEY")
COMBINED: list[tuple[tuple[tuple[str, str], ...], str, tuple[Expected, ...]]] = [
    (
        (
            ("vm.shell-fish", "vm.dirty-tree"),
            ("vm.git-fsmonitor", "vm.head-mismatch"),
            ("vm.git-config", "vm.dirty-tree"),  # its hidden untracked file counts: README.md and scratch.txt
        ),
        "A_git_integrity",
        ({A: TWO_PATHS}, {A: (*FAILED, "does not match the recorded commit_sha")}, {A: TWO_PATHS}),
    ),
    (
        (
            ("vm.git-hooks", "vm.truncated-file"),
            ("vm.locale", "vm.foreign-clone"),  # git refuses in German; the gate still names the refusal
            ("vm.shell-dash", "vm.wide-modes"),
        ),
        "A_git_integrity or vm_hygiene",
        (
            {A: (*FAILED, "3 path(s)")},
            {A: ("failed", "config_defect", "detected dubious ownership")},
            {("vm_hygiene", None): ("failed", "security_exposure", "~/app/.env is 0644")},
        ),
    ),
    (
        (
            ("vm.roster-flow", "openrouter.model-down"),  # the C items exist only if the host read the roster
            ("vm.shell-zsh", "vm.no-runtime-key"),
            ("vm.tool-shims", "vm.no-pi"),  # the shim is there, the tool is not
        ),
        "B_pi_models or C_roster_matches or C_model_answers or E_credit_remaining",
        (
            {("C_model_answers", DOWN_MODEL): (*FAILED, "did not answer")},
            {("C_model_answers", "*"): NO_KEY, ("E_credit_remaining", None): NO_KEY},
            {("B_pi_models", None): (*FAILED, "printed no model table")},
        ),
    ),
    (
        (("vm.shell-tcsh", "vm.provisioning-key-planted"),),
        "vm_hygiene or A_git_integrity",
        ({("vm_hygiene", None): ("failed", "security_exposure", "~/.config/openrouter/credentials")},),
    ),
]


def _need(dimensions: tuple[str, ...]) -> None:
    """Skip visibly when this machine lacks what a dimension needs (CI installs it: .ci/run)."""
    shells = [d.removeprefix("vm.shell-") for d in dimensions if d.startswith("vm.shell-")]
    missing = [f"vm.shell-{s} needs {s} (apt-get install {s})" for s in shells if not shutil.which(s)]
    if "vm.foreign-clone" in dimensions and os.geteuid() != 0:
        missing.append("vm.foreign-clone needs root")
    if "vm.locale" in dimensions:
        have = subprocess.run(["locale", "-a"], capture_output=True, text=True, timeout=10).stdout.lower()
        if "tr_tr.utf8" not in have:
            missing.append("vm.locale needs the tr_TR.UTF-8 locale (localedef -i tr_TR -f UTF-8 tr_TR.UTF-8)")
    if missing:
        if os.environ.get("CI") and "root" not in " ".join(missing):
            pytest.fail("; ".join(missing) + " (CI must have them)")
        pytest.skip("; ".join(missing))


def test_every_personal_fault_is_shown_healthy_and_with_a_defect() -> None:
    alone = sorted(d for group in HEALTHY for vm in group if len(vm) == 1 for d in vm)
    combined = sorted(d for pairs, _, _ in COMBINED for d, _ in pairs)
    assert alone == combined == sorted(PERSONAL_FAULTS)  # each dimension alone on a VM, and with a defect


def _healthy_id(group: tuple[tuple[str, ...], ...]) -> str:
    return "+".join(vm[0] + ("-and-all" if len(vm) > 1 else "") for vm in group)


@pytest.mark.parametrize("group", HEALTHY, ids=[_healthy_id(g) for g in HEALTHY])
def test_a_personal_vm_passes_every_gate_item(
    pytester: pytest.Pytester, tmp_path: Path, group: tuple[tuple[str, ...], ...]
) -> None:
    _need(tuple(d for vm in group for d in vm))
    fleet = SimFleet(tmp_path / "fleet", [f"{d}@{run}" for run, vm in zip(RUNS, group, strict=False) for d in vm])
    with fleet:
        outcome = run_gate(pytester, fleet)
    items = outcome.items()
    assert sorted(items) == sorted(expected_items(fleet)), outcome.stdout[-3000:]
    wrong = [
        f"{e['nodeid']}: {e['outcome']}: {e['message']}"
        for (_, run, _), e in items.items()
        if run not in fleet.closed_run_ids and e["outcome"] != "passed"
    ]
    assert not wrong and outcome.ret == 0, "\n".join(wrong)
    for run, vm in zip(RUNS, group, strict=False):  # what each VM's evidence shows of its dimension
        a_item = items[("A_git_integrity", run, None)]
        assert a_item["evidence"]["porcelain_lines"] == 0 and "porcelain_sample" in a_item["evidence"]
        if "vm.tool-shims" in vm:  # pi is what the login PATH gives, as the SDLC runs it: the shim
            assert items[("B_pi_models", run, None)]["evidence"]["pi_path"].endswith("/mise/shims/pi")
        if "vm.roster-flow" in vm:  # read as YAML on the host (the C items) and on the VM
            assert items[("C_roster_matches", run, None)]["evidence"]["vm_roster"] == list(ROSTER)
            assert all(("C_model_answers", run, m) in items for m in ROSTER)


@pytest.mark.parametrize("group", COMBINED, ids=["+".join(f"{d}&{f}" for d, f in g[0]) for g in COMBINED])
def test_a_personal_vm_with_a_defect_fails_for_the_defects_reason(
    pytester: pytest.Pytester,
    tmp_path: Path,
    group: tuple[tuple[tuple[str, str], ...], str, tuple[Expected, ...]],
) -> None:
    pairs, selection, expectations = group
    _need(tuple(f for pair in pairs for f in pair))
    faults = [f"{f}@{run}" for run, pair in zip(RUNS, pairs, strict=False) for f in pair]
    with SimFleet(tmp_path / "fleet", faults) as fleet:
        outcome = run_gate(pytester, fleet, "-k", selection)
    wrong = []
    for (check, run, model), entry in sorted(outcome.items().items()):
        if run in fleet.closed_run_ids:
            continue
        index = RUNS.index(run)
        table = expectations[index] if index < len(expectations) else {}
        want = table.get((check, model)) or table.get((check, "*" if model else None)) or ("passed", None, "")
        got = (entry["outcome"], entry["classification"])
        if got != want[:2] or want[2] not in entry["message"]:
            wrong.append(f"{entry['nodeid']}: want {want}, got {got}: {entry['message']}")
    assert not wrong, "\n".join(wrong)
    assert outcome.ret == 1
