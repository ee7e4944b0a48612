"""Synthetic run reports for the report page, history and metrics tests (no fleet needed).

They start from ``data/sim-healthy-results.json``, a real ``pytest -m "gate or canary or triage"``
run against the embedded fleet (78 items with the evidence the checks really record), and change
items the way the named faults would, then re-assemble (so incidents and counts are computed by
the real code).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sbxcheck.report import assemble_report
from sbxcheck.results import CheckRecord, Classification, Outcome, RunReport

HEALTHY_PATH = Path(__file__).parents[1] / "data" / "sim-healthy-results.json"
RUNS = ("alpha-20261130-2265b1", "bravo-20261130-91b758", "charlie-20261130-d8f16a")
C = Classification
DGX_RECOVERY = "systemctl enable --now tailscaled, then a strict-host-key SSH and a silent sentinel run"
CRASH_ADVICE = (
    "stop launching opencode; open exactly one bounded repair mission on a reliable route, then validate "
    "with one narrow probe before relaunching (§8.8)"
)
FLAKY_ITEM = "canary/reaches_execution/codex-terra"
FLAKY_NIGHTS = (2, 5, 9)  # nights (0-based) on which the flaky item fails: 5 flips in 10 runs


def healthy() -> RunReport:
    return RunReport.model_validate(json.loads(HEALTHY_PATH.read_text(encoding="utf-8")))


def gate_advice(run_id: str) -> str:
    return (
        f"the VM is left up as evidence — get in: ssh {run_id}.exe.xyz; diagnose, fix, then re-run "
        f"`just sbx lifecycle setup {run_id}`. Teardown stays your decision."
    )


Change = Callable[[CheckRecord], CheckRecord | None]


def rebuild(report: RunReport, change: Change) -> RunReport:
    records = []
    for record in report.checks:
        changed = change(record)
        records.append(changed if changed is not None else record)
    return assemble_report(
        records, started_at=report.started_at, finished_at=report.finished_at, inventory=report.inventory
    )


def _set(record: CheckRecord, *, keep_evidence: bool = True, **update: Any) -> CheckRecord:
    if "evidence" in update and keep_evidence:
        update["evidence"] = {**record.evidence, **update["evidence"]}
    return record.model_copy(update=update)


def host_key_changed(record: CheckRecord, run: str) -> CheckRecord | None:
    """vm.host-key-changed: every item of ``run`` could not tell (the connection was refused)."""
    if record.suite != "gate" or not record.target.startswith(run) or record.check == "run_record":
        return None
    host = f"{run}.exe.xyz"
    return _set(
        record,
        keep_evidence=False,
        outcome=Outcome.ERROR,
        classification=C.HOST_KEY_MISMATCH,
        message=f"{host} presented a host key that does not match known_hosts — refused, nothing ran",
        evidence={
            "alias": host,
            "known_hosts": "~/.ssh/known_hosts",
            "presented": "SHA256:Qm9ndXNLZXlGb3JUZXN0",
        },
        cause=f"host_key_mismatch:{host}",
        recommendation=None,
    )


def dirty_tree(record: CheckRecord, run: str) -> CheckRecord | None:
    if record.check != "A_git_integrity" or record.target != run:
        return None
    return _set(
        record,
        outcome=Outcome.FAILED,
        classification=C.CHECK_FAILED,
        message="HEAD matches, but the tree is dirty: 2 lines from git status --porcelain",
        evidence={"porcelain_lines": 2, "porcelain_sample": [" M src/app.py", "?? notes.txt"]},
        recommendation=gate_advice(run),
        commands=[f"ssh {run}.exe.xyz", f"just sbx lifecycle setup {run}"],
    )


def credit_low(record: CheckRecord, run: str, remaining: float) -> CheckRecord | None:
    if record.check != "E_credit_remaining" or record.target != run:
        return None
    below = remaining < 1.0
    return _set(
        record,
        outcome=Outcome.FAILED if below else Outcome.PASSED,
        classification=C.CHECK_FAILED if below else None,
        message=(
            f"remaining credit ${remaining:.2f} (limit $50.00 − used ${50 - remaining:.2f}) is below the floor $1.00"
            if below
            else f"remaining ${remaining:.2f} of $50.00 (floor $1.00)"
        ),
        evidence={"remaining_usd": remaining, "usage_usd": round(50 - remaining, 6), "limit_usd": 50.0},
        cause=f"credit-exhausted:{run}" if below else None,
        recommendation=(
            f"the runtime key of {run} is nearly spent; raising the cap or tearing down is the operator's "
            "decision — nothing was changed"
            if below
            else None
        ),
    )


def gate_fault() -> RunReport:
    """bravo's host key changed (one incident of 8 items), charlie's tree is dirty, alpha's credit is low."""

    def change(record: CheckRecord) -> CheckRecord | None:
        return (
            host_key_changed(record, RUNS[1])
            or dirty_tree(record, RUNS[2])
            or credit_low(record, RUNS[0], 0.42)
        )

    return rebuild(healthy(), change)


def opencode_crash(record: CheckRecord) -> CheckRecord | None:
    """cp.backend-crash@opencode: both opencode routes terminate before any tool call, alike."""
    if record.check != "reaches_execution" or not record.target.startswith("opencode-"):
        return None
    return _set(
        record,
        outcome=Outcome.FAILED,
        classification=C.INFRASTRUCTURE,
        message="failed before any tool call: adapter exited 139 (shared adapter crash)",
        evidence={"status": "failed", "signature": "adapter exited 139", "events_seen": ["status", "error"]},
        cause="adapter-crash:opencode:adapter exited 139",
        recommendation=CRASH_ADVICE,
    )


def tailscaled_disabled(record: CheckRecord) -> CheckRecord | None:
    """dgx.tailscaled-disabled: the chain breaks at its first link; triage names the one recovery."""
    failing = {"tailscaled_enabled": "disabled", "tailscaled_active": "inactive"}
    if record.check in failing:
        return _set(
            record,
            outcome=Outcome.FAILED,
            classification=C.INFRASTRUCTURE,
            message=f"tailscaled is {failing[record.check]} on agent-core",
            evidence={"state": failing[record.check], "exit_code": 3},
            cause="dgx-unreachable:tailscaled-down:agent-core",
            recommendation=DGX_RECOVERY,
            commands=["systemctl enable --now tailscaled"],
        )
    if record.check in ("tailscale_ping", "dgx_ssh"):
        return _set(
            record,
            outcome=Outcome.ERROR,
            classification=C.INFRA_UNREACHABLE,
            message="no pong from dgx-spark within 10 s"
            if record.check == "tailscale_ping"
            else "ssh: timed out",
            evidence={"exit_code": 1, "stderr": "timeout waiting for pong"},
            cause="dgx-unreachable:tailscaled-down:agent-core",
            recommendation=DGX_RECOVERY,
            commands=["systemctl enable --now tailscaled"],
        )
    return None


def canary_incident() -> RunReport:
    """The opencode adapter crashes on both routes and tailscaled on agent-core is disabled."""
    return rebuild(healthy(), lambda r: opencode_crash(r) or tailscaled_disabled(r))


def _night(report: RunReport, index: int) -> RunReport:
    """The report as if run on night ``index`` (0-based): new run ids (new VMs) and new timestamps."""
    day = 20 + index
    text = report.model_dump_json(by_alias=True)
    for run in RUNS:
        stem = run.split("-")[0]
        text = text.replace(run, f"{stem}-202611{day:02d}-{index:02d}{stem[:1].encode().hex()}a0")
    data = json.loads(text)
    data["started_at"] = f"2026-11-{day:02d}T03:17:00Z"
    data["finished_at"] = f"2026-11-{day:02d}T03:{18 + index % 5}:{(index * 7) % 60:02d}Z"
    return RunReport.model_validate(data)


def history_runs(nights: int = 10) -> list[RunReport]:
    """Ten nights: one flaky item, a failure since night 3, incidents resolved, ongoing and new.

    - FLAKY_ITEM fails on FLAKY_NIGHTS (5 flips);
    - charlie's tree is dirty from night 3 on (failing since then);
    - the opencode crash is open on nights 4–8 (resolved on the last night);
    - bravo's host key mismatch is open on nights 7–9 (ongoing, 3 runs);
    - tailscaled is disabled on night 9 only (new);
    - alpha's credit falls by $4.5 a night.
    """
    base = healthy()
    runs = []
    for n in range(nights):
        run_ids = [f"{r.split('-')[0]}-202611{20 + n:02d}-{n:02d}{r[:1].encode().hex()}a0" for r in RUNS]

        def change(record: CheckRecord, n: int = n, run_ids: list[str] = run_ids) -> CheckRecord | None:
            if n in FLAKY_NIGHTS and record.check == "reaches_execution" and record.target == "codex-terra":
                return _set(
                    record,
                    outcome=Outcome.FAILED,
                    classification=C.TIMEOUT,
                    message="still pending at the 90 s deadline: no tool call, no assistant message",
                    evidence={"status": "pending", "waited_s": 90.0, "deadline_s": 90.0},
                )
            if n >= 3 and (changed := dirty_tree(record, run_ids[2])):
                return changed
            if 4 <= n <= 8 and (changed := opencode_crash(record)):
                return changed
            if n >= 7 and (changed := host_key_changed(record, run_ids[1])):
                return changed
            if n == 9 and (changed := tailscaled_disabled(record)):
                return changed
            if changed := credit_low(record, run_ids[0], round(48.0 - 4.5 * n, 2)):
                return changed
            if record.check == "B_pi_models":
                return _set(record, duration_s=round(record.duration_s + 0.4 * n, 3))
            return None

        runs.append(rebuild(_night(base, n), change))
    return runs
