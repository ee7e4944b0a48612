"""ResultCollector (xdist controller side): item outcomes -> RunReport, cleanup, reports, terminal summary.

The collector reads and completes the process's :class:`~sbxcheck.plugin.runstate.RunState` (``run_state``):
the workers' cleanup lines join it, and at the end the mounts' teardown and the mission cancels.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sbxcheck.plugin.settings import settings_of
from sbxcheck.plugin.stash import (
    PYTEST_SESSION_KEY,
    SESSION_KEY,
    get_session,
    plain_nodeid,
    run_state,
    simulated_fleet,
    suite_of,
)

if TYPE_CHECKING:
    from sbxcheck.results import CheckRecord, RunReport


#: The session's collector, in ``config.stash`` (set in ``pytest_configure``).
COLLECTOR_KEY: pytest.StashKey[ResultCollector] = pytest.StashKey()


class ResultCollector:
    """Controller-side: gathers each item's CheckRecord, calls the sbxcheck hooks, cleans up, writes reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: dict[str, CheckRecord] = {}
        self.started_at = _now()
        self.written: dict[str, Path] = {}
        self.report: RunReport | None = None
        self.not_written = ""  # one line naming every output the disk refused; empty when all were written
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
        """Once, when this run is known to write a report: the previous run's files go first.

        A red run must never leave the last run's green report behind for a CI upload.
        """
        if self._stale_removed:
            return
        self._stale_removed = True
        from sbxcheck.plugin.outputs import remove_stale_reports

        with contextlib.suppress(OSError):  # a report dir we cannot clean was named at configure time
            remove_stale_reports(settings_of(self.config).report_dir)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not any(suite_of(item) for item in session.items):
            return
        self.remove_stale_reports()
        from sbxcheck.plugin.cleanup import param_id

        for item in session.items:
            if suite_of(item) is not None:
                self.selected[plain_nodeid(item)] = param_id(item.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        from sbxcheck.plugin.cleanup import param_id, strip_group

        for nodeid in ids:
            plain = strip_group(nodeid)
            self.selected.setdefault(plain, param_id(plain))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        cleanup = output.get("sbxcheck_cleanup") if isinstance(output, dict) else None
        if isinstance(cleanup, list) and cleanup:
            run_state(self.config).cleanup.extend(c for c in cleanup if isinstance(c, dict))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "sbxcheck", None)
        if payload is not None:
            self.remove_stale_reports()  # under xdist the first sbxcheck result is the first sign
        if payload is not None and (report.when == "call" or not report.passed):
            from sbxcheck.plugin.cleanup import strip_group

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
        if crashed and self.report is not None:  # pytest prints no terminal summary after an internal error
            where = self.written.get("results.json", "not written")
            line = (
                f"sbxcheck: verdict: INTERRUPTED ({self.interrupted_reason}): {len(self.report.not_run)} "
                f"selected item(s) did not run; report: {where}\n"
            )
            with contextlib.suppress(OSError):
                os.write(2, line.encode())
        if self.not_written and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            # a green run without its report is no green run: exit as pytest does when it cannot write
            # its own --junitxml (internal error); a failed or interrupted run keeps its status
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        failed_cleanup = [c for c in run_state(self.config).cleanup if not c.get("ok", True)]
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
        settings = settings_of(self.config)
        out_dir = settings.report_dir
        stale = interrupted and (out_dir / "results.json").exists()
        sbx = self.config.stash.get(SESSION_KEY, None)
        if sbx is None and not (self.records or stale or run_state(self.config).cleanup):
            return  # no sbxcheck item ran, nothing was mounted or cancelled: an unrelated run gets no report
        from sbxcheck.errors import SbxError
        from sbxcheck.plugin.cleanup import left_open, mount_cleanup
        from sbxcheck.redact import default_redactor
        from sbxcheck.report import assemble_report
        from sbxcheck.report.present import key_evidence_lines, next_step
        from sbxcheck.report.writers import write_artifacts
        from sbxcheck.results import InventoryInfo

        sbx, state = get_session(self.config), run_state(self.config)
        mounts = sbx.ledger_mounts.finish_mounts(state, settings.teardown, self._gate_outcomes())
        sbx.control_plane.close_missions(state)
        if state.interrupted_during:  # the run ends as interrupted (exit 2): every artifact says so
            interrupted = True
            self.interrupted_reason = self.interrupted_reason or (
                "interrupted during cleanup: " + "; ".join(state.interrupted_during)
            )
        cleanup = list(state.cleanup) + [mount_cleanup(m) for m in mounts if m.action != "pending"]
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
            sim=simulated_fleet(sbx),  # a `sbxcheck sim up` inventory is a simulated fleet too
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
        from sbxcheck.plugin.waiving import waivers_of_run
        from sbxcheck.report import leftover_incidents
        from sbxcheck.spend import summarize_spend

        report = report.model_copy(
            update={
                "incidents": [*report.incidents, *leftover_incidents(cleanup)],  # missions still there after close
                "spend": summarize_spend(cleanup, records, cap_usd=settings.max_spend_usd),
                "interrupted": interrupted,
                "interrupted_reason": (self.interrupted_reason or "interrupted") if interrupted else "",
                "not_run": self.not_run() if interrupted else [],
                "cleanup": cleanup,
                "left": left,
                "report_url": settings.report_url or "",
                "waivers": waivers_of_run(self.config, records),
            }
        )
        for incident in report.incidents:
            self.config.hook.pytest_sbxcheck_incident(incident=incident, config=self.config)
        written = write_artifacts(
            report,
            out_dir,
            default_redactor(),
            history_dir=settings.history,
            history_keep=settings.history_keep,
            metrics_path=settings.metrics,
        )
        self.written, self.history_warnings = written.paths, written.warnings
        self.report = written.report or report  # with history, each failure says how long it has failed
        self.not_written = written.problem()
        if self.not_written:  # a full or broken disk: one line, and the terminal summary still follows
            with contextlib.suppress(OSError):
                os.write(2, f"sbxcheck: {self.not_written}\n".encode())
        if {"results.json", "junit.xml", "report.html"} <= self.written.keys():
            self.config.hook.pytest_sbxcheck_report(report=report, paths=dict(self.written), config=self.config)
        if interrupted and not self.config.stash.get(PYTEST_SESSION_KEY, None):
            # no terminal summary follows an interrupt before the session started: say it here
            where = self.written.get("results.json", "not written")
            with contextlib.suppress(OSError):
                os.write(2, f"sbxcheck: interrupted; report: {where}\n".encode())

    def _add_not_run(self, session: pytest.Session) -> None:
        """Interrupted: every selected item without a result is reported as not run, and why."""
        from sbxcheck.results import CheckRecord, Outcome

        sbx = self.config.stash.get(SESSION_KEY, None)
        fanout = sbx.fanout if sbx is not None else None
        for item in session.items:
            suite, nodeid = suite_of(item), plain_nodeid(item)
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
        from sbxcheck.lifecycle.recipes import NOT_RUN

        def of_run(target: str, run_id: str) -> bool:
            return target == run_id or target.startswith(run_id + "-")

        out: dict[str, list[str]] = {}
        never = self.not_run()
        for mounted in run_state(self.config).mounts:
            if mounted.run_id:
                out[mounted.run_id] = [
                    r.outcome.value
                    for r in self.records.values()
                    if r.suite == "gate" and of_run(r.target, mounted.run_id) and "not_run" not in r.evidence
                ] + [NOT_RUN for n in never if of_run(self.selected[n], mounted.run_id)]
        return out

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.report is None:
            return
        from sbxcheck.display import SanitisingWriter
        from sbxcheck.report.history import verdict_of
        from sbxcheck.report.html_verdict import verdict_headline
        from sbxcheck.report.present import counts_line, detail_block, headline

        document = self.report.model_dump(mode="json")
        tr = SanitisingWriter(terminalreporter)  # every line redacted, then neutralised
        tr.section("sbxcheck")
        verdict = verdict_of(self.report)
        why = f" ({document['interrupted_reason']})" if document.get("interrupted_reason") else ""
        tr.write_line(
            f"verdict: {verdict_headline(verdict, document['summary'])}{why}",
            bold=True,
            purple=verdict == "interrupted",
            red=verdict == "failed",
            green=verdict == "passed",
        )
        tr.write_line(f"inventory: {document['inventory']['source']}")
        tr.write_line(counts_line(document["summary"], len(document.get("not_run") or [])))
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
        from sbxcheck.report.waivers import waiver_lines

        for line, style in waiver_lines(document) if verbosity > -2 else []:
            tr.write_line(line, **style)
        for mount in document["mounts"]:
            where = f" — {mount['ssh']}" if mount.get("ssh") else ""
            tr.write_line(
                f"mount {mount['name']} → {mount.get('run_id') or '?'}: {mount['action']}{where} ({mount['why']})"
            )
        for item in document.get("cleanup") or []:
            if item.get("kind") in ("mission", "foreign mission"):
                mark = "" if item.get("ok", True) else "FAILED "
                cost = f" (cost unreadable: {item['cost_unreadable']})" if item.get("cost_unreadable") else ""
                tr.write_line(f"cleanup: {mark}{item['kind']} {item.get('ident')}: {item.get('action')}{cost}")
        sbx_probe = settings_of(self.config).probe
        if sbx_probe:  # say what was left out, so a probe run never reads as a full one
            tr.write_line(f"probe: one narrow no-push probe of route {sbx_probe}; nothing else was run")
        from sbxcheck.spend import spend_worth_showing

        if spend_worth_showing(document.get("spend")):
            from sbxcheck.spend import spend_line

            tr.write_line(spend_line(document["spend"]))
            for nodeid in document["spend"].get("not_run") or []:
                tr.write_line(f"    not run (spend cap): {nodeid}")
        if document.get("interrupted"):
            not_run = document.get("not_run") or []
            ran = f"{len(not_run)} selected item(s) did not run" if not_run else "every selected item ran, "
            tr.write_line(
                f"interrupted: {ran}" + ("" if not_run else "but the run was stopped before it finished") + why,
                bold=True,
            )
            for nodeid in not_run[:NOT_RUN_SHOWN]:
                tr.write_line(f"    not run: {nodeid}")
            if len(not_run) > NOT_RUN_SHOWN:
                tr.write_line(f"    … and {len(not_run) - NOT_RUN_SHOWN} more (results.json: not_run)")
            from sbxcheck.report.nextsteps import not_run_command

            rerun = not_run_command(self.report)
            if rerun:
                tr.write_line(f"    re-run what did not run: {rerun}")
        for entry in document.get("left") or []:
            tr.write_line(
                f"left open: {entry['kind']} {entry['ident']} ({entry['state']}) {entry['why']}".rstrip()
            )
        for note in run_state(self.config).interrupted_during:
            tr.write_line(f"interrupted during {note}")
        for warning in self.history_warnings:
            tr.write_line(f"warning: {warning}", yellow=True)
        if self.not_written:
            tr.write_line(f"report: FAILED: {self.not_written}", bold=True, red=True)
        if self.written:
            tr.write_line("report: " + ", ".join(str(p) for p in self.written.values()))
        if document.get("report_url"):
            tr.write_line(f"report page: {document['report_url']}")


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
