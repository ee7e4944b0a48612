#!/usr/bin/env python3
"""Run records for the SSSF sandbox recipes: ``.sandbox/runs/<run-id>.json`` (stdlib only).

A closed 12-field schema. ``create`` writes with O_CREAT|O_EXCL at 0600 and never clobbers;
updates write ``<id>.json.tmp`` and ``os.replace`` it, so a crash leaves the old record whole.
A malformed record is a hard error, never skipped.

Usage: run_record.py create ID | get ID [FIELD] | set ID K=V... | close ID | list | path ID | new-id TASK
Errors print ``run_record: <msg>`` and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import sys
from pathlib import Path
from typing import Any

FIELDS = (
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
IMMUTABLE = ("run_id", "created_at")
RUN_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
TIMESTAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
USAGE = "usage: run_record.py create ID | get ID [FIELD] | set ID K=V... | close ID | list | path ID | new-id TASK"


class RecordError(Exception):
    """A failure reported as ``run_record: <msg>`` with exit 1."""


def runs_dir() -> Path:
    """``$SBX_RUNS_DIR``, else ``<repo root>/.sandbox/runs`` (this file is sandbox_mount/host/)."""
    override = os.environ.get("SBX_RUNS_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[2] / ".sandbox" / "runs"


def now() -> str:
    """UTC, whole seconds, literal Z."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def record_path(run_id: str) -> Path:
    if not RUN_ID_RE.match(run_id) or len(run_id) > 63:
        raise RecordError(f"invalid run id {run_id!r}: lowercase [a-z0-9-], at most 63 characters")
    return runs_dir() / f"{run_id}.json"


def new_id(task: str) -> str:
    """``<slug>-<YYYYMMDD>-<6 hex>``; the slug is never truncated."""
    slug = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-") or "run"
    return f"{slug}-{dt.datetime.now(dt.UTC):%Y%m%d}-{secrets.token_hex(3)}"


def _check(path: Path, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RecordError(f"malformed run record {path}: not a JSON object")
    keys = set(data)
    if keys != set(FIELDS):
        missing = sorted(set(FIELDS) - keys)
        extra = sorted(keys - set(FIELDS))
        raise RecordError(f"malformed run record {path}: missing {missing}, unknown {extra}")
    if data["run_id"] != path.stem:
        raise RecordError(
            f"malformed run record {path}: run_id {data['run_id']!r} differs from the file name"
        )
    for name in ("created_at", "closed_at"):
        value = data[name]
        if value is not None and (not isinstance(value, str) or not TIMESTAMP_RE.match(value)):
            raise RecordError(f"malformed run record {path}: {name} is {value!r}")
    return data


def load(path: Path) -> dict[str, Any]:
    """Read and validate one record (hard error when missing or malformed)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordError(f"no run record: {path}") from None
    except OSError as exc:
        raise RecordError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"malformed run record {path}: {exc}") from None
    return _check(path, data)


def dump(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2) + "\n"


def replace(path: Path, record: dict[str, Any]) -> None:
    """Write ``<id>.json.tmp`` and move it over the record."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dump(record), encoding="utf-8")
    os.replace(tmp, path)


def create(run_id: str) -> Path:
    path = record_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = dict.fromkeys(FIELDS)
    record.update(run_id=run_id, created_at=now())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise RecordError(f"run record already exists: {path}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(dump(record))
    return path


def coerce(name: str, raw: str) -> Any:
    if raw == "null":
        return None
    try:
        if name == "ports":
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError("not a JSON object")
            return value
        if name == "pid":
            return int(raw)
        if name in ("limit", "spend"):
            return float(raw)
    except ValueError as exc:
        raise RecordError(f"bad value for {name}: {raw!r} ({exc})") from None
    return raw


def set_fields(run_id: str, pairs: list[str]) -> None:
    path = record_path(run_id)
    record = load(path)
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep:
            raise RecordError(f"expected key=value, got {pair!r}")
        if name not in FIELDS:
            raise RecordError(f"unknown field {name!r}; known: {', '.join(FIELDS)}")
        if name in IMMUTABLE:
            raise RecordError(f"{name} is set once at create and cannot be changed")
        record[name] = coerce(name, raw)
    replace(path, record)


def show(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def list_records() -> list[dict[str, Any]]:
    directory = runs_dir()
    records = [load(p) for p in sorted(directory.glob("*.json"))] if directory.is_dir() else []
    records.sort(key=lambda r: (r["created_at"] or "", r["run_id"]), reverse=True)
    return records


def main(argv: list[str]) -> int:
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    verb, args = argv[0], argv[1:]
    arity = {"create": (1, 1), "get": (1, 2), "set": (2, None), "close": (1, 1), "list": (0, 0)}
    arity.update({"path": (1, 1), "new-id": (1, 1)})
    if verb not in arity:
        print(USAGE, file=sys.stderr)
        return 2
    low, high = arity[verb]
    if len(args) < low or (high is not None and len(args) > high):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if verb == "create":
            print(create(args[0]))
        elif verb == "get":
            record = load(record_path(args[0]))
            if len(args) == 1:
                print(dump(record), end="")
            elif args[1] not in FIELDS:
                raise RecordError(f"unknown field {args[1]!r}; known: {', '.join(FIELDS)}")
            else:
                print(show(record[args[1]]))
        elif verb == "set":
            set_fields(args[0], args[1:])
        elif verb == "close":
            path = record_path(args[0])
            record = load(path)
            if record["closed_at"] is None:  # the first close wins
                record["closed_at"] = now()
                replace(path, record)
            print(record["closed_at"])
        elif verb == "list":
            print(json.dumps(list_records(), indent=2))
        elif verb == "path":
            print(record_path(args[0]))
        else:
            print(new_id(args[0]))
    except RecordError as exc:
        print(f"run_record: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
