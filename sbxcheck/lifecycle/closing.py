"""Closing a session's missions: what is this session's, what the stored record says, what to cancel.

A mission is this session's only when this session's create made it. A create answered with
``x-coalesced-with`` naming a mission the session did not create joined someone else's work: that
mission is never followed, never cancelled and never booked as spent; it is reported. At close,
every mission the session made is judged by what the control plane stored — its events after the
follower's cursor (read for the cost anyway) when they show it ended, else its record (``GET``) —
never by the live stream's word: the stream only wakes readers, and an event it carries may be wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sbxcheck.clients.channels import Created, MissionChannel
from sbxcheck.clients.missionruns import TERMINAL, RouteRun, new_events
from sbxcheck.clients.sandboxed import NotFound
from sbxcheck.clients.sandboxed_models import RecordMismatch
from sbxcheck.errors import BadResponseError, SbxError
from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.lifecycle.listing import Page, missions_since, oldest_intent, resolve_listed
from sbxcheck.spend import MissionCost, mission_cost

EVENT_PAGE = 100  # the events endpoint's default page: a full page means more may follow
MAX_CLOSE_PAGES = 10  # event pages read per mission at close (what the follower read is not read again)
FOREIGN_HOW = "left alone: not this session's (a create over {via} was answered with it, x-coalesced-with)"


class ClosingMixin:
    """Ownership of created missions and their cancellation at close (mixed into the dispatcher)."""

    created: dict[str, str]  # mission id -> via: made by this session's creates
    foreign: dict[str, str]  # mission id -> via: answered to a create, made by someone else
    costs: dict[str, float | None]
    cost_unreadable: dict[str, str]
    ledger: Ledger | None
    _entries: dict[str, str]
    _runs: dict[str, RouteRun]
    _unanswered: dict[str, RouteRun]
    _list_missions: Page | None
    channel_for: Callable[[str], MissionChannel]

    def _release(self, entry: str | None, how: str) -> None:
        raise NotImplementedError

    def book_cost(self, mission_id: str, cost: MissionCost) -> None:
        """Record what ``mission_id`` cost; an unreadable cost is kept with its reason, never summed."""
        self.costs[mission_id] = cost.usd
        if cost.unreadable is not None:
            self.cost_unreadable[mission_id] = cost.unreadable

    def _joined_foreign(self, created: Created, run: RouteRun, entry: str | None) -> bool:
        """True (and reported, its intent closed) when ``created`` is another's mission the create joined."""
        mission_id = str(created.mission.get("id"))
        if created.coalesced_with is None or mission_id in self.created:
            return False
        self.foreign[mission_id] = run.route.via
        self._release(entry, f"never created: joined {mission_id} (x-coalesced-with), not this session's")
        return True

    def _foreign_error(self, created: Created, run: RouteRun) -> BadResponseError:
        mission_id = str(created.mission.get("id"))
        return BadResponseError(
            f"the create of {run.route.label} was answered with mission {mission_id} (x-coalesced-with "
            f"{created.coalesced_with}), which this session did not create: it is not followed, judged "
            "or cancelled",
            evidence={"coalesced_with": created.coalesced_with, "answered_mission_id": mission_id},
        )

    def _stored_events(
        self, mission_id: str, channel: MissionChannel
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The mission's stored events — what its follower read, then what was stored after its cursor
        (bounded) — and the last status stored: its last record read when that was terminal (final),
        else the newest stored ``mission_status_changed`` (None when none was read)."""
        run = self._runs.get(mission_id)
        events = list(run.events) if run is not None else []
        last = run.last.get("status") if run is not None and run.last else None
        if last in TERMINAL:  # its events were read after that record: nothing is missing
            return events, str(last)
        cursor = max((e["sequence"] for e in events if isinstance(e.get("sequence"), int)), default=0)
        try:
            for _ in range(MAX_CLOSE_PAGES):
                page = channel.events(mission_id, cursor)
                fresh = [
                    e
                    for e in new_events(events, page)
                    if isinstance(e.get("sequence"), int) and e["sequence"] > cursor
                ]
                events.extend(fresh)
                if len(page) < EVENT_PAGE or not fresh:
                    break
                cursor = max(e["sequence"] for e in fresh)
        except SbxError:
            return events, None
        for event in reversed(events):
            if event.get("event_type") == "mission_status_changed":
                status = (event.get("metadata") or {}).get("status")
                return events, status if isinstance(status, str) else None
        return events, None

    def _cancel_created(self) -> dict[str, str]:
        outcome: dict[str, str] = {}
        for mission_id, via in list(self.created.items()):
            try:
                channel = self.channel_for(via)
                # the stored mission decides, never the stream's word: its stored events (read for
                # the cost anyway) when they show it ended, else its record
                events, status = self._stored_events(mission_id, channel)
                if mission_id not in self.costs:  # what it cost, where the control plane stores it
                    self.book_cost(mission_id, mission_cost(events))
                if status not in TERMINAL:
                    try:
                        status = channel.get(mission_id).get("status")
                    except RecordMismatch:
                        status = None  # the answer was another mission's record: cancel ours by its id
                if status in TERMINAL:
                    how = f"already {status}"
                else:
                    how = "cancelled" if channel.cancel(mission_id) else "already gone"
            except NotFound:
                how = "already gone"
            except SbxError as exc:  # one failing cancel does not stop the others
                how = f"cancel failed: {exc.message}"
            outcome[mission_id] = how
            entry = self._entries.get(mission_id)
            if self.ledger is not None and entry is not None and not how.startswith("cancel failed"):
                # released as each one ends, so an abandoned close leaves the ledger exact; a failed
                # cancel stays open: the next session sees it
                self.ledger.mark_released(entry, how)
        for mission_id, via in self.foreign.items():
            outcome.setdefault(mission_id, FOREIGN_HOW.format(via=via))
        outcome.update(self._close_unanswered())
        return outcome

    def _close_unanswered(self) -> dict[str, str]:
        """Creates that failed without an answer (a 500, a dropped connection) may still have made a
        mission: find it by its title in a listing that reaches back to the create, then cancel it."""
        if not self._unanswered or self.ledger is None:
            return {}
        entries = {e.id: e for e in self.ledger.state()}
        open_ = [entries[i] for i in self._unanswered if i in entries]
        outcome: dict[str, str] = {}
        listing, reason = None, "no way to list missions"
        if self._list_missions is not None:
            try:
                listing = missions_since(self._list_missions, oldest_intent(open_))
            except SbxError as exc:
                reason = exc.message
        for entry_id, run in list(self._unanswered.items()):
            label = f"unanswered create of {run.title}"
            entry = entries.get(entry_id)
            if listing is None or entry is None:
                outcome[label] = f"cancel failed: cannot find what it made ({reason})"
                continue
            found = resolve_listed(entry, listing, claimed=set(self._entries) | set(self.foreign))
            if found.status == "unmatched":
                self.ledger.mark_released(entry_id, f"never created: {found.why}")
                outcome[label] = "never created"
            elif found.status == "ambiguous" or found.ident is None:
                outcome[label] = f"cancel failed: {found.why}"
            else:
                self.ledger.mark_created(entry_id, found.ident)
                try:
                    how = "cancelled" if self.channel_for("rest").cancel(found.ident) else "already gone"
                except SbxError as exc:
                    outcome[found.ident] = f"cancel failed: {exc.message}"
                    continue
                self.ledger.mark_released(entry_id, f"{how} (found by title after an unanswered create)")
                outcome[found.ident] = f"{how} (its create was never answered)"
            self._unanswered.pop(entry_id, None)
        return outcome
