"""Match a ledger entry to what it actually created, before anything is done about it.

An intent is written before a mount or a mission create starts. When the session dies before it
learns the identity (SIGKILL, a second Ctrl-C, a create answered with a 500 after the server
accepted it), the entry only knows what was asked: the mount *name*, or the mission's idempotency
key and title, and when. A later session resolves it here, from facts it reads (run records, the
control plane's mission list), and never acts on a guess:

- a mount named ``demo`` matches run records ``demo-…`` created inside the intent's window
  (from the intent until it was abandoned, else until the mount recipe's timeout);
- a mission matches missions with the intent's idempotency key or title created after the intent;
- identities another ledger entry already claims are not candidates;
- exactly one candidate resolves it; none is ``unmatched`` (nothing to release, reported once);
  several is ``ambiguous`` (reported, nothing done).

Pure functions: the caller reads the facts and applies the result.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sbxcheck.clients.runrecords import mount_run_prefix
from sbxcheck.ids import is_valid_id
from sbxcheck.lifecycle.ledger import LedgerEntry

CLOCK_SLACK_S = 2.0  # the ledger and the records are stamped to the second, by different processes

__all__ = ["RecordFact", "Resolution", "parse_ts", "resolve_mission", "resolve_mount"]


@dataclass(frozen=True)
class RecordFact:
    """What reconciling needs from one run record."""

    run_id: str
    created_at: str | None
    closed_at: str | None


@dataclass(frozen=True)
class Resolution:
    """What an entry stands for, as far as the facts tell."""

    status: Literal["resolved", "unmatched", "ambiguous"]
    ident: str | None  # the run id or mission id, when resolved
    why: str
    candidates: list[str] = field(default_factory=list)
    closed: bool = False  # resolved to a run record that is already closed (nothing left to release)


def parse_ts(value: object) -> dt.datetime | None:
    """An ISO-8601 UTC time (``Z`` or an offset, any fraction), or None when it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def _window(entry: LedgerEntry, max_duration_s: float) -> tuple[dt.datetime, dt.datetime] | None:
    start = parse_ts(entry.opened_at)
    if start is None:
        return None
    end = start + dt.timedelta(seconds=max_duration_s)
    if entry.state == "abandoned":  # abandoned and its recipe killed: nothing it made is younger
        end = min(end, parse_ts(entry.updated_at) or end)
    slack = dt.timedelta(seconds=CLOCK_SLACK_S)
    return start - slack, end + slack


def resolve_mount(
    entry: LedgerEntry,
    records: Iterable[RecordFact],
    *,
    claimed: Iterable[str] = (),
    max_duration_s: float = 600.0,
) -> Resolution:
    """Which run record a mount entry created: its recorded run id, else ``<name>-…`` in its window."""
    facts = {r.run_id: r for r in records}
    if entry.ident != entry.intended_ident or entry.state in ("created", "kept"):
        fact = facts.get(entry.ident)
        if fact is None:
            return Resolution("resolved", entry.ident, f"run {entry.ident} (no run record found)")
        closed = fact.closed_at is not None
        why = f"run {entry.ident}" + (f", record closed at {fact.closed_at}" if closed else "")
        return Resolution("resolved", entry.ident, why, [entry.ident], closed=closed)
    name = entry.intended_ident
    window = _window(entry, max_duration_s)
    if window is None:
        return Resolution("ambiguous", None, f"mount {name}: the intent has no usable time; nothing done")
    start, end = window
    taken = set(claimed)
    prefix = mount_run_prefix(name)
    found = sorted(
        r.run_id
        for r in facts.values()
        if (r.run_id == name if prefix is None else r.run_id.startswith(prefix))
        and r.run_id not in taken
        and (created := parse_ts(r.created_at)) is not None
        and start <= created <= end
    )
    span = f"created {start:%Y-%m-%dT%H:%M:%SZ}–{end:%Y-%m-%dT%H:%M:%SZ}"
    if not found:
        return Resolution(
            "unmatched", None, f"no run record {prefix or name}… {span}: the mount made nothing sbxcheck can find"
        )
    if len(found) > 1:
        return Resolution(
            "ambiguous", None, f"{len(found)} run records {prefix or name}… {span}: {', '.join(found)}", found
        )
    fact = facts[found[0]]
    closed = fact.closed_at is not None
    why = f"mount {name} created {found[0]} (run record {span})"
    return Resolution("resolved", found[0], why, found, closed=closed)


def resolve_mission(
    entry: LedgerEntry,
    missions: Iterable[Mapping[str, Any]],
    *,
    claimed: Iterable[str] = (),
    server_ahead: dt.timedelta = dt.timedelta(0),
) -> Resolution:
    """Which mission an intent created: its recorded id, else one with its key or title, made after it.

    The intent was stamped on this machine's clock, a mission's ``created_at`` on the server's:
    ``server_ahead`` (the server's clock less this machine's) puts the intent on the server's clock.
    """
    if entry.ident != entry.intended_ident or entry.state in ("created", "kept"):
        if not is_valid_id(entry.ident):  # read back from the ledger: data, never a path
            return Resolution(
                "ambiguous", None, f"the recorded mission id {entry.ident[:60]!r} is not a UUID"
            )
        return Resolution("resolved", entry.ident, f"mission {entry.ident}", [entry.ident])
    key = entry.intended_ident
    title = entry.detail.get("title")
    opened = parse_ts(entry.opened_at)
    start = opened + server_ahead if opened is not None else None
    taken = set(claimed)
    found: list[str] = []
    invalid = 0
    for mission in missions:
        mission_id = str(mission.get("id") or "")
        if not mission_id or mission_id in taken:
            continue
        same_key = mission.get("idempotency_key") == key
        same_title = isinstance(title, str) and title and mission.get("title") == title
        if not (same_key or same_title):
            continue
        if not is_valid_id(mission_id):  # a listed id that is not a UUID is never acted on
            invalid += 1
            continue
        created = parse_ts(mission.get("created_at"))
        if (
            start is not None
            and created is not None
            and created < start - dt.timedelta(seconds=CLOCK_SLACK_S)
        ):
            continue
        found.append(mission_id)
    what = f"key {key}" + (f" or title {title!r}" if isinstance(title, str) and title else "")
    if not found and invalid:
        return Resolution(
            "ambiguous",
            None,
            f"{invalid} mission(s) with {what} have ids that are not UUIDs; none is acted on",
        )
    if not found:
        return Resolution("unmatched", None, f"no mission with {what}: the create made nothing")
    if len(found) > 1:
        return Resolution("ambiguous", None, f"{len(found)} missions with {what}: {', '.join(found)}", found)
    return Resolution("resolved", found[0], f"mission {found[0]} has {what}", found)
