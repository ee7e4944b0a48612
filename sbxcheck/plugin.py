"""The pytest plugin: options, markers, parametrization from the inventory, results and reports.

Thin by design (like pytest-xdist's): heavy objects are made only when an item needs them, and
reports are written only on the xdist controller (or the single process without xdist).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest

from sbxcheck.checks.base import trim
from sbxcheck.errors import InventoryError, SbxError
from sbxcheck.redact import default_redactor
from sbxcheck.results import CheckRecord, CheckResult, Classification, InventoryInfo, Outcome
from sbxcheck.session import GateRun, SbxSession

pytest_plugins = ["sbxcheck.fixtures"]

SUITES = ("gate", "canary", "triage")
MARKERS = {
    "gate": "SSSF setup-gate assertions A–E, run over SSH inside each VM (pytest -m gate)",
    "canary": "nightly fleet canaries (pytest -m canary)",
    "triage": "incident runbooks: classify and recommend, never act destructively (pytest -m triage)",
}
USER_PROPERTY = "sbxcheck_result"
SESSION_KEY = pytest.StashKey[SbxSession]()
RESULT_KEY = pytest.StashKey[CheckResult]()
COLLECTOR_KEY = pytest.StashKey["ResultCollector"]()
PYTEST_SESSION_KEY = pytest.StashKey[pytest.Session]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sbxcheck", "sbxcheck: sandbox fleet checks")
    group.addoption(
        "--sbx-inventory",
        metavar="PATH",
        default=None,
        help="inventory TOML (default: $SBXCHECK_INVENTORY, then <rootdir>/sbxcheck.toml, "
        "else the embedded simulated fleet)",
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
        choices=("never", "on-pass", "always"),
        default="never",
        help="what to do with mounted runs afterwards (default never); a failed gate always keeps its VM",
    )
    group.addoption(
        "--sbx-sweep",
        action="store_true",
        default=False,
        help="release what earlier sessions left open in the ledger, through the same recipes / cancel calls",
    )
    group.addoption(
        "--sbx-state", metavar="DIR", default=None, help="ledger directory (default .sbxcheck/state)"
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
        default="sbxcheck-report",
        help="write results.json, junit.xml and report.html here (default: sbxcheck-report/)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    config.addinivalue_line(
        "markers", "sbx_placeholder: internal: a parameter that stands for nothing to check"
    )
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    seed = workerinput.get("sbxcheck_sim_seed") if workerinput else _sim_seed()
    session = SbxSession(
        session_tag=workerinput.get("sbxcheck_session_tag") if workerinput else None,
        rootdir=Path(str(config.rootpath)),
        inventory_option=config.getoption("sbx_inventory"),
        force_sim=config.getoption("sbx_sim"),
        faults=list(config.getoption("sbx_sim_fault")),
        run_ids=list(config.getoption("sbx_run_id")),
        sim_seed=seed,
    )
    session.remediate = bool(config.getoption("sbx_remediate"))
    session.state_option = config.getoption("sbx_state")
    session.mount_names = list(config.getoption("sbx_mount"))
    session.sweep = bool(config.getoption("sbx_sweep"))
    session.max_parallel = config.getoption("sbx_max_parallel")
    config.stash[SESSION_KEY] = session
    _terminate_as_interrupt()
    if workerinput is not None:
        if workerinput.get("sbxcheck_loadgroup"):
            config.option.loadgroup = True  # else the worker drops the @group suffix the scheduler groups by
        session.run_ids.extend(r for r in workerinput.get("sbxcheck_mounted", []) if r not in session.run_ids)
        shared = workerinput.get("sbxcheck_inventory")
        if shared:
            session.inventory_path, session.force_sim = Path(shared), False
    elif not config.getoption("collectonly") and (session.mount_names or _inventory_mounts(session)):
        try:
            session.mount_all()
        except SbxError as exc:
            session.mount_error = exc.message
    if workerinput is None:
        collector = ResultCollector(config, session)
        config.stash[COLLECTOR_KEY] = collector
        config.pluginmanager.register(collector, "sbxcheck-collector")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistSeed(seed, session.session_tag), "sbxcheck-xdist")
            if getattr(config.option, "dist", None) == "load" and (
                getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None)
            ):
                # items of one VM (and of the control plane) go to one worker: one connection, one owner
                config.option.dist = "loadgroup"


def _sim_seed() -> int | None:
    """``$SBXCHECK_SIM_SEED`` when set (a different fleet layout), else the simulator's fixed default."""
    value = os.environ.get("SBXCHECK_SIM_SEED", "")
    return int(value) if value.isdigit() else None


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        try:
            if not hasattr(
                config, "workerinput"
            ):  # interrupted before sessionfinish: the policy still applies
                session.finish_mounts(config.getoption("sbx_teardown"), {})
        finally:
            session.close()
            if session.interrupted_during:
                _exit_as_interrupted(config)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[PYTEST_SESSION_KEY] = session


def _exit_as_interrupted(config: pytest.Config) -> None:
    """An interrupt that let a teardown finish still ends the run as interrupted (exit status 2)."""
    pytest_session = config.stash.get(PYTEST_SESSION_KEY, None)
    if pytest_session is not None and pytest_session.exitstatus not in (
        pytest.ExitCode.INTERRUPTED,
        pytest.ExitCode.INTERNAL_ERROR,
    ):
        pytest_session.exitstatus = pytest.ExitCode.INTERRUPTED


def _inventory_mounts(session: SbxSession) -> bool:
    """True when the inventory itself asks for mounts (an unreadable inventory is reported elsewhere)."""
    if session.uses_sim:
        return False
    try:
        sssf = session.inventory().sssf
    except SbxError:
        return False
    return bool(sssf and sssf.mounts)


def _terminate_as_interrupt() -> None:
    """SIGTERM ends the session like Ctrl-C: teardowns the policy allows still run, the ledger stays true."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGTERM, interrupt)


class _XdistSeed:
    """Hands every worker the same simulator seed (identical ids) and session tag (same idempotency keys)."""

    def __init__(self, seed: int | None, session_tag: str) -> None:
        self.seed = seed
        self.session_tag = session_tag

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["sbxcheck_sim_seed"] = self.seed
        node.workerinput["sbxcheck_session_tag"] = self.session_tag
        session: SbxSession = node.config.stash[SESSION_KEY]
        node.workerinput["sbxcheck_mounted"] = [m.run_id for m in session.mounts if m.run_id]
        # workers re-parse the command line (dist=load): tell them the controller groups by VM
        node.workerinput["sbxcheck_loadgroup"] = node.config.option.dist == "loadgroup"
        if session.mounts and session.uses_sim and session.sim is not None:
            # workers gate the fleet the controller mounted on, not fleets of their own
            node.workerinput["sbxcheck_inventory"] = str(session.sim.inventory_path)


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash[SESSION_KEY]
    lines = [f"sbxcheck: inventory: {session.describe_source()}"]
    if session.uses_sim:
        from sbxcheck.sim.pi import pi_status

        lines.append(f"sbxcheck: simulated VMs run {pi_status()}")
    return lines


# ------------------------------------------------------------------ parametrization


def _gate_runs(config: pytest.Config) -> tuple[list[GateRun], str | None]:
    """The gate runs, or why there are none (an inventory problem is reported, not raised)."""
    session = config.stash[SESSION_KEY]
    try:
        runs = session.gate_runs()
    except InventoryError as exc:
        return [], exc.message
    if not runs:
        inv = session.inventory()
        if inv.sssf is None:
            return [], f"the inventory {session.describe_source()} has no [sssf] section"
        wanted = "the named runs" if session.run_ids else "open runs"
        return [], f"no {wanted} under {inv.sssf.runs_path}"
    return runs, None


# ``--dist loadgroup`` sends a group to one worker: one SSH connection per VM, one owner of the missions.
# The marks ride on the parameters, so they exist before any plugin's collection hooks run.
CONTROL_PLANE_GROUP = pytest.mark.xdist_group(name="sandboxed-control-plane")


def _vm_group(run: GateRun) -> pytest.MarkDecorator:
    return pytest.mark.xdist_group(name=run.run_id)


def _sandboxed_params(config: pytest.Config, kind: str) -> list[Any]:
    """Parameters for the canary suite: route labels, canary labels, or (name, prompt) pairs."""
    session = config.stash[SESSION_KEY]
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
        params = [pytest.param(p, id=f"{p.workspace}-{p.via}") for p in section.github_probes]
    elif kind == "route":
        params = [pytest.param(r.label, id=r.label, marks=CONTROL_PLANE_GROUP) for r in section.routes]
    elif kind == "canary":
        params = [pytest.param(c.label, id=c.label, marks=CONTROL_PLANE_GROUP) for c in section.canaries]
    else:
        from sbxcheck.lifecycle import canary_prompt

        prompts = [(f"route-{r.label}", r.prompt) for r in section.routes]
        prompts += [(f"canary-{c.label}", canary_prompt(c)) for c in section.canaries]
        params = [pytest.param(p, id=p[0]) for p in prompts]
    return params or [
        pytest.param(None, id=f"no-{kind}s", marks=pytest.mark.skip(reason=f"no {kind}s declared"))
    ]


def _ledger_params(config: pytest.Config) -> list[Any]:
    """Leaked ledger entries: mounts are gate items, missions canary items; none → one skipped item."""
    session = config.stash[SESSION_KEY]
    try:
        entries = session.leaked_entries()
    except InventoryError as exc:
        return [
            pytest.param(None, id="inventory", marks=[pytest.mark.gate, pytest.mark.skip(reason=exc.message)])
        ]
    params = [
        pytest.param(
            e, id=f"{e.kind}-{e.ident}", marks=pytest.mark.gate if e.kind == "mount" else pytest.mark.canary
        )
        for e in entries
    ]
    # nothing leaked: a placeholder that collection removes (an empty parametrization would be a skip)
    return params or [pytest.param(None, id="none", marks=[pytest.mark.gate, pytest.mark.sbx_placeholder])]


def _dgx_params(config: pytest.Config) -> list[Any]:
    session = config.stash[SESSION_KEY]
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
    return [pytest.param(section, id=section.dgx_host)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = set(metafunc.fixturenames)
    for kind in ("route", "canary", "prompt", "node", "discovery_via", "github_probe"):
        if f"sbx_{kind}" in names:
            metafunc.parametrize(f"sbx_{kind}", _sandboxed_params(metafunc.config, kind))
    if "sbx_ledger_entry" in names:
        metafunc.parametrize("sbx_ledger_entry", _ledger_params(metafunc.config))
    if "sbx_dgx" in names:
        metafunc.parametrize("sbx_dgx", _dgx_params(metafunc.config))
    if not names & {"sbx_run_entry", "sbx_gate_run", "sbx_gate_model"}:
        return
    runs, why_none = _gate_runs(metafunc.config)
    if "sbx_run_entry" in names:
        if why_none and not runs:
            params = [pytest.param(why_none, id="inventory")]
        else:
            params = [pytest.param(r, id=r.run_id, marks=_vm_group(r)) for r in runs]
        metafunc.parametrize("sbx_run_entry", params)
    elif "sbx_gate_run" in names:
        gateable = [r for r in runs if r.target is not None]
        params = [pytest.param(r, id=r.run_id, marks=_vm_group(r)) for r in gateable] or [
            pytest.param(None, id="no-runs", marks=pytest.mark.skip(reason=why_none or "no run can be gated"))
        ]
        metafunc.parametrize("sbx_gate_run", params)
    elif "sbx_gate_model" in names:
        params = []
        for r in runs:
            if r.target is None:
                continue
            if not r.target.roster:
                params.append(pytest.param((r, None), id=f"{r.run_id}-no-roster", marks=_vm_group(r)))
            params.extend(
                pytest.param((r, m), id=f"{r.run_id}-{m}", marks=_vm_group(r)) for m in r.target.roster
            )
        if not params:
            params = [
                pytest.param(
                    None, id="no-runs", marks=pytest.mark.skip(reason=why_none or "no run can be gated")
                )
            ]
        metafunc.parametrize("sbx_gate_model", params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop placeholder items (a parameter that stands for nothing to check) as deselected."""
    placeholders = [item for item in items if item.get_closest_marker("sbx_placeholder") is not None]
    if placeholders:
        items[:] = [item for item in items if item.get_closest_marker("sbx_placeholder") is None]
        config.hook.pytest_deselected(items=placeholders)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Remember which routes and canaries the selected items need: only those are dispatched."""
    state = session.config.stash.get(SESSION_KEY, None)
    if state is None:
        return
    routes: set[str] = set()
    canaries: set[str] = set()
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if isinstance(params.get("sbx_route"), str):
            routes.add(params["sbx_route"])
        if isinstance(params.get("sbx_canary"), str):
            canaries.add(params["sbx_canary"])
    state.wanted_routes, state.wanted_canaries = routes, canaries


# ------------------------------------------------------------------ per-item results


def suite_of(item: pytest.Item) -> str | None:
    for name in SUITES:
        if item.get_closest_marker(name) is not None:
            return name
    return None


def _result_from_report(
    item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]
) -> CheckResult:
    """The CheckResult for an item: the one the test recorded, else one derived from what happened."""
    recorded = item.stash.get(RESULT_KEY, None)
    name = item.originalname if isinstance(item, pytest.Function) else item.name
    check = name.removeprefix("test_").removeprefix(f"{suite_of(item)}_")
    target = item.callspec.id if isinstance(item, pytest.Function) and hasattr(item, "callspec") else ""
    exc = call.excinfo.value if call.excinfo is not None else None
    if recorded is not None and report.when == "call":
        return recorded
    if isinstance(exc, SbxError):
        host = exc.evidence.get("alias") or exc.evidence.get("endpoint")
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
        where = "" if report.when == "call" else f" during {report.when}"
        return CheckResult.errored(
            check,
            target,
            f"{type(exc).__name__ if exc else 'error'}{where}: {text}",
            Classification.INTERNAL_ERROR,
        )
    return CheckResult.passed(check, target, "passed without recording evidence", {})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report: pytest.TestReport = yield
    suite = suite_of(item)
    if suite is None:
        return report
    redactor = default_redactor()
    if report.longrepr is not None and not isinstance(report.longrepr, tuple):
        exc = call.excinfo.value if call.excinfo is not None else None
        if isinstance(exc, SbxError):  # one readable line, not a traceback wall
            report.longrepr = f"[{exc.classification.value}] {exc.message}"
        report.longrepr = redactor.redact_text(str(report.longrepr))
    report.sections = [(title, redactor.redact_text(text)) for title, text in report.sections]
    meaningful = report.when == "call" or report.failed or report.skipped
    if meaningful:
        result = _result_from_report(item, report, call)
        if report.when == "teardown" and report.failed:
            result = result.model_copy(
                update={
                    "outcome": Outcome.ERROR,
                    "classification": result.classification or Classification.INTERNAL_ERROR,
                }
            )
        record = CheckRecord(nodeid=_plain_nodeid(item), suite=suite, **result.model_dump())
        payload = redactor.redact_text(record.model_dump_json())
        report.user_properties.append((USER_PROPERTY, payload))
    return report


def _plain_nodeid(item: pytest.Item) -> str:
    """The node id without the ``@group`` suffix xdist's loadgroup adds, so reports match a serial run."""
    group = item.get_closest_marker("xdist_group")
    name = group.kwargs.get("name") if group is not None else None
    if name and item.nodeid.endswith(f"@{name}"):
        return item.nodeid[: -len(name) - 1]
    return item.nodeid


class ResultCollector:
    """Controller-side: gathers each item's CheckRecord and writes the reports at the end."""

    def __init__(self, config: pytest.Config, session: SbxSession) -> None:
        self.config = config
        self.session = session
        self.records: dict[str, CheckRecord] = {}
        self.started_at = _now()
        self.written: dict[str, Path] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == USER_PROPERTY and isinstance(value, str):
                record = CheckRecord.model_validate_json(value)
                previous = self.records.get(record.nodeid)
                # the call verdict stands unless setup or teardown went wrong
                if previous is None or record.outcome is not Outcome.PASSED:
                    self.records[record.nodeid] = record

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self._add_not_run(session)
        mounts = self.session.finish_mounts(self.config.getoption("sbx_teardown"), self._gate_outcomes())
        if not self.records:
            return
        from sbxcheck.report import assemble_report, write_reports

        records = _link_triage(list(self.records.values()))
        info = InventoryInfo(
            source=self.session.describe_source(),
            sim=self.session.uses_sim,
            details=self.session.describe_details(),
        )
        report = assemble_report(records, started_at=self.started_at, finished_at=_now(), inventory=info)
        if mounts:
            sssf = self.session.inventory().sssf
            suffix = sssf.vm_host_suffix if sssf else ""
            report = report.model_copy(update={"mounts": [m.summary(suffix) for m in mounts]})
        machines = [r.evidence["machine_inventory"] for r in records if "machine_inventory" in r.evidence]
        if machines and isinstance(machines[0], list):
            report = report.model_copy(update={"machine_inventory": machines[0]})
        out_dir = Path(self.config.getoption("sbx_report"))
        if not out_dir.is_absolute():
            out_dir = Path(str(self.config.invocation_params.dir)) / out_dir
        self.written = write_reports(report, out_dir, default_redactor())
        self.report = report

    def _add_not_run(self, session: pytest.Session) -> None:
        """Interrupted: every selected item without a result is reported as not run, and why."""
        fanout = self.session.fanout
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
        """Gate outcomes per mounted run (a C item's target is <run>-<model>)."""
        out: dict[str, list[str]] = {}
        for mounted in self.session.mounts:
            if mounted.run_id:
                out[mounted.run_id] = [
                    r.outcome.value
                    for r in self.records.values()
                    if r.suite == "gate"
                    and (r.target == mounted.run_id or r.target.startswith(mounted.run_id + "-"))
                ]
        return out

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.records or not self.written:
            return
        report = self.report
        tr = terminalreporter
        tr.section("sbxcheck")
        counts = ", ".join(f"{v} {k}" for k, v in report.summary.items() if k != "total" and v)
        tr.write_line(f"inventory: {report.inventory.source}")
        tr.write_line(f"checks: {report.summary.get('total', 0)} ({counts})")
        for inc in report.incidents:
            tr.write_line(f"incident {inc.id} [{inc.classification.value}] {inc.summary}")
            tr.write_line(f"    next step: {inc.recommendation}")
        for rec in report.checks:
            if rec.outcome in (Outcome.FAILED, Outcome.ERROR):
                cls = rec.classification.value if rec.classification else "-"
                tr.write_line(f"{rec.outcome.value.upper():6} [{cls}] {rec.nodeid}: {trim(rec.message, 200)}")
        for mount in report.mounts:
            where = f" — {mount['ssh']}" if mount.get("ssh") else ""
            tr.write_line(
                f"mount {mount['name']} → {mount.get('run_id') or '?'}: {mount['action']}{where} ({mount['why']})"
            )
        for note in self.session.interrupted_during:
            tr.write_line(f"interrupted during {note}")
        not_run = [r for r in report.checks if "not_run" in r.evidence]
        if not_run:
            tr.write_line(f"not run (interrupted): {len(not_run)} items, e.g. {not_run[0].nodeid}")
        tr.write_line("report: " + ", ".join(str(p) for p in self.written.values()))


def _link_triage(records: list[CheckRecord]) -> list[CheckRecord]:
    """A triage verdict names the checks it rests on: they share its cause, so the report shows one incident."""
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
