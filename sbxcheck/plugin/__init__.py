"""The pytest plugin (entry point ``sbxcheck.plugin``): its hooks (options, markers, collection, results).

The rest of the pytest layer sits beside it: :mod:`.stash` (config.stash keys, ``get_session``,
``run_state``), :mod:`.params` (parametrization from the inventory), :mod:`.collector` (outcomes ->
RunReport, terminal summary), :mod:`.handoff` and :mod:`.xdist` (workers), :mod:`.fixtures`,
:mod:`.session` (the run's resources) and :mod:`.runstate` (what the run learns and does).

Thin by design (like pytest-xdist's): loading it imports only pytest and the standard library; the
session, inventory, transports and simulator are imported and built when an sbxcheck item needs
them. A run that selects no sbxcheck item gets no header, no signal handler and no report.
Reports are written only on the xdist controller (or the single process without xdist).

How sbxcheck's verdicts meet pytest's own output:

- pytest's ``longrepr`` is kept (assertion rewriting, the short summary, ``--junitxml``'s message);
  sbxcheck adds a report section "sbxcheck" (classification, message, key evidence, next step).
- An sbxcheck ``error`` (we could not tell: unreachable, timed out, bad response) is a pytest
  *error*, also when it is found in the call phase: :func:`pytest_report_teststatus` files it under
  "error" (the hook pytest-rerunfailures uses for "rerun"), so pytest's summary line and
  sbxcheck's counts agree. pytest's own ``--junitxml`` still writes a call-phase error as
  ``<failure>`` (it decides by phase); sbxcheck's junit.xml says ``error`` in the failure's type.
- A plain ``assert`` in a user's sbxcheck-marked test is ``failed``/``check_failed``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pytest import ExitCode

from sbxcheck.fleetsource import FleetSource
from sbxcheck.plugin.collector import COLLECTOR_KEY, ResultCollector
from sbxcheck.plugin.handoff import XdistNodes
from sbxcheck.plugin.itemreport import hide_sbxcheck_frames, redact_longrepr, result_from_report
from sbxcheck.plugin.params import NOTHING_LEAKED, parametrize
from sbxcheck.plugin.runstate import RunState
from sbxcheck.plugin.settings import SETTINGS_KEY, Settings, build, declare
from sbxcheck.plugin.stash import (
    CALL_START_KEY,
    PARAMS_KEY,
    PYTEST_SESSION_KEY,
    RUN_STATE_KEY,
    SESSION_KEY,
    SESSION_TAG_KEY,
    fleet_source,
    get_session,
    plain_nodeid,
    run_state,
    simulated_fleet,
    suite_of,
)

if TYPE_CHECKING:
    from sbxcheck.lifecycle.following import WaitingState

pytest_plugins = ["sbxcheck.plugin.fixtures"]

MARKERS = {
    "gate": "SSSF setup-gate assertions A–E, run over SSH inside each VM (pytest -m gate)",
    "canary": "nightly fleet canaries (pytest -m canary)",
    "triage": "incident runbooks: classify and recommend, never act destructively (pytest -m triage)",
    "run": "a run that has executed or been observed: SDLC alive, run.log clean, app and trace UI (pytest -m run)",
}


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from sbxcheck.plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    declare(parser)


def _check_outputs(config: pytest.Config, settings: Settings) -> None:
    """Every output option names something sbxcheck can write: one usage-error line per wrong one."""
    from sbxcheck.plugin.outputs import output_problems

    allure = config.getoption("allure_report_dir", None)
    problems = output_problems(
        [
            ("--sbx-report", settings.report_dir, "dir"),
            ("--sbx-history", settings.history, "dir"),
            ("--sbx-metrics", settings.metrics, "file"),
            ("--sbx-state", settings.state, "dir"),
            ("--alluredir", Path(str(allure)).expanduser() if allure else None, "dir"),
        ]
    )
    if problems:
        raise pytest.UsageError("; ".join(problems))


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, ExitCode | int | None, ExitCode | int | None]:
    """Settings and output paths are checked here, before any plugin's ``pytest_configure`` runs
    (allure-pytest creates its ``--alluredir`` in its own configure, and crashes on a regular file);
    a run that ends in a usage error leaves no earlier run's report behind it."""
    controller = getattr(config, "workerinput", None) is None
    try:
        if controller and not (config.option.help or config.option.version):  # these two write nothing
            settings = build(config)
            config.stash[SETTINGS_KEY] = settings
            _check_outputs(config, settings)
            _check_rootdir(config)
        return (yield)
    except pytest.UsageError:
        if controller:
            _remove_old_report(config)
        raise


def _check_rootdir(config: pytest.Config) -> None:
    """A path given as ``--sbx-x PATH`` that moved pytest's ini file is a usage error naming the fix;
    one that moved only the rootdir (the node ids) is a warning naming it."""
    from sbxcheck.plugin.rootdir import moved_rootdir

    moved = moved_rootdir(config)
    if moved is None:
        return
    text, lost_ini = moved
    if lost_ini:
        raise pytest.UsageError(text)
    config.issue_config_time_warning(pytest.PytestConfigWarning(text), stacklevel=2)


def _remove_old_report(config: pytest.Config) -> None:
    """Delete the previous run's report files: after a usage error none may pass for this run's."""
    from sbxcheck.plugin.outputs import remove_stale_reports
    from sbxcheck.plugin.settings import read_one

    settings = config.stash.get(SETTINGS_KEY, None)
    try:
        report_dir = settings.report_dir if settings is not None else read_one(config, "report_dir")
    except pytest.UsageError:  # the report dir itself is what is wrong: there is nothing to trust in it
        return
    with contextlib.suppress(OSError):
        remove_stale_reports(report_dir)


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    handed = workerinput.get("sbxcheck_settings") if workerinput else None
    # a worker takes the controller's settings whole; elsewhere a bad value is a usage error now
    # (pytest_cmdline_main built them already, unless a caller configured pytest without it)
    settings = Settings.from_wire(handed) if handed else config.stash.get(SETTINGS_KEY, None) or build(config)
    config.stash[SETTINGS_KEY] = settings
    if settings.doctor:
        _run_doctor(settings)
    if workerinput is None and not getattr(config.option, "help", False):
        _preflight(config, settings)  # a bad configuration is one usage error, before collection (exit 4)
    if not getattr(config.option, "help", False):
        from sbxcheck.plugin.waiving import start

        start(config, settings, fleet_source(settings) if workerinput is None else None)  # a bad waiver: exit 4
    _check_outputs(config, settings)  # again, for a caller that skipped pytest_cmdline_main
    _add_shipped_suites(config, settings)
    config.stash[PARAMS_KEY] = {}
    config.stash[SESSION_TAG_KEY] = (
        workerinput.get("sbxcheck_session_tag") if workerinput else None
    ) or uuid.uuid4().hex
    # what this process learns and does, beside the collector (a worker starts with the runs its controller mounted)
    config.stash[RUN_STATE_KEY] = RunState.starting(settings.run_ids, (workerinput or {}).get("sbxcheck_mounted", ()))
    if workerinput is not None:
        scope_dir = workerinput.get("sbxcheck_scope_dir")
        if scope_dir:
            # the controller groups by VM with its own scheduler (sbxcheck.plugin.xdist) when this
            # worker collects sbxcheck items: their node ids then stay plain even under --dist loadgroup
            from sbxcheck.plugin.xdist import WorkerGroups

            groups = WorkerGroups(Path(scope_dir), str(workerinput.get("workerid")), lambda i: bool(suite_of(i)))
            config.pluginmanager.register(groups, "sbxcheck-worker-groups")
        from sbxcheck.plugin.cleanup import WorkerCleanup

        config.pluginmanager.register(
            WorkerCleanup(lambda: config.stash.get(SESSION_KEY, None), run_state(config)), "sbxcheck-worker-cleanup"
        )
        return
    # registered before any mount, so an interrupted mount still gets its report
    collector = ResultCollector(config)
    config.stash[COLLECTOR_KEY] = collector
    config.pluginmanager.register(collector, "sbxcheck-collector")
    if not config.getoption("collectonly") and _wants_mounts(config, settings):
        collector.remove_stale_reports()  # a mount is sbxcheck work: this run writes a report
        session, state = get_session(config), run_state(config)
        _terminate_as_interrupt()
        try:
            session.ledger_mounts.mount_all(state)
        except Exception as exc:
            from sbxcheck.errors import SbxError

            if not isinstance(exc, SbxError):
                raise
            state.mount_error = exc.message
    if config.pluginmanager.hasplugin("xdist"):
        xdist_nodes = XdistNodes(config)
        if getattr(config.option, "dist", None) in ("load", "loadgroup") and (
            getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None)
        ):
            # items of one VM (and of the control plane) go to one worker: one connection, one owner
            import tempfile

            xdist_nodes.scope_dir = Path(tempfile.mkdtemp(prefix="sbxcheck-xdist-"))
        config.pluginmanager.register(xdist_nodes, "sbxcheck-xdist")


def _add_shipped_suites(config: pytest.Config, settings: Settings) -> None:
    """Collect the installed package's suites where the run asks for a suite and has none of its own."""
    if getattr(config.option, "help", False):
        return
    from sbxcheck.plugin.suites import ShippedSuites, name_the_suite_packages

    name_the_suite_packages(config)
    shipped = ShippedSuites.for_run(config, settings.shipped_suites)
    if shipped is not None:
        shipped.add_to(config)
        config.pluginmanager.register(shipped, "sbxcheck-shipped-suites")


def _preflight(config: pytest.Config, settings: Settings) -> None:
    """Raise pytest.UsageError with one message when the configuration cannot give a fleet verdict."""
    from sbxcheck.preflight import configuration_problem

    required = (settings.require_inventory, settings.source("require_inventory"))
    problem = configuration_problem(
        fleet_source(settings),
        required=required,
        faults=list(settings.sim_faults),
        markexpr=str(config.getoption("markexpr") or ""),
        sim_seed=settings.sim_seed,
    )
    if problem:
        raise pytest.UsageError(problem)


def _run_doctor(settings: Settings) -> None:
    """--sbx-doctor: the doctor's report instead of a test run (exit 0 or 1), nothing collected."""
    from sbxcheck.doctor import run_doctor

    source = FleetSource.choose(settings.inventory, settings.source("inventory"), settings.rootdir, force_sim=False)
    code = run_doctor(source)
    pytest.exit("sbxcheck doctor: all preconditions met" if code == 0 else "sbxcheck doctor: see the ✗ lines", code)


def _wants_mounts(config: pytest.Config, settings: Settings) -> bool:
    """--sbx-mount, or an inventory that asks for mounts (checked without loading anything when absent)."""
    if settings.mounts:
        return True
    if fleet_source(settings).simulated:
        return False
    session = get_session(config)
    if session.uses_sim:
        return False
    try:
        sssf = session.inventory().sssf
    except Exception:  # an unreadable inventory is reported by the items, not here
        return False
    return bool(sssf and sssf.mounts)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        state = run_state(config)
        try:
            collector = config.stash.get(COLLECTOR_KEY, None)
            if collector is not None and not collector.finished:
                # interrupted before sessionfinish (e.g. during a mount): the policy still applies,
                # and the report is still written, marked interrupted
                collector.finish(interrupted=True)
        finally:
            try:
                session.control_plane.close_missions(state)  # what is still open, reported in the state
            finally:
                session.close()
            if state.interrupted_during:
                _exit_as_interrupted(config)
    xdist_nodes = config.pluginmanager.get_plugin("sbxcheck-xdist")
    if isinstance(xdist_nodes, XdistNodes) and xdist_nodes.scope_dir is not None:
        import shutil

        shutil.rmtree(xdist_nodes.scope_dir, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[PYTEST_SESSION_KEY] = session
    from sbxcheck.redact import install_log_redaction

    install_log_redaction(session.config.pluginmanager)  # caplog, captured logs, --log-cli-level, --log-file


def _exit_as_interrupted(config: pytest.Config) -> None:
    """An interrupt that let a teardown finish still ends the run as interrupted (exit status 2)."""
    pytest_session = config.stash.get(PYTEST_SESSION_KEY, None)
    if pytest_session is not None and pytest_session.exitstatus not in (
        pytest.ExitCode.INTERRUPTED,
        pytest.ExitCode.INTERNAL_ERROR,
    ):
        pytest_session.exitstatus = pytest.ExitCode.INTERRUPTED


def _terminate_as_interrupt() -> None:
    """SIGTERM ends the session like Ctrl-C: teardowns the policy allows still run, the ledger stays true.

    Installed only once sbxcheck has something to tear down or check (mounts, or selected items).
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGTERM, interrupt)


def pytest_report_collectionfinish(
    config: pytest.Config, start_path: Path, items: list[pytest.Item]
) -> list[str]:
    """Which fleet is checked — only when sbxcheck items were selected (an unrelated run sees nothing)."""
    if not any(suite_of(item) for item in items):
        return []
    session = get_session(config)
    lines = [f"sbxcheck: inventory: {session.describe_source()}"]
    if session.uses_sim:
        from sbxcheck.fleetsource import pi_status

        lines.append(f"sbxcheck: simulated VMs run {pi_status(version=session.settings.sim_pi_version)}")
    if simulated_fleet(session):
        lines.append(
            "sbxcheck: SIMULATED RUN: these verdicts are about a simulated fleet, not yours "
            "(CI: --sbx-require-inventory makes a lost inventory exit 4)"
        )
    return lines


# ------------------------------------------------------------------ parametrization


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the "nothing leaked" items (a parameter that stands for nothing to check) as deselected."""

    def placeholder(item: pytest.Item) -> bool:
        params = getattr(getattr(item, "callspec", None), "params", {})
        return bool(params.get("sbx_ledger_entry") == NOTHING_LEAKED)

    if getattr(config, "workerinput", None) is None and any(suite_of(item) for item in items):
        from sbxcheck.fleetsource import SIMULATOR_MISSING, sim_installed

        if fleet_source(config.stash[SETTINGS_KEY]).simulated and not sim_installed():
            raise pytest.UsageError(f"sbxcheck: {SIMULATOR_MISSING}")
    dropped = [item for item in items if placeholder(item)]
    if dropped:
        items[:] = [item for item in items if not placeholder(item)]
        config.hook.pytest_deselected(items=dropped)
    probe = config.stash[SETTINGS_KEY].probe
    if probe:  # --sbx-probe=ROUTE keeps that route's three items, nothing else
        from sbxcheck.lifecycle.prompts import probe_items

        kept, other = probe_items(items, probe)
        if not kept:
            raise pytest.UsageError(
                f"sbxcheck: --sbx-probe={probe}: no selected route item has that route (select the route "
                "suite, canaries/test_routes.py, and give a route name from [[sandboxed.routes]])"
            )
        items[:] = kept
        config.hook.pytest_deselected(items=other)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Remember which routes and canaries the selected items need: only those are dispatched."""
    if not any(suite_of(item) for item in session.items):
        return
    _terminate_as_interrupt()
    get_session(session.config)  # made now if no fixture made it: its close runs at unconfigure
    state = run_state(session.config)
    routes: set[str] = set()
    canaries: set[str] = set()
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        for key in ("sbx_route", "sbx_contract"):  # a contract item needs its route dispatched
            if isinstance(params.get(key), str):
                routes.add(params[key])
        if isinstance(params.get("sbx_canary"), str):
            canaries.add(params["sbx_canary"])
    state.wanted_routes, state.wanted_canaries = routes, canaries
    state.on_wait = _progress_callback(session.config)


def _progress_callback(config: pytest.Config) -> Any:
    """What the dispatcher calls while an item waits on missions: the live status line."""
    from sbxcheck.plugin.progress import ProgressLine, describe_wait

    line = ProgressLine(config)

    def on_wait(waiting: WaitingState | None, waited_s: float) -> None:
        if waiting is None:
            line.done()
            return
        line.update(
            describe_wait("mission", waiting.by_status, waiting.elapsed_s, waiting.deadline_s), waited_s
        )

    return on_wait if line.enabled else None


# ------------------------------------------------------------------ per-item results


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    """A fixture that needs what the control plane's release does not serve skips the item."""
    return (yield from _not_served_as_skip())


def _not_served_as_skip() -> Generator[None, Any, Any]:
    """The inner part of a hook wrapper: :class:`~sbxcheck.errors.NotServed` raised below becomes a
    skip with its message (``not served by this control plane (version X): ...``). An unrelated run
    never imports sbxcheck's errors for it: where they are not loaded, none was raised."""
    import sys

    try:
        return (yield)
    except Exception as exc:
        errors = sys.modules.get("sbxcheck.errors")
        if errors is not None and isinstance(exc, errors.NotServed):
            pytest.skip(exc.message)
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Note when the test body started: a verdict reports its elapsed time to Allure's steps. A body
    that meets a route or feature the control plane's release does not serve is skipped, naming it."""
    if suite_of(item) is not None:
        import time

        item.stash[CALL_START_KEY] = time.monotonic()
    return (yield from _not_served_as_skip())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    suite = suite_of(item)
    if suite is not None:
        from sbxcheck.redact import redact_exception

        redact_exception(call.excinfo)  # before pytest, junit or Allure format it
        from sbxcheck.display import neutralise_exception

        neutralise_exception(call.excinfo)  # then control characters shown visibly (fleet text never drives a terminal)
    if call.excinfo is not None and not item.config.getoption("fulltrace", False):
        hide_sbxcheck_frames(call.excinfo)
    report: pytest.TestReport = yield
    if suite is None:
        return report
    from sbxcheck.display import display_data, for_display, neutralise_report
    from sbxcheck.redact import default_redactor, redact_report
    from sbxcheck.report.present import detail_block
    from sbxcheck.results import CheckRecord, Classification, Outcome

    redactor = default_redactor()
    report.longrepr = redact_longrepr(report.longrepr, lambda t: for_display(t, redactor), set())
    redact_report(report, redactor)  # what the structure keeps hidden: -l locals cut short, sections
    neutralise_report(report)  # redaction first, then control characters shown visibly
    meaningful = report.when == "call" or report.failed or report.skipped
    if not meaningful:
        return report
    result = result_from_report(item, report, call)
    if report.when == "teardown" and report.failed:
        result = result.model_copy(
            update={
                "outcome": Outcome.ERROR,
                "classification": result.classification or Classification.INTERNAL_ERROR,
            }
        )
    record = CheckRecord(nodeid=plain_nodeid(item), suite=suite, **result.model_dump())
    if not record.duration_s and report.duration:
        record.duration_s = round(report.duration, 6)  # the check did not time itself: pytest did
    from sbxcheck.plugin.waiving import apply_waiver

    record = apply_waiver(item, report, record)  # a waived failure: pytest's xfail, sbxcheck's waived
    wait = record.evidence.get("wait_s")
    if isinstance(wait, (int, float)) and not isinstance(wait, bool):
        record.wait_s = float(wait)
    document = display_data(record.model_dump(mode="json"), redactor)  # redacted, then neutralised
    # plain attributes travel with the report through xdist (pytest serialises the report's __dict__);
    # user_properties would also land in --junitxml as <properties> inside <testcase>, which xunit2 forbids
    report.sbxcheck = CheckRecord.model_validate(document).model_dump_json()  # type: ignore[attr-defined]
    report.sbxcheck_outcome = record.outcome.value  # type: ignore[attr-defined]
    if record.outcome in (Outcome.FAILED, Outcome.ERROR):
        report.sections.append(("sbxcheck", detail_block(document)))
    return report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """A run meant for a fleet that collected nothing says how the shipped suites are run.

    Not where items were collected and then deselected (``-k``, ``-m``): that run found its tests.
    """
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED or getattr(config, "workerinput", None) is not None:
        return
    if terminalreporter.stats.get("deselected"):
        return
    from sbxcheck.preflight import names_a_suite

    settings = config.stash.get(SETTINGS_KEY, None)
    asked = names_a_suite(str(config.getoption("markexpr", "") or ""))
    if settings is None or not (settings.inventory is not None or asked):
        return
    terminalreporter.write_line(
        "sbxcheck: no tests ran. The shipped suites run with `pytest -m gate` (or canary, triage, run) "
        "given no test path, or `pytest --pyargs sbxcheck.suites -m gate`"
        + (f" (--sbx-shipped-suites is {settings.shipped_suites})" if settings.shipped_suites != "auto" else "")
    )


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    """An sbxcheck ``error`` found in the call phase is a pytest error too: one count in both summaries."""
    if report.when == "call" and report.failed and getattr(report, "sbxcheck_outcome", None) == "error":
        return "error", "E", "ERROR"
    return None

