"""The results.json document (schema 1): assemble, render, write atomically, load."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sbxcheck.display import display_data
from sbxcheck.errors import BadResponseError
from sbxcheck.redact import Redactor
from sbxcheck.report.incidents import build_incidents
from sbxcheck.results import SCHEMA_VERSION, CheckRecord, InventoryInfo, Outcome, RunReport
from sbxcheck.safeio import UnsafeInput, loads_bounded, read_text_file

__all__ = [
    "CHECK_KEY_ORDER",
    "assemble_report",
    "atomic_write_text",
    "load_report",
    "render_results_json",
    "report_dict",
    "stage_text",
]

#: Key order of one check in results.json: the published schema-1 fields first, then the extra fields.
CHECK_KEY_ORDER = (
    "nodeid",
    "suite",
    "check",
    "target",
    "outcome",
    "classification",
    "message",
    "evidence",
    "duration_s",
    "attempts",
    "cause",
    "recommendation",
)


def _check_sort_key(record: CheckRecord) -> tuple[str, str, str]:
    return (record.nodeid, record.target, record.check)


def assemble_report(
    records: Sequence[CheckRecord],
    *,
    started_at: str,
    finished_at: str,
    inventory: InventoryInfo,
) -> RunReport:
    """Build the run report: checks sorted by nodeid, incidents grouped, counts per outcome.

    Sorting by nodeid makes a pytest-xdist run (records arrive in worker order) and a serial run
    produce the same document.
    """
    checks = sorted(records, key=_check_sort_key)
    summary: dict[str, int] = {outcome.value: 0 for outcome in Outcome}
    for record in checks:
        summary[record.outcome.value] += 1
    summary["total"] = len(checks)
    return RunReport(
        started_at=started_at,
        finished_at=finished_at,
        inventory=inventory,
        checks=list(checks),
        incidents=build_incidents(checks),
        summary=summary,
    )


def report_dict(report: RunReport, redactor: Redactor) -> dict[str, Any]:
    """The redacted results.json document as a dict, keys in contract order."""
    raw = report.model_dump(mode="json", by_alias=True)
    checks = []
    for check in raw["checks"]:
        ordered = {key: check[key] for key in CHECK_KEY_ORDER if key in check}
        ordered.update({k: v for k, v in check.items() if k not in ordered})
        checks.append(ordered)
    raw["checks"] = checks
    redacted: dict[str, Any] = display_data(raw, redactor)  # redacted, then control characters shown
    return redacted


def render_results_json(report: RunReport, redactor: Redactor) -> str:
    """results.json text: ``redactor.redact`` applied to the dumped document, then serialised."""
    return json.dumps(report_dict(report, redactor), indent=2, ensure_ascii=False) + "\n"


def stage_text(path: Path, text: str) -> str:
    """Write ``text`` to a new temporary file beside ``path`` (flushed to disk); return its name.

    Nothing is left behind when the write fails (a full or broken disk): the OSError propagates.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    return tmp_name


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_name = stage_text(path, text)
    try:
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def _summarise_validation(exc: ValidationError, shown: int = 3) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    parts = [f"{_location(tuple(e['loc']))}: {e['msg']}" for e in errors[:shown]]
    more = len(errors) - shown
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def load_report(path: Path) -> RunReport:
    """Parse a results.json back into a :class:`RunReport`.

    Any problem (unreadable, not JSON, wrong schema, a missing or invalid field) raises a single
    :class:`BadResponseError` whose one-line message names the file and the offending field.
    """
    path = Path(path)
    try:
        text = read_text_file(path)  # regular files only, size capped
    except (OSError, ValueError) as exc:
        raise BadResponseError(f"{path}: cannot read results file: {exc}") from None
    try:
        data = loads_bounded(text)
    except UnsafeInput as exc:
        raise BadResponseError(f"{path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadResponseError(
            f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(data, dict):
        raise BadResponseError(f"{path}: expected a JSON object at top level, got {type(data).__name__}")
    schema = data.get("schema")
    if schema != SCHEMA_VERSION:
        raise BadResponseError(
            f"{path}: field 'schema' is {schema!r}; this sbxcheck reads schema {SCHEMA_VERSION}"
        )
    try:
        return RunReport.model_validate(data)
    except ValidationError as exc:
        raise BadResponseError(f"{path}: invalid results: {_summarise_validation(exc)}") from None
