"""History across runs: stable identities, the bounded store, flaky items, incidents new/ongoing/resolved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import report_scenarios as scenarios

from sbxcheck.cli import main as cli_main
from sbxcheck.redact import Redactor
from sbxcheck.report.history import (
    HistoryStore,
    analyse,
    incident_key,
    item_identity,
    render_history_text,
    stable_text,
)
from sbxcheck.report.results_json import render_results_json
from sbxcheck.report.writers import write_artifacts
from sbxcheck.results import CheckRecord, Outcome


def _record(nodeid: str, suite: str, check: str, target: str) -> CheckRecord:
    return CheckRecord(nodeid=nodeid, suite=suite, check=check, target=target, outcome=Outcome.PASSED)


def test_gate_identity_drops_the_nightly_parts_of_the_run_id() -> None:
    tonight = _record(
        "gates/test_gate.py::test_gate_C_model_answers[demo-20261130-abc123-google/gemini-3.6-flash]",
        "gate",
        "C_model_answers",
        "demo-20261130-abc123-google/gemini-3.6-flash",
    )
    tomorrow = tonight.model_copy(update={"target": "demo-20261201-9f0e11-google/gemini-3.6-flash"})
    assert (
        item_identity(tonight)
        == item_identity(tomorrow)
        == "gate/C_model_answers/google/gemini-3.6-flash@demo"
    )
    a_item = _record("x", "gate", "A_git_integrity", "demo-20261130-abc123")
    assert item_identity(a_item) == "gate/A_git_integrity@demo"
    other_run = a_item.model_copy(update={"target": "fix-login-20261130-abc123"})
    assert item_identity(other_run) == "gate/A_git_integrity@fix-login"  # two VMs of one night stay apart


def test_canary_identity_is_suite_check_target_without_reprs_or_temp_paths() -> None:
    route = _record(
        "canaries/test_routes.py::test_route_dispatched[codex-terra]", "canary", "dispatched", "codex-terra"
    )
    assert item_identity(route) == "canary/dispatched/codex-terra"
    odd = _record(
        "x", "canary", "probe", "<Thing object at 0x7f3a2b1c9d00>-/tmp/pytest-of-root/pytest-7/x0/fleet"
    )
    identity = item_identity(odd)
    assert "0x7f3a" not in identity and "/tmp/" not in identity and "pytest-7" not in identity
    assert stable_text("cause alpha-20261130-2265b1 on /tmp/abc/def") == "cause alpha on <tmp>"


def test_store_is_bounded_atomic_and_skips_a_corrupt_entry(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history", keep=4)
    redactor = Redactor()
    runs = scenarios.history_runs(6)
    for run in runs:
        store.add(render_results_json(run, redactor), run.started_at)
    entries = store.entries()
    assert len(entries) == 4  # bounded: the two oldest were dropped
    assert not list((tmp_path / "history").glob(".*tmp"))  # no temporary file left behind
    entries[1].write_text("{ not json", encoding="utf-8")
    loaded, warnings = store.load()
    assert [r.started_at for r in loaded] == [runs[2].started_at, runs[4].started_at, runs[5].started_at]
    assert len(warnings) == 1 and entries[1].name in warnings[0] and "not valid JSON" in warnings[0]
    with pytest.raises(ValueError, match="at least 1"):
        HistoryStore(tmp_path, keep=0)


def test_ten_runs_flaky_item_and_incidents_new_ongoing_resolved() -> None:
    runs = scenarios.history_runs(10)
    view = analyse(runs)
    flaky = {item.identity: item for item in view.flaky}
    assert scenarios.FLAKY_ITEM in flaky
    assert flaky[scenarios.FLAKY_ITEM].flips == 5
    assert flaky[scenarios.FLAKY_ITEM].outcomes == [
        "failed" if n in scenarios.FLAKY_NIGHTS else "passed" for n in range(10)
    ]
    steady = view.items["gate/A_git_integrity@alpha"]
    assert steady.flips == 0 and not steady.flaky
    dirty = view.items["gate/A_git_integrity@charlie"]
    assert (dirty.failing_since, dirty.failing_runs) == (runs[3].started_at, 7)

    status = {s.status: s for s in view.incidents}
    assert sorted(s.status for s in view.incidents) == ["new", "ongoing", "resolved"]
    assert "tailscaled" in status["new"].key
    assert status["ongoing"].incident.classification.value == "host_key_mismatch"
    assert (status["ongoing"].since, status["ongoing"].runs) == (runs[7].started_at, 3)
    assert "adapter-crash:opencode" in status["resolved"].key and status["resolved"].runs == 5
    # matched by classification + stable cause, not by the incident id (which changes with the run id)
    host_key = [
        next(i for i in r.incidents if i.classification.value == "host_key_mismatch") for r in runs[7:]
    ]
    assert len({i.id for i in host_key}) == 3  # a new VM each night gives a new incident id
    keys = {incident_key(i, runs[9]) for i in runs[9].incidents}
    assert "host_key_mismatch:host_key_mismatch:bravo.exe.xyz" in keys

    credit = [p.remaining_usd if p else None for _, p in view.credit["alpha"]]
    assert credit[0] == 48.0 and credit[-1] == 7.5


def test_history_text_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = scenarios.history_runs(10)
    text = render_history_text(analyse(runs))
    assert f"{scenarios.FLAKY_ITEM}  — 5 flips" in text
    assert "NEW " in text and "ONGOING since 2026-11-27T03:17:00Z (3 runs)" in text and "RESOLVED" in text
    assert "gate/A_git_integrity@charlie  — failed since 2026-11-23T03:17:00Z (7 runs)" in text

    store = HistoryStore(tmp_path)
    for run in runs:
        store.add(render_results_json(run, Redactor()), run.started_at)
    (tmp_path / "run-00000000000000-broken.json").write_text("[]", encoding="utf-8")
    assert cli_main(["history", str(tmp_path)]) == 1  # the last run failed
    out = capsys.readouterr().out
    assert "10 runs" in out and "5 flips" in out and "warning: history entry skipped" in out
    assert cli_main(["history", str(tmp_path), "--keep", "3"]) == 1
    assert "3 runs" in capsys.readouterr().out
    assert cli_main(["history", str(tmp_path / "absent")]) == 2


def test_write_artifacts_keeps_history_and_the_page_labels_it(tmp_path: Path) -> None:
    runs = scenarios.history_runs(10)
    history = tmp_path / "history"
    redactor = Redactor()
    for run in runs[:-1]:
        HistoryStore(history).add(render_results_json(run, redactor), run.started_at)
    written = write_artifacts(runs[-1], tmp_path / "report", redactor, history_dir=history, history_keep=10)
    assert written.history is not None and len(written.history.runs) == 10
    assert len(HistoryStore(history).entries()) == 10
    page = written.paths["report.html"].read_text(encoding="utf-8")
    assert "FLAKY: 5 flips in 10 runs" in page
    assert "NEW</span>" in page and "ONGOING since" in page and "RESOLVED</span>" in page
    stored = json.loads(written.paths["history"].read_text(encoding="utf-8"))
    assert stored == json.loads(written.paths["results.json"].read_text(encoding="utf-8"))
