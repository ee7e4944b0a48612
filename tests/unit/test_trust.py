"""Whose mission it is, and how far the mission list is read back to settle an unanswered create
(the end-to-end runs are tests/integration/test_lying_control_plane.py)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from sbxcheck.checks.missions import check_dispatched
from sbxcheck.clients.channels import Created
from sbxcheck.clients.sandboxed_models import MissionSpec
from sbxcheck.errors import BadResponseError
from sbxcheck.inventory import RouteSpec, SandboxedSection
from sbxcheck.lifecycle import MissionDispatcher
from sbxcheck.lifecycle.ledger import LedgerEntry
from sbxcheck.lifecycle.listing import MissionList, missions_since, resolve_listed

FOREIGN = "f0e1a2b3-0000-4000-8000-00000000c0a1"


# ------------------------------------------------------------------ whose mission


class _JoiningPlane:
    """A channel whose creates (or only the keyed retry) are joined to a person's live mission."""

    via = "rest"

    def __init__(self, *, first_too: bool) -> None:
        self.first_too = first_too
        self.missions: dict[str, dict[str, Any]] = {
            FOREIGN: {"id": FOREIGN, "title": "a person's work", "status": "active", "backend": "codex"}
        }
        self.writes: list[tuple[str, str]] = []
        self.creates = 0

    def create(self, spec: MissionSpec) -> Created:
        self.creates += 1
        if self.first_too or self.creates > 1:
            return Created(dict(self.missions[FOREIGN]), FOREIGN)
        mid = str(uuid.uuid4())
        self.missions[mid] = {"id": mid, "title": spec.title, "status": "active", "backend": spec.backend}
        return Created(dict(self.missions[mid]))

    def get(self, mission_id: str) -> dict[str, Any]:
        return dict(self.missions[mission_id])

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        return [] if since_seq else [{"event_type": "tool_call", "sequence": 1, "tool_name": "bash"}]

    def cancel(self, mission_id: str) -> bool:
        self.writes.append(("cancel", mission_id))
        self.missions[mission_id]["status"] = "interrupted"
        return True


def _dispatch(plane: _JoiningPlane) -> tuple[MissionDispatcher, dict[str, str]]:
    section = SandboxedSection(
        url="http://cp.invalid", routes=[RouteSpec(name="r", backend="codex")], poll_interval_s=0.02
    )
    d = MissionDispatcher(
        section, lambda via: plane, "0123456789abcdef", workspace_ids=dict, exec_sha256=lambda w, p: ""
    )
    d.route("r", 10)
    return d, d.close()


def test_a_create_joined_to_another_mission_is_reported_and_never_cancelled() -> None:
    plane = _JoiningPlane(first_too=True)
    d, closed = _dispatch(plane)
    run = d.routes["r"]
    assert isinstance(run.error, BadResponseError) and FOREIGN in run.error.message
    assert run.created is None and d.created == {}
    assert plane.writes == [] and plane.missions[FOREIGN]["status"] == "active"
    assert closed[FOREIGN].startswith("left alone: not this session's")
    assert FOREIGN not in d.costs


def test_a_keyed_retry_joined_to_another_mission_is_not_ours_either() -> None:
    plane = _JoiningPlane(first_too=False)
    d, closed = _dispatch(plane)
    run = d.routes["r"]
    ours = run.mission_id
    assert ours is not None and run.retry is None and run.error is None and run.retry_joined == FOREIGN
    dispatched = check_dispatched(run)
    assert dispatched.outcome.value == "failed" and FOREIGN in dispatched.message
    assert plane.writes == [("cancel", ours)]  # ours is cancelled, the person's is not
    assert plane.missions[FOREIGN]["status"] == "active" and closed[FOREIGN].startswith("left alone")


# ------------------------------------------------------------------ the list, paged back to the intent


def _at(newest: dt.datetime, seconds: int) -> str:
    return (newest - dt.timedelta(seconds=seconds)).isoformat()


def _rows(count: int, newest: dt.datetime) -> list[dict[str, Any]]:
    return [
        {"id": str(uuid.UUID(int=i + 1)), "title": f"m{i}", "created_at": _at(newest, i)}
        for i in range(count)
    ]


def _pager(
    rows: list[dict[str, Any]], calls: list[tuple[int, int]], server_ahead: dt.timedelta | None = None
) -> MissionList:
    def page(limit: int, offset: int) -> list[dict[str, Any]]:
        calls.append((limit, offset))
        return rows[offset : offset + limit]

    return MissionList(page, lambda: server_ahead)


def _intent(opened: dt.datetime, title: str) -> LedgerEntry:
    return LedgerEntry(
        id="e1", kind="mission", ident="sbxcheck-key", run_id=None, owner="1@h", intended_ident="sbxcheck-key",
        detail={"title": title}, opened_at=opened.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )  # fmt: skip


def test_the_list_is_paged_until_it_reaches_the_intent_and_no_further() -> None:
    now = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
    rows = _rows(1000, now)  # one a second, newest first
    calls: list[tuple[int, int]] = []
    target = rows[450]
    listing = missions_since(_pager(rows, calls), now - dt.timedelta(seconds=450))
    assert listing.reached and calls == [(200, 0), (200, 200), (200, 400)]
    found = resolve_listed(_intent(now - dt.timedelta(seconds=451), target["title"]), listing)
    assert (found.status, found.ident) == ("resolved", target["id"])


def test_an_intent_beyond_the_page_bound_is_left_open_never_never_created() -> None:
    now = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
    rows = _rows(1000, now)
    calls: list[tuple[int, int]] = []
    listing = missions_since(_pager(rows, calls), now - dt.timedelta(seconds=900), max_pages=2)
    assert not listing.reached and len(calls) == 2
    found = resolve_listed(_intent(now - dt.timedelta(seconds=900), "not listed yet"), listing)
    assert found.status == "ambiguous" and "left open" in found.why and "did not reach" in found.why
    # a listing that did reach back, without the title: the create made nothing
    whole = missions_since(_pager(rows, []), now - dt.timedelta(seconds=900))
    assert resolve_listed(_intent(now - dt.timedelta(seconds=900), "not listed"), whole).status == "unmatched"


def test_a_list_sorted_by_last_update_is_read_past_an_old_mission_touched_just_now() -> None:
    """v0.7.0 sorts its list by updated_at: an old mission updated a second ago heads the first page, and
    the intent's mission (created after the floor, updated before the others) is on the second."""
    now = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
    rows = _rows(400, now)
    for r in rows:
        r["updated_at"] = r["created_at"]
    rows[0]["created_at"] = _at(now, 86_400)  # created a day ago, touched now
    target = rows[300]
    calls: list[tuple[int, int]] = []
    listing = missions_since(_pager(rows, calls), now - dt.timedelta(seconds=320))
    assert listing.reached and calls == [(200, 0), (200, 200)]
    found = resolve_listed(_intent(now - dt.timedelta(seconds=320), target["title"]), listing)
    assert (found.status, found.ident) == ("resolved", target["id"])


@pytest.mark.parametrize("server_ahead_s", [-900, 900], ids=["15-min-behind", "15-min-ahead"])
def test_the_intent_is_matched_on_the_servers_clock(server_ahead_s: int) -> None:
    """created_at is the server's time, the intent this machine's: the listing's server clock joins them."""
    now = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
    ahead = dt.timedelta(seconds=server_ahead_s)
    rows = _rows(600, now + ahead)  # stamped on the server's clock, one a second, newest first
    target = rows[450]  # made 1 s after the intent, on the server's clock
    intent = _intent(now - dt.timedelta(seconds=451), target["title"])
    listing = missions_since(_pager(rows, [], ahead), now - dt.timedelta(seconds=451))
    found = resolve_listed(intent, listing)
    assert listing.reached and (found.status, found.ident) == ("resolved", target["id"])
    # on this machine's clock alone: a server behind hides the mission ("never created"); for one ahead
    # the listing reads 15 minutes of older missions it did not need
    blind = missions_since(_pager(rows, []), now - dt.timedelta(seconds=451))
    if server_ahead_s < 0:
        assert resolve_listed(intent, blind).status == "unmatched"
    else:
        assert blind.pages > listing.pages


class _ListingClient:
    """``list_missions(all=True, limit, offset)`` over rows newest first, counting the pages asked."""

    def __init__(self, rows: list[dict[str, Any]], server_ahead: dt.timedelta | None = None) -> None:
        self.rows, self.pages = rows, 0
        self.server_ahead = server_ahead  # as the real client reads it from each answer's Date

    def list_missions(self, *, all: bool, limit: int, offset: int) -> list[Any]:
        from sbxcheck.clients.sandboxed_models import Mission

        assert all
        self.pages += 1
        return [
            Mission.model_validate({"status": "completed", **r}) for r in self.rows[offset : offset + limit]
        ]


class _Reviewer:
    sweep = False

    def __init__(self, ledger: Any, client: _ListingClient) -> None:
        self._ledger, self._client = ledger, client

    def ledger(self) -> Any:
        return self._ledger

    def sandboxed_client(self) -> _ListingClient:
        return self._client


def test_review_of_an_earlier_session_pages_back_to_its_unanswered_create(tmp_path: Any) -> None:
    from sbxcheck.lifecycle.ledger import Ledger
    from sbxcheck.plugin.review import reconcile

    ledger = Ledger(tmp_path, session="gone")
    entry_id = ledger.record_intent(
        "mission", "sbxcheck-k", run_id=None, detail={"title": "sbxcheck t route r"}
    )
    [entry] = [e for e in ledger.state() if e.id == entry_id]
    opened = dt.datetime.fromisoformat(entry.opened_at.replace("Z", "+00:00"))
    made = {"id": str(uuid.uuid4()), "title": "sbxcheck t route r", "created_at": _at(opened, -1)}
    newer = [{**r, "created_at": _at(opened, -2 - i)} for i, r in enumerate(_rows(450, opened))]
    older = [
        {"id": str(uuid.uuid4()), "title": f"o{i}", "created_at": _at(opened, 10 + i)} for i in range(300)
    ]
    client = _ListingClient([*newer[::-1], made, *older])  # newest first: 450 newer, then it, then older
    found = reconcile(_Reviewer(ledger, client), entry)  # type: ignore[arg-type]
    assert (found.status, found.ident) == ("resolved", made["id"]) and client.pages == 3
