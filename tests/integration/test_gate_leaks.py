"""No secret of the fleet reaches any artifact: reports, Allure results, pytest output or logs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.gate_harness import run_gate

from sbxcheck.sim.fleet import DEFAULT_SEED, SimFleet, plan_run_ids

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

KEY_SHAPE = re.compile(r"sk-or-v1-[0-9a-f]{64}")


def _scan(text: str, secrets: list[str]) -> list[str]:
    found = [f"secret #{i}" for i, s in enumerate(secrets) if s in text]
    found += [f"key-shaped string at {m.start()}" for m in KEY_SHAPE.finditer(text)]
    return found


# one session over healthy and faulted VMs: passing items, failing ones with their evidence, an
# unreachable host key and a dirty tree all go through the same writers
FAULTS = (
    "openrouter.key-exhausted",
    "vm.no-models",
    "openrouter.model-down",
    "vm.partial-cost",
    "vm.host-key-changed",
    "vm.dirty-tree",
)


def test_no_secret_in_any_artifact(pytester: pytest.Pytester, tmp_path: Path) -> None:
    runs = plan_run_ids(DEFAULT_SEED, len(FAULTS) + 1)  # the last run stays healthy
    specs = [f"{fault}@{run}" for fault, run in zip(FAULTS, runs, strict=False)]
    allure_dir = tmp_path / "allure"
    with SimFleet(tmp_path / "fleet", specs, runs=len(runs)) as fleet:
        secrets = fleet.secrets()
        outcome = run_gate(
            pytester,
            fleet,
            "--alluredir",
            str(allure_dir),
            "-rA",
            "-l",
            "--log-level=DEBUG",
            "--junitxml",
            str(outcome_dir(pytester) / "pytest-junit.xml"),
            "--sbx-history",
            str(pytester.path / "report" / "history"),  # inside the report dir: scanned below
            "--sbx-metrics",
            str(pytester.path / "report" / "sbxcheck.prom"),
        )
    assert list((outcome.report_dir / "history").glob("run-*.json"))
    assert (outcome.report_dir / "sbxcheck.prom").read_text(encoding="utf-8").count(
        "sbxcheck_item_outcome"
    ) > 27
    # the scan can find what it looks for: the keys really sit on the VMs
    vm_env = (fleet.runs[-1].home / "app" / ".env").read_text()  # the healthy run's
    assert _scan(vm_env, secrets)
    texts = {"stdout+stderr+report": outcome.artifacts_text()}
    for path in sorted(allure_dir.rglob("*")) + sorted(outcome_dir(pytester).rglob("*")):
        if path.is_file():
            texts[str(path)] = path.read_text(encoding="utf-8", errors="replace")
    leaks = {name: hits for name, text in texts.items() if (hits := _scan(text, secrets))}
    assert not leaks, leaks
    assert len(texts) > 10  # allure results, attachments, reports and output were all scanned


def outcome_dir(pytester: pytest.Pytester) -> Path:
    path = pytester.path / "extra"
    path.mkdir(exist_ok=True)
    return path


def test_allure_results_carry_evidence_and_labels(
    pytester: pytest.Pytester, tmp_path: Path, healthy_fleet: SimFleet
) -> None:
    allure_dir = tmp_path / "allure"
    fleet = healthy_fleet
    run_gate(pytester, fleet, "--alluredir", str(allure_dir), "-k", "A_git or E_credit")
    results = [json.loads(p.read_text()) for p in allure_dir.glob("*-result.json")]
    assert len(results) == 6
    for result in results:
        labels = {(lab["name"], lab["value"]) for lab in result["labels"]}
        assert ("parentSuite", "gate") in labels  # Allure: parentSuite = the sbxcheck suite
        run = next(v for n, v in labels if n == "subSuite")  # subSuite = the target: the run id for A and E
        assert run in fleet.run_ids
        [attachment] = [a for a in result["attachments"] if a["name"] == "evidence"]
        evidence = json.loads((allure_dir / attachment["source"]).read_text())
        assert evidence["host"] == f"{run}.exe.xyz"
