"""Read the control plane's mission list back far enough to judge what an unanswered create made.

The list is newest first and a page holds at most 200 missions, so one page says nothing about a
mission made before the 200 newest. An intent is settled only against a listing that reached back
to it: pages are read until a row last touched before the oldest intent (less the clock slack) or the
end of the list, and at most ``max_pages`` of them. A listing cut at that bound is *incomplete*: an
intent it did not find stays open and is reported, never closed as "never created". A release whose
list takes no query answers the same 50 rows to every page: the page after them repeats them, and the
listing is incomplete too (never "the end of the list").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sbxcheck.lifecycle.ledger import LedgerEntry
from sbxcheck.lifecycle.reconcile import CLOCK_SLACK_S, Resolution, parse_ts, resolve_mission

if TYPE_CHECKING:
    from sbxcheck.clients.sandboxed import SandboxedClient

LIST_PAGE = 200  # the list endpoint's largest page
DEFAULT_PAGE = 50  # its default: answered exactly this many when more were asked, one more page decides
MAX_LIST_PAGES = 25  # 5,000 missions: beyond that the listing is reported as incomplete

Page = Callable[[int, int], list[dict[str, Any]]]  # (limit, offset) -> rows, newest first
ServerClock = Callable[[], dt.timedelta | None]  # the server's clock less this machine's, as last answered


def _no_clock() -> dt.timedelta | None:
    return None


@dataclass(frozen=True)
class MissionList:
    """The control plane's mission list: its pages, and its clock as its answers tell it."""

    page: Page
    server_clock: ServerClock = _no_clock


def every_owners_missions(client: SandboxedClient) -> MissionList:
    """``client``'s mission list of every owner (``all=True``), and the server's clock as it last answered."""
    return MissionList(
        lambda limit, offset: [
            m.model_dump(mode="json") for m in client.list_missions(all=True, limit=limit, offset=offset)
        ],
        lambda: client.server_ahead,
    )


@dataclass(frozen=True)
class Listing:
    """Missions read newest first, and whether they reach back to the time that was asked for."""

    missions: list[dict[str, Any]]
    reached: bool  # the listing went back past ``since`` or to the end of the list
    pages: int
    since: str | None  # the time it had to reach (ISO, this machine's clock), None: the whole list
    server_ahead: dt.timedelta = dt.timedelta(0)  # the server's clock less this machine's while it listed

    def describe(self) -> str:
        """Where the listing stopped, for a report line."""
        goal = f"back to {self.since}" if self.since else "to its end"
        if self.reached:
            return f"{len(self.missions)} mission(s) in {self.pages} page(s), listed {goal}"
        return (
            f"the {len(self.missions)} newest mission(s) ({self.pages} pages, the bound) did not reach {goal}"
        )


def missions_since(
    source: MissionList,
    since: dt.datetime | None,
    *,
    page_size: int = LIST_PAGE,
    max_pages: int = MAX_LIST_PAGES,
) -> Listing:
    """Pages of the list until a row last touched before ``since`` (less the slack) or a short page.

    ``since`` is this machine's time and the rows carry the server's: once the first page is in,
    ``source.server_clock`` (read from that answer's ``Date``) moves the floor onto the server's clock.
    """
    size = max(1, min(LIST_PAGE, page_size))
    floor: dt.datetime | None = None
    ahead = dt.timedelta(0)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    pages = 0
    reached = False
    offset = 0
    while pages < max_pages:
        batch = source.page(size, offset)
        pages += 1
        if pages == 1:
            ahead = source.server_clock() or dt.timedelta(0)
            floor = since + ahead - dt.timedelta(seconds=CLOCK_SLACK_S) if since is not None else None
        fresh = [r for r in batch if str(r.get("id")) not in seen]  # a list shifting under us repeats rows
        seen.update(str(r.get("id")) for r in fresh)
        rows.extend(fresh)
        if offset and batch and not fresh:  # the next page repeated the last: the server ignores offset
            break  # what lies beyond its first page cannot be read: not reached
        offset += len(batch)
        if not batch or (len(batch) < size and not (len(batch) == DEFAULT_PAGE and size > DEFAULT_PAGE)):
            reached = True
            break
        size = min(size, len(batch))  # a server that answers its own page size is read at that size
        if floor is not None and any((last := last_touched(r)) is not None and last < floor for r in fresh):
            reached = True
            break
    return Listing(rows, reached, pages, since.isoformat() if since is not None else None, ahead)


def last_touched(row: dict[str, Any]) -> dt.datetime | None:
    """When ``row`` last changed (``updated_at``, else ``created_at``): the key the stop rule reads.

    A list sorted by creation (today's) or by last update (v0.7.0's) puts every row after one last
    touched before the floor later than it in both orders, so neither can hide a newer mission there;
    a row created long ago and updated just now says nothing about what follows it.
    """
    times = [t for key in ("updated_at", "created_at") if (t := parse_ts(row.get(key))) is not None]
    return max(times) if times else None


def oldest_intent(entries: Iterable[LedgerEntry]) -> dt.datetime | None:
    """When the oldest of ``entries`` was opened (None: none has a usable time)."""
    times = [t for e in entries if (t := parse_ts(e.opened_at)) is not None]
    return min(times) if times else None


def resolve_listed(entry: LedgerEntry, listing: Listing, *, claimed: Iterable[str] = ()) -> Resolution:
    """:func:`resolve_mission` against ``listing``; not found in a listing that stopped short of the
    intent is ``ambiguous`` (reported, nothing done), never ``unmatched``."""
    found = resolve_mission(entry, listing.missions, claimed=claimed, server_ahead=listing.server_ahead)
    if found.status != "unmatched" or listing.reached:
        return found
    return Resolution("ambiguous", None, f"{found.why.split(':')[0]} in {listing.describe()}: left open")
