"""Canary verdicts that once lied: the idempotency probe, tool-result shapes, and the one mission deadline."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
from typing import Any

import pytest

from sbxcheck.checks.missions import (
    IDEMPOTENCY_CAUSE,
    check_dispatched,
    check_reaches_execution,
)
from sbxcheck.checks.toolsteps import tool_outcome
from sbxcheck.checks.workspace import check_workspace_visible
from sbxcheck.clients.channels import Created
from sbxcheck.clients.missionruns import CanaryRun, RouteRun
from sbxcheck.clients.sandboxed import MissionRejected
from sbxcheck.clients.sandboxed import RateLimited as SandboxedRateLimited
from sbxcheck.clients.sandboxed_models import MissionSpec
from sbxcheck.clients.stream import ControlStream
from sbxcheck.inventory import RouteSpec, SandboxedSection, WorkspaceCanarySpec
from sbxcheck.lifecycle import MissionDispatcher
from sbxcheck.lifecycle.following import WaitingState
from sbxcheck.results import Classification, Outcome


class FakePlane:
    """A mission channel with upstream's two coalescing rules (§3.4 steps 5 and 6), each switchable."""

    via = "rest"

    def __init__(
        self,
        *,
        honour_key: bool = True,
        coalesce_titles: bool = True,
        create_delay_s: float = 0.0,
        status: str = "active",
        one_per_workspace: bool = False,
    ) -> None:
        self.honour_key, self.coalesce_titles = honour_key, coalesce_titles
        self.create_delay_s, self.status = create_delay_s, status
        self.one_per_workspace = one_per_workspace
        self.missions: dict[str, dict[str, Any]] = {}
        self.leases: dict[str, str] = {}
        self.seq = itertools.count(1)

    def create(self, spec: MissionSpec) -> Created:
        time.sleep(self.create_delay_s)
        if self.honour_key and spec.idempotency_key in self.leases:
            held = self.missions[self.leases[spec.idempotency_key]]
            return Created(held, held["id"])
        if self.coalesce_titles:
            for m in self.missions.values():
                if m["title"] == spec.title and m["status"] in ("pending", "active"):
                    return Created(m, m["id"])
        if self.one_per_workspace and spec.workspace_id and self.missions:
            raise MissionRejected("POST /api/control/missions", 409, "workspace_occupied")
        mid = str(uuid.uuid4())
        self.missions[mid] = {
            "id": mid,
            "title": spec.title,
            "status": self.status,
            "backend": spec.backend,
            "model_override": spec.model_override,
            "model_effort": spec.model_effort,
            "agent": spec.agent,
        }
        if spec.idempotency_key:
            self.leases.setdefault(spec.idempotency_key, mid)
        return Created(self.missions[mid])

    def get(self, mission_id: str) -> dict[str, Any]:
        return dict(self.missions[mission_id])

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        if self.status != "active" or since_seq:
            return []
        return [{"event_type": "tool_call", "sequence": next(self.seq), "tool_name": "bash"}]

    def cancel(self, mission_id: str) -> bool:
        self.missions[mission_id]["status"] = "interrupted"
        return True


def _dispatcher(plane: FakePlane, stream: ControlStream | None = None, **section: Any) -> MissionDispatcher:
    defaults: dict[str, Any] = {
        "url": "http://cp.invalid",
        "routes": [RouteSpec(name="r", backend="codex", workspace=section.pop("workspace", None))],
        "poll_interval_s": 0.02,
    }
    return MissionDispatcher(
        SandboxedSection(**{**defaults, **section}),
        lambda via: plane,
        "0123456789abcdef",
        workspace_ids=lambda: {"w": "11111111-1111-1111-1111-111111111111"},
        exec_sha256=lambda ws, path: "0" * 64,
        stream=stream,
    )


def _route(plane: FakePlane, **section: Any) -> RouteRun:
    d = _dispatcher(plane, **section)
    try:
        return d.route("r", 10)
    finally:
        d.close()


# ------------------------------------------------------------------ idempotency (issue 8.5)


def test_title_coalescing_does_not_mask_an_ignored_key() -> None:
    """An identical retry would meet title coalescing; the probe's retry can only match by key."""
    result = check_dispatched(_route(FakePlane(honour_key=False, coalesce_titles=True)))
    assert result.outcome is Outcome.FAILED and "idempotency ignored" in result.message
    assert result.cause == IDEMPOTENCY_CAUSE  # every route shares it: one incident
    assert result.evidence["retry_mission_id"] != result.evidence["mission_id"]


def test_an_honoured_key_passes_and_makes_one_mission() -> None:
    plane = FakePlane(honour_key=True, coalesce_titles=True)
    result = check_dispatched(_route(plane))
    assert result.outcome is Outcome.PASSED, result.message
    assert len(plane.missions) == 1 and "honoured" in result.evidence["idempotency"]


def test_a_refused_keyed_retry_is_an_ignored_key() -> None:
    """The key lookup precedes the workspace check: a 409 on the retry means the key did not match."""
    plane = FakePlane(honour_key=False, coalesce_titles=True, one_per_workspace=True)
    result = check_dispatched(_route(plane, workspace="w"))
    assert result.outcome is Outcome.FAILED and "refused" in result.message
    assert result.cause == IDEMPOTENCY_CAUSE


# ------------------------------------------------------------------ one deadline (issue 8.8)


def test_route_deadline_counts_from_dispatch_and_the_message_says_the_true_time() -> None:
    """Create and keyed retry (1 s each) are inside the one 3 s budget: 3 s in all, not 2 + 3."""
    plane = FakePlane(status="pending", create_delay_s=1.0)
    started = time.monotonic()
    run = _route(plane, execution_deadline_s=3.0)
    took = time.monotonic() - started
    assert 2.9 <= run.waited_s <= 3.8, run.waited_s
    assert took < 4.3, f"{took:.2f}s against a 3 s deadline"
    result = check_reaches_execution(run)
    assert result.classification is Classification.TIMEOUT
    assert f"after {run.waited_s:.0f}s" in result.message and "from dispatch" in result.message


def test_canary_is_polled_once_to_its_deadline_never_twice() -> None:
    plane = FakePlane(status="pending")
    spec = WorkspaceCanarySpec(backend="codex", workspace="w", checkout="/w/x", pin_file=None)
    d = _dispatcher(plane, routes=[], canaries=[spec], canary_deadline_s=1.5)
    started = time.monotonic()
    canary = d.canary(spec.label, 10)
    took = time.monotonic() - started
    d.close()
    assert canary.error is not None
    said = re.search(r"still pending after (\d+)s", canary.error.message)
    assert said and int(said.group(1)) <= 2, canary.error.message  # the true elapsed time, not 2 x 1.5
    assert took < 2.6, f"polled {took:.2f}s against a 1.5 s deadline"
    assert canary.run is not None and 1.5 <= canary.run.waited_s < 2.6


# ------------------------------------------------------------------ tool results (issue 8.6)


@pytest.mark.parametrize(
    "row",
    [
        {"content": "x", "metadata": {"is_error": True}},
        {"content": "x", "metadata": {"exit_code": 2}},
        {"content": "x", "exit_code": 1},
        {"content": "x", "is_error": True},
        {"content": json.dumps({"output": "x", "exit_code": 128})},
        {"content": json.dumps({"stdout": "", "stderr": "x", "returncode": 1})},
        {"content": "x", "metadata": {"status": "error"}},
        {"content": "x", "metadata": {"success": False}},
        {"content": "x", "metadata": {"exit_code": "1"}},
        {"content": "ls: cannot access 'x'\nExit code: 2"},
        {"content": "Process exited with code 1\nfatal: not a git repository"},
        None,
    ],
)
def test_every_failure_shape_is_a_failure(row: dict[str, Any] | None) -> None:
    assert not tool_outcome(row).ok


@pytest.mark.parametrize(
    "row",
    [
        {"content": "x", "metadata": {"exit_code": 0, "is_error": False}},
        {"content": "x", "metadata": {}},
        {"content": json.dumps({"output": "x", "exit_code": 0})},
        {"content": "Exit code: 0\nx"},
    ],
)
def test_success_shapes_are_successes(row: dict[str, Any]) -> None:
    outcome = tool_outcome(row)
    assert outcome.ok and outcome.text.rstrip().endswith("x")


def _canary_events(checkout: str, meta_for: Any) -> list[dict[str, Any]]:
    """The steps of a mission that sees an empty directory: every one fails, each naming the path."""
    steps = [
        ("bash", {"command": f"ls -d {checkout}"}, f"ls: cannot access '{checkout}': No such file", 2),
        (
            "bash",
            {"command": f"git -C {checkout} rev-parse HEAD"},
            f"fatal: cannot change to '{checkout}'",
            128,
        ),
        (
            "bash",
            {"command": f"cat {checkout}/lean-toolchain"},
            f"cat: {checkout}/lean-toolchain: missing",
            1,
        ),
        ("mcp__workspace__read_file", {"path": f"{checkout}/README.md"}, f"could not read {checkout}", 1),
    ]
    events: list[dict[str, Any]] = []
    for i, (tool, args, text, code) in enumerate(steps):
        call = f"c{i}"
        events.append(
            {"event_type": "tool_call", "tool_name": tool, "tool_call_id": call, "content": json.dumps(args)}
        )
        events.append(
            {"event_type": "tool_result", "tool_call_id": call, "content": text, "metadata": meta_for(code)}
        )
    return events


@pytest.mark.parametrize(
    "meta_for",
    [lambda code: {"exit_code": code}, lambda code: {"is_error": True}, lambda code: {"status": "failed"}],
    ids=["exit_code", "is_error", "status"],
)
def test_a_missing_checkout_is_a_mount_defect_whatever_the_result_shape(meta_for: Any) -> None:
    spec = WorkspaceCanarySpec(backend="opencode", workspace="verity", checkout="/ws/verity", pin="v4")
    run = RouteRun(RouteSpec(backend="opencode"), "t", "k", {"model_effort": None})
    run.created = Created({"id": "m1", "status": "completed"})
    run.last = {"status": "completed"}
    run.events = _canary_events(spec.checkout, meta_for)
    result = check_workspace_visible(CanaryRun(spec, run=run, exec_sha256="0" * 64))
    assert result.classification is Classification.WORKSPACE_MOUNT_DEFECT, result.message
    ev = result.evidence
    assert ev["checkout_visible"] is False and ev["pin"] is None and ev["mcp_sha256"] is None
    assert set(ev["failed_steps"]) == {
        "ls",
        "git rev-parse",
        "cat lean-toolchain",
        "mcp__workspace__read_file",
    }


# ------------------------------------------------------------------ effort echo (issue 10.17)


def test_a_400_echoing_model_effort_on_a_route_without_effort_is_no_ladder_verdict() -> None:
    run = RouteRun(RouteSpec(backend="gemini"), "t", "k", {"model_override": "m", "model_effort": None})
    run.effort_attempts = [{"effort": None, "accepted": False, "reason": "bad"}]
    run.rejection = MissionRejected("create", 400, "unknown field `model_effort`: null is not a string")
    result = check_dispatched(run)
    assert result.outcome is Outcome.FAILED
    assert "ladder" not in result.message and "HTTP 400" in result.message


def test_a_json_file_read_by_a_step_is_output_not_an_envelope() -> None:
    """package.json with an `error` or `status` key is the file's text, never a failure flag."""
    text = json.dumps({"name": "x", "status": "error", "scripts": {"test": "exit 1"}})
    outcome = tool_outcome({"content": text, "metadata": {"exit_code": 0}})
    assert outcome.ok and outcome.text == text


# ------------------------------------------------------------------ the live stream (issue 23)


class _PushingStream(ControlStream):
    """A ControlStream fed in-process: each new mission of ``plane`` gets ``frames`` (the real fold)."""

    def __init__(self, plane: FakePlane, frames: list[tuple[str, dict[str, Any]]]) -> None:
        super().__init__("http://cp.invalid", dict)
        self.plane, self.frames = plane, frames
        self._pusher = threading.Thread(target=self._push, daemon=True)

    def start(self, wait_s: float) -> bool:
        self._dispatch("status", json.dumps({"type": "status", "state": "idle", "queue_len": 0}))
        self._pusher.start()
        return True

    def _push(self) -> None:
        done: set[str] = set()
        while not self._stop.is_set():
            for mid in [m for m in list(self.plane.missions) if m not in done]:
                done.add(mid)
                time.sleep(0.05)
                for kind, data in self.frames:
                    self._dispatch(kind, json.dumps({"type": kind, "mission_id": mid, **data}))
            time.sleep(0.01)


def _streamed(plane: FakePlane, frames: list[tuple[str, dict[str, Any]]]) -> tuple[RouteRun, WaitingState]:
    # a poll would come far too late: only the stream can settle it
    d = _dispatcher(plane, _PushingStream(plane, frames), poll_interval_s=5.0)
    try:
        d.start()
        state = d.waiting()
        return d.route("r", 10), state
    finally:
        d.close()


def test_with_the_stream_a_route_is_read_once_when_its_evidence_arrives() -> None:
    plane = FakePlane()
    started = time.monotonic()
    run, state = _streamed(
        plane,
        [("mission_status_changed", {"status": "active"}), ("tool_call", {"name": "bash", "args": "ls"})],
    )
    assert time.monotonic() - started < 2.0
    assert state.open == 1 and state.followed_by == "stream"
    assert run.followed_by == "stream" and run.reads == 2  # the record and the events, once
    result = check_reaches_execution(run)
    assert result.outcome is Outcome.PASSED and result.evidence["followed_by"] == "stream"
    assert [s for _, s in run.timeline] == ["active"]


def test_a_lag_makes_one_catch_up_read_that_finds_the_dropped_evidence() -> None:
    plane = FakePlane()
    lag = ("error", {"message": "event stream lagged; some events were dropped", "mission_id": None})
    run, _ = _streamed(plane, [("mission_status_changed", {"status": "active"}), lag])
    assert run.reads == 2 and run.events and run.events[0]["event_type"] == "tool_call"
    assert check_reaches_execution(run).outcome is Outcome.PASSED


def test_a_stream_that_never_names_the_mission_still_gets_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's stream, a filtering proxy: silence about a mission triggers a read, not a wait to the deadline."""
    monkeypatch.setattr("sbxcheck.lifecycle.following.STREAM_SILENCE_S", 0.3)
    started = time.monotonic()
    run, _ = _streamed(FakePlane(), [])
    assert time.monotonic() - started < 3.0 and run.reads == 2
    assert check_reaches_execution(run).outcome is Outcome.PASSED


def test_a_stream_without_status_events_reads_at_the_evidence() -> None:
    run, _ = _streamed(FakePlane(), [("tool_result", {"name": "bash", "result": "ok"})])
    assert run.reads == 2 and check_reaches_execution(run).outcome is Outcome.PASSED


def test_without_the_stream_polls_back_off_and_stop_at_the_deadline() -> None:
    """A mission that never starts, no stream: reads double their spacing (jittered), not one per interval."""
    plane = FakePlane(status="pending")
    run = _route(plane, poll_interval_s=0.1, execution_deadline_s=2.0)
    # 0.1 s doubling: reads near 0, 0.1, 0.3, 0.7, 1.5 s, then the deadline (a fixed 0.1 s would be ~20)
    assert 5 * 2 <= run.reads <= 8 * 2, run.reads
    assert run.followed_by == "polling (no live stream)" and 1.9 <= run.waited_s < 3.0
    assert check_reaches_execution(run).classification is Classification.TIMEOUT


# ------------------------------------------------------------------ pushback is not a verdict (issue 23)


class _PushedBack(FakePlane):
    def create(self, spec: MissionSpec) -> Created:
        raise SandboxedRateLimited(
            "POST /api/control/missions", 429, "Too many requests (pushed back until the deadline)"
        )


def test_a_create_pushed_back_to_its_deadline_is_an_error_rate_limited_never_a_failure() -> None:
    run = _route(_PushedBack())
    for check in (check_dispatched, check_reaches_execution):
        result = check(run)
        assert (result.outcome, result.classification) == (Outcome.ERROR, Classification.RATE_LIMITED)
        assert "429" in result.message


def test_a_workspace_exec_pushed_back_is_no_workspace_defect() -> None:
    plane = FakePlane(status="completed")
    spec = WorkspaceCanarySpec(backend="codex", workspace="w", checkout="/w/x", pin_file=None)
    d = _dispatcher(plane, routes=[], canaries=[spec], canary_deadline_s=2.0)

    def exec_pushed_back(workspace_id: str, path: str) -> str:
        raise SandboxedRateLimited("POST /api/workspaces/w/exec", 503, "Service Unavailable")

    d._exec_sha256 = exec_pushed_back
    try:
        canary = d.canary(spec.label, 10)
    finally:
        d.close()
    result = check_workspace_visible(canary)
    assert (result.outcome, result.classification) == (Outcome.ERROR, Classification.RATE_LIMITED)


def test_an_unusable_reported_cost_is_named_on_the_route_it_came_from() -> None:
    run = RouteRun(RouteSpec(backend="codex"), "t", "k", {"model_effort": None})
    run.created = Created({"id": "m1", "status": "pending"})
    run.last = {"status": "completed"}
    run.events = [
        {"event_type": "tool_call", "sequence": 1, "tool_name": "bash"},
        {"event_type": "assistant_message", "sequence": 2, "metadata": {"cost_cents": -1e9}},
    ]
    result = check_reaches_execution(run)
    assert result.outcome is Outcome.PASSED  # the route works; its cost report does not
    why = "bad_response: assistant_message 2: cost_cents -1000000000.0 is negative"
    assert result.evidence["cost_unreadable"] == why
