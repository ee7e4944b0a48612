"""Waivers: known failures that expire, read from ``[[waivers]]`` tables (the inventory, a waivers file).

A waiver names items by a node-id pattern and says why their failure is accepted and until when. An
item it matches still runs: failing for the waived cause it is ``waived`` (left out of the verdict),
failing for another cause it stays failed and says the waiver did not cover it, passing it says the
waiver is no longer needed. An expired waiver is no error: it stops applying, and a failure says when
it expired.

Patterns: ``*`` is any text, ``?`` one character; everything else is literal, brackets too, so a
parameter id is written as pytest shows it (``test_route_reaches_execution[opencode-*]``).

Pure: reading and validating the tables, matching node ids, deciding what a result becomes and
summarising a run's waivers. The plugin applies the decisions; the reports show them.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from sbxcheck.errors import InventoryError
from sbxcheck.inventory_base import StrictSection, no_userinfo
from sbxcheck.redact import default_redactor
from sbxcheck.results import CheckRecord, Classification, Outcome
from sbxcheck.safeio import UnsafeInput, read_regular_file

__all__ = [
    "CLASSIFICATIONS",
    "MAX_DAYS_AHEAD",
    "WAIVERS_FILENAME",
    "Decision",
    "PlacedWaiver",
    "Waiver",
    "append_waiver",
    "decide",
    "duplicate_problems",
    "glob_match",
    "load_waivers_file",
    "parse_time",
    "read_waivers",
    "summarise",
    "table_problems",
    "waiver_table",
]

#: How far ahead a waiver may end: a known failure is looked at again at least this often.
MAX_DAYS_AHEAD = 90
#: The waivers file a run reads from its rootdir when no setting names one (``sbxcheck waive`` writes it).
WAIVERS_FILENAME = "sbxcheck-waivers.toml"
MAX_WAIVERS_BYTES = 1024 * 1024
CLASSIFICATIONS = frozenset(c.value for c in Classification)
_FIELDS = ("match", "reason", "until", "cause", "owner", "link")
_REQUIRED_WHY = {
    "match": "the node ids it waives, e.g. canaries/test_routes.py::test_route_reaches_execution[opencode-*]",
    "reason": "why the failure is accepted",
    "until": f"the date it stops applying, at most {MAX_DAYS_AHEAD} days ahead",
}
_FAILING = (Outcome.FAILED, Outcome.ERROR)


def glob_match(pattern: str, text: str) -> bool:
    """``*`` any text, ``?`` one character, everything else literal (brackets are a parameter id's)."""
    return _compiled(pattern).fullmatch(text) is not None


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    parts = (".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.compile("".join(parts), re.DOTALL)


def parse_time(text: str) -> dt.date | dt.datetime:
    """A date (``2026-12-08``) or a date and time (``2026-12-08T06:00:00Z``) from ISO text; ValueError."""
    value = text.strip()
    if len(value) == 10:
        return dt.date.fromisoformat(value)
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _as_utc(value: dt.date | dt.datetime) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return dt.datetime.combine(value, dt.time.min, dt.UTC)


class Waiver(StrictSection):
    """A known failure that expires: items matching ``match`` that fail (for ``cause``, when given) are
    ``waived`` until ``until`` — they still run, and are left out of the verdict and the exit code.

    A waived item that fails for another cause stays failed; one that passes says the waiver is no longer
    needed; after ``until`` the waiver stops applying and the failure names the date. The same tables may
    live in a separate file (`--sbx-waivers=PATH`, `$SBXCHECK_WAIVERS`, ini `sbx_waivers`, else
    `sbxcheck-waivers.toml` in the rootdir); both add up, and one `match` in both is an error.
    """

    match: str = Field(
        description="the node ids it waives: `*` any text, `?` one character, brackets literal, e.g. "
        "`canaries/test_routes.py::test_route_reaches_execution[opencode-*]`; it must name a test "
        "(`::test_…`) and match an item of the suites a run collects"
    )
    reason: str = Field(description="why the failure is accepted (shown with every waived item)")
    until: dt.datetime | dt.date = Field(
        description=f"when it stops applying: a TOML date (00:00 UTC that day) or date-time, at most "
        f"{MAX_DAYS_AHEAD} days ahead; afterwards its items count again (no error)"
    )
    cause: str | None = Field(
        default=None,
        description="only failures of this cause are waived: a classification (`infrastructure`, `timeout`, …) "
        "or a cause key as the item's results.json `cause` shows it (`*` allowed, e.g. `adapter-crash:opencode:*`); "
        "unset: any cause (the message says which it was)",
    )
    owner: str | None = Field(default=None, description="who follows it up (shown on the page)")
    link: str | None = Field(default=None, description="the upstream issue or ticket, an http(s) URL")

    @field_validator("match")
    @classmethod
    def _names_a_test(cls, value: str) -> str:
        value = value.strip()
        if any(ord(ch) < 32 for ch in value):
            raise ValueError("must be one line")
        module, sep, rest = value.partition("::")
        if not sep or not module or "test_" not in rest:
            raise ValueError("must name a test: <path>::test_<name>[<params>] (`*` and `?` allowed)")
        return value

    @field_validator("reason", "owner")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        if value is not None and any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise ValueError("must be one line of text (it is shown beside every waived item)")
        return value.strip() if value is not None else None

    @field_validator("until", mode="before")
    @classmethod
    def _date_or_time(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return parse_time(value)
            except ValueError:
                raise ValueError(
                    "expected a date (2026-12-08) or a date-time (2026-12-08T06:00:00Z)"
                ) from None
        if not isinstance(value, dt.date):  # a bare number would read as seconds since 1970
            raise ValueError("expected a TOML date (2026-12-08) or date-time (2026-12-08T06:00:00Z)")
        return value

    @field_validator("cause")
    @classmethod
    def _cause(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if re.fullmatch(r"[a-z_]+", value) and value not in CLASSIFICATIONS:
            raise ValueError(
                f"{value!r} is no classification ({', '.join(sorted(CLASSIFICATIONS))}) and no cause key "
                "(those hold ':' or '-', e.g. adapter-crash:opencode:*)"
            )
        if not value:
            raise ValueError("must not be empty (leave it out to waive any cause)")
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise ValueError("must be one line")
        return value

    @field_validator("link")
    @classmethod
    def _web_link(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not value.startswith(("http://", "https://")) or any(ch.isspace() for ch in value):
            raise ValueError("expected an http:// or https:// URL")
        no_userinfo(value, "link to the issue itself")
        return value

    @property
    def expires_at(self) -> dt.datetime:
        """When it stops applying (a date: 00:00 UTC that day; a date-time without offset: UTC)."""
        return _as_utc(self.until)

    @property
    def until_text(self) -> str:
        """``until`` as written: ``2026-12-08``, or the date-time in ISO form."""
        return (
            self.until.isoformat()
            if not isinstance(self.until, dt.datetime)
            else _as_utc(self.until).isoformat()
        )

    def covers(self, classification: str | None, cause: str | None) -> bool:
        """Whether a failure with this classification and cause key is the one waived."""
        want = self.cause
        if want is None:
            return True
        if want in CLASSIFICATIONS:
            return classification == want
        texts = [cause, f"{classification}:{cause}"] if cause else []
        return any(glob_match(want, t) for t in texts)


@dataclass(frozen=True)
class PlacedWaiver:
    """A waiver and where it is written: its file and its place among that file's ``[[waivers]]`` tables."""

    waiver: Waiver
    source: str
    index: int  # 1-based

    @property
    def label(self) -> str:
        """``<file>: waiver #2 (match '<pattern>')``: how every message names it."""
        return f"{self.source}: waiver #{self.index} (match '{self.waiver.match}')"

    @property
    def short_label(self) -> str:
        """``waiver #2 of <file name>``: how an item's message names it (the run's list has the rest)."""
        return f"waiver #{self.index} of {Path(self.source).name}"

    @property
    def key(self) -> str:
        return f"{self.source}#{self.index}"

    def days_left(self, now: dt.datetime) -> float:
        return round((self.waiver.expires_at - now).total_seconds() / 86400, 2)

    def expired(self, now: dt.datetime) -> bool:
        return now >= self.waiver.expires_at

    def matches(self, nodeids: Iterable[str]) -> bool:
        return any(glob_match(self.waiver.match, n) for n in nodeids)

    def describe(self, now: dt.datetime) -> dict[str, Any]:
        """The waiver as results.json shows it (with item and run)."""
        w = self.waiver
        return {
            "match": w.match,
            "reason": w.reason,
            "until": w.until_text,
            "cause": w.cause,
            "owner": w.owner,
            "link": w.link,
            "source": self.source,
            "index": self.index,
            "days_left": self.days_left(now),
        }

    def to_wire(self) -> dict[str, Any]:
        """Plain values for an xdist worker (:meth:`from_wire` reads them back)."""
        return {"waiver": self.waiver.model_dump(mode="json"), "source": self.source, "index": self.index}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> PlacedWaiver:
        return cls(Waiver.model_validate(data["waiver"]), str(data["source"]), int(data["index"]))


# ------------------------------------------------------------------ reading


def _problem_text(err: Mapping[str, Any]) -> str:
    field = ".".join(str(p) for p in err["loc"]) or "(table)"
    if err["type"] == "extra_forbidden":
        return f"unknown field '{field}' (a waiver has {', '.join(_FIELDS)})"
    if err["type"] == "missing":
        return f"missing required field '{field}' ({_REQUIRED_WHY.get(field, 'required')})"
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"field '{field}': {message}"


def table_problems(table: object, now: dt.datetime) -> tuple[Waiver | None, list[str]]:
    if not isinstance(table, dict):
        return None, [f"expected a table ([[waivers]]), got {type(table).__name__}"]
    try:
        waiver = Waiver.model_validate(table)
    except ValidationError as exc:
        return None, [_problem_text(e) for e in exc.errors(include_url=False)]
    ahead = (waiver.expires_at - now).total_seconds() / 86400
    if ahead > MAX_DAYS_AHEAD:
        return None, [
            f"until {waiver.until_text} is {int(ahead)} days ahead; at most {MAX_DAYS_AHEAD} (a waiver is "
            "renewed when it ends, never open-ended)"
        ]
    return waiver, []


def read_waivers(tables: object, source: str, *, now: dt.datetime) -> list[PlacedWaiver]:
    """The validated ``[[waivers]]`` tables of ``source``; InventoryError with one line naming the file
    and each bad waiver (its number and match) otherwise."""
    if not isinstance(tables, list):
        raise InventoryError(
            f"{source}: 'waivers' must be a list of tables ([[waivers]]), got {type(tables).__name__}"
        )
    placed: list[PlacedWaiver] = []
    problems: list[str] = []
    for number, table in enumerate(tables, start=1):
        waiver, found = table_problems(table, now)
        if waiver is not None:
            placed.append(PlacedWaiver(waiver, source, number))
            continue
        match = table.get("match") if isinstance(table, dict) else None
        named = f"match '{match}'" if isinstance(match, str) else "no match"
        problems.append(f"waiver #{number} ({named}): {'; '.join(found)}")
    problems.extend(p.removeprefix(f"{source}: ") for p in duplicate_problems(placed))
    if problems:
        shown = problems[:3] + ([f"and {len(problems) - 3} more"] if len(problems) > 3 else [])
        raise InventoryError(default_redactor().redact_text(f"{source}: " + "; ".join(shown)))
    return placed


def duplicate_problems(waivers: Sequence[PlacedWaiver]) -> list[str]:
    """One line per ``match`` written twice (in one file or across the inventory and the waivers file)."""
    first: dict[str, PlacedWaiver] = {}
    problems = []
    for placed in waivers:
        earlier = first.setdefault(placed.waiver.match, placed)
        if earlier is not placed:
            where = f"#{earlier.index}" if earlier.source == placed.source else earlier.label
            problems.append(f"{placed.label}: the same match as {where}; keep one waiver per pattern")
    return problems


def load_waivers_file(path: Path, *, now: dt.datetime) -> list[PlacedWaiver]:
    """The waivers of a waivers file (only ``[[waivers]]`` tables); InventoryError with one line otherwise."""
    source = str(path)
    try:
        raw = read_regular_file(path, MAX_WAIVERS_BYTES)
    except UnsafeInput as exc:
        raise InventoryError(f"{exc}; expected a TOML file of [[waivers]] tables") from None
    except OSError as exc:
        raise InventoryError(f"{source}: cannot read the waivers file ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InventoryError(
            f"{source}: not UTF-8 text; expected a TOML file of [[waivers]] tables"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(
            f"{source}: not valid TOML ({default_redactor().redact_text(str(exc))})"
        ) from None
    except RecursionError:
        raise InventoryError(f"{source}: TOML nested too deeply") from None
    other = sorted(k for k in data if k != "waivers")
    if other:
        raise InventoryError(
            f"{source}: unknown table or key '{other[0]}' (a waivers file holds only [[waivers]] tables)"
        )
    return read_waivers(data.get("waivers", []), source, now=now)


# ------------------------------------------------------------------ deciding


@dataclass(frozen=True)
class Decision:
    """What a waiver does to one item's result.

    ``status``: ``waived`` (failing for the waived cause), ``not covering`` (failing for another), ``expired``,
    ``not needed`` (it passed) or ``skipped`` (a precondition was absent: nothing learnt).
    """

    status: str
    placed: PlacedWaiver
    now: dt.datetime

    @property
    def outcome(self) -> Outcome | None:
        """The item's new outcome (``waived``), or None when it keeps its own."""
        return Outcome.WAIVED if self.status == "waived" else None

    def message(self, record: CheckRecord) -> str:
        """The item's message, saying what the waiver did (unchanged where it did nothing)."""
        w = self.placed.waiver
        had = _cause_text(record)
        if self.status == "waived":
            return f"waived until {w.until_text} ({w.reason}); {record.outcome.value} for {had}: {record.message}"
        if self.status == "not covering":
            return (
                f"not covered by {self.placed.short_label}: it waives cause {w.cause}, this is {had}: "
                f"{record.message}"
            )
        if self.status == "expired" and record.outcome in _FAILING:
            return f"{self.placed.short_label} expired on {w.until_text}: {record.message}"
        if self.status == "not needed":
            return f"{record.message} — waiver no longer needed ({self.placed.short_label}, until {w.until_text})"
        return record.message

    def pytest_reason(self) -> str:
        """What pytest shows as the xfail/xpass reason."""
        w = self.placed.waiver
        if self.status == "not needed":
            return f"waiver no longer needed: it passed ({w.match}, until {w.until_text})"
        return f"waived until {w.until_text}: {w.reason}"

    def describe(self, record: CheckRecord) -> dict[str, Any]:
        """The item's ``waiver`` entry in results.json: the waiver, what it did, and what the item had."""
        return {
            **self.placed.describe(self.now),
            "status": self.status,
            "item_outcome": record.outcome.value,  # what the item itself said (failed, error, passed, skipped)
        }


def _cause_text(record: CheckRecord) -> str:
    classification = record.classification.value if record.classification else "check_failed"
    return f"{classification} (cause {record.cause})" if record.cause else classification


def decide(
    waivers: Sequence[PlacedWaiver], nodeids: Sequence[str], record: CheckRecord, now: dt.datetime
) -> Decision | None:
    """What the first matching waiver does to ``record`` (None: no waiver matches the item).

    A failure takes the first unexpired waiver that covers its cause; else it is not covered (an unexpired
    one matched) or its waiver expired.
    """
    matching = [w for w in waivers if w.matches(nodeids)]
    if not matching:
        return None
    active = [w for w in matching if not w.expired(now)]
    if record.outcome in _FAILING:
        classification = record.classification.value if record.classification else "check_failed"
        covering = next((w for w in active if w.waiver.covers(classification, record.cause)), None)
        if covering is not None:
            return Decision("waived", covering, now)
        if active:
            return Decision("not covering", active[0], now)
        return Decision("expired", max(matching, key=lambda w: w.waiver.expires_at), now)
    if not active:
        return Decision("expired", max(matching, key=lambda w: w.waiver.expires_at), now)
    return Decision("not needed" if record.outcome is Outcome.PASSED else "skipped", active[0], now)


# ------------------------------------------------------------------ a run's waivers

#: Expiring within this many days: a warning in the terminal and on the page.
EXPIRES_SOON_DAYS = 1.0


def summarise(
    waivers: Sequence[PlacedWaiver], records: Sequence[CheckRecord], now: dt.datetime
) -> list[dict[str, Any]]:
    """Every waiver of the run with what it did: ``status`` and the items per status.

    ``status``: ``expired``; ``unmatched`` (no selected item); ``waiving`` (at least one item waived);
    ``not covering`` (its items failed for other causes); ``not needed`` (its items passed); ``not tested``
    (its items were skipped).
    """
    out = []
    for placed in waivers:
        items: dict[str, list[str]] = {}
        for record in records:
            seen = record.waiver or {}
            if seen.get("source") == placed.source and seen.get("index") == placed.index:
                items.setdefault(str(seen.get("status")), []).append(record.nodeid)
        if placed.expired(now):
            status = "expired"
        elif not items:
            status = "unmatched"
        elif "waived" in items:
            status = "waiving"
        elif "not covering" in items:
            status = "not covering"
        elif "not needed" in items:
            status = "not needed"
        else:
            status = "not tested"
        days = placed.days_left(now)
        out.append(
            {
                **placed.describe(now),
                "status": status,
                "expires_soon": status != "expired" and days < EXPIRES_SOON_DAYS,
                "items": {k: sorted(v) for k, v in sorted(items.items())},
            }
        )
    return out


# ------------------------------------------------------------------ writing (sbxcheck waive)


def _toml_string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; DEL, which JSON leaves bare, escaped too)."""
    import json

    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def waiver_table(waiver: Waiver) -> str:
    """One ``[[waivers]]`` table as TOML text."""
    lines = ["[[waivers]]"]
    for name in _FIELDS:
        value = getattr(waiver, name)
        if value is None:
            continue
        lines.append(f"{name} = {value.isoformat() if name == 'until' else _toml_string(str(value))}")
    return "\n".join(lines) + "\n"


def append_waiver(path: Path, waiver: Waiver, *, now: dt.datetime) -> int:
    """Append ``waiver`` to the waivers file at ``path`` (made when absent), keeping its text as it is.

    The whole new file is validated first (the same checks as a run's, a duplicate match included) and
    written atomically (a temporary file beside it, then a rename); InventoryError names what is wrong,
    and then nothing was written. Returns the new waiver's number in the file.
    """
    import os
    import tempfile

    old = ""
    if path.exists():
        try:
            old = read_regular_file(path, MAX_WAIVERS_BYTES).decode("utf-8")
        except (UnsafeInput, UnicodeDecodeError) as exc:
            raise InventoryError(f"{path}: {exc}; not changed") from None
        except OSError as exc:
            raise InventoryError(
                f"{path}: cannot read the waivers file ({exc.strerror or exc}); not changed"
            ) from None
        _unchanged(lambda: load_waivers_file(path, now=now))  # an existing bad file is named as it is
    separator = "" if not old else "\n" if old.endswith("\n") else "\n\n"
    text = old + separator + waiver_table(waiver)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(
            f"{path}: the waiver would not be valid TOML here ({exc}); not changed"
        ) from None
    placed = _unchanged(lambda: read_waivers(data.get("waivers", []), str(path), now=now))
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return placed[-1].index


def _unchanged(read: Callable[[], list[PlacedWaiver]]) -> list[PlacedWaiver]:
    """``read()``, its InventoryError saying that the file was not changed."""
    try:
        return read()
    except InventoryError as exc:
        raise InventoryError(f"{exc.message}; not changed") from None
