"""The page's gate grid comes from the gate checks' own column table (``results.GATE_COLUMNS``)."""

from __future__ import annotations

import re

import pytest
from support import report_scenarios as scenarios

from sbxcheck.checks.gate import GateTarget, judge_git_integrity, judge_pi_models, judge_roster_matches
from sbxcheck.checks.gate_model import judge_cost_reported, judge_credit_remaining, judge_model_answers
from sbxcheck.checks.script import ScriptRun
from sbxcheck.redact import Redactor
from sbxcheck.report import html_fleet
from sbxcheck.report.html import render_html
from sbxcheck.report.html_base import item_anchor
from sbxcheck.report.results_json import report_dict
from sbxcheck.results import GATE_COLUMNS, GateColumn, RunReport

TARGET = GateTarget("alpha", "alpha.exe.xyz", "ab" * 20, ("m/one",), "cfg", "http://x", 1.0, "m/one", 60, 180)
STOPPED = ScriptRun("alpha.exe.xyz", 1, "", "bash: not found")  # a script that never reached its end


def _grid(report: RunReport) -> str:
    page = render_html(report_dict(report, Redactor()), Redactor())
    match = re.search(r"<h3>Gate: runs × items</h3><table>(.*?)</table>", page)
    assert match, "no gate grid on the page"
    return match.group(1)


def test_every_gate_judge_has_a_column() -> None:
    """A gate check renamed without its row would fall out of the grid: the judges' names are the table's."""
    judged = {
        judge_git_integrity(TARGET, STOPPED).check,
        judge_pi_models(TARGET, STOPPED).check,
        judge_roster_matches(TARGET, STOPPED).check,
        judge_model_answers(TARGET, "m/one", STOPPED).check,
        judge_cost_reported(TARGET, STOPPED).check,
        judge_credit_remaining(TARGET, STOPPED).check,
    }
    assert judged | {"run_record"} == {c.check for c in GATE_COLUMNS}


def test_the_grid_follows_the_table_in_order() -> None:
    head = re.findall(r"<th>([^<]*)</th>", _grid(scenarios.healthy()).split("</tr>", 1)[0])
    fixed = [c.label for c in GATE_COLUMNS if not c.per_model]
    assert [h for h in head if h in fixed] == fixed
    assert head.index("C roster") < min(i for i, h in enumerate(head) if h.startswith("C ") and h != "C roster")


def test_a_new_gate_check_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gate check with a row in the table gets its column with no edit of the page."""
    report = scenarios.healthy()
    git = next(r for r in report.checks if r.check == "A_git_integrity")
    extra = git.model_copy(update={"check": "F_fleet_clock", "nodeid": git.nodeid.replace("git", "clock")})
    report = report.model_copy(update={"checks": [*report.checks, extra]})
    assert "F clock" not in _grid(report)
    monkeypatch.setattr(html_fleet, "GATE_COLUMNS", (*GATE_COLUMNS, GateColumn("F_fleet_clock", "F clock")))
    grid = _grid(report)
    assert grid.split("</tr>", 1)[0].endswith("<th>F clock</th>")
    assert f'href="#{item_anchor(extra.nodeid)}"' in grid
