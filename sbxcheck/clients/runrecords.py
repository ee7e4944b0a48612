"""SSSF run records: ``.sandbox/runs/<run-id>.json``, a closed 12-field schema (specs/sssf-sandbox.md, 2).

Read no more strictly than the writer (upstream ``run_record.py``) writes: ``set`` coerces
``ports`` as any JSON value, ``pid`` to int, ``limit``/``spend`` to float, everything else to a
string, and the literal ``null`` to null. So a record is:

- **unreadable** (its run cannot be gated, and the reason names the file) when it is not a
  regular file, not JSON, not an object, or its ``run_id`` is missing, not a run id, or not the
  file name — the things upstream itself refuses;
- **blocked** (see :func:`gate_problem`) when a field the gate *uses* is absent or unusable:
  ``vm_name`` (a host label: it becomes an SSH/DNS name), ``commit_sha``, ``closed_at``;
- otherwise readable. Deviations in fields the gate does not use (a missing or unknown key, a
  ``pid`` that is not an int, a non-finite ``limit``) are listed in :attr:`RunRecord.deviations`
  and reported by the run-record item; they never block the gate.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbxcheck.safeio import UnsafeInput, loads_bounded, read_text_file

RUN_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
TIMESTAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
SHA_RE = re.compile(r"^[0-9a-f]{7,64}$")
MAX_RECORD_BYTES = 1 << 20  # upstream records are < 1 KiB; anything this large is not one
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
_STRING_FIELDS = ("vm_name", "https_url", "key_hash", "session_id", "commit_sha", "created_at", "closed_at")
_FLOAT_FIELDS = ("limit", "spend")


_SLUG_RE = re.compile(r"[^a-z0-9]+")
_HAS_SUFFIX_RE = re.compile(r"-[0-9a-f]{6}$")


def task_slug(task: str) -> str:
    """The slug run_record.py makes of a task before it adds the date and entropy (``Fix Login!`` -> ``fix-login``)."""
    return _SLUG_RE.sub("-", task.lower()).strip("-") or "run"


def mount_run_prefix(name: str) -> str | None:
    """What the run ids a mount of ``name`` creates start with; None when ``name`` is used as is.

    The create recipe keeps a name that already ends in ``-<6 hex>``; any other name goes through
    ``new-id``, which slugifies it and appends ``-<YYYYMMDD>-<6 hex>``.
    """
    return None if _HAS_SUFFIX_RE.search(name) else f"{task_slug(name)}-"


def is_run_id(value: str) -> bool:
    """A run id as upstream's create makes it: a lowercase host label of at most 63 characters."""
    return bool(RUN_ID_RE.match(value)) and len(value) <= 63


def is_host_label(value: str) -> bool:
    """One DNS label (letters, digits, inner hyphens, 1-63 characters): safe as an SSH/DNS name part."""
    return bool(HOST_LABEL_RE.match(value))


@dataclass(frozen=True)
class RunRecord:
    """One readable run record. Fields hold what the writer's coercion makes, else None.

    ``deviations`` lists what differs from upstream's schema in ways the gate does not depend on.
    """

    run_id: str
    vm_name: str | None = None
    https_url: str | None = None
    key_hash: str | None = None
    limit: float | None = None
    spend: float | None = None
    session_id: str | None = None
    commit_sha: str | None = None
    ports: Any = None
    pid: int | None = None
    created_at: str | None = None
    closed_at: str | None = None
    deviations: tuple[str, ...] = field(default=(), compare=False)
    invalid: tuple[str, ...] = field(default=(), compare=False)  # fields present with an unusable value

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


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def parse_run_record(data: Any, source: str, expected_run_id: str) -> RunRecord:
    """Build a record from parsed JSON; raise ValueError (one readable line) only for what upstream refuses."""
    if not isinstance(data, dict):
        raise ValueError(
            f"{source}: expected a JSON object with the 12 run-record fields, got {_type_name(data)}"
        )
    run_id = data.get("run_id")
    if not isinstance(run_id, str):
        raise ValueError(f"{source}: field 'run_id' is {_type_name(run_id)}; expected the run id (a string)")
    if not is_run_id(run_id):
        raise ValueError(
            f"{source}: field 'run_id' is not a run id (lowercase letters, digits and inner '-', at most 63)"
        )
    if run_id != expected_run_id:
        raise ValueError(
            f"{source}: field 'run_id' is {run_id!r} but the file is named {expected_run_id}.json"
        )
    deviations: list[str] = []
    invalid: list[str] = []
    values: dict[str, Any] = {"run_id": run_id}
    missing = [f for f in RECORD_FIELDS if f not in data]
    unknown = sorted(str(k) for k in data if k not in RECORD_FIELDS)
    if missing:
        deviations.append(f"missing field(s) {', '.join(missing)} (upstream writes all 12, null when unset)")
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:5]) + (" …" if len(unknown) > 5 else "")
        deviations.append(f"unknown field(s) {shown} (upstream's schema is closed)")
    for name in _STRING_FIELDS:
        value = data.get(name)
        if value is None or isinstance(value, str):
            values[name] = value
        else:
            invalid.append(name)
            deviations.append(f"field '{name}' is {_type_name(value)}; upstream writes a string or null")
    for name in _FLOAT_FIELDS:
        value = data.get(name)
        if value is None:
            values[name] = None
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            values[name] = float(value)
        else:
            invalid.append(name)
            shown = repr(value) if isinstance(value, float) else _type_name(value)
            deviations.append(f"field '{name}' is {shown}; expected a finite number of dollars or null")
    pid = data.get("pid")
    if pid is None or (isinstance(pid, int) and not isinstance(pid, bool)):
        values["pid"] = pid
    else:
        invalid.append("pid")
        deviations.append(f"field 'pid' is {_type_name(pid)}; upstream writes an int or null")
    values["ports"] = data.get("ports")  # upstream stores any JSON value here
    for name in ("created_at", "closed_at"):
        value = values.get(name)
        if isinstance(value, str) and not TIMESTAMP_RE.match(value):
            deviations.append(f"field '{name}' is not UTC YYYY-MM-DDTHH:MM:SSZ")
    return RunRecord(**values, deviations=tuple(deviations), invalid=tuple(invalid))


def read_run_record(path: Path) -> RunRecord:
    """Parse one record file; raise ValueError with a readable one-line message."""
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
    return parse_run_record(data, source, path.name.removesuffix(".json"))


def discover_runs(runs_dir: Path) -> list[RunEntry]:
    """Every ``*.json`` record in ``runs_dir``, parsed or with its problem, sorted by run id."""
    if not runs_dir.is_dir():
        return []
    entries = []
    for path in sorted(runs_dir.glob("*.json")):
        run_id = path.name.removesuffix(".json")
        try:
            entries.append(RunEntry(run_id, path, read_run_record(path)))
        except ValueError as exc:
            entries.append(RunEntry(run_id, path, None, str(exc)))
    return entries


def select_runs(runs_dir: Path, run_ids: list[str] | tuple[str, ...] = ()) -> list[RunEntry]:
    """The runs a gate covers: the named ones, else every record (open, closed and unreadable).

    Closed runs are kept so the report accounts for every record (their item is a skip). A named
    run that is not a run id or has no record becomes an entry with a problem (no path is built
    from a name that is not a host label).
    """
    found = {e.run_id: e for e in discover_runs(runs_dir)}
    if not run_ids:
        return list(found.values())
    selected = []
    for run_id in dict.fromkeys(run_ids):
        if not is_run_id(run_id):
            shown = run_id if len(run_id) <= 80 else run_id[:80] + "…"
            selected.append(
                RunEntry(
                    re.sub(r"[^a-z0-9-]", "_", run_id.lower())[:63] or "invalid",
                    runs_dir,
                    None,
                    f"--sbx-run-id {shown!r} is not a run id (lowercase letters, digits and inner '-', "
                    "at most 63 characters); nothing was looked up",
                )
            )
            continue
        entry = found.get(run_id)
        path = runs_dir / f"{run_id}.json"
        selected.append(
            entry if entry is not None else RunEntry(run_id, path, None, f"no run record: {path}")
        )
    return selected


def closed_note(record: RunRecord) -> str:
    """The message of a closed run's item."""
    key = f"key hash {record.key_hash[:12]}…" if record.key_hash else "no key hash recorded"
    return (
        f"run closed at {record.closed_at}; {key} — not gated (a closed run is over); the orphan audit "
        "checks whether the key is still live"
    )


def gate_problem(record: RunRecord, path: Path) -> str | None:
    """Why a readable record still cannot be gated (closed, or setup's own preconditions), or None."""
    if not record.is_open:
        return closed_note(record)
    if "closed_at" in record.invalid:
        return f"{path}: field 'closed_at' is not a timestamp or null — cannot tell whether the run is open"
    if record.vm_name is None:
        why = "is not a string" if "vm_name" in record.invalid else "is null — CREATE never finished"
        return f"{path}: field 'vm_name' {why} (just sbx lifecycle create)"
    if not is_host_label(record.vm_name):
        return (
            f"{path}: field 'vm_name' is not a host label (letters, digits and inner '-', at most 63): "
            "it would become an SSH/DNS name; nothing was connected"
        )
    if record.commit_sha is None:
        why = "is not a string" if "commit_sha" in record.invalid else "is null — FILL never ran"
        return f"{path}: field 'commit_sha' {why} (just sbx lifecycle fill {record.run_id})"
    if not SHA_RE.match(record.commit_sha):
        return f"{path}: field 'commit_sha' is {record.commit_sha[:80]!r}; expected 7-64 lowercase hex characters"
    return None
