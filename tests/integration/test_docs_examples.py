"""Every command the README and docs/ show, run as written on the embedded fleet.

Each case runs in a fresh directory laid out as a checkout is (the shipped suites, pyproject.toml,
conftest.py), with the interpreter running this test first on PATH and this checkout's sbxcheck
imported. Only what names this machine's world is resolved: a placeholder run id becomes a run id of
the embedded fleet, ``/tmp/fleet`` a directory of the case, ``~/src/inkwell`` the checkout
``$SBXCHECK_TEST_INKWELL`` names (unset: those cases skip, saying so), node_exporter's textfile
directory one under the case. A page's
``sim up`` … ``sim down`` sequence is one case; a command that reads what another documented
command wrote (a report, a history, a ledger) runs in a copy of that command's directory. Each
command must end with the exit code EXPECTED gives (reviewed against what the pages say it does)
and print no traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.children import child_blocked_plugins
from support.doc_commands import REPO, Shown, shown_commands
from support.inkwell import inkwell_absent, inkwell_checkout

from sbxcheck.sim.fleet import DEFAULT_SEED, plan_run_ids

pytestmark = pytest.mark.slow  # every documented suite run, end to end

RUN_ID = plan_run_ids(DEFAULT_SEED, 3)[0]
INKWELL_SHOWN = "~/src/inkwell"  # the pages' name for the reader's own inkwell checkout
CHECKOUT_FILES = ("gates", "canaries", "conftest.py", "pyproject.toml")
COMMAND_TIMEOUT_S = 300.0
TEST_BED_KNOBS = ("SBXCHECK_CACHE", "SBXCHECK_SIM_LATENCY_SCALE")


@dataclass(frozen=True)
class Skip:
    """A command this machine cannot run as the page means it, and why."""

    reason: str


ALREADY_DONE = Skip("the environment this test runs in is that install")
BENCHMARK = Skip("a benchmark: repeated timed runs for minutes on an idle machine, read by a person, not pass/fail")
REAL_FLEET_INSTALL = Skip(
    "installs the published package into ~/.venvs and checks a real fleet's sbxcheck.toml; the same path "
    "(a wheel in a fresh venv, an empty directory, a `sim up` inventory) is tests/integration/test_wheel_install.py"
)
NEEDS_RUNNERS = Skip("needs the runner hosts runner-1 and runner-2 (SSH or execnet socket servers); none here")

# What each documented command must exit with (a Skip: why it is not run here). Exit codes are the
# table of docs/reports-and-alerting.md for pytest (0 passed, 1 a check failed or could not tell, 4
# usage); `sbxcheck report` is 1 when the report holds a failure, `sbxcheck history` 0 only when the
# last run passed, `sbxcheck doctor` 0 when every precondition is met.
EXPECTED: dict[str, int | Skip] = {
    "pip install -e '.[sim]'": ALREADY_DONE,
    "pip install -e '.[test]'": ALREADY_DONE,
    "pytest tests -n 4 --dist worksteal": Skip("the project's own test suite, which holds this test (CI runs it)"),
    "sbxcheck doctor": 0,
    # README.md, "Checking a real fleet"
    "python3 -m venv ~/.venvs/sbxcheck": REAL_FLEET_INSTALL,
    ". ~/.venvs/sbxcheck/bin/activate": REAL_FLEET_INSTALL,
    "pip install sbxcheck": REAL_FLEET_INSTALL,
    "mkdir ~/fleet": REAL_FLEET_INSTALL,
    "cd ~/fleet": REAL_FLEET_INSTALL,
    "pytest -m gate --sbx-inventory=sbxcheck.toml": REAL_FLEET_INSTALL,
    "pytest -m gate": 0,
    "pytest -m gate --sbx-run-id fix-login-20260301-9c04be": 0,
    "pytest -m gate -n 2 --alluredir allure-results": 0,
    # docs/embedded-fleet.md
    "sbxcheck sim faults": 0,
    "pytest -m gate --sbx-sim-fault vm.dirty-tree": 1,  # A fails on the first run
    "pytest -m gate --sbx-sim-fault openrouter.model-down@bravo": 1,  # bravo's C for that model fails
    "pytest -m canary --sbx-sim-fault cp.backend-crash": 1,  # the routes on that backend fail
    "pytest -m triage --sbx-sim-fault dgx.tailscaled-disabled": 1,  # the DGX chain stops at tailscaled
    "pytest -m canary --sbx-sim-fault cp.rate-limited": 0,  # every refusal is waited out and retried
    "pytest -m canary --sbx-sim-fault cp.stream-lags": 0,  # a lagging stream is read again from the record
    "sbxcheck sim up --dir /tmp/fleet [--fault NAME ...] [--runs N]": 0,
    "pytest -m gate --sbx-inventory=/tmp/fleet/sbxcheck.toml": 0,
    "sbxcheck sim down --dir /tmp/fleet": 0,
    "sbxcheck report sbxcheck-report": 0,  # the healthy gate just before it
    "sbxcheck history .sbxcheck/history": 0,
    "sbxcheck --version": 0,
    "sbxcheck ledger compact .sbxcheck/state": 0,
    "sbxcheck sim up --dir /tmp/fleet --sssf-checkout ~/src/inkwell": 0,
    "pytest -m gate --sbx-inventory=/tmp/fleet/sbxcheck.toml --sbx-mount demo --sbx-teardown on-pass": 0,
    "pytest -m gate --sbx-mount demo --sbx-sim-sssf=~/src/inkwell": 0,
    "sbxcheck sim up --dir /tmp/fleet --cp-version v0.7": 0,  # stopped by the test afterwards
    "pytest -m canary --sbx-sim-cp-version v0.7": 0,  # what v0.7 does not serve is skipped, never an error
    "pytest -m gate --sbx-sim-pi-version 1.6.0": 0,  # a healthy fleet passes on pi 1.6.0 as on 0.83.0
    "sbxcheck sim up --dir /tmp/fleet --pi-version 0.73.1": 0,  # stopped by the test afterwards
    "pytest -m canary --sbx-sim-cp-version 1.3": 0,  # 1.3.0's routes start, its finished turns are acknowledged
    # docs/gate.md
    "pytest -m gate --sbx-inventory=/srv/sbxcheck.toml "
    "--tx ssh=ops@runner-1//python=/opt/sbxcheck/bin/python//chdir=/srv/checkout "
    "--tx ssh=ops@runner-2//python=/opt/sbxcheck/bin/python//chdir=/srv/checkout": NEEDS_RUNNERS,
    "pytest -m gate --tx socket=runner-1:8888 --tx socket=runner-2:8888 ...": NEEDS_RUNNERS,
    "python benchmarks/gate_vs_floor.py --runs 3 --repeat 5": BENCHMARK,
    "python benchmarks/collect_scale.py --runs 1000": BENCHMARK,
    "python benchmarks/idle_cost.py": BENCHMARK,
    "python benchmarks/gate_walltime.py --workers 2": BENCHMARK,
    "pytest -m gate --sbx-mount demo": 0,
    "pytest -m gate --sbx-mount demo --sbx-teardown on-pass": 0,
    "pytest -m gate --sbx-sweep": 0,
    # docs/internals.md
    "python -m sbxcheck.docs_inventory docs/inventory.md": 0,
    "python -m sbxcheck.plugin.docs_settings docs/settings.md": 0,
    # docs/pytest.md
    "pytest -m gate -n auto": 0,
    "pytest -m gate --junitxml=pytest-junit.xml": 0,
    "pytest -m gate --alluredir=allure-results": 0,
    "cp -r allure-report/history allure-results/ 2>/dev/null || true": 0,
    "allure generate allure-results --clean -o allure-report": 0,
    # docs/reports-and-alerting.md
    'pytest -m "canary or triage" --sbx-history=.sbxcheck/history': 0,
    "pytest -m canary --sbx-history=.sbxcheck/history --sbx-history-keep=90": 0,
    "pytest -m canary --sbx-metrics=/var/lib/node_exporter/textfile/sbxcheck.prom": 0,
    "sbxcheck history .sbxcheck/history [--keep N]": 0,
    "sbxcheck waive 'canaries/test_routes.py::test_route_reaches_execution[opencode-*]' --reason \"opencode "
    'adapter crash (fn3 is not a function), upstream sandboxed.sh #797" --until +7d --owner oncall': 0,
    "pytest -m canary --sbx-sim-fault cp.backend-crash --sbx-waivers=sbxcheck-waivers.toml": 0,  # both waived
    # docs/run-items.md: in the SSSF checkout of a `sbxcheck sim up` fleet (RUN_FLEET)
    'just sbx lifecycle execute RUN_ID "add a health endpoint"': 0,
    "just sbx lifecycle observe RUN_ID": 0,
    "pytest -m run": 0,
}

# What a command's output must show, beside its exit: the items the page says a fault turns; the
# history of the page's two runs before it.
SHOWS: dict[str, str] = {
    "sbxcheck history .sbxcheck/history": r"(?m)^2 runs, .* last verdict: passed",
    "sbxcheck history .sbxcheck/history [--keep N]": r"(?m)^2 runs, .* last verdict: passed",
    "pytest -m gate --sbx-sim-fault vm.dirty-tree": rf"FAILED \S*test_gate_A_git_integrity\[{RUN_ID}\]",
    "pytest -m gate --sbx-sim-fault openrouter.model-down@bravo": r"FAILED \S*test_gate_C_model_answers\[bravo-",
    "pytest -m canary --sbx-sim-fault cp.backend-crash --sbx-waivers=sbxcheck-waivers.toml": (
        r"waived: 2 item\(s\), known failures left out of the verdict"
    ),
}

# A command that reads what an earlier documented command wrote runs in a copy of that one's directory.
READS: dict[str, str] = {
    "sbxcheck history .sbxcheck/history": "pytest -m canary --sbx-history=.sbxcheck/history --sbx-history-keep=90",
    "sbxcheck history .sbxcheck/history [--keep N]": (
        "pytest -m canary --sbx-history=.sbxcheck/history --sbx-history-keep=90"
    ),
    "pytest -m canary --sbx-history=.sbxcheck/history --sbx-history-keep=90": (
        'pytest -m "canary or triage" --sbx-history=.sbxcheck/history'
    ),
    "sbxcheck ledger compact .sbxcheck/state": "pytest -m gate --sbx-mount demo --sbx-teardown on-pass",
    "pytest -m canary --sbx-sim-fault cp.backend-crash --sbx-waivers=sbxcheck-waivers.toml": (
        "sbxcheck waive 'canaries/test_routes.py::test_route_reaches_execution[opencode-*]' --reason \"opencode "
        'adapter crash (fn3 is not a function), upstream sandboxed.sh #797" --until +7d --owner oncall'
    ),
    "cp -r allure-report/history allure-results/ 2>/dev/null || true": "pytest -m gate --alluredir=allure-results",
    "allure generate allure-results --clean -o allure-report": (
        "cp -r allure-report/history allure-results/ 2>/dev/null || true"
    ),
}

# (page, first command, last command): run in order in one directory, as one case.
SEQUENCES = (
    ("docs/embedded-fleet.md", "sbxcheck sim up --dir /tmp/fleet [--fault NAME ...] [--runs N]",
     "sbxcheck report sbxcheck-report"),
    ("docs/embedded-fleet.md", "sbxcheck sim up --dir /tmp/fleet --sssf-checkout ~/src/inkwell",
     "sbxcheck sim down --dir /tmp/fleet"),
    ("docs/run-items.md", 'just sbx lifecycle execute RUN_ID "add a health endpoint"', "pytest -m run"),
)  # fmt: skip
# A case that runs on a `sbxcheck sim up` fleet of its own: the run items' recipes are run in its SSSF
# checkout, and pytest finds its inventory through $SBXCHECK_INVENTORY.
RUN_FLEET = {'just sbx lifecycle execute RUN_ID "add a health endpoint"'}
IN_SSSF_CHECKOUT = {'just sbx lifecycle execute RUN_ID "add a health endpoint"', "just sbx lifecycle observe RUN_ID"}


@dataclass(frozen=True)
class Ran:
    """One command as run: the text run, where, its exit and output."""

    command: str
    cwd: Path
    returncode: int
    output: str


def _cases() -> list[list[Shown]]:
    shown = shown_commands()
    cases: list[list[Shown]] = []
    index = 0
    while index < len(shown):
        line = shown[index]
        end = index
        for page, first, last in SEQUENCES:
            if line.page == page and line.text == first:
                end = next(i for i in range(index, len(shown)) if shown[i].page == page and shown[i].text == last)
        cases.append(shown[index : end + 1])
        index = end + 1
    return cases


CASES = _cases()
_DIRS: dict[str, Path] = {}  # command text -> the directory it ran in, for the commands that read it
_RAN: dict[str, Ran] = {}  # command text -> its run, when the same command is shown in two places


def resolve(command: str, case_dir: Path) -> str:
    """The command with this machine's world in place of the page's."""
    resolved = re.sub(r"\s+\[[^\]]*\]", "", command)  # [--keep N]: optional parts left out (never a node id's)
    resolved = resolved.replace("fix-login-20260301-9c04be", RUN_ID).replace("RUN_ID", RUN_ID)
    resolved = resolved.replace("/tmp/fleet", str(case_dir / "fleet"))
    resolved = resolved.replace(INKWELL_SHOWN, str(inkwell_checkout()))
    return resolved.replace("/var/lib/node_exporter/textfile", str(case_dir / "node_exporter" / "textfile"))


def checkout_copy(into: Path) -> Path:
    """A directory laid out as a checkout: the shipped suites and the project's pytest configuration."""
    into.mkdir(parents=True, exist_ok=True)
    for name in CHECKOUT_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, into / name)
    (into / "docs").mkdir(exist_ok=True)
    return into


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """This environment, without the outer run's pytest and sbxcheck settings (and the test extras'
    pytest plugins); this checkout imported.

    The test bed's own knobs stay: the pi cache and the simulated control plane's pace (the same
    verdicts, sooner)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "SBXCHECK_")) or k in TEST_BED_KNOBS
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env["PYTEST_ADDOPTS"] = child_blocked_plugins()  # the test extras' plugins a newcomer does not have
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**env, **extra}


def run_shown(command: str, cwd: Path, case_dir: Path, env: dict[str, str]) -> Ran:
    resolved = resolve(command, case_dir)
    done = subprocess.run(
        ["bash", "-c", resolved],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    return Ran(resolved, cwd, done.returncode, done.stdout + done.stderr)


def _stop_fleet(case_dir: Path, env: dict[str, str]) -> None:
    fleet = case_dir / "fleet"
    if (fleet / "sim.pid").exists():
        subprocess.run(
            [sys.executable, "-m", "sbxcheck.cli", "sim", "down", "--dir", str(fleet)],
            env=env, capture_output=True, timeout=60, check=False,
        )  # fmt: skip


def skip_of(part: str) -> Skip | None:
    """Why this command is not run here, if it is not."""
    expected = EXPECTED[part]
    if isinstance(expected, Skip):
        return expected
    if INKWELL_SHOWN in part and (absent := inkwell_absent()):
        return Skip(absent)
    if part.startswith("allure ") and not shutil.which("allure"):
        return Skip("the Allure CLI is not installed here")
    return None


def _skip_reason(case: list[Shown]) -> str | None:
    parts = [part for line in case for part in line.parts()]
    absent = inkwell_absent()
    if absent and any(INKWELL_SHOWN in part for part in parts):
        return absent  # the fleet the case's other commands check is the one that part starts
    skips = [skip_of(part) for part in parts]
    if not all(skips):
        return None
    return "; ".join(dict.fromkeys(s.reason for s in skips if s))


def test_every_shown_command_has_an_expected_exit() -> None:
    shown = {part for case in CASES for line in case for part in line.parts()}
    assert shown - EXPECTED.keys() == set(), "a page shows a command this test does not know what to expect of"
    assert EXPECTED.keys() - shown == set(), "EXPECTED names a command no page shows any more"
    assert set(READS) | set(READS.values()) | set(SHOWS) <= shown


@pytest.mark.parametrize("case", CASES, ids=[case[0].where for case in CASES])
def test_shown_command_runs_as_documented(case: list[Shown], tmp_path: Path) -> None:
    reason = _skip_reason(case)
    if reason:
        pytest.skip(reason)
    case_dir = tmp_path
    work = checkout_copy(case_dir / "checkout")
    (case_dir / "node_exporter" / "textfile").mkdir(parents=True)  # as node_exporter's package makes it
    problems: list[str] = []
    env = child_env({})
    try:
        if case[0].text in RUN_FLEET:
            up = run_shown("sbxcheck sim up --dir /tmp/fleet", work, case_dir, env)
            assert up.returncode == 0, up.output
            env = child_env({"SBXCHECK_INVENTORY": str(case_dir / "fleet" / "sbxcheck.toml")})
        for line in case:
            for part in line.parts():
                expected = EXPECTED[part]
                if isinstance(expected, Skip) or skip_of(part):
                    continue
                ran = _run_part(part, work, case_dir, env, shared=len(case) == 1)
                if ran.returncode != expected:
                    problems.append(
                        f"{line.where}: `{ran.command}` exited {ran.returncode}, the pages say {expected}\n"
                        + ran.output[-3000:]
                    )
                if part in SHOWS and not re.search(SHOWS[part], ran.output):
                    problems.append(f"{line.where}: `{ran.command}` shows no {SHOWS[part]!r}\n{ran.output[-3000:]}")
                if "Traceback" in ran.output:
                    problems.append(f"{line.where}: `{ran.command}` printed a traceback\n{ran.output[-4000:]}")
    finally:
        _stop_fleet(case_dir, env)
    assert not problems, "\n\n".join(problems)


def _run_part(part: str, work: Path, case_dir: Path, env: dict[str, str], shared: bool = False) -> Ran:
    """Run one command in the case's checkout (a copy of what it reads, where it reads something).

    A command run on its own (``shared``: a one-line case, or run first for a command that reads
    what it writes) is run once, however many places show it or read it.
    """
    if shared and part in _RAN:
        return _RAN[part]
    if part in READS:
        producer = READS[part]
        if producer not in _DIRS:
            produced = checkout_copy(Path(tempfile.mkdtemp(dir=case_dir)) / "checkout")
            _run_part(producer, produced, case_dir, env, shared=True)
        shutil.rmtree(work)
        shutil.copytree(_DIRS[producer], work, symlinks=True)
    cwd = case_dir / "fleet" / "sssf" if part in IN_SSSF_CHECKOUT else work
    ran = run_shown(part, cwd, case_dir, env)
    _DIRS[part] = work
    if shared:
        _RAN[part] = ran
    return ran
