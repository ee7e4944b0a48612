"""sbxcheck seen through pytest's own tools: terminal, short summary, --junitxml, Allure, xdist, ini, hooks.

Most tests read one child run of a small synthetic suite (sbxcheck-marked tests that record
verdicts without any fleet); the xdist and Allure-history tests use the embedded fleet.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.gate_harness import REPO, run_gate
from support.schemas import validate_junit

from sbxcheck.sim.fleet import SimFleet

# its module-scoped servers start once, on one xdist worker (sbxcheck makes -n use loadgroup)
pytestmark = pytest.mark.xdist_group("pytest-native")

SECRET = "sk-or-v1-" + "a1b2c3d4" * 8
ADVICE_TAIL = "END-OF-ADVICE"
ADVICE = (
    "the VM is left up as evidence (runbook §8.8) — get in: ssh vm-1.exe.xyz; diagnose, fix, then re-run "
    "`just sbx lifecycle setup run-1`. "
    + "Teardown stays your decision, nothing was changed. " * 6
    + ADVICE_TAIL
)

GATE_SUITE = f'''
import time
import pytest
from sbxcheck.results import CheckResult, Classification, Outcome

pytestmark = pytest.mark.gate


def test_plain_assert():
    x = 1
    assert x == 2


def test_dirty_tree(sbx_verdict):
    evidence = {{"host": "vm-1", "ran": "git status --porcelain",
                 "porcelain_sample": [" M src/app.py", "?? notes.txt"],
                 "porcelain_lines": 2, "stdout": "x" * 500}}
    sbx_verdict(CheckResult.failed("A_git_integrity", "run-1",
        "unexpected working-tree changes (the tree must be clean): 2 line(s)", evidence,
        recommendation={ADVICE!r}))


@pytest.mark.parametrize("n", [1, 2])
def test_unreachable(sbx_verdict, n):
    sbx_verdict(CheckResult.errored("B_pi_models", "run-2", "connect to vm-2:22 timed out after 10s",
        Classification.INFRA_UNREACHABLE, {{"host": "vm-2"}}, cause="infra_unreachable:vm-2"))


def test_slow(sbx_verdict):
    time.sleep(0.3)
    sbx_verdict(CheckResult.passed("slow", "run-1", "took its time", {{"slept_s": 0.3}}))


def test_skipped(sbx_verdict):
    sbx_verdict(CheckResult(check="dgx", target="-", outcome=Outcome.SKIPPED, message="no [dgx] section"))


def test_leaky(sbx_verdict):
    sbx_verdict(CheckResult.failed("leaky", "run-1", "key {SECRET} is exposed", {{"key": "{SECRET}"}},
        Classification.SECURITY_EXPOSURE))
'''

OTHER_SUITES = """
import pytest


@pytest.mark.canary
def test_canary_ok():
    pass


@pytest.mark.triage
def test_triage_ok():
    pass
"""


def _child(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


@dataclass
class Synthetic:
    dir: Path
    proc: subprocess.CompletedProcess[str]

    @property
    def out(self) -> str:
        return self.proc.stdout

    def results(self) -> dict[str, dict[str, object]]:
        document = json.loads((self.dir / "rep" / "results.json").read_text())
        return {c["nodeid"].split("::")[-1]: c for c in document["checks"]}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Synthetic:
    """One child run of the synthetic suites with --junitxml, --alluredir and sbxcheck's reports."""
    root = tmp_path_factory.mktemp("synthetic")
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (root / "test_gate_synthetic.py").write_text(GATE_SUITE)
    (root / "test_other_suites.py").write_text(OTHER_SUITES)
    proc = _child(
        root,
        "--junitxml=pytest-junit.xml",
        "--alluredir=allure",
        "--sbx-report=rep",
        "-o",
        "junit_family=xunit2",
    )
    return Synthetic(root, proc)


# ------------------------------------------------------------------ defect 2: pytest's own output


def test_plain_assert_keeps_rewriting_short_summary_and_junit_message(synthetic: Synthetic) -> None:
    assert "assert 1 == 2" in synthetic.out  # assertion rewriting survived
    assert re.search(r"^FAILED \S*test_plain_assert - assert 1 == 2$", synthetic.out, re.M), synthetic.out
    pytest_junit = (synthetic.dir / "pytest-junit.xml").read_text()
    assert re.search(r'<failure message="assert 1 == 2', pytest_junit), pytest_junit
    assert "sbxcheck_result" not in pytest_junit  # no sbxcheck payload as <properties> in pytest's junit
    record = synthetic.results()["test_plain_assert"]
    assert (record["outcome"], record["classification"]) == ("failed", "check_failed")


def test_pytest_summary_and_sbxcheck_counts_agree(synthetic: Synthetic) -> None:
    last = synthetic.out.strip().splitlines()[-1]
    assert "3 failed" in last and "2 errors" in last and "3 passed" in last and "1 skipped" in last, last
    summary = json.loads((synthetic.dir / "rep" / "results.json").read_text())["summary"]
    assert (summary["failed"], summary["error"], summary["passed"], summary["skipped"]) == (3, 2, 3, 1)
    assert "ERROR test_gate_synthetic.py::test_unreachable[1]" in synthetic.out


# ------------------------------------------------------------------ defect 3: the next step reaches the person


def test_terminal_shows_key_evidence_and_whole_next_step_without_runbook_numbers(
    synthetic: Synthetic,
) -> None:
    section = synthetic.out.split("= sbxcheck =", 1)[1]
    assert " M src/app.py" in section and "?? notes.txt" in section
    flat = " ".join(section.split())
    assert ADVICE_TAIL in flat and "get in: ssh vm-1.exe.xyz" in flat
    assert "§" not in synthetic.out
    assert re.search(r"incident INC-[0-9a-f]{8} \[infra_unreachable\]", section)
    # the FAILURES entry of an item carries sbxcheck's section next to pytest's own report
    assert re.search(r"-+ sbxcheck -+\noutcome: failed\nclassification: check_failed", synthetic.out)
    records = synthetic.results()
    assert records["test_dirty_tree"]["key_evidence"][:3] == [
        "porcelain_sample:",
        "   M src/app.py",
        "  ?? notes.txt",
    ]
    assert str(records["test_dirty_tree"]["next_step"]).endswith(ADVICE_TAIL)


# ------------------------------------------------------------------ defect 4: durations


def test_every_duration_is_measured(synthetic: Synthetic) -> None:
    records = synthetic.results()
    assert float(records["test_slow"]["duration_s"]) >= 0.3  # type: ignore[arg-type]
    assert all(float(r["duration_s"]) > 0 for r in records.values())  # type: ignore[arg-type]


# ------------------------------------------------------------------ defect 5: junit.xml


def test_junit_validates_one_suite_each_with_message_incident_and_next_step(synthetic: Synthetic) -> None:
    import xml.etree.ElementTree as ET

    path = synthetic.dir / "rep" / "junit.xml"
    root = ET.parse(path).getroot()
    assert [s.get("name") for s in root.findall("testsuite")] == ["gate", "canary", "triage"]
    # the only properties say which fleet was checked (a simulated run says so in junit.xml) and the
    # run's verdict, on every run
    properties = {p.get("name") for p in root.iter("property")}
    assert properties == {"sbxcheck.fleet", "sbxcheck.inventory", "sbxcheck.verdict"}
    gate = root.find("testsuite[@name='gate']")
    assert gate is not None and float(gate.get("time", "0")) >= 0.3
    cases = {c.get("name"): c for c in root.iter("testcase")}
    failure = cases["test_unreachable[1]"].find("failure")
    assert failure is not None and failure.get("type") == "error/infra_unreachable"
    message = failure.get("message") or ""
    assert message.startswith("[infra_unreachable]") and re.search(r"\(incident INC-[0-9a-f]{8}\)", message)
    assert "next step: check the host is up" in message
    dirty = cases["test_dirty_tree"]
    assert ADVICE_TAIL in (dirty.find("failure").get("message") or "")  # type: ignore[union-attr]
    assert " M src/app.py" in (dirty.findtext("system-out") or "")
    validate_junit(path)  # last: without the schema it skips (fails in CI), after the structure is checked


# ------------------------------------------------------------------ defect 6: Allure


def _allure_results(directory: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in directory.glob("*-result.json")]


def test_allure_labels_links_steps_and_redaction(synthetic: Synthetic) -> None:
    results = {str(r["name"]): r for r in _allure_results(synthetic.dir / "allure")}
    dirty = results["test_dirty_tree"]
    labels = {(lab["name"], lab["value"]) for lab in dirty["labels"]}  # type: ignore[union-attr]
    assert {("parentSuite", "gate"), ("feature", "A_git_integrity"), ("tag", "check_failed"),
            ("severity", "critical")} <= labels  # fmt: skip
    [step] = dirty["steps"]  # type: ignore[misc]
    assert step["name"] == "ssh vm-1: git status --porcelain" and step["stop"] >= step["start"]
    unreachable = next(r for n, r in results.items() if n.startswith("test_unreachable"))
    links = unreachable.get("links") or []
    assert any(str(link.get("name", "")).startswith("incident INC-") for link in links)  # type: ignore[union-attr]
    text = "\n".join(p.read_text(errors="replace") for p in (synthetic.dir / "allure").iterdir())
    assert SECRET not in text


@pytest.mark.slow
def test_allure_history_id_is_stable_across_runs(pytester: pytest.Pytester) -> None:
    """Two runs on two embedded fleets (different temp paths): the same items have the same historyId."""
    import shutil

    shutil.copy(REPO / "gates" / "test_gate.py", pytester.path / "test_gate.py")
    ids = []
    for n in (1, 2):
        result = pytester.runpytest_subprocess(
            "-m", "gate", "-k", "run_record", f"--alluredir=allure{n}", f"--sbx-report=rep{n}", "-p", "no:randomly",
            timeout=300,
        )  # fmt: skip
        assert result.ret == 0, result.stdout.str()[-2000:]
        ids.append({r["name"]: r["historyId"] for r in _allure_results(pytester.path / f"allure{n}")})
    assert len(ids[0]) == 4 and ids[0] == ids[1]  # three open runs and the closed one


# ------------------------------------------------------------------ defect 1: xdist


@pytest.fixture(scope="module")
def serving_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    with SimFleet(tmp_path_factory.mktemp("fleet")) as fleet:
        yield fleet


@pytest.mark.slow
def test_plain_n2_keeps_each_vm_on_one_worker_and_one_connection(
    pytester: pytest.Pytester, serving_fleet: SimFleet
) -> None:
    before = {r: serving_fleet.connections(r) for r in serving_fleet.run_ids}
    outcome = run_gate(pytester, serving_fleet, "-n", "2", "-v", "-k", "A_git or C_roster or E_credit")
    assert outcome.ret == 0, outcome.stdout[-3000:]
    workers: dict[str, set[str]] = {r: set() for r in serving_fleet.run_ids}
    for line in outcome.stdout.splitlines():
        match = re.match(r"\[(gw\d+)\] .*PASSED .*\[([a-z]+-\d{8}-[0-9a-f]{6})\]", line)
        if match:
            workers[match.group(2)].add(match.group(1))
    assert all(len(w) == 1 for w in workers.values()), workers
    assert {r: serving_fleet.connections(r) - before[r] for r in serving_fleet.run_ids} == dict.fromkeys(
        serving_fleet.run_ids, 1
    )


# ------------------------------------------------------------------ defect 7: cost to unrelated runs


def test_unrelated_run_pays_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_unrelated="""
        import signal, sys

        def test_nothing_heavy_and_no_handler():
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
            heavy = [m for m in ("mcp", "paramiko", "asyncssh", "sbxcheck.plugin.session",
                                 "sbxcheck.sim", "sbxcheck.results", "sbxcheck.inventory") if m in sys.modules]
            assert heavy == []
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", timeout=120)
    result.assert_outcomes(passed=1)
    assert "sbxcheck:" not in result.stdout.str()  # no header lines (the plugin list still names it)
    assert not (pytester.path / "sbxcheck-report").exists()


# ------------------------------------------------------------------ defect 8: conventions


def test_fixtures_are_documented_and_the_internal_marker_hidden(pytester: pytest.Pytester) -> None:
    fixtures = pytester.runpytest_subprocess("--fixtures", timeout=120).stdout.str()
    for name in ("sbx_verdict", "sbx_vm", "sbx_ssh_pool", "sbx_inventory", "sbx_mission", "sbx_gate_run"):
        assert re.search(rf"^{name}( \[session scope\])? -- .*\n    \S", fixtures, re.M), name
    markers = pytester.runpytest_subprocess("--markers", timeout=120).stdout.str()
    assert "@pytest.mark.gate" in markers and "sbx_placeholder" not in markers


@pytest.mark.slow  # six child sessions
def test_ini_options_resolve_cli_over_env_over_ini(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nsbx_report_dir = "from-ini"\n')
    pytester.makepyfile(test_g="import pytest\n\n@pytest.mark.gate\ndef test_g():\n    pass\n")
    pytester.runpytest_subprocess("-p", "no:randomly", timeout=120)
    assert (pytester.path / "from-ini" / "results.json").is_file()
    env = os.environ.copy()
    try:
        os.environ["SBXCHECK_REPORT_DIR"] = str(pytester.path / "from-env")
        pytester.runpytest_subprocess("-p", "no:randomly", timeout=120)
        assert (pytester.path / "from-env" / "results.json").is_file()
        pytester.runpytest_subprocess("-p", "no:randomly", "--sbx-report=from-cli", timeout=120)
        assert (pytester.path / "from-cli" / "results.json").is_file()
    finally:
        os.environ.clear()
        os.environ.update(env)
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nsbx_teardown = "sometimes"\n')
    bad = pytester.runpytest_subprocess("-p", "no:randomly", timeout=120)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*sbx_teardown in pyproject.toml: expected one of never, on-pass, always*"])


@pytest.mark.parametrize("option", ["--sbx-inventory", "--sbx-report"])
def test_a_space_form_path_that_moves_the_rootdir_is_a_usage_error_and_equals_form_keeps_it(
    pytester: pytest.Pytester, tmp_path: Path, option: str
) -> None:
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\n")
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    elsewhere = tmp_path / "fleet" / "sbxcheck.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text("[ssh]\n")
    value = str(elsewhere if option == "--sbx-inventory" else elsewhere.parent)
    # no test path, so PATH alone would decide the rootdir: it is refused, naming the fix
    space = pytester.runpytest_subprocess(option, value, timeout=120)
    assert space.ret == pytest.ExitCode.USAGE_ERROR
    space.stderr.fnmatch_lines([f"*sbxcheck: pytest took {value} (the value of {option}) for a test path*"
                                f"write {option}={value}"])  # fmt: skip
    assert not (pytester.path / "sbxcheck-report").exists()
    equals = pytester.runpytest_subprocess(f"{option}={value}", "-p", "no:randomly", timeout=120)
    equals.stdout.fnmatch_lines([f"rootdir: {pytester.path}", "configfile: pyproject.toml"])
    assert "for a test path" not in equals.stdout.str() + equals.stderr.str()
    inside = pytester.mkdir("out")  # a path inside the project leaves the rootdir where it was
    assert pytester.runpytest_subprocess("--sbx-report", str(inside), timeout=120).ret != 4


def test_hooks_see_results_incidents_and_the_report(tmp_path: Path) -> None:
    root = tmp_path / "hooks"
    root.mkdir()
    (root / "test_gate_synthetic.py").write_text(GATE_SUITE)
    (root / "conftest.py").write_text(
        textwrap.dedent(
            """
            import json
            seen = {"results": [], "incidents": [], "reports": []}

            def pytest_sbxcheck_result(record, config):
                seen["results"].append((record.nodeid, record.outcome.value))

            def pytest_sbxcheck_incident(incident, config):
                seen["incidents"].append(incident.id)

            def pytest_sbxcheck_report(report, paths, config):
                seen["reports"].append(sorted(paths))
                with open("hooks.json", "w") as fh:
                    json.dump(seen, fh)
            """
        )
    )
    _child(root, "--sbx-report=rep", "-k", "dirty or unreachable")
    seen = json.loads((root / "hooks.json").read_text())
    assert sorted(o for _, o in seen["results"]) == ["error", "error", "failed"]
    assert len(seen["incidents"]) == 1 and seen["reports"] == [["junit.xml", "report.html", "results.json"]]


def test_repository_config_keeps_lf_working_and_pins_mcp_to_the_imported_api() -> None:
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "cacheprovider" not in project["tool"]["pytest"]["ini_options"].get("addopts", "")
    mcp = next(Requirement(r) for r in project["project"]["dependencies"] if r.startswith("mcp"))
    assert not mcp.specifier.contains("1.30.0")  # McpError, no mcp.shared._stream_protocols, no mcp_types
    assert mcp.specifier.contains("2.0.0")
