"""SSSF run records: ``.sandbox/runs/<run-id>.json``, a closed 12-field schema (specs §2).

Reading is strict, as upstream's helper is: a malformed record, an unknown or missing field,
or a run_id that differs from the file name is a problem for that run, never a silent skip,
because a skipped record could hide a key that is still spending.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from sbxcheck.errors import describe_validation_error
from sbxcheck.safeio import UnsafeInput, loads_bounded, read_text_file

MAX_RECORD_BYTES = 1024 * 1024  # a record is ~1 KB; anything near this is not one

RUN_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
TIMESTAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")
RECORD_FIELDS = (
    "run_id",
    "vm_name",
    "https_url",
    "key_hash",
    "limit",
    "spend",
    "session_id",
    "commit_sha",
    "ports",
    "pid",
    "created_at",
    "closed_at",
)


class RunRecord(BaseModel):
    """One run record. All 12 keys must be present (null allowed where upstream allows it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    run_id: str
    vm_name: str | None
    https_url: str | None
    key_hash: str | None
    limit: float | None
    spend: float | None
    session_id: str | None
    commit_sha: str | None
    ports: dict[str, int] | None
    pid: int | None
    created_at: str | None
    closed_at: str | None

    @field_validator("run_id")
    @classmethod
    def _run_id_shape(cls, value: str) -> str:
        if not RUN_ID_RE.match(value) or len(value) > 63:
            raise ValueError("expected lowercase [a-z0-9-], at most 63 characters")
        return value

    @field_validator("created_at", "closed_at")
    @classmethod
    def _timestamp_shape(cls, value: str | None) -> str | None:
        if value is not None and not TIMESTAMP_RE.match(value):
            raise ValueError("expected UTC YYYY-MM-DDTHH:MM:SSZ")
        return value

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True)
class RunEntry:
    """A run as found on disk: its record, or the reason it cannot be used."""

    run_id: str
    path: Path
    record: RunRecord | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.record is not None and self.problem is None


def read_run_record(path: Path) -> RunRecord:
    """Parse one record; raise ValueError with a readable one-line message."""
    source = str(path)
    try:
        text = read_text_file(path, MAX_RECORD_BYTES)  # regular files only: a FIFO must not hang us
    except UnsafeInput as exc:
        raise ValueError(f"{exc}; expected a run record") from None
    except OSError as exc:
        raise ValueError(f"{source}: cannot read run record ({exc.strerror or exc})") from None
    try:
        data: Any = loads_bounded(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except UnsafeInput as exc:
        raise ValueError(f"{source}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object with the 12 run-record fields")
    try:
        record = RunRecord.model_validate(data)
    except ValidationError as exc:
        raise ValueError(describe_validation_error(exc, source)) from None
    if record.run_id != path.stem:
        raise ValueError(f"{source}: field 'run_id' is {record.run_id!r} but the file is named {path.name!r}")
    return record


def discover_runs(runs_dir: Path) -> list[RunEntry]:
    """Every ``*.json`` record in ``runs_dir``, parsed or with its problem, sorted by run id."""
    if not runs_dir.is_dir():
        return []
    entries = []
    for path in sorted(runs_dir.glob("*.json")):
        try:
            entries.append(RunEntry(path.stem, path, read_run_record(path)))
        except ValueError as exc:
            entries.append(RunEntry(path.stem, path, None, str(exc)))
    return entries


def select_runs(runs_dir: Path, run_ids: list[str] | tuple[str, ...] = ()) -> list[RunEntry]:
    """The runs a gate covers: the named ones, else every open run (and every unreadable one).

    A named run that is missing or closed becomes an entry with a problem.
    """
    found = {e.run_id: e for e in discover_runs(runs_dir)}
    if not run_ids:
        return [e for e in found.values() if e.record is None or e.record.is_open]
    selected = []
    for run_id in dict.fromkeys(run_ids):
        entry = found.get(run_id)
        path = runs_dir / f"{run_id}.json"
        if entry is None:
            selected.append(RunEntry(run_id, path, None, f"no run record: {path}"))
        elif entry.record is not None and not entry.record.is_open:
            problem = f"{path}: run is closed (closed_at {entry.record.closed_at}); a closed run is not gated"
            selected.append(RunEntry(run_id, path, entry.record, problem))
        else:
            selected.append(entry)
    return selected


def gate_problem(record: RunRecord, path: Path) -> str | None:
    """Why a valid, open record still cannot be gated (setup's own preconditions), or None."""
    if not record.vm_name:
        return f"{path}: field 'vm_name' is null — CREATE never finished (just sbx lifecycle create)"
    if not record.commit_sha:
        return (
            f"{path}: field 'commit_sha' is null — FILL never ran (just sbx lifecycle fill {record.run_id})"
        )
    if not SHA_RE.match(record.commit_sha):
        return f"{path}: field 'commit_sha' is {record.commit_sha!r}; expected 7-40 lowercase hex characters"
    return None
