"""The pytest plugin: options, markers, parametrization from the inventory, results and reports.

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
import datetime as dt
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sbxcheck.lifecycle import WaitingState
    from sbxcheck.results import CheckRecord, CheckResult
    from sbxcheck.session import GateRun, SbxSession

pytest_plugins = ["sbxcheck.fixtures"]

SUITES = ("gate", "canary", "triage", "run")
MARKERS = {
    "gate": "SSSF setup-gate assertions A–E, run over SSH inside each VM (pytest -m gate)",
    "canary": "nightly fleet canaries (pytest -m canary)",
    "triage": "incident runbooks: classify and recommend, never act destructively (pytest -m triage)",
    "run": "a run that has executed or been observed: SDLC alive, run.log clean, app and trace UI (pytest -m run)",
}
SESSION_KEY = pytest.StashKey["SbxSession"]()
RESULT_KEY = pytest.StashKey["CheckResult"]()
COLLECTOR_KEY = pytest.StashKey["ResultCollector"]()
PYTEST_SESSION_KEY = pytest.StashKey[pytest.Session]()
PARAMS_KEY = pytest.StashKey[dict[tuple[str, Any], Any]]()
SESSION_TAG_KEY = pytest.StashKey[str]()
CALL_START_KEY = pytest.StashKey[float]()
#: The parameter of "nothing leaked": the item is dropped at collection (an empty parametrization would skip).
NOTHING_LEAKED = "sbxcheck:nothing-leaked"
#: Parameters whose values are objects: they are parametrized indirectly by a stable key (run id, host,
#: ledger entry id), so node ids, xdist and Allure's historyId never see a repr with paths or times.
OBJECT_PARAMS = (
    "sbx_run_entry",
    "sbx_gate_run",
    "sbx_gate_model",
    "sbx_ledger_entry",
    "sbx_dgx",
    "sbx_github_probe",
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from sbxcheck import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    from sbxcheck.options import SETTINGS, TEARDOWN_CHOICES, add_ini_options

    group = parser.getgroup("sbxcheck", "sbxcheck: sandbox fleet checks")
    group.addoption(
        "--sbx-inventory",
        metavar="PATH",
        default=None,
        help=SETTINGS["sbx_inventory"].help + "; write --sbx-inventory=PATH (the space form lets pytest "
        "take PATH for a test path when it picks the rootdir); also $SBXCHECK_INVENTORY, ini sbx_inventory",
    )
    group.addoption(
        "--sbx-sim",
        action="store_true",
        default=False,
        help="use the embedded simulated fleet even if an inventory exists",
    )
    group.addoption(
        "--sbx-sim-fault",
        action="append",
        default=[],
        metavar="NAME[@RUN]",
        help="inject a named fault into the embedded fleet (repeatable; sbxcheck sim faults lists them)",
    )
    group.addoption(
        "--sbx-run-id",
        action="append",
        default=[],
        metavar="ID",
        help="gate only this run (repeatable; default: every open run)",
    )
    group.addoption(
        "--sbx-remediate",
        action="store_true",
        default=False,
        help="let the DGX triage run its one recovery command (systemctl enable --now tailscaled); "
        "off by default: triage only classifies and recommends",
    )
    group.addoption(
        "--sbx-mount",
        action="append",
        default=[],
        metavar="NAME",
        help="mount a sandbox with the inventory's mount recipe (just sbx mount NAME) before the gate (repeatable)",
    )
    group.addoption(
        "--sbx-teardown",
        choices=TEARDOWN_CHOICES,
        default=None,
        help=SETTINGS["sbx_teardown"].help + "; a failed gate always keeps its VM; "
        "also $SBXCHECK_TEARDOWN, ini sbx_teardown",
    )
    group.addoption(
        "--sbx-sweep",
        action="store_true",
        default=False,
        help="release what earlier sessions left open in the ledger, through the same recipes / cancel calls",
    )
    group.addoption(
        "--sbx-state",
        metavar="DIR",
        default=None,
        help="ledger directory (default: the inventory's [state] dir, else .sbxcheck/state beside the "
        "inventory file; relative to where pytest was started); also $SBXCHECK_STATE_DIR, ini sbx_state_dir",
    )
    group.addoption(  # issue 21
        "--sbx-probe",
        metavar="ROUTE",
        default=None,
        help="validate a repair: run exactly one narrow no-push probe mission of ROUTE (its dispatched, "
        "echo and execution items) and nothing else",
    )
    group.addoption(
        "--sbx-max-parallel",
        type=int,
        default=None,
        metavar="N",
        help="VMs gated at once (default: the inventory's [ssh] max_parallel, 32); 0 = no fan-out",
    )
    group.addoption(
        "--sbx-report",
        metavar="DIR",
        default=None,
        help=SETTINGS["sbx_report"].help + "; also $SBXCHECK_REPORT_DIR, ini sbx_report_dir",
    )
    add_ini_options(parser)
    _add_history_options(parser, group)
    _add_first_contact_options(parser, group)


def _add_first_contact_options(parser: pytest.Parser, group: Any) -> None:
    """Issue 18: a lost inventory is a usage error on request; the doctor checks before anything runs."""
    group.addoption(
        "--sbx-require-inventory",
        action="store_true",
        default=False,
        help="no inventory found is a usage error (exit 4) instead of a run on the embedded simulated fleet "
        "(what CI sets); also $SBXCHECK_REQUIRE_INVENTORY=1, ini sbx_require_inventory = true",
    )
    group.addoption(
        "--sbx-doctor",
        action="store_true",
        default=False,
        help="check every precondition (inventory, files, known_hosts, env vars, control plane, OpenRouter "
        "key, tools), one line each, and collect nothing: the same as `sbxcheck doctor`",
    )
    parser.addini(
        "sbx_require_inventory", "no inventory found is a usage error (as --sbx-require-inventory)", type="bool"
    )


# History and metrics (issue 9): CLI, then ini, then default.
HISTORY_KEEP_DEFAULT = 30


def _add_history_options(parser: pytest.Parser, group: Any) -> None:
    group.addoption(
        "--sbx-history",
        metavar="DIR",
        default=None,
        help="keep this run's results.json in DIR (the last --sbx-history-keep runs) and show flaky items, "
        "since-when failing and new/ongoing/resolved incidents on the page (ini: sbx_history)",
    )
    group.addoption(
        "--sbx-history-keep",
        metavar="N",
        default=None,
        help=f"how many runs the history keeps (default {HISTORY_KEEP_DEFAULT}; ini: sbx_history_keep)",
    )
    group.addoption(
        "--sbx-metrics",
        metavar="FILE",
        default=None,
        help="write Prometheus text exposition here (node_exporter textfile collector; ini: sbx_metrics)",
    )
    group.addoption(  # issue 21
        "--sbx-max-spend",
        metavar="USD",
        default=None,
        help="stop dispatching new missions once this run has spent USD (missions then run one at a time, "
        "each to its end, so its cost is known); what was not run is reported (ini: sbx_max_spend)",
    )
    parser.addini("sbx_max_spend", "spend cap in USD (as --sbx-max-spend)", default="")
    parser.addini("sbx_history", "history directory (as --sbx-history), relative to the ini file", default="")
    parser.addini("sbx_history_keep", "runs the history keeps (as --sbx-history-keep)", default="")
    parser.addini(
        "sbx_metrics", "Prometheus textfile (as --sbx-metrics), relative to the ini file", default=""
    )


def _resolved_path(config: pytest.Config, option: str, ini: str) -> Path | None:
    """A path option: the CLI value (relative to where pytest was invoked), else the ini value (relative
    to the ini file), else None."""
    value = config.getoption(option)
    if value:
        path = Path(str(value)).expanduser()
        return path if path.is_absolute() else Path(str(config.invocation_params.dir)) / path
    text = str(config.getini(ini) or "").strip()
    if not text:
        return None
    path = Path(text).expanduser()
    base = config.inipath.parent if config.inipath else config.rootpath
    return path if path.is_absolute() else Path(str(base)) / path


def _history_keep(config: pytest.Config) -> int:
    """--sbx-history-keep, else ini sbx_history_keep, else the default; a bad value is a usage error (exit 4)."""
    raw, source = config.getoption("sbx_history_keep"), "--sbx-history-keep"
    if raw is None:
        raw, source = str(config.getini("sbx_history_keep") or "").strip() or None, "ini sbx_history_keep"
    if raw is None:
        return HISTORY_KEEP_DEFAULT
    try:
        keep = int(str(raw))
    except ValueError:
        keep = 0
    if keep < 1:
        raise pytest.UsageError(f"{source}: expected a whole number of runs, at least 1; got {raw!r}")
    return keep


def _report_dir(config: pytest.Config) -> Path:
    """--sbx-report (or its env/ini forms, or the default), relative to where pytest was started."""
    from sbxcheck.options import resolve

    out_dir = Path(resolve(config, "sbx_report").value or "sbxcheck-report").expanduser()
    return out_dir if out_dir.is_absolute() else Path(str(config.invocation_params.dir)) / out_dir


def _check_outputs(config: pytest.Config) -> None:
    """Every output option names something sbxcheck can write: one usage-error line per wrong one."""
    from sbxcheck.options import resolve
    from sbxcheck.outputs import output_problems

    state = resolve(config, "sbx_state").value
    state_dir = Path(state).expanduser() if state else None
    if state_dir is not None and not state_dir.is_absolute():
        state_dir = Path(str(config.invocation_params.dir)) / state_dir
    allure = config.getoption("allure_report_dir", None)
    problems = output_problems(
        [
            ("--sbx-report", _report_dir(config), "dir"),
            ("--sbx-history", _resolved_path(config, "sbx_history", "sbx_history"), "dir"),
            ("--sbx-metrics", _resolved_path(config, "sbx_metrics", "sbx_metrics"), "file"),
            ("--sbx-state", state_dir, "dir"),
            ("--alluredir", Path(str(allure)).expanduser() if allure else None, "dir"),
        ]
    )
    if problems:
        raise pytest.UsageError("; ".join(problems))


def pytest_configure(config: pytest.Config) -> None:
    from sbxcheck.options import resolve

    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    for dest in ("sbx_inventory", "sbx_report", "sbx_teardown", "sbx_state"):
        resolve(config, dest)  # a bad value is a usage error now, naming its source
    _history_keep(config)  # a bad value stops the run before anything is mounted
    if config.getoption("sbx_doctor"):
        _run_doctor(config)
    if getattr(config, "workerinput", None) is None and not getattr(config.option, "help", False):
        _preflight(config)  # a bad configuration is one usage error, before collection (exit 4)
    from sbxcheck.options import max_spend_usd

    max_spend_usd(config)  # issue 21: a bad cap is a usage error now
    _check_outputs(config)  # issue 20: a wrong output path is exit 4, before anything runs
    config.stash[PARAMS_KEY] = {}
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    config.stash[SESSION_TAG_KEY] = (
        workerinput.get("sbxcheck_session_tag") if workerinput else None
    ) or uuid.uuid4().hex
    if workerinput is not None:
        scope_dir = workerinput.get("sbxcheck_scope_dir")
        if scope_dir:
            # the controller groups by VM with its own scheduler (sbxcheck.xdist_scope): node ids stay
            # plain even under an explicit --dist loadgroup, which would append "@<group>" to them
            from sbxcheck.xdist_scope import WorkerGroups

            config.option.loadgroup = False
            config.pluginmanager.register(
                WorkerGroups(Path(scope_dir), str(workerinput.get("workerid"))), "sbxcheck-worker-groups"
            )
        from sbxcheck.cleanup import WorkerCleanup

        config.pluginmanager.register(
            WorkerCleanup(lambda: config.stash.get(SESSION_KEY, None)), "sbxcheck-worker-cleanup"
        )
        return
    _warn_space_form_inventory(config)
    # registered before any mount, so an interrupted mount still gets its report
    collector = ResultCollector(config)
    config.stash[COLLECTOR_KEY] = collector
    config.pluginmanager.register(collector, "sbxcheck-collector")
    if not config.getoption("collectonly") and _wants_mounts(config):
        collector.remove_stale_reports()  # a mount is sbxcheck work: this run writes a report
        session = get_session(config)
        _terminate_as_interrupt()
        try:
            session.mount_all()
        except Exception as exc:
            from sbxcheck.errors import SbxError

            if not isinstance(exc, SbxError):
                raise
            session.mount_error = exc.message
    if config.pluginmanager.hasplugin("xdist"):
        xdist_nodes = _XdistNodes(config)
        if getattr(config.option, "dist", None) in ("load", "loadgroup") and (
            getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None)
        ):
            # items of one VM (and of the control plane) go to one worker: one connection, one owner
            import tempfile

            xdist_nodes.scope_dir = Path(tempfile.mkdtemp(prefix="sbxcheck-xdist-"))
        config.pluginmanager.register(xdist_nodes, "sbxcheck-xdist")


def _preflight(config: pytest.Config) -> None:
    """Raise pytest.UsageError with one message when the configuration cannot give a fleet verdict."""
    from sbxcheck.options import resolve
    from sbxcheck.preflight import REQUIRE_ENV, choose_inventory, configuration_problem, require_flag

    max_parallel = config.getoption("sbx_max_parallel")
    if max_parallel is not None and max_parallel < 0:
        raise pytest.UsageError(
            f"--sbx-max-parallel: expected 0 (no fan-out) or a number of VMs at once, got {max_parallel}"
        )
    setting = resolve(config, "sbx_inventory")
    faults = list(config.getoption("sbx_sim_fault"))
    choice = choose_inventory(
        setting.value,
        setting.source,
        Path(str(config.rootpath)),
        force_sim=bool(config.getoption("sbx_sim") or faults),
    )
    try:
        required = require_flag(
            bool(config.getoption("sbx_require_inventory")),
            os.environ.get(REQUIRE_ENV),
            config.getini("sbx_require_inventory"),
        )
    except ValueError as exc:
        raise pytest.UsageError(f"sbxcheck: {exc}") from None
    problem = configuration_problem(
        choice, required=required, faults=faults, markexpr=str(config.getoption("markexpr") or "")
    )
    if problem:
        raise pytest.UsageError(problem)


def _run_doctor(config: pytest.Config) -> None:
    """--sbx-doctor: the doctor's report instead of a test run (exit 0 or 1), nothing collected."""
    from sbxcheck.doctor import run_doctor
    from sbxcheck.options import resolve
    from sbxcheck.preflight import choose_inventory

    setting = resolve(config, "sbx_inventory")
    choice = choose_inventory(setting.value, setting.source, Path(str(config.rootpath)), force_sim=False)
    code = run_doctor(choice)
    pytest.exit("sbxcheck doctor: all preconditions met" if code == 0 else "sbxcheck doctor: see the ✗ lines", code)


def get_session(config: pytest.Config) -> SbxSession:
    """This process's SbxSession, made on first use (a run without sbxcheck items never makes one)."""
    existing = config.stash.get(SESSION_KEY, None)
    if existing is not None:
        return existing
    from sbxcheck.options import resolve
    from sbxcheck.session import SbxSession

    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    seed = workerinput.get("sbxcheck_sim_seed") if workerinput else _sim_seed()
    session = SbxSession(
        session_tag=config.stash[SESSION_TAG_KEY],
        rootdir=Path(str(config.rootpath)),
        inventory_option=resolve(config, "sbx_inventory").value,
        force_sim=config.getoption("sbx_sim"),
        faults=list(config.getoption("sbx_sim_fault")),
        run_ids=list(config.getoption("sbx_run_id")),
        sim_seed=seed,
        invocation_dir=Path(str(config.invocation_params.dir)),
    )
    session.remediate = bool(config.getoption("sbx_remediate"))
    session.state_option = resolve(config, "sbx_state").value
    session.mount_names = list(config.getoption("sbx_mount"))
    session.sweep = bool(config.getoption("sbx_sweep"))
    session.max_parallel = config.getoption("sbx_max_parallel")
    from sbxcheck.options import max_spend_usd

    session.max_spend_usd = max_spend_usd(config)  # issue 21
    if workerinput is not None:
        session.run_ids.extend(r for r in workerinput.get("sbxcheck_mounted", []) if r not in session.run_ids)
        shared = workerinput.get("sbxcheck_inventory")
        if shared:
            session.inventory_path, session.force_sim = Path(shared), False
        if "sbxcheck_ledger_ids" in workerinput:
            session.ledger_ids = set(workerinput["sbxcheck_ledger_ids"])
    config.stash[SESSION_KEY] = session
    return session


def _wants_mounts(config: pytest.Config) -> bool:
    """--sbx-mount, or an inventory that asks for mounts (checked without loading anything when absent)."""
    if config.getoption("sbx_mount"):
        return True
    from sbxcheck.options import resolve

    explicit = resolve(config, "sbx_inventory").value
    if config.getoption("sbx_sim") or config.getoption("sbx_sim_fault"):
        return False
    if not explicit and not (Path(str(config.rootpath)) / "sbxcheck.toml").is_file():
        return False
    session = get_session(config)
    if session.uses_sim:
        return False
    try:
        sssf = session.inventory().sssf
    except Exception:  # an unreadable inventory is reported by the items, not here
        return False
    return bool(sssf and sssf.mounts)


def _warn_space_form_inventory(config: pytest.Config) -> None:
    """Say so when ``--sbx-inventory PATH`` (space form) moved pytest's rootdir away from the project.

    pytest picks its rootdir and ini file before it loads plugins, so it cannot know that PATH is an
    option's value: an existing PATH is taken for a test path and pulls the rootdir towards it.
    """
    args = [str(a) for a in config.invocation_params.args]
    if "--sbx-inventory" not in args:
        return
    index = args.index("--sbx-inventory")
    value = args[index + 1] if index + 1 < len(args) else ""
    if not value or not Path(value).exists():
        return
    invocation = Path(str(config.invocation_params.dir)).resolve()
    if config.inipath is not None and invocation.is_relative_to(config.rootpath):
        return
    config.issue_config_time_warning(
        pytest.PytestConfigWarning(
            f"sbxcheck: '--sbx-inventory {value}' (space form) made pytest choose rootdir {config.rootpath} "
            f"and ini file {config.inipath or 'none'}: pytest decides them before plugins load and takes an "
            f"existing path for a test path. Write --sbx-inventory={value}."
        ),
        stacklevel=2,
    )


def _sim_seed() -> int | None:
    """``$SBXCHECK_SIM_SEED`` when set (a different fleet layout), else the simulator's fixed default."""
    value = os.environ.get("SBXCHECK_SIM_SEED", "")
    return int(value) if value.isdigit() else None


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        try:
            collector = config.stash.get(COLLECTOR_KEY, None)
            if collector is not None and not collector.finished:
                # interrupted before sessionfinish (e.g. during a mount): the policy still applies,
                # and the report is still written, marked interrupted
                collector.finish(interrupted=True)
        finally:
            session.close()
            if session.interrupted_during:
                _exit_as_interrupted(config)
    xdist_nodes = config.pluginmanager.get_plugin("sbxcheck-xdist")
    if isinstance(xdist_nodes, _XdistNodes) and xdist_nodes.scope_dir is not None:
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


class _XdistNodes:
    """Hands every worker what it must share with the controller.

    The simulator seed (identical ids), the session tag (same idempotency keys), the mounted runs, and
    where workers leave their items' groups for the per-VM scheduler (``scope_dir``, when it is used).
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._ledger_ids: list[str] | None = None
        self.scope_dir: Path | None = None

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """``-n``/``--tx`` with load or loadgroup: one unit per VM / control plane, plain node ids."""
        if self.scope_dir is None:
            return None
        from sbxcheck.xdist_scope import GroupScopeScheduling

        return GroupScopeScheduling(config, log, self.scope_dir, self._groups_from_node_ids)

    def _groups_from_node_ids(self, nodeids: Sequence[str]) -> dict[str, str]:
        """For workers on other hosts: sbxcheck's groups from the node ids and the inventory."""
        from sbxcheck.errors import SbxError
        from sbxcheck.xdist_scope import groups_by_parameter

        if not any(n.endswith("]") for n in nodeids):
            return {}
        session = get_session(self.config)
        try:
            runs = [r.run_id for r in session.gate_runs()]
            section = session.inventory().sandboxed
        except SbxError:
            return {}
        labels = {r.label for r in section.routes} | {c.label for c in section.canaries} if section else set()
        return groups_by_parameter(nodeids, runs, labels, str(CONTROL_PLANE_GROUP.kwargs["name"]))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["sbxcheck_sim_seed"] = _sim_seed()
        node.workerinput["sbxcheck_session_tag"] = self.config.stash[SESSION_TAG_KEY]
        if self.scope_dir is not None:
            node.workerinput["sbxcheck_scope_dir"] = str(self.scope_dir)
        session = self.config.stash.get(SESSION_KEY, None)
        if session is None:
            return
        node.workerinput["sbxcheck_mounted"] = [m.run_id for m in session.mounts if m.run_id]
        if session.mounts and session.uses_sim and session.sim is not None:
            # workers gate the fleet the controller mounted on, not fleets of their own
            node.workerinput["sbxcheck_inventory"] = str(session.sim.inventory_path)
        if not session.uses_sim or session.mounts:
            # every worker collects the same ledger items: the entries the controller saw
            if self._ledger_ids is None:
                self._ledger_ids = [e.id for e in session.ledger_entries()]
            node.workerinput["sbxcheck_ledger_ids"] = self._ledger_ids


def pytest_report_collectionfinish(
    config: pytest.Config, start_path: Path, items: list[pytest.Item]
) -> list[str]:
    """Which fleet is checked — only when sbxcheck items were selected (an unrelated run sees nothing)."""
    if not any(suite_of(item) for item in items):
        return []
    session = get_session(config)
    lines = [f"sbxcheck: inventory: {session.describe_source()}"]
    if session.uses_sim:
        from sbxcheck.sim.pi import pi_status

        lines.append(f"sbxcheck: simulated VMs run {pi_status()}")
    if simulated_fleet(session):
        lines.append(
            "sbxcheck: SIMULATED RUN: these verdicts are about a simulated fleet, not yours "
            "(CI: --sbx-require-inventory makes a lost inventory exit 4)"
        )
    return lines


def simulated_fleet(session: SbxSession) -> bool:
    """The embedded fleet, or an inventory the simulator wrote (``sbxcheck sim up``: its ``[sim]`` section)."""
    if session.uses_sim:
        return True
    from sbxcheck.errors import SbxError

    try:
        return session.inventory().sim is not None
    except SbxError:
        return False


# ------------------------------------------------------------------ parametrization


def _gate_runs(config: pytest.Config) -> tuple[list[GateRun], str | None]:
    """The gate runs, or why there are none (an inventory problem is reported, not raised)."""
    from sbxcheck.errors import InventoryError

    session = get_session(config)
    try:
        runs = session.gate_runs()
    except InventoryError as exc:
        return [], exc.message
    if not runs:
        inv = session.inventory()
        if inv.sssf is None:
            return [], f"the inventory {session.describe_source()} has no [sssf] section"
        if session.run_ids:
            return [], f"no run records for the named runs under {inv.sssf.runs_path}"
        if not inv.sssf.runs_path.is_dir():
            return (
                [],
                f"no run records: {inv.sssf.runs_path} does not exist (no run was created from this checkout)",
            )
        return [], f"no run records under {inv.sssf.runs_path}"
    return runs, None


# Under -n a group goes to one worker (sbxcheck.xdist_scope): one SSH connection per VM, one owner of the missions.
# The marks ride on the parameters, so they exist before any plugin's collection hooks run.
CONTROL_PLANE_GROUP = pytest.mark.xdist_group(name="sandboxed-control-plane")


def _vm_group(run: GateRun) -> pytest.MarkDecorator:
    return pytest.mark.xdist_group(name=run.run_id)


def _keyed(config: pytest.Config, fixture: str, key: Any, value: Any) -> Any:
    """Remember ``value`` under a stable ``key``; the indirect fixture of the same name returns it."""
    config.stash[PARAMS_KEY][(fixture, key)] = value
    return key


def param_object(config: pytest.Config, fixture: str, key: Any) -> Any:
    """The object an indirect parameter's stable key stands for (see :data:`OBJECT_PARAMS`)."""
    return config.stash[PARAMS_KEY][(fixture, key)]


def _sandboxed_params(config: pytest.Config, kind: str) -> list[Any]:
    """Parameters for the canary suite: route labels, canary labels, or (name, prompt) pairs."""
    from sbxcheck.errors import InventoryError

    session = get_session(config)
    try:
        section = session.inventory().sandboxed
    except InventoryError as exc:
        return [pytest.param(None, id="inventory", marks=pytest.mark.skip(reason=exc.message))]
    if section is None:
        reason = f"the inventory {session.describe_source()} has no [sandboxed] section"
        return [pytest.param(None, id="no-control-plane", marks=pytest.mark.skip(reason=reason))]
    if kind == "node":
        params = [pytest.param(n, id=n) for n in section.expected_nodes]
    elif kind == "discovery_via":
        params = [pytest.param("rest", id="rest")] + ([pytest.param("mcp", id="mcp")] if section.mcp else [])
    elif kind == "github_probe":
        params = []
        for p in section.github_probes:
            key = f"{p.workspace}-{p.via}"
            params.append(pytest.param(_keyed(config, "sbx_github_probe", key, p), id=key))
    elif kind == "route":
        params = [pytest.param(r.label, id=r.label, marks=CONTROL_PLANE_GROUP) for r in section.routes]
    elif kind == "canary":
        params = [pytest.param(c.label, id=c.label, marks=CONTROL_PLANE_GROUP) for c in section.canaries]
    elif kind == "catalog":  # issue 21: every route, judged before dispatch (selecting it dispatches nothing)
        params = [pytest.param(r.label, id=r.label, marks=CONTROL_PLANE_GROUP) for r in section.routes]
    elif kind == "contract":  # issue 21: routes with an opt-in dispatch contract
        contracts = [r for r in section.routes if r.contract != "none"]
        params = [pytest.param(r.label, id=r.label, marks=CONTROL_PLANE_GROUP) for r in contracts]
    elif kind == "workspace":  # issue 21: expected workspaces, then those routes and canaries use
        names = [w.name for w in section.workspaces] + [r.workspace for r in section.routes if r.workspace]
        names += [c.workspace for c in section.canaries]
        params = [pytest.param(n, id=n, marks=CONTROL_PLANE_GROUP) for n in dict.fromkeys(names)]
    else:
        from sbxcheck.lifecycle import canary_prompt

        prompts = [(f"route-{r.label}", r.prompt) for r in section.routes]
        prompts += [(f"canary-{c.label}", canary_prompt(c)) for c in section.canaries]
        params = [pytest.param(p, id=p[0]) for p in prompts]
    return params or [
        pytest.param(None, id=f"no-{kind}s", marks=pytest.mark.skip(reason=f"no {kind}s declared"))
    ]


def _ledger_params(config: pytest.Config) -> list[Any]:
    """Entries other sessions left open (kept ones too): mounts are gate items, missions canary items."""
    from sbxcheck.errors import InventoryError

    session = get_session(config)
    try:
        entries = session.ledger_entries()
    except InventoryError as exc:
        return [
            pytest.param(None, id="inventory", marks=[pytest.mark.gate, pytest.mark.skip(reason=exc.message)])
        ]
    params = [
        pytest.param(
            _keyed(config, "sbx_ledger_entry", e.id, e),
            id=f"{e.kind}-{e.ident}",
            marks=pytest.mark.gate if e.kind == "mount" else pytest.mark.canary,
        )
        for e in entries
    ]
    if session.ledger_problem is not None:  # issue 20: an unreadable ledger is one error item, not silence
        key = _keyed(config, "sbx_ledger_entry", "unreadable", session.ledger_problem)
        params.append(pytest.param(key, id="unreadable", marks=pytest.mark.gate))
    # nothing leaked: a parameter that collection removes (an empty parametrization would be a skip)
    return params or [pytest.param(NOTHING_LEAKED, id="none", marks=pytest.mark.gate)]


def _dgx_params(config: pytest.Config) -> list[Any]:
    from sbxcheck.errors import InventoryError

    session = get_session(config)
    try:
        section = session.inventory().dgx
    except InventoryError as exc:
        return [pytest.param(None, id="inventory", marks=pytest.mark.skip(reason=exc.message))]
    if section is None:
        return [
            pytest.param(
                None, id="no-dgx", marks=pytest.mark.skip(reason="the inventory has no [dgx] section")
            )
        ]
    cores = section.per_agent_core()  # one item per agent-core; a single one keeps the plain DGX id
    params = []
    for core in cores:
        key = core.dgx_host if len(cores) == 1 else f"{core.core}-{core.dgx_host}"
        params.append(pytest.param(_keyed(config, "sbx_dgx", key, core), id=key))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = set(metafunc.fixturenames)
    config = metafunc.config
    kinds = ("route", "canary", "prompt", "node", "discovery_via", "github_probe")
    for kind in (*kinds, "workspace", "contract", "catalog"):  # the last three: issue 21
        if f"sbx_{kind}" in names:
            metafunc.parametrize(
                f"sbx_{kind}", _sandboxed_params(config, kind), indirect=f"sbx_{kind}" in OBJECT_PARAMS
            )
    if "sbx_ledger_entry" in names:
        metafunc.parametrize("sbx_ledger_entry", _ledger_params(config), indirect=True)
    if "sbx_dgx" in names:
        metafunc.parametrize("sbx_dgx", _dgx_params(config), indirect=True)
    if not names & {"sbx_run_entry", "sbx_gate_run", "sbx_gate_model"}:
        return
    runs, why_none = _gate_runs(config)
    if "sbx_run_entry" in names:
        if why_none and not runs:
            params = [pytest.param(_keyed(config, "sbx_run_entry", "inventory", why_none), id="inventory")]
        else:
            params = [
                pytest.param(_keyed(config, "sbx_run_entry", r.run_id, r), id=r.run_id, marks=_vm_group(r))
                for r in runs
            ]
        metafunc.parametrize("sbx_run_entry", params, indirect=True)
    elif "sbx_gate_run" in names:
        gateable = [r for r in runs if r.target is not None]
        params = [
            pytest.param(_keyed(config, "sbx_gate_run", r.run_id, r), id=r.run_id, marks=_vm_group(r))
            for r in gateable
        ] or [
            pytest.param(None, id="no-runs", marks=pytest.mark.skip(reason=why_none or "no run can be gated"))
        ]
        metafunc.parametrize("sbx_gate_run", params, indirect=True)
    elif "sbx_gate_model" in names:
        params = []
        for r in runs:
            if r.target is None:
                continue
            models: list[str | None] = list(r.target.roster) or [None]
            for m in models:
                key = (r.run_id, m)
                pid = f"{r.run_id}-{m}" if m is not None else f"{r.run_id}-no-roster"
                params.append(
                    pytest.param(_keyed(config, "sbx_gate_model", key, (r, m)), id=pid, marks=_vm_group(r))
                )
        if not params:
            params = [
                pytest.param(
                    None, id="no-runs", marks=pytest.mark.skip(reason=why_none or "no run can be gated")
                )
            ]
        metafunc.parametrize("sbx_gate_model", params, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the "nothing leaked" items (a parameter that stands for nothing to check) as deselected."""

    def placeholder(item: pytest.Item) -> bool:
        params = getattr(getattr(item, "callspec", None), "params", {})
        return bool(params.get("sbx_ledger_entry") == NOTHING_LEAKED)

    dropped = [item for item in items if placeholder(item)]
    if dropped:
        items[:] = [item for item in items if not placeholder(item)]
        config.hook.pytest_deselected(items=dropped)
    probe = config.getoption("sbx_probe", None)
    if probe:  # issue 21: --sbx-probe=ROUTE keeps that route's three items, nothing else
        from sbxcheck.lifecycle import probe_items

        kept, other = probe_items(items, probe)
        if not kept:
            raise pytest.UsageError(
                f"sbxcheck: --sbx-probe={probe}: no selected route item has that route (select the route "
                "suite, canaries/test_routes.py, and give a route name from [[sandboxed.routes]])"
            )
        items[:] = kept
        config.hook.pytest_deselected(items=other)
        get_session(config).probe_route = probe


def pytest_collection_finish(session: pytest.Session) -> None:
    """Remember which routes and canaries the selected items need: only those are dispatched."""
    if not any(suite_of(item) for item in session.items):
        return
    _terminate_as_interrupt()
    state = get_session(session.config)
    routes: set[str] = set()
    canaries: set[str] = set()
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        for key in ("sbx_route", "sbx_contract"):  # issue 21: a contract item needs its route dispatched
            if isinstance(params.get(key), str):
                routes.add(params[key])
        if isinstance(params.get("sbx_canary"), str):
            canaries.add(params["sbx_canary"])
    state.wanted_routes, state.wanted_canaries = routes, canaries
    state.on_wait = _progress_callback(session.config)


def _progress_callback(config: pytest.Config) -> Any:
    """What the dispatcher calls while an item waits on missions: the live status line."""
    from sbxcheck.progress import ProgressLine, describe_wait

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


def suite_of(item: pytest.Item) -> str | None:
    for name in SUITES:
        if item.get_closest_marker(name) is not None:
            return name
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Note when the test body started: a verdict reports its elapsed time to Allure's steps."""
    if suite_of(item) is not None:
        import time

        item.stash[CALL_START_KEY] = time.monotonic()
    return (yield)


def _result_from_report(
    item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]
) -> CheckResult:
    """The CheckResult for an item: the one the test recorded, else one derived from what happened."""
    from sbxcheck.checks.base import trim
    from sbxcheck.errors import SbxError
    from sbxcheck.results import CheckResult, Classification, Outcome

    recorded = item.stash.get(RESULT_KEY, None)
    name = item.originalname if isinstance(item, pytest.Function) else item.name
    check = name.removeprefix("test_").removeprefix(f"{suite_of(item)}_")
    target = item.callspec.id if isinstance(item, pytest.Function) and hasattr(item, "callspec") else ""
    exc = call.excinfo.value if call.excinfo is not None else None
    if recorded is not None and report.when == "call":
        return recorded
    if isinstance(exc, SbxError):
        host = exc.evidence.get("alias") or exc.evidence.get("service") or exc.evidence.get("endpoint")
        cause = f"{exc.classification.value}:{host}" if host else None  # one unreachable host = one incident
        return CheckResult.errored(
            check, target, exc.message, exc.classification, dict(exc.evidence), cause=cause
        )
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
        return CheckResult(
            check=check, target=target, outcome=Outcome.SKIPPED, message=str(reason).removeprefix("Skipped: ")
        )
    if report.failed:
        text = trim(str(exc) if exc is not None else str(report.longrepr), 1000)
        if report.when == "call" and isinstance(exc, (AssertionError, pytest.fail.Exception)):
            # the test's own assertion said no: the system is wrong, not sbxcheck
            return CheckResult.failed(check, target, text or "assertion failed", {})
        where = "" if report.when == "call" else f" during {report.when}"
        return CheckResult.errored(
            check,
            target,
            f"{type(exc).__name__ if exc else 'error'}{where}: {text}",
            Classification.INTERNAL_ERROR,
        )
    return CheckResult.passed(check, target, "passed without recording evidence", {})


def _redact_repr(obj: Any, redact: Any, seen: set[int]) -> Any:
    """Redact every string inside pytest's longrepr objects in place, keeping their structure.

    Keeping the objects (not their text) keeps what pytest derives from them: the short summary's
    crash line, ``--junitxml``'s failure message, colours and ``--tb`` styles.
    """
    if isinstance(obj, str):
        return redact(obj)
    if id(obj) in seen or obj is None or isinstance(obj, (int, float, bool)):
        return obj
    seen.add(id(obj))
    if isinstance(obj, list):
        obj[:] = [_redact_repr(v, redact, seen) for v in obj]
        return obj
    if isinstance(obj, tuple):
        return tuple(_redact_repr(v, redact, seen) for v in obj)
    if isinstance(obj, dict):
        return {k: _redact_repr(v, redact, seen) for k, v in obj.items()}
    if type(obj).__module__.startswith("_pytest."):
        for key, value in list(vars(obj).items()):
            with contextlib.suppress(AttributeError, TypeError):
                object.__setattr__(obj, key, _redact_repr(value, redact, seen))
    return obj


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    suite = suite_of(item)
    if suite is not None:
        from sbxcheck.redact import redact_exception

        redact_exception(call.excinfo)  # before pytest, junit or Allure format it
        from sbxcheck.display import neutralise_exception

        neutralise_exception(call.excinfo)  # then control characters shown visibly (issue 20)
    if call.excinfo is not None and not item.config.getoption("fulltrace", False):
        _hide_sbxcheck_frames(call.excinfo)
    report: pytest.TestReport = yield
    if suite is None:
        return report
    from sbxcheck.display import display_data, for_display, neutralise_report
    from sbxcheck.redact import default_redactor, redact_report
    from sbxcheck.report.present import detail_block
    from sbxcheck.results import CheckRecord, Classification, Outcome

    redactor = default_redactor()
    report.longrepr = _redact_repr(report.longrepr, lambda t: for_display(t, redactor), set())
    redact_report(report, redactor)  # what the structure keeps hidden: -l locals cut short, sections
    neutralise_report(report)  # redaction first, then control characters shown visibly
    meaningful = report.when == "call" or report.failed or report.skipped
    if not meaningful:
        return report
    result = _result_from_report(item, report, call)
    if report.when == "teardown" and report.failed:
        result = result.model_copy(
            update={
                "outcome": Outcome.ERROR,
                "classification": result.classification or Classification.INTERNAL_ERROR,
            }
        )
    record = CheckRecord(nodeid=_plain_nodeid(item), suite=suite, **result.model_dump())
    if not record.duration_s and report.duration:
        record.duration_s = round(report.duration, 6)  # the check did not time itself: pytest did
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


def _hide_sbxcheck_frames(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """An SbxError's traceback ends where it entered sbxcheck (``--full-trace`` shows it whole).

    The error is sbxcheck's answer about the fleet (unreachable, host key changed, bad inventory),
    with its message, classification and evidence in the item's sbxcheck section: the frames inside
    sbxcheck are noise at 3 a.m., and pytest renders each with its source (tenths of a second per
    item, for every item of an unreachable VM). A user's test frame that called sbxcheck stays.
    """
    from sbxcheck.errors import SbxError

    if not isinstance(excinfo.value, SbxError):
        return  # anything else may be a bug: its whole traceback is the evidence
    import _pytest
    import pluggy

    package = Path(__file__).resolve().parent
    runners = (Path(_pytest.__file__).resolve().parent, Path(pluggy.__file__).resolve().parent)
    kept = []
    for entry in excinfo.traceback:
        path = entry.path
        if not isinstance(path, Path):
            kept.append(entry)
        elif path.is_relative_to(package):
            break
        elif not any(path.is_relative_to(runner) for runner in runners):  # pytest would cut these too
            kept.append(entry)
    excinfo.traceback = type(excinfo.traceback)(kept)


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    """An sbxcheck ``error`` found in the call phase is a pytest error too: one count in both summaries."""
    if report.when == "call" and report.failed and getattr(report, "sbxcheck_outcome", None) == "error":
        return "error", "E", "ERROR"
    return None


def _plain_nodeid(item: pytest.Item) -> str:
    """The node id without the ``@group`` suffix xdist's loadgroup adds, so reports match a serial run."""
    group = item.get_closest_marker("xdist_group")
    name = group.kwargs.get("name") if group is not None else None
    if name and item.nodeid.endswith(f"@{name}"):
        return item.nodeid[: -len(name) - 1]
    return item.nodeid


class ResultCollector:
    """Controller-side: gathers each item's CheckRecord, calls the sbxcheck hooks, cleans up, writes reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: dict[str, CheckRecord] = {}
        self.started_at = _now()
        self.written: dict[str, Path] = {}
        self._nodeids: dict[str, str] = {}  # report nodeid (maybe with @group) -> plain nodeid
        self.selected: dict[str, str] = {}  # plain nodeid -> parameter id, of every selected item
        self.reported: set[str] = set()  # plain nodeids that ran (a call, or a failed/skipped phase)
        self.interrupted = False
        self.interrupted_reason = ""  # "Ctrl-C", "SIGTERM", "stopping after 1 failures", "internal error"
        self.finished = False
        self.history_warnings: list[str] = []
        self._stale_removed = False

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.interrupted = True
        self.interrupted_reason = self.interrupted_reason or _interrupt_reason(excinfo.value)

    def remove_stale_reports(self) -> None:
        """Once, when this run is known to write a report: the previous run's files go first (issue 20)."""
        if self._stale_removed:
            return
        self._stale_removed = True
        from sbxcheck.outputs import remove_stale_reports

        with contextlib.suppress(OSError):  # a report dir we cannot clean was named at configure time
            remove_stale_reports(_report_dir(self.config))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not any(suite_of(item) for item in session.items):
            return
        self.remove_stale_reports()
        from sbxcheck.cleanup import param_id

        for item in session.items:
            if suite_of(item) is not None:
                self.selected[_plain_nodeid(item)] = param_id(item.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        from sbxcheck.cleanup import param_id, strip_group

        for nodeid in ids:
            plain = strip_group(nodeid)
            self.selected.setdefault(plain, param_id(plain))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        cleanup = output.get("sbxcheck_cleanup") if isinstance(output, dict) else None
        if isinstance(cleanup, list) and cleanup:
            get_session(self.config).cleanup.extend(c for c in cleanup if isinstance(c, dict))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "sbxcheck", None)
        if payload is not None:
            self.remove_stale_reports()  # under xdist the first sbxcheck result is the first sign
        if payload is not None and (report.when == "call" or not report.passed):
            from sbxcheck.cleanup import strip_group

            self.reported.add(strip_group(report.nodeid))  # a passed setup alone is not having run
        if isinstance(payload, str):
            from sbxcheck.results import CheckRecord, Outcome

            record = CheckRecord.model_validate_json(payload)
            self._nodeids[report.nodeid] = record.nodeid
            previous = self.records.get(record.nodeid)
            # the call verdict stands unless setup or teardown went wrong
            if previous is None or record.outcome is not Outcome.PASSED:
                self.records[record.nodeid] = record
        if report.when == "teardown" and report.nodeid in self._nodeids:
            final = self.records[self._nodeids[report.nodeid]]
            self.config.hook.pytest_sbxcheck_result(record=final, config=self.config)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        interrupted = self.interrupted or session.exitstatus == pytest.ExitCode.INTERRUPTED
        stop = getattr(session, "shouldfail", False) or getattr(session, "shouldstop", False)
        if not interrupted and stop and self.not_run():
            # -x / --maxfail (serially; under xdist they arrive as an interrupt): items were left out
            interrupted, self.interrupted_reason = True, str(stop)
        crashed = session.exitstatus == pytest.ExitCode.INTERNAL_ERROR
        if not interrupted and crashed:
            interrupted, self.interrupted_reason = True, "internal error (a crash)"
        if interrupted:
            self._add_not_run(session)
        self.finish(interrupted=interrupted)
        if crashed and self.written:  # pytest prints no terminal summary after an internal error
            line = (
                f"sbxcheck: verdict: INTERRUPTED ({self.interrupted_reason}): {len(self.report.not_run)} "
                f"selected item(s) did not run; report: {self.written.get('results.json', '')}\n"
            )
            with contextlib.suppress(OSError):
                os.write(2, line.encode())
        sbx = self.config.stash.get(SESSION_KEY, None)
        failed_cleanup = [c for c in (sbx.cleanup if sbx else []) if not c.get("ok", True)]
        if failed_cleanup and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a pending mission is not a green run

    def not_run(self) -> list[str]:
        """Selected items that never ran (the session was interrupted before them)."""
        return sorted(
            n
            for n in self.selected
            if (n not in self.reported and n not in self.records)
            or (n in self.records and "not_run" in self.records[n].evidence)
        )

    def finish(self, *, interrupted: bool) -> None:
        """Clean up (teardown policy, mission cancels), then write the reports with what cleanup did."""
        if self.finished:
            return
        self.finished = True
        interrupted = interrupted or self.interrupted
        from sbxcheck.options import resolve

        out_dir = _report_dir(self.config)
        stale = interrupted and (out_dir / "results.json").exists()
        sbx = self.config.stash.get(SESSION_KEY, None)
        if sbx is None and not (self.records or stale):
            return  # no sbxcheck item ran and nothing was mounted: an unrelated run gets no report
        from sbxcheck.cleanup import left_open, mount_cleanup
        from sbxcheck.errors import SbxError
        from sbxcheck.redact import default_redactor
        from sbxcheck.report import assemble_report
        from sbxcheck.report.present import key_evidence_lines, next_step
        from sbxcheck.report.writers import write_artifacts
        from sbxcheck.results import InventoryInfo

        sbx = get_session(self.config)
        policy = resolve(self.config, "sbx_teardown").value or "never"
        mounts = sbx.finish_mounts(policy, self._gate_outcomes())
        sbx.close_missions()
        cleanup = list(sbx.cleanup) + [mount_cleanup(m) for m in mounts if m.action != "pending"]
        left = left_open(sbx)
        if not (self.records or mounts or cleanup or left or stale):
            return
        from sbxcheck.report.nextsteps import inventory_flag

        flag = inventory_flag(str(sbx.inventory_path)) if sbx.inventory_path and not sbx.uses_sim else ""
        records = []
        for record in _link_triage(list(self.records.values())):
            as_dict = record.model_dump(mode="json")
            records.append(
                record.model_copy(
                    update={
                        "next_step": next_step(as_dict, flag),
                        "key_evidence": key_evidence_lines(record.evidence),
                    }
                )
            )
        info = InventoryInfo(
            source=sbx.describe_source(),
            sim=simulated_fleet(sbx),  # issue 18: a `sbxcheck sim up` inventory is a simulated fleet too
            details=sbx.describe_details(),
        )
        report = assemble_report(records, started_at=self.started_at, finished_at=_now(), inventory=info)
        if mounts:
            try:
                sssf = sbx.inventory().sssf
            except SbxError:
                sssf = None
            suffix = sssf.vm_host_suffix if sssf else ""
            report = report.model_copy(update={"mounts": [m.summary(suffix) for m in mounts]})
        machines = [r.evidence["machine_inventory"] for r in records if "machine_inventory" in r.evidence]
        if machines and isinstance(machines[0], list):
            report = report.model_copy(update={"machine_inventory": machines[0]})
        from sbxcheck.spend import summarize_spend  # issue 21

        report = report.model_copy(
            update={
                "spend": summarize_spend(cleanup, records, cap_usd=sbx.max_spend_usd),
                "interrupted": interrupted,
                "interrupted_reason": (self.interrupted_reason or "interrupted") if interrupted else "",
                "not_run": self.not_run() if interrupted else [],
                "cleanup": cleanup,
                "left": left,
            }
        )
        for incident in report.incidents:
            self.config.hook.pytest_sbxcheck_incident(incident=incident, config=self.config)
        written = write_artifacts(
            report,
            out_dir,
            default_redactor(),
            history_dir=_resolved_path(self.config, "sbx_history", "sbx_history"),
            history_keep=_history_keep(self.config),
            metrics_path=_resolved_path(self.config, "sbx_metrics", "sbx_metrics"),
        )
        self.written, self.history_warnings = written.paths, written.warnings
        self.report = report
        self.config.hook.pytest_sbxcheck_report(report=report, paths=dict(self.written), config=self.config)
        if interrupted and not self.config.stash.get(PYTEST_SESSION_KEY, None):
            # no terminal summary follows an interrupt before the session started: say it here
            with contextlib.suppress(OSError):
                os.write(2, f"sbxcheck: interrupted; report: {out_dir / 'results.json'}\n".encode())

    def _add_not_run(self, session: pytest.Session) -> None:
        """Interrupted: every selected item without a result is reported as not run, and why."""
        from sbxcheck.results import CheckRecord, Outcome

        sbx = self.config.stash.get(SESSION_KEY, None)
        fanout = sbx.fanout if sbx is not None else None
        for item in session.items:
            suite, nodeid = suite_of(item), _plain_nodeid(item)
            if suite is None or nodeid in self.records:
                continue
            state = (fanout.state(item.nodeid) if fanout is not None else None) or "never started"
            name = item.originalname if isinstance(item, pytest.Function) else item.name
            self.records[nodeid] = CheckRecord(
                nodeid=nodeid,
                suite=suite,
                check=name.removeprefix("test_").removeprefix(f"{suite}_"),
                target=item.callspec.id
                if isinstance(item, pytest.Function) and hasattr(item, "callspec")
                else "",
                outcome=Outcome.SKIPPED,
                message=f"not run: the session was interrupted ({state})",
                evidence={"not_run": state},
            )

    def _gate_outcomes(self) -> dict[str, list[str]]:
        """Gate outcomes per mounted run (a C item's target is <run>-<model>); a selected item that
        never reported counts as ``not-run``."""
        from sbxcheck.recipes import NOT_RUN

        def of_run(target: str, run_id: str) -> bool:
            return target == run_id or target.startswith(run_id + "-")

        out: dict[str, list[str]] = {}
        never = self.not_run()
        sbx = self.config.stash.get(SESSION_KEY, None)
        for mounted in sbx.mounts if sbx else []:
            if mounted.run_id:
                out[mounted.run_id] = [
                    r.outcome.value
                    for r in self.records.values()
                    if r.suite == "gate" and of_run(r.target, mounted.run_id) and "not_run" not in r.evidence
                ] + [NOT_RUN for n in never if of_run(self.selected[n], mounted.run_id)]
        return out

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.written:
            return
        from sbxcheck.display import SanitisingWriter
        from sbxcheck.report.history import verdict_of
        from sbxcheck.report.html import verdict_headline
        from sbxcheck.report.present import detail_block, headline

        document = self.report.model_dump(mode="json")
        tr = SanitisingWriter(terminalreporter)  # every line redacted, then neutralised
        tr.section("sbxcheck")
        verdict = verdict_of(self.report)
        why = f" ({document['interrupted_reason']})" if document.get("interrupted_reason") else ""
        tr.write_line(
            f"verdict: {verdict_headline(verdict)}{why}",
            bold=True,
            purple=verdict == "interrupted",
            red=verdict == "failed",
            green=verdict == "passed",
        )
        summary = document["summary"]
        counts = ", ".join(f"{v} {k}" for k, v in summary.items() if k != "total" and v)
        tr.write_line(f"inventory: {document['inventory']['source']}")
        tr.write_line(f"checks: {summary.get('total', 0)} ({counts})")
        by_nodeid = {c["nodeid"]: c for c in document["checks"]}
        shown: set[str] = set()
        # -q or --tb=no: one line per incident and item, no evidence; -qq: the verdict and counts only
        verbosity = self.config.get_verbosity()
        details = verbosity >= 0 and self.config.getoption("tbstyle", "auto") != "no"
        for inc in document["incidents"] if verbosity > -2 else []:
            tr.write_line("")
            tr.write_line(f"incident {inc['id']} [{inc['classification']}] {inc['summary']}", bold=True)
            tr.write_line(f"    next step: {_user(inc['recommendation'])}")
            members = [by_nodeid[n] for n in inc["checks"] if n in by_nodeid]
            # evidence every member shares is printed once, under the incident
            shared = _shared_lines([m.get("key_evidence") or [] for m in members]) if len(members) > 1 else []
            for line in shared if details else []:
                tr.write_line(f"    {line}")
            for check in members:
                shown.add(check["nodeid"])
                tr.write_line(f"    {check['outcome'].upper():6} {check['nodeid']} {headline(check)}")
                for line in check.get("key_evidence") or [] if details else []:
                    if line not in shared:
                        tr.write_line(f"        {line}")
        for check in document["checks"] if verbosity > -2 else []:
            if check["outcome"] in ("failed", "error") and check["nodeid"] not in shown:
                tr.write_line("")
                tr.write_line(f"{check['outcome'].upper():6} {check['nodeid']} {headline(check)}", red=True)
                block = detail_block(check).split("\n") if details else []
                for line in block[3:]:  # outcome, classification and message are in the headline
                    tr.write_line(f"    {line}")
        for mount in document["mounts"]:
            where = f" — {mount['ssh']}" if mount.get("ssh") else ""
            tr.write_line(
                f"mount {mount['name']} → {mount.get('run_id') or '?'}: {mount['action']}{where} ({mount['why']})"
            )
        for item in document.get("cleanup") or []:
            if item.get("kind") == "mission":
                mark = "" if item.get("ok", True) else "FAILED "
                tr.write_line(f"cleanup: {mark}mission {item.get('ident')}: {item.get('action')}")
        sbx_probe = self.config.getoption("sbx_probe", None)
        if sbx_probe:  # issue 21
            tr.write_line(f"probe: one narrow no-push probe of route {sbx_probe}; nothing else was run")
        from sbxcheck.spend import spend_worth_showing

        if spend_worth_showing(document.get("spend")):  # issue 21
            from sbxcheck.spend import spend_line

            tr.write_line(spend_line(document["spend"]))
            for nodeid in document["spend"].get("not_run") or []:
                tr.write_line(f"    not run (spend cap): {nodeid}")
        if document.get("interrupted"):
            not_run = document.get("not_run") or []
            tr.write_line(f"interrupted: {len(not_run)} selected item(s) did not run{why}", bold=True)
            for nodeid in not_run[:NOT_RUN_SHOWN]:
                tr.write_line(f"    not run: {nodeid}")
            if len(not_run) > NOT_RUN_SHOWN:
                tr.write_line(f"    … and {len(not_run) - NOT_RUN_SHOWN} more (results.json: not_run)")
        for entry in document.get("left") or []:
            tr.write_line(
                f"left open: {entry['kind']} {entry['ident']} ({entry['state']}) {entry['why']}".rstrip()
            )
        sbx = self.config.stash.get(SESSION_KEY, None)
        for note in sbx.interrupted_during if sbx else []:
            tr.write_line(f"interrupted during {note}")
        for warning in self.history_warnings:
            tr.write_line(f"warning: {warning}", yellow=True)
        tr.write_line("report: " + ", ".join(str(p) for p in self.written.values()))


#: How many not-run items the terminal names (results.json and report.html have every one).
NOT_RUN_SHOWN = 10


def _interrupt_reason(exc: BaseException) -> str:
    """Why a KeyboardInterrupt stopped the run, in the words an on-call engineer uses."""
    import signal

    text = str(exc)
    if text == f"signal {int(signal.SIGTERM)}":  # raised by _terminate_as_interrupt
        return "SIGTERM"
    if not text or "keyboard-interrupt" in text:  # xdist: a worker got the Ctrl-C too
        return "Ctrl-C"
    return text  # xdist's Interrupted: "stopping after 1 failures", "maximum crashed workers reached"


def _shared_lines(blocks: list[list[str]]) -> list[str]:
    """The lines every block holds, in the first block's order."""
    if not blocks:
        return []
    rest = [set(b) for b in blocks[1:]]
    return [line for line in blocks[0] if all(line in r for r in rest)]


def _user(text: str) -> str:
    from sbxcheck.report.present import user_text

    return user_text(text)


def _link_triage(records: list[CheckRecord]) -> list[CheckRecord]:
    """A triage verdict names the checks it rests on: they share its cause, so the report shows one incident."""
    from sbxcheck.results import Outcome

    by_nodeid = {r.nodeid: r for r in records}
    for record in list(by_nodeid.values()):
        supporting = record.evidence.get("supporting_checks")
        if record.cause and isinstance(supporting, list):
            for nodeid in supporting:
                member = by_nodeid.get(str(nodeid))
                if member is not None and member.outcome in (Outcome.FAILED, Outcome.ERROR):
                    by_nodeid[member.nodeid] = member.model_copy(
                        update={"cause": record.cause, "recommendation": record.recommendation}
                    )
    return list(by_nodeid.values())


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
