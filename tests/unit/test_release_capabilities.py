"""What a control plane can do, learned from its answers, and how sbxcheck judges what it cannot.

The create's prompt (``x-ignored-fields``, else the stored record), the MCP tool's ``inputSchema``,
mission rows of another shape (1.3.0's integer ``github_pr``), a cancel never taken on its word,
and missions the control plane ended for a reason of its own (``terminal_reason``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sbxcheck.checks.missions import check_reaches_execution
from sbxcheck.clients.channels import McpChannel, MissionSpec, create_took
from sbxcheck.clients.mcp import McpToolResult
from sbxcheck.clients.mission_rows import read_rows
from sbxcheck.clients.missionruns import RouteRun
from sbxcheck.clients.sandboxed import NotFound
from sbxcheck.errors import NotServed
from sbxcheck.inventory import RouteSpec
from sbxcheck.lifecycle.closing import OwnedMissions, left_status
from sbxcheck.lifecycle.intents import MissionIntents
from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.lifecycle.listwatch import ListWatch
from sbxcheck.lifecycle.spendcap import SpendCap
from sbxcheck.report import leftover_incidents
from sbxcheck.results import Classification, Outcome

MID = "6f1c2d3e-0000-4000-8000-000000000001"
SPEC = MissionSpec(title="t", prompt="say ok", tags=["sbxcheck"], origin="sbxcheck", idempotency_key="k")


# ---- the create: did it take the prompt? ---------------------------------------------------------


def test_a_create_whose_record_echoes_tags_but_lacks_origin_kept_an_older_body() -> None:
    """1.3.0 stores tags but has no prompt, idempotency_key or origin: the record shows it by the field it
    stores when it takes a prompt (origin), where the old rule, a sent field missing, never saw it."""
    took = create_took(SPEC, {"id": MID, "status": "pending", "tags": ["sbxcheck"]}, None)
    assert (took.prompt, took.idempotency, took.dropped) == (False, False, ("origin",))
    assert "its record lacks origin" in took.why


def test_x_ignored_fields_decides_when_the_release_sends_it() -> None:
    dropped = create_took(SPEC, {"id": MID, "tags": ["sbxcheck"]}, ("prompt", "idempotency_key"))
    assert (dropped.prompt, dropped.idempotency) == (False, False) and "x-ignored-fields" in dropped.why
    keyless = create_took(SPEC, {"id": MID}, ("idempotency_key",))  # it names what it ignored: nothing else was
    assert (keyless.prompt, keyless.idempotency, keyless.dropped) == (True, False, ("idempotency_key",))


def test_a_create_that_echoes_what_it_was_sent_took_the_prompt() -> None:
    took = create_took(SPEC, {"id": MID, "tags": ["sbxcheck", "disk-estimate-gib:64"], "origin": "sbxcheck"}, None)
    assert (took.prompt, took.idempotency, took.dropped) == (True, True, ())
    assert took.why == "its record echoes origin, tags"


# ---- MCP: the arguments the advertised tool takes -------------------------------------------------


class _Mcp:
    """An assistant MCP whose start_mission takes ``takes`` (its inputSchema), recording the calls."""

    def __init__(self, takes: frozenset[str] | None) -> None:
        self.takes = takes
        self.sent: dict[str, Any] = {}

    def tool_arguments(self, tool: str) -> frozenset[str] | None:
        return self.takes if tool == "start_mission" else None

    def redact(self, text: str) -> str:
        return text

    def start_mission(self, title: str, prompt: str, **kw: Any) -> McpToolResult:
        self.sent = {"title": title, "prompt": prompt, **kw}
        return McpToolResult(is_error=False, text=f'{{"mission": {{"id": "{MID}", "status": "pending"}}}}')


def test_mcp_create_sends_project_and_track_where_the_tool_takes_them() -> None:
    mcp = _Mcp(frozenset({"title", "prompt", "project", "track", "tags"}))
    spec = MissionSpec(title="t", prompt="p", project="verity", track="c3", origin_session_id="chat-1")
    created = McpChannel(mcp).create(spec)  # type: ignore[arg-type]
    assert (mcp.sent["project"], mcp.sent["track"]) == ("verity", "c3")
    assert "origin_session_id" not in mcp.sent  # no release's start_mission takes it (4d62797, 1.3.0)
    assert created.dropped == ("origin_session_id",) and not created.idempotency_supported
    assert created.decided_by == "the MCP start_mission tool's inputSchema takes no origin_session_id"


def test_mcp_create_on_a_tool_without_tagging_names_every_field_it_could_not_send() -> None:
    mcp = _Mcp(frozenset({"title", "prompt", "backend"}))  # 1.3.0's start_mission
    created = McpChannel(mcp).create(MissionSpec(title="t", prompt="p", project="verity", track="c3"))  # type: ignore[arg-type]
    assert "project" not in mcp.sent and created.dropped == ("project", "track")


# ---- rows of another shape -----------------------------------------------------------------------


def test_one_mission_with_an_integer_pr_never_fails_the_list() -> None:
    """1.3.0's github_pr is an integer: the row is read (the number as text) and named; a row that is no
    mission (no status) is left out and named; every other row is judged."""
    rows = read_rows(
        [
            {"id": "a", "status": "active", "github_pr": 42},
            {"id": "b", "status": "pending", "tags": "not-a-list"},
            {"id": "c"},
            {"id": "d", "status": "completed"},
        ]
    )
    assert [m.id for m in rows] == ["a", "b", "d"]
    assert rows[0].github_pr == "42" and rows[1].tags == []
    assert "mission a: github_pr 42 is a int: read as text" in rows.notes
    assert any(n.startswith("mission b: tags is not what the API documents") for n in rows.notes)
    assert any(n.startswith("c: not judged") and "status" in n for n in rows.notes)


# ---- terminal reasons ----------------------------------------------------------------------------


def _ended(status: str, reason: str | None, events: list[dict[str, Any]] | None = None) -> RouteRun:
    run = RouteRun(
        route=RouteSpec(name="r", backend="codex"),
        title="t",
        idempotency_key="k",
        requested={"agent": None, "backend": "codex", "model_override": None, "model_effort": None},
        deadline_s=10,
    )
    from sbxcheck.clients.channels import Created

    run.created = Created({"id": MID, "status": "pending"})
    run.last = {"id": MID, "status": status, "terminal_reason": reason}
    run.events = events or []
    run.timeline = [(0.0, status)]
    return run


def test_a_mission_a_deploy_interrupted_is_could_not_tell_not_a_failed_dispatch() -> None:
    result = check_reaches_execution(_ended("interrupted", "server_shutdown"))
    assert (result.outcome, result.classification) == (Outcome.ERROR, Classification.INFRASTRUCTURE)
    assert "server_shutdown" in result.message and "failed dispatch" not in result.message
    assert result.cause == "control-plane-ended:server_shutdown"
    assert result.evidence["terminal_reason"] == "server_shutdown"


@pytest.mark.parametrize(
    ("reason", "classification"),
    [("deadline_exceeded", Classification.TIMEOUT), ("remote_node_lost", Classification.INFRASTRUCTURE)],
)
def test_terminal_reasons_say_what_ended_the_mission(reason: str, classification: Classification) -> None:
    result = check_reaches_execution(_ended("failed", reason))
    assert result.classification is classification and reason in result.message
    assert "no execution evidence" not in result.message


def test_an_ordinary_failure_keeps_its_verdict() -> None:
    result = check_reaches_execution(_ended("failed", "agent_error"))
    assert result.classification is Classification.TRANSPORT_FAILURE and "failed dispatch" in result.message


# ---- the close: a cancel is read back ------------------------------------------------------------


class _Plane:
    """A control plane that cancels only what it runs: ``statuses`` says what each mission is."""

    via = "rest"

    def __init__(self, statuses: dict[str, str], kinds: dict[str, str] | None = None) -> None:
        self.statuses = statuses
        self.kinds = kinds or {}
        self.cancels: list[str] = []
        self.acks: list[str] = []

    def get(self, mission_id: str) -> dict[str, Any]:
        if mission_id not in self.statuses:
            raise NotFound("GET", 404, f"Mission {mission_id} not found")
        record = {"id": mission_id, "status": self.statuses[mission_id]}
        if mission_id in self.kinds:
            record["awaiting_kind"] = self.kinds[mission_id]
        return record

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        return []

    def cancel(self, mission_id: str) -> bool:
        self.cancels.append(mission_id)
        if self.statuses.get(mission_id) == "active":
            self.statuses[mission_id] = "interrupted"
            return True
        return False  # 404 `Mission <id> not found`: the mission is not running (it stays as it is)

    def acknowledge(self, mission_id: str) -> None:
        if self.kinds.get(mission_id) is None:
            raise NotServed("POST /status", "1.3.0", "no")
        self.acks.append(mission_id)
        self.statuses[mission_id] = "acknowledged"

    def start(self, mission_id: str, prompt: str) -> None:
        raise AssertionError("not started at close")


def _owned(plane: _Plane, ledger: Ledger, missions: list[str]) -> OwnedMissions:
    intents = MissionIntents(ledger)
    owned = OwnedMissions(lambda via: plane, intents, SpendCap(None))  # type: ignore[arg-type, return-value]
    for mission_id in missions:
        run = _ended("pending", None)
        entry = intents.intent(run)
        intents.created(entry, mission_id)
        owned.claim(mission_id, "rest")
    return owned


def test_a_cancel_answered_404_for_a_mission_still_there_leaves_it_open_in_the_ledger(tmp_path: Path) -> None:
    """v0.7.0 and 1.3.0 answer 404 for a mission they do not run and keep it: the close reads it back, the
    ledger keeps it open saying its status, and the report makes it an incident (it read "already gone")."""
    plane = _Plane({"p": "pending", "a": "active", "done": "completed"})
    ledger = Ledger(tmp_path, session="s")
    outcome = _owned(plane, ledger, ["p", "a", "done"]).cancel_all()
    assert left_status(outcome["p"]) == "pending" and "answered 404" in outcome["p"]
    assert outcome["a"] == "cancelled" and outcome["done"] == "already completed"
    states = {e.ident: (e.state, e.why) for e in ledger.state()}
    assert states["p"][0] == "left" and "still pending" in str(states["p"][1])
    assert states["a"][0] == states["done"][0] == "released"
    lines = [
        {"kind": "mission", "ident": m, "action": how, "left_status": left_status(how)} for m, how in outcome.items()
    ]
    [incident] = leftover_incidents(lines)
    assert incident.classification is Classification.INFRASTRUCTURE
    assert "mission p is still pending" in incident.summary and incident.checks == []


def test_a_finished_turn_parked_for_its_ack_is_acknowledged_and_read_back(tmp_path: Path) -> None:
    """1.3.0 parks every finished turn in awaiting_user (ack): it is acknowledged, not left behind; a parked
    question (decision) cannot be acknowledged and is a leftover."""
    plane = _Plane({"ack": "awaiting_user", "ask": "awaiting_user"}, {"ack": "ack"})
    outcome = _owned(plane, Ledger(tmp_path, session="s"), ["ack", "ask"]).cancel_all()
    assert outcome["ack"].startswith("acknowledged") and plane.acks == ["ack"]
    assert left_status(outcome["ask"]) == "awaiting_user"


def test_a_mission_gone_after_its_404_is_closed() -> None:
    plane = _Plane({})
    owned = OwnedMissions(lambda via: plane, MissionIntents(None), SpendCap(None))  # type: ignore[arg-type, return-value]
    owned.claim("gone", "rest")
    assert owned.cancel_all() == {"gone": "already gone"}


# ---- polling without a stream: one list read for every mission -----------------------------------


def test_the_list_watch_wakes_a_follower_when_its_row_says_it_may_settle() -> None:
    rows = [{"id": "m", "status": "pending"}]
    reads: list[int] = []

    def list_rows(limit: int) -> list[dict[str, Any]]:
        reads.append(limit)
        return [dict(r) for r in rows]

    watch = ListWatch(list_rows, tick_s=0.05)
    try:
        assert watch.start(wait_s=5.0)
        watch.watch("m")
        deadline = time.monotonic() + 10
        while watch.signal("m") is None and time.monotonic() < deadline:
            watch.wait("m", 0, watch.generation, 0.2)
        first = watch.signal("m")
        assert first is not None and first.status == "pending" and not first.evidence
        rows[0] = {"id": "m", "status": "active", "last_output_at": "2026-06-10T12:00:00Z"}
        while (sig := watch.signal("m")) is not None and not sig.evidence and time.monotonic() < deadline:
            watch.wait("m", sig.version, watch.generation, 0.2)
        sig = watch.signal("m")
        assert sig is not None and sig.status == "active" and sig.evidence
        assert [s for _, s in sig.statuses] == ["pending", "active"]
    finally:
        watch.close()
    assert reads and set(reads) == {100}
