"""Run records read as upstream writes them; closed runs are skips; only fields the gate uses block it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sbxcheck.checks.records import check_run_record
from sbxcheck.clients.runrecords import RECORD_FIELDS, gate_problem, select_runs
from sbxcheck.results import Outcome

RUN = "alpha-20261130-abcdef"
SHA = "d34db33f" * 5


def write(runs: Path, run_id: str = RUN, **fields: Any) -> Path:
    doc: dict[str, Any] = dict.fromkeys(RECORD_FIELDS)
    doc.update(
        run_id=run_id,
        vm_name=run_id,
        https_url=f"https://{run_id}.exe.xyz",
        key_hash="ab" * 32,
        limit=50.0,
        commit_sha=SHA,
        ports={"app": 4501, "obs": 4600},
        created_at="2026-11-30T09:00:00Z",
    )
    doc.update(fields)
    path = runs / f"{run_id}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    d = tmp_path / ".sandbox" / "runs"
    d.mkdir(parents=True)
    return d


def only(runs: Path, *names: str) -> Any:
    [entry] = select_runs(runs, names)
    return entry


@pytest.mark.parametrize(
    "ports", [[4501, 4600], {"app": 4501}, "4501", 4501, None, {"app": {"port": 4501}}], ids=repr
)
def test_ports_may_be_any_json_value_as_upstream_set_coerces_it(runs: Path, ports: Any) -> None:
    write(runs, ports=ports)
    entry = only(runs)
    assert entry.ok and entry.record.ports == ports
    assert gate_problem(entry.record, entry.path) is None
    assert check_run_record(entry).outcome is Outcome.PASSED


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"pid": "2211"}, "'pid' is str"),
        ({"limit": "50"}, "'limit' is str"),
        ({"spend": float("nan")}, "'spend' is nan"),
        ({"session_id": 7}, "'session_id' is int"),
        ({"extra": 1}, "unknown field"),
        ({"created_at": "yesterday"}, "'created_at' is not UTC"),
    ],
)
def test_a_deviation_in_a_field_the_gate_does_not_use_never_blocks_it(
    runs: Path, fields: dict[str, Any], needle: str
) -> None:
    write(runs, **fields)
    entry = only(runs)
    assert entry.ok and gate_problem(entry.record, entry.path) is None  # the gate runs
    result = check_run_record(entry)
    assert result.outcome is Outcome.FAILED and needle in result.message
    json.dumps(result.evidence, allow_nan=False)  # no NaN reaches the report


def test_a_missing_field_is_reported_not_blocking(runs: Path) -> None:
    path = write(runs)
    doc = json.loads(path.read_text())
    del doc["pid"]
    path.write_text(json.dumps(doc))
    entry = only(runs)
    assert entry.ok and "missing field(s) pid" in check_run_record(entry).message


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"vm_name": None}, "CREATE never finished"),
        ({"vm_name": "x -oProxyCommand=sh"}, "not a host label"),
        ({"vm_name": ["a"]}, "'vm_name' is not a string"),
        ({"commit_sha": None}, "FILL never ran"),
        ({"commit_sha": "main"}, "lowercase hex"),
        ({"closed_at": 5}, "cannot tell whether the run is open"),
    ],
)
def test_fields_the_gate_uses_block_it_with_one_readable_error(
    runs: Path, fields: dict[str, Any], needle: str
) -> None:
    write(runs, **fields)
    entry = only(runs)
    result = check_run_record(entry)
    assert result.outcome is Outcome.ERROR and needle in result.message
    assert gate_problem(entry.record, entry.path) is not None


@pytest.mark.parametrize("text", ["{not json", "[]", '{"run_id": "other-20261130-abcdef"}', "[" * 100000])
def test_what_upstream_refuses_is_an_unreadable_record(runs: Path, text: str) -> None:
    (runs / f"{RUN}.json").write_text(text)
    entry = only(runs)
    assert entry.record is None and entry.problem and f"{RUN}.json" in entry.problem
    assert check_run_record(entry).outcome is Outcome.ERROR


def test_a_fifo_named_json_is_refused_without_hanging(runs: Path) -> None:
    os.mkfifo(runs / f"{RUN}.json")
    entry = only(runs)
    assert entry.record is None and "not a regular file" in (entry.problem or "")


def test_closed_runs_are_visible_as_skips_listed_or_named(runs: Path) -> None:
    write(runs, closed_at="2026-11-30T10:00:00Z")
    write(runs, "bravo-20261130-bbbbbb")
    entries = select_runs(runs)
    assert [e.run_id for e in entries] == [RUN, "bravo-20261130-bbbbbb"]
    for entry in (entries[0], only(runs, RUN)):  # a closed run named with --sbx-run-id: the same skip
        result = check_run_record(entry)
        assert result.outcome is Outcome.SKIPPED
        assert (
            "closed at 2026-11-30T10:00:00Z" in result.message and "key hash abababababab" in result.message
        )
        assert "orphan audit" in result.message
        assert gate_problem(entry.record, entry.path) is not None  # never gated


@pytest.mark.parametrize("name", ["../../etc/passwd", "UPPER-20261130-abcdef", "a" * 64, "x y"])
def test_a_named_run_id_that_is_not_a_host_label_is_refused_before_any_lookup(runs: Path, name: str) -> None:
    entry = only(runs, name)
    assert entry.record is None and "is not a run id" in (entry.problem or "")
    assert entry.path == runs


def test_a_named_run_without_a_record(runs: Path) -> None:
    entry = only(runs, "ghost-20261130-cccccc")
    assert entry.problem and entry.problem.startswith("no run record")
