"""Runs the shipped gate suite in a child pytest against a live embedded fleet, and reads its report."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sbxcheck.sim.fleet import SimFleet
from support.children import check_selection

REPO = Path(__file__).resolve().parents[2]
GATE_SUITE = REPO / "gates" / "test_gate.py"
CANARY_SUITES = (REPO / "canaries" / "test_routes.py", REPO / "canaries" / "test_workspaces.py")
ROSTER = ("deepseek/deepseek-v4-flash-0731", "google/gemini-3.6-flash", "openai/gpt-5.6-luna")
RUN_CHECKS = (
    "A_git_integrity",
    "B_pi_models",
    "C_roster_matches",
    "D_cost_reported",
    "E_credit_remaining",
    "vm_hygiene",
)


@dataclass
class GateOutcome:
    """What one child gate session produced."""

    stdout: str
    stderr: str
    ret: int
    report: dict[str, Any]
    report_dir: Path
    fleet: SimFleet

    def items(self) -> dict[tuple[str, str, str | None], dict[str, Any]]:
        """(check, run_id, model) -> the results.json entry."""
        out = {}
        for check in self.report["checks"]:
            param = check["nodeid"].split("[", 1)[1].rstrip("]")
            run_id = next(r for r in [*self.fleet.run_ids, *self.fleet.closed_run_ids] if param.startswith(r))
            model = param[len(run_id) + 1 :] or None
            out[(check["check"], run_id, model)] = check
        return out

    def artifacts_text(self) -> str:
        """Everything the session wrote or printed, as one string (for leak checks)."""
        parts = [self.stdout, self.stderr]
        for path in sorted(self.report_dir.rglob("*")):
            if path.is_file():
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
        return "\n".join(parts)


def run_gate(pytester: pytest.Pytester, fleet: SimFleet, *args: str, timeout: float = 600) -> GateOutcome:
    """Run ``pytest -m gate`` in a subprocess against ``fleet`` (already serving)."""
    return run_suite(pytester, fleet, "gate", (GATE_SUITE,), *args, timeout=timeout)


def run_canary(pytester: pytest.Pytester, fleet: SimFleet, *args: str, timeout: float = 600) -> GateOutcome:
    """Run ``pytest -m canary`` in a subprocess against ``fleet`` (already serving)."""
    return run_suite(pytester, fleet, "canary", CANARY_SUITES, *args, timeout=timeout)


def run_suite(
    pytester: pytest.Pytester,
    fleet: SimFleet,
    marker: str,
    suites: tuple[Path, ...],
    *args: str,
    timeout: float = 600,
) -> GateOutcome:
    """Run ``pytest -m <marker>`` over copies of ``suites`` in a subprocess against ``fleet``."""
    check_selection(args, pytester.path)
    suite_dir = pytester.path / f"{marker}s"
    suite_dir.mkdir(exist_ok=True)
    for suite in suites:
        shutil.copy(suite, suite_dir / suite.name)
    report_dir = pytester.path / "report"
    result = pytester.runpytest_subprocess(
        "-m", marker, "-p", "no:cacheprovider", "-p", "no:randomly",
        "--sbx-inventory", str(fleet.inventory_path), "--sbx-report", str(report_dir),
        str(suite_dir), *args,
        timeout=timeout,
    )  # fmt: skip
    report = json.loads((report_dir / "results.json").read_text(encoding="utf-8"))
    return GateOutcome(
        "\n".join(result.outlines), "\n".join(result.errlines), int(result.ret), report, report_dir, fleet
    )


def expected_items(fleet: SimFleet) -> list[tuple[str, str, str | None]]:
    """Every item a healthy gate has for ``fleet``: run_record, A, B, C roster, C per model, D, E per run.

    A closed run has its run_record item only (a skip).
    """
    keys: list[tuple[str, str, str | None]] = [("run_record", r, None) for r in fleet.closed_run_ids]
    for run_id in fleet.run_ids:
        keys.append(("run_record", run_id, None))
        keys.extend((check, run_id, None) for check in RUN_CHECKS)
        keys.extend(("C_model_answers", run_id, model) for model in ROSTER)
    return keys
