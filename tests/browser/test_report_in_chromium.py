"""report.html in real headless Chromium (Debian's chromium, driven by Playwright from PyPI).

Built from synthetic RunReports (tests/report_scenarios.py), so no fleet is needed. Screenshots of a
healthy, a gate-fault, a canary-incident and a history-with-flake page go to the artifacts
directory ($SBXCHECK_TEST_ARTIFACTS, default test-artifacts/report-pages); with
SBXCHECK_UPDATE_DOCS=1 the gate-fault one also replaces docs/report-failing.png.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support import report_scenarios as scenarios

from sbxcheck.redact import Redactor
from sbxcheck.report.history import HistoryStore
from sbxcheck.report.html_base import item_anchor
from sbxcheck.report.results_json import render_results_json
from sbxcheck.report.writers import write_artifacts
from sbxcheck.results import RunReport

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SBXCHECK_TEST_ARTIFACTS", REPO / "test-artifacts")) / "report-pages"
CHROMIUM = os.environ.get("SBXCHECK_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# one worker drives every page through one browser (sbxcheck turns -n's load into loadgroup):
# a Chromium per xdist worker cost ~1.5 s CPU each and made the pages wait on each other
pytestmark = pytest.mark.xdist_group("chromium")

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')"
)
if not Path(CHROMIUM).exists():
    pytest.skip(
        f"no Chromium at {CHROMIUM} (apt-get install chromium, or set SBXCHECK_CHROMIUM)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@dataclass
class Page:
    """One report page loaded from file://, with everything it asked the network for or complained about."""

    page: Any
    report: RunReport
    path: Path
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def screenshot(self, name: str, height: int = 900) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        out = ARTIFACTS / f"{name}.png"
        self.page.set_viewport_size({"width": 1280, "height": height})
        self.page.screenshot(path=str(out), full_page=False)
        return out


_WRITTEN: dict[str, Path] = {}


def _write(name: str, report: RunReport, history: list[RunReport] | None = None) -> Path:
    """Write the page once per test session (the tests only read it)."""
    if name not in _WRITTEN:
        _WRITTEN[name] = _write_page(name, report, history)
    return _WRITTEN[name]


def _write_page(name: str, report: RunReport, history: list[RunReport] | None) -> Path:
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # one directory per xdist worker: no worker removes
    out = ARTIFACTS / (f"{name}-{worker}" if worker else name)  # a page another is still loading
    shutil.rmtree(out, ignore_errors=True)
    history_dir = None
    if history:
        history_dir = out / "history"
        for run in history:
            HistoryStore(history_dir).add(render_results_json(run, Redactor()), run.started_at)
    written = write_artifacts(report, out, Redactor(), history_dir=history_dir)
    return written.paths["report.html"]


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    contexts: list[Any] = []

    def load(
        name: str, report: RunReport, history: list[RunReport] | None = None, *, js: bool = True
    ) -> Page:
        path = _write(name, report, history)
        context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=js)
        contexts.append(context)
        page = context.new_page()
        loaded = Page(page, report, path)

        def record(route: Any) -> None:
            url = route.request.url
            if url == path.as_uri():
                route.continue_()
            else:
                loaded.requests.append(url)
                route.abort()

        context.route("**", record)
        page.on("request", lambda r: r.url != path.as_uri() and loaded.requests.append(r.url))
        page.on("console", lambda m: m.type == "error" and loaded.console_errors.append(m.text))
        page.on("pageerror", lambda e: loaded.console_errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        return loaded

    yield load
    for context in contexts:
        context.close()


SCENARIOS = {
    "healthy": scenarios.healthy,
    "gate-fault": scenarios.gate_fault,
    "canary-incident": scenarios.canary_incident,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_page_grid_order_and_quiet(open_page: Any, name: str) -> None:
    report = SCENARIOS[name]()
    loaded = open_page(name, report)
    page = loaded.page
    loaded.screenshot(name)

    cells = page.locator("#grid a.cell")
    assert cells.count() == len(report.checks)  # one cell per item
    hrefs = cells.evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert sorted(hrefs) == sorted(f"#{item_anchor(r.nodeid)}" for r in report.checks)
    assert page.locator("article.item").count() == len(report.checks)

    outcomes = page.locator("article.item").evaluate_all("els => els.map(e => e.dataset.outcome)")
    rank = {"failed": 0, "error": 1, "skipped": 2, "passed": 3}
    assert [rank[o] for o in outcomes] == sorted(rank[o] for o in outcomes)  # failed and errored first

    verdict = page.locator("#verdict").get_attribute("data-verdict")
    assert verdict == ("passed" if name == "healthy" else "failed")
    assert not loaded.console_errors
    assert not loaded.requests  # no network: no CDN, no fonts, no favicon


def test_filter_hides_passed_items(open_page: Any) -> None:
    report = scenarios.gate_fault()
    page = open_page("gate-fault", report).page
    items = page.locator("article.item")
    assert page.locator("#filters").is_visible()
    page.select_option("#filter-outcome", "failed")
    visible = items.evaluate_all("els => els.filter(e => !e.hidden).map(e => e.dataset.outcome)")
    assert visible and set(visible) == {"failed"}
    first_passed = page.locator('article.item[data-outcome="passed"]').first
    assert first_passed.is_hidden()
    page.select_option("#filter-outcome", "problems")
    page.select_option("#filter-suite", "gate")
    visible = items.evaluate_all(
        "els => els.filter(e => !e.hidden).map(e => [e.dataset.outcome, e.dataset.suite])"
    )
    assert len(visible) == report.summary["failed"] + report.summary["error"]
    assert {suite for _, suite in visible} == {"gate"}
    page.select_option("#filter-outcome", "")
    page.select_option("#filter-suite", "")
    assert page.locator("#shown").inner_text() == f"{len(report.checks)} shown"


def test_incident_commands_appear_verbatim(open_page: Any) -> None:
    report = scenarios.canary_incident()
    page = open_page("canary-incident", report).page
    for incident in report.incidents:
        codes = page.locator(f'section.incident[id="{incident.id}"] .cmd code').all_inner_texts()
        for command in incident.commands:
            assert command in codes
        assert any(code.startswith("pytest ") for code in codes)  # and the re-run of its items
    dgx = next(i for i in report.incidents if "tailscaled" in i.recommendation)
    assert (
        "systemctl enable --now tailscaled" in page.locator(f'section.incident[id="{dgx.id}"]').inner_text()
    )

    gate = scenarios.gate_fault()
    page = open_page("gate-fault", gate).page
    run = scenarios.RUNS[2]
    item = page.locator(f"#{item_anchor(f'gates/test_gate.py::test_gate_A_git_integrity[{run}]')}")
    codes = item.locator(".cmd code").all_inner_texts()
    assert f"ssh {run}.exe.xyz" in codes and f"just sbx lifecycle setup {run}" in codes
    assert item.locator(".msg").is_visible() and item.locator(".ev").is_visible()  # without expanding
    assert not item.locator("details pre").is_visible()  # the full evidence stays folded
    host_key = next(i for i in gate.incidents if i.classification.value == "host_key_mismatch")
    codes = page.locator(f'section.incident[id="{host_key.id}"] .cmd code').all_inner_texts()
    assert f"pytest -m gate --sbx-run-id {scenarios.RUNS[1]}" in codes


def test_page_is_complete_without_javascript(open_page: Any) -> None:
    report = scenarios.gate_fault()
    loaded = open_page("gate-fault", report, js=False)
    page = loaded.page
    assert not page.locator("#filters").is_visible()  # the filters need the script, so they stay hidden
    assert page.locator("article.item:visible").count() == len(report.checks)
    assert page.locator("#grid a.cell").count() == len(report.checks)
    assert page.locator("section.incident .cmd code").first.is_visible()
    assert not loaded.requests


def test_history_page_shows_flaky_and_incident_states(open_page: Any) -> None:
    runs = scenarios.history_runs(10)
    loaded = open_page("history-with-flake", runs[-1], runs[:-1])
    page = loaded.page
    loaded.screenshot("history-with-flake")
    text = page.inner_text("body")
    assert "FLAKY: 5 flips in 10 runs" in text
    for label in ("NEW", "ONGOING since 2026-11-27T03:17:00Z (3 runs)", "RESOLVED"):
        assert page.locator(".tag", has_text=label).first.is_visible()
    flaky_rows = page.locator("#history ~ table tr", has_text=scenarios.FLAKY_ITEM)
    assert flaky_rows.count() >= 1
    assert page.locator(".strip.big i").count() == 10
    assert not loaded.console_errors and not loaded.requests


def test_docs_screenshot_of_a_failing_run(open_page: Any) -> None:
    """The README's picture: a failing run. Written to the artifacts; to docs/ with SBXCHECK_UPDATE_DOCS=1."""
    loaded = open_page("gate-fault", scenarios.gate_fault())
    shot = loaded.screenshot("report-failing", height=1500)
    assert shot.stat().st_size > 10_000
    if os.environ.get("SBXCHECK_UPDATE_DOCS") == "1":
        shutil.copy(shot, REPO / "docs" / "report-failing.png")
    assert (REPO / "docs" / "report-failing.png").is_file()
