"""Closing a session's missions: what is this session's, what the stored record says, what to cancel.

A mission is this session's only when this session's create made it. A create answered with
``x-coalesced-with`` naming a mission the session did not create joined someone else's work: that
mission is never followed, never cancelled and never booked as spent; it is reported. At close,
every mission the session made is judged by what the control plane stored — its events after the
follower's cursor (read for the cost anyway) when they show it ended, else its record (``GET``) —
never by the live stream's word: the stream only wakes readers, and an event it carries may be wrong.

A cancel is never taken on its word: after any answer (a 404 included) the mission is read back. A
release that cancels only what it runs (v0.7.0, 1.3.0) answers 404 ``Mission <id> not found`` for a
pending or parked mission and leaves it as it was; one still there and not ended stays open in the
ledger as a leftover (``still <status>: ...``), which the report makes an incident. A mission whose turn
ended (``awaiting_user`` with ``awaiting_kind`` ack: 1.3.0 parks every finished turn there) is
acknowledged rather than cancelled, and read back too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sbxcheck.clients.channels import Created, MissionChannel
from sbxcheck.clients.missionruns import TERMINAL, RouteRun, new_events
from sbxcheck.clients.sandboxed import NotFound
from sbxcheck.clients.sandboxed_models import RecordMismatch
from sbxcheck.errors import BadResponseError, NotServed, SbxError
from sbxcheck.lifecycle.following import EVENT_PAGE
from sbxcheck.lifecycle.intents import MissionIntents
from sbxcheck.lifecycle.listing import MissionList
from sbxcheck.lifecycle.spendcap import SpendCap
from sbxcheck.spend import mission_cost

MAX_CLOSE_PAGES = 10  # event pages read per mission at close (what the follower read is not read again)
FOREIGN_HOW = "left alone: not this session's (a create over {via} was answered with it)"
SETTLED = TERMINAL | {"acknowledged"}  # nothing runs and nothing waits on an operator: nothing to close
LEFT = "still "  # the start of a close outcome that left the mission behind, not ended
CANCEL_SETTLE_S = 15.0  # how long a cancel answered ok may take to show in the record (read back, bounded)
READ_BACK_PAUSE_S = 0.25


def left_status(how: str) -> str | None:
    """The status a close outcome left the mission in (``still pending: ...`` → ``pending``), or None."""
    if not how.startswith(LEFT):
        return None
    return how[len(LEFT) :].split(":", 1)[0].strip() or None


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
        if last in TERMINAL or last == "awaiting_user":  # its turn had ended when its events were read
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
        """End every mission this session made that has not ended; say what happened to each (and to the
        creates never answered). A mission still there after its cancel stays open in the ledger."""
        outcome: dict[str, str] = {}
        listed = self._listed()  # one list read for what every mission is now (a GET each where it fails)
        for mission_id, via in list(self.created.items()):
            try:
                how = self._close(mission_id, self.channel_for(via), listed.get(mission_id))
            except NotFound:
                how = "already gone"
            except SbxError as exc:  # one failing cancel does not stop the others
                how = f"cancel failed: {exc.message}"
            outcome[mission_id] = how
            if how.startswith(LEFT):
                self.intents.leave_mission(mission_id, how)  # the next session's review meets it
            elif not how.startswith("cancel failed"):
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

    def _listed(self) -> dict[str, dict[str, Any]]:
        """Every listed mission's row by id, from one read of the list ({} when there is none or it fails:
        each mission is then read on its own)."""
        if self.list_missions is None or not self.created:
            return {}
        try:
            rows = self.list_missions.page(min(200, max(50, 2 * len(self.created))), 0)
        except SbxError:
            return {}
        return {str(r["id"]): r for r in rows if isinstance(r.get("id"), str)}

    def _close(self, mission_id: str, channel: MissionChannel, row: dict[str, Any] | None = None) -> str:
        """End one mission this session made (``row``: its line of the close's list read, if it had one);
        what happened to it, read back from the control plane."""
        # the stored mission decides, never the stream's word: its stored events (read for the cost
        # anyway) when they show it ended, else its record
        events, status = self.stored_events(mission_id, channel)
        if mission_id not in self.spend.costs:  # what it cost, where the control plane stores it
            self.spend.book(mission_id, mission_cost(events))
        if status in SETTLED:
            return f"already {status}"
        record = row if row is not None else self._record(mission_id, channel)
        status = record.get("status") if record is not None else None
        if status in SETTLED:
            return f"already {status}"
        if _parked_for_ack(record):  # its turn ended: acknowledged, not cancelled (where the release can)
            acknowledged = self._acknowledge(mission_id, channel)
            if acknowledged is not None:
                return acknowledged
        answered = channel.cancel(mission_id)  # False: the control plane said "not found" (404)
        how, record = self._read_back(mission_id, channel, answered)
        if _parked_for_ack(record):  # its turn ended while the close went on
            return self._acknowledge(mission_id, channel) or how
        return how

    def _record(self, mission_id: str, channel: MissionChannel) -> dict[str, Any] | None:
        try:
            return channel.get(mission_id)
        except RecordMismatch:
            return None  # the answer was another mission's record: cancel ours by its id

    def _acknowledge(self, mission_id: str, channel: MissionChannel) -> str | None:
        """Archive a mission whose turn ended (awaiting_user, ack) over its channel, else over REST; read
        back. The outcome, or None when it could not be acknowledged (it is cancelled instead)."""
        for way in (channel, self.channel_for("rest")):
            try:
                way.acknowledge(mission_id)
            except NotServed:
                continue
            except SbxError:
                return None
            record = self._record(mission_id, channel)
            if record is not None and record.get("status") in SETTLED:
                return f"acknowledged: its turn had ended (awaiting_user, ack); read back {record.get('status')}"
            return None
        return None

    def _read_back(
        self, mission_id: str, channel: MissionChannel, answered: bool
    ) -> tuple[str, dict[str, Any] | None]:
        """What the mission is after its cancel, and its record: gone or ended (closed), or still there
        (``still ...``). A cancel answered ok is read until it shows (bounded); one answered 404 changed
        nothing to wait for."""
        said = "ok" if answered else "404 (not found)"
        deadline = time.monotonic() + (CANCEL_SETTLE_S if answered else 0.0)
        pause = READ_BACK_PAUSE_S
        while True:
            try:
                record = self._record(mission_id, channel)
            except NotFound:
                return ("cancelled" if answered else "already gone"), None
            except SbxError as exc:
                why = f"the cancel answered {said}, then the mission could not be read: {exc.message}"
                return f"cancel failed: {why}", None
            status = record.get("status") if record is not None else None
            if status in SETTLED:
                return ("cancelled" if answered else f"already {status} (the cancel answered 404)"), record
            if time.monotonic() + pause > deadline:
                how = f"{LEFT}{status}: the cancel answered {said} and the mission is still there; it stays open"
                return f"{how} in the ledger", record
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


def _parked_for_ack(record: dict[str, Any] | None) -> bool:
    """Its turn ended and it waits only to be acknowledged (awaiting_user, awaiting_kind ack)."""
    return record is not None and record.get("status") == "awaiting_user" and record.get("awaiting_kind") == "ack"
