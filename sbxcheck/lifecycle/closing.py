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
from sbxcheck.lifecycle.following import EVENT_PAGE
from sbxcheck.lifecycle.intents import MissionIntents
from sbxcheck.lifecycle.listing import MissionList
from sbxcheck.lifecycle.spendcap import SpendCap
from sbxcheck.spend import mission_cost

MAX_CLOSE_PAGES = 10  # event pages read per mission at close (what the follower read is not read again)
FOREIGN_HOW = "left alone: not this session's (a create over {via} was answered with it)"


def session_mark(title: str) -> str:
    """``sbxcheck 1a2b3c4d``: the first two words of every title a session sends (its tag's mark)."""
    return " ".join(title.split()[:2])


def stored_title(answer: dict[str, Any], mission_id: str, channel: MissionChannel) -> str | None:
    """The mission's stored title: the create's answer, else its record read once; None when neither
    says (then the answer cannot show it is another's)."""
    title = answer.get("title")
    if isinstance(title, str):
        return title
    try:
        title = channel.get(mission_id).get("title")
    except SbxError:
        return None
    return title if isinstance(title, str) else None


class OwnedMissions:
    """The missions this session's creates made (and those they only joined), and their cancellation at close."""

    def __init__(
        self,
        channel_for: Callable[[str], MissionChannel],
        intents: MissionIntents,
        spend: SpendCap,
        list_missions: MissionList | None = None,
    ) -> None:
        self.channel_for = channel_for
        self.intents = intents
        self.spend = spend  # a mission's cost is booked at close when nothing booked it before
        self.list_missions = list_missions  # paged back to the oldest unanswered create
        self.created: dict[str, str] = {}  # mission id -> via: made by this session's creates
        self.foreign: dict[str, str] = {}  # mission id -> via: answered to a create, made by someone else
        self.runs: dict[str, RouteRun] = {}  # mission id -> the run that created (and followed) it

    def claim(self, mission_id: str, via: str, run: RouteRun | None = None) -> None:
        """``mission_id`` was made by this session's create over ``via`` (``run``: the run that follows it)."""
        self.created[mission_id] = via
        if run is not None:
            self.runs[mission_id] = run

    def joined_foreign(self, created: Created, run: RouteRun, entry: str | None, channel: MissionChannel) -> bool:
        """True (and reported, its intent closed) when ``created`` is another's mission the create joined:
        the answer says so (``x-coalesced-with``), or — on any channel, MCP's answers carry no header — the
        stored record's title lacks this session's mark (every title this session sends starts with it)."""
        mission_id = str(created.mission.get("id"))
        if mission_id in self.created:
            return False
        if created.coalesced_with is None:
            title = stored_title(created.mission, mission_id, channel)
            if title is None or session_mark(run.title) in title:
                return False
        self.foreign[mission_id] = run.route.via
        self.intents.release(entry, f"never created: joined {mission_id}, not this session's")
        return True

    @staticmethod
    def foreign_error(created: Created, run: RouteRun) -> BadResponseError:
        """The error of a run whose create was answered with another's mission."""
        mission_id = str(created.mission.get("id"))
        if created.coalesced_with is not None:
            how = f"x-coalesced-with {created.coalesced_with}"
        else:
            how = f"its stored title {str(created.mission.get('title'))[:80]!r} is not this session's"
        return BadResponseError(
            f"the create of {run.route.label} was answered with mission {mission_id} ({how}), which this "
            "session did not create: it is not followed, judged or cancelled",
            evidence={
                "coalesced_with": created.coalesced_with,
                "answered_mission_id": mission_id,
                "answered_title": created.mission.get("title"),
                "sent_title": run.title,
            },
        )

    def stored_events(
        self, mission_id: str, channel: MissionChannel
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The mission's stored events — what its follower read, then what was stored after its cursor
        (bounded) — and the last status stored: its last record read when that was terminal (final),
        else the newest stored ``mission_status_changed`` (None when none was read)."""
        run = self.runs.get(mission_id)
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

    def cancel_all(self) -> dict[str, str]:
        """Cancel every mission this session made that has not ended; say what happened to each (and to
        the creates never answered)."""
        outcome: dict[str, str] = {}
        for mission_id, via in list(self.created.items()):
            try:
                channel = self.channel_for(via)
                # the stored mission decides, never the stream's word: its stored events (read for
                # the cost anyway) when they show it ended, else its record
                events, status = self.stored_events(mission_id, channel)
                if mission_id not in self.spend.costs:  # what it cost, where the control plane stores it
                    self.spend.book(mission_id, mission_cost(events))
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
            if not how.startswith("cancel failed"):
                # released as each one ends, so an abandoned close leaves the ledger exact; a failed
                # cancel stays open: the next session sees it
                self.intents.release_mission(mission_id, how)
        for mission_id, via in self.foreign.items():
            outcome.setdefault(mission_id, FOREIGN_HOW.format(via=via))
        outcome.update(
            self.intents.close_unanswered(
                self.list_missions, lambda ident: self.channel_for("rest").cancel(ident), set(self.foreign)
            )
        )
        return outcome
