"""The ledger side of a session's mission creates: an intent before each create is sent, closed by its answer.

An intent is written before the request goes out, so a session killed mid-create still leaves a line
saying what it may have made. The answer marks it created (with the mission id) or released (nothing
was made); a create that was never answered stays open until the close finds what it made by its
title in the control plane's listing (:meth:`MissionIntents.close_unanswered`).
"""

from __future__ import annotations

from collections.abc import Callable

from sbxcheck.clients.missionruns import RouteRun
from sbxcheck.errors import SbxError, made_nothing
from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.lifecycle.listing import MissionList, missions_since, oldest_intent, resolve_listed


class MissionIntents:
    """This session's mission intents in the ledger (every call is a no-op without a ledger)."""

    def __init__(self, ledger: Ledger | None) -> None:
        self.ledger = ledger
        self.entries: dict[str, str] = {}  # mission id -> its ledger entry
        self.unanswered: dict[str, RouteRun] = {}  # ledger entry -> the run whose create never answered

    def intent(self, run: RouteRun) -> str | None:
        """The ledger entry written before ``run``'s create is sent (None without a ledger)."""
        if self.ledger is None:
            return None
        entry = self.ledger.record_intent(
            "mission",
            run.idempotency_key,
            run_id=None,
            detail={"route": run.route.label, "via": run.route.via, "title": run.title},
        )
        self.unanswered[entry] = run  # until the create answers
        return entry

    def created(self, entry: str | None, mission_id: str) -> None:
        """The create answered with ``mission_id``, this session's."""
        if self.ledger is not None and entry is not None:
            self.ledger.mark_created(entry, mission_id)
            self.entries[mission_id] = entry
            self.unanswered.pop(entry, None)

    def release(self, entry: str | None, how: str) -> None:
        """The create answered without making anything of this session's."""
        if self.ledger is not None and entry is not None:
            self.unanswered.pop(entry, None)
            self.ledger.mark_released(entry, how)

    def release_if_made_nothing(self, entry: str | None, exc: SbxError) -> None:
        """A create that cannot have made anything closes its intent now: never sent (the connect or
        the login before it failed) or refused before the server acted (401/403, a login page). One
        sent without an answer stays open, for the listing to settle (:meth:`close_unanswered`)."""
        why = made_nothing(exc)
        if why is not None:
            self.release(entry, f"never created: {why}")

    def release_mission(self, mission_id: str, how: str) -> None:
        """``mission_id`` ended (or was cancelled) at close: its entry is released."""
        entry = self.entries.get(mission_id)
        if self.ledger is not None and entry is not None:
            self.ledger.mark_released(entry, how)

    def leave_mission(self, mission_id: str, why: str) -> None:
        """``mission_id`` is still there after the close tried to end it: its entry stays open, saying so."""
        entry = self.entries.get(mission_id)
        if self.ledger is not None and entry is not None:
            self.ledger.mark_left(entry, why)

    def close_unanswered(
        self, list_missions: MissionList | None, cancel: Callable[[str], bool], foreign: set[str]
    ) -> dict[str, str]:
        """Creates that failed without an answer (a 500, a dropped connection) may still have made a
        mission: find it by its title in a listing that reaches back to the create, then ``cancel`` it
        (True: cancelled, False: already gone). ``foreign``: missions that are someone else's."""
        if not self.unanswered or self.ledger is None:
            return {}
        entries = {e.id: e for e in self.ledger.state()}
        open_ = [entries[i] for i in self.unanswered if i in entries]
        outcome: dict[str, str] = {}
        listing, reason = None, "no way to list missions"
        if list_missions is not None:
            try:
                listing = missions_since(list_missions, oldest_intent(open_))
            except SbxError as exc:
                reason = exc.message
        for entry_id, run in list(self.unanswered.items()):
            label = f"unanswered create of {run.title}"
            entry = entries.get(entry_id)
            if listing is None or entry is None:
                outcome[label] = f"cancel failed: cannot find what it made ({reason})"
                continue
            found = resolve_listed(entry, listing, claimed=set(self.entries) | foreign)
            if found.status == "unmatched":
                self.ledger.mark_released(entry_id, f"never created: {found.why}")
                outcome[label] = "never created"
            elif found.status == "ambiguous" or found.ident is None:
                outcome[label] = f"cancel failed: {found.why}"
            else:
                self.ledger.mark_created(entry_id, found.ident)
                try:
                    how = "cancelled" if cancel(found.ident) else "already gone"
                except SbxError as exc:
                    outcome[found.ident] = f"cancel failed: {exc.message}"
                    continue
                self.ledger.mark_released(entry_id, f"{how} (found by title after an unanswered create)")
                outcome[found.ident] = f"{how} (its create was never answered)"
            self.unanswered.pop(entry_id, None)
        return outcome
