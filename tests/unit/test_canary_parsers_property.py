"""Property tests for the canary parsers: random and mutated remote output never crashes a check and
never yields ``passed`` unless the pass condition is really there.

Covered: mission events and tool results (workspace visibility, reaches-execution, crash signature),
systemctl and tailscale output (DGX checks), and REST mission/health bodies as the checks read them.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sbxcheck.checks.dgx import _judge_ping, _judge_unit, probe_unit
from sbxcheck.checks.fleet import judge_fleet_health
from sbxcheck.checks.missions import (
    check_dispatched,
    check_reaches_execution,
    check_record_echoes_request,
)
from sbxcheck.checks.toolsteps import tool_outcome
from sbxcheck.checks.workspace import check_workspace_visible
from sbxcheck.clients.channels import Created
from sbxcheck.clients.missionruns import CanaryRun, RouteRun, crash_signature
from sbxcheck.clients.sandboxed_models import FleetHealth
from sbxcheck.inventory import RouteSpec, WorkspaceCanarySpec
from sbxcheck.results import Outcome
from sbxcheck.transports.ssh import CommandResult

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_leaf = (
    st.none() | st.booleans() | st.integers(-300, 300) | st.floats(allow_nan=False) | st.text(max_size=30)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
FAIL_KEYS = ("is_error", "exit_code", "status", "success", "timed_out")


# ------------------------------------------------------------------ tool results


@FAST
@given(
    content=json_value,
    metadata=json_value,
    extra=st.dictionaries(
        st.sampled_from(["is_error", "exit_code", "status", "error"]), json_value, max_size=2
    ),
)
def test_tool_outcome_never_crashes_and_flags_are_never_ignored(
    content: Any, metadata: Any, extra: Any
) -> None:
    row = {"event_type": "tool_result", "content": content, "metadata": metadata, **extra}
    outcome = tool_outcome(row)
    assert isinstance(outcome.text, str)
    meta = metadata if isinstance(metadata, dict) else {}
    flagged = (
        meta.get("is_error") is True
        or row.get("is_error") is True
        or (
            isinstance(meta.get("exit_code"), int)
            and not isinstance(meta.get("exit_code"), bool)
            and meta["exit_code"] != 0
        )
        or meta.get("success") is False
        or meta.get("timed_out") is True
    )
    if flagged:
        assert not outcome.ok


@FAST
@given(code=st.integers(-255, 255).filter(bool), text=st.text(max_size=80), where=st.sampled_from(range(5)))
def test_a_nonzero_exit_in_any_shape_is_a_failure(code: int, text: str, where: int) -> None:
    rows: list[dict[str, Any]] = [
        {"content": text, "metadata": {"exit_code": code}},
        {"content": text, "exit_code": code},
        {"content": json.dumps({"output": text, "exit_code": code})},
        {"content": f"{text}\nExit code: {code}"},
        {"content": text, "metadata": {"exit_code": str(code)}},
    ]
    assert not tool_outcome(rows[where]).ok


# ------------------------------------------------------------------ workspace visibility

CHECKOUT = "/ws/verity"
REF = "a" * 40
PIN = "leanprover/lean4:v4.19.0"
README = "# verity\nsome text\n"
EXEC_SHA = hashlib.sha256(README.encode()).hexdigest()
STEPS = (
    ("bash", {"command": f"ls -d {CHECKOUT}"}, f"{CHECKOUT}\n"),
    ("bash", {"command": f"git -C {CHECKOUT} rev-parse HEAD"}, f"{REF}\n"),
    ("bash", {"command": f"cat {CHECKOUT}/lean-toolchain"}, f"{PIN}\n"),
    ("mcp__workspace__read_file", {"path": f"{CHECKOUT}/README.md"}, README),
)
FAILURE_SHAPES = (
    lambda r, c: r["metadata"].update(is_error=True),
    lambda r, c: r["metadata"].update(exit_code=c),
    lambda r, c: r.update(exit_code=c),
    lambda r, c: r["metadata"].update(status="error"),
    lambda r, c: r.update(content=json.dumps({"output": r["content"], "exit_code": c})),
    lambda r, c: r.update(content=f"{r['content']}\nProcess exited with code {c}"),
)


def _healthy_events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for i, (tool, args, out) in enumerate(STEPS):
        call_id = f"call_{i}"
        events.append(
            {
                "event_type": "tool_call",
                "tool_name": tool,
                "tool_call_id": call_id,
                "content": json.dumps(args),
            }
        )
        events.append({"event_type": "tool_result", "tool_call_id": call_id, "content": out, "metadata": {}})
    return events


def _visibility(events: list[dict[str, Any]], exec_sha: str | None = EXEC_SHA) -> Any:
    spec = WorkspaceCanarySpec(backend="opencode", workspace="verity", checkout=CHECKOUT, ref=REF, pin=PIN)
    run = RouteRun(RouteSpec(backend="opencode"), "t", "k", {"model_effort": None})
    run.created = Created({"id": "m1", "status": "completed"})
    run.last = {"status": "completed"}
    run.events = events
    return check_workspace_visible(CanaryRun(spec, run=run, exec_sha256=exec_sha))


def test_the_healthy_transcript_passes() -> None:
    assert _visibility(_healthy_events()).outcome is Outcome.PASSED


mutation = st.tuples(
    st.sampled_from(range(len(STEPS))),
    st.sampled_from(["fail", "drop_result", "drop_call", "garble"]),
    st.integers(1, 255),
    st.text(max_size=60),
)
noise = st.lists(
    st.fixed_dictionaries(
        {
            "event_type": st.sampled_from(
                ["text_delta", "status", "error", "assistant_message", "tool_call"]
            ),
            "content": st.text(max_size=40).map(lambda t: "echo " + t),
            "tool_name": st.sampled_from(["bash", "noise"]),
            "tool_call_id": st.text(max_size=6),
        }
    ),
    max_size=4,
)


@FAST
@given(mutations=st.lists(mutation, min_size=1, max_size=3), extra=noise)
def test_a_broken_step_never_passes_visibility(mutations: list[Any], extra: list[dict[str, Any]]) -> None:
    events = _healthy_events()
    broken = False
    for step, kind, code, text in mutations:
        call, result = events[2 * step], events[2 * step + 1]
        if kind == "fail":
            FAILURE_SHAPES[code % len(FAILURE_SHAPES)](result, code)
            broken = True
        elif kind == "drop_result":
            result["tool_call_id"] = "gone"
            broken = True
        elif kind == "drop_call":
            call["event_type"] = "text_delta"
            broken = True
        elif text.strip() != STEPS[step][2].strip() and text != STEPS[step][2]:
            result["content"] = text
            broken = True
    result = _visibility(extra + events)
    if broken:
        assert result.outcome is not Outcome.PASSED, result.message


@FAST
@given(
    events=st.lists(
        st.dictionaries(
            st.sampled_from(["event_type", "tool_call_id", "tool_name", "content", "metadata", "sequence"]),
            json_value,
        ),
        max_size=8,
    ),
    exec_sha=st.none() | st.just(EXEC_SHA),
)
def test_random_events_never_crash_and_pass_only_with_every_step(
    events: list[dict[str, Any]], exec_sha: str | None
) -> None:
    result = _visibility(events, exec_sha)
    if result.outcome is Outcome.PASSED:  # impossible without the real steps and their outputs
        ev = result.evidence
        assert (
            ev["checkout_visible"] and ev["head"] == REF and ev["pin"] == PIN and ev["mcp_sha256"] == EXEC_SHA
        )


# ------------------------------------------------------------------ reaches execution and the record

STATUSES = st.sampled_from(
    ["pending", "active", "completed", "failed", "awaiting_user", "interrupted", "blocked", "weird", ""]
)


@FAST
@given(
    status=STATUSES,
    events=st.lists(
        st.fixed_dictionaries(
            {
                "event_type": st.sampled_from(
                    ["status", "error", "text_delta", "tool_call", "assistant_message", "x"]
                ),
                "content": json_value,
                "sequence": st.integers(0, 50),
            }
        ),
        max_size=6,
    ),
)
def test_reaches_execution_passes_only_with_evidence(status: str, events: list[dict[str, Any]]) -> None:
    run = RouteRun(RouteSpec(backend="codex"), "t", "k", {"model_effort": None})
    run.created = Created({"id": "m1", "status": "pending"})
    run.last = {"status": status}
    run.events = events
    assert crash_signature(events) is None or isinstance(crash_signature(events), str)
    result = check_reaches_execution(run)
    if result.outcome is Outcome.PASSED:
        assert status in ("active", "completed", "awaiting_user")
        assert any(e["event_type"] in ("tool_call", "tool_result", "assistant_message") for e in events)


@FAST
@given(
    record=st.dictionaries(
        st.sampled_from(["backend", "model_override", "model_effort", "agent", "status", "id"]),
        json_value,
        max_size=6,
    )
)
def test_record_echo_passes_only_when_the_record_says_what_was_asked(record: dict[str, Any]) -> None:
    requested = {
        "agent": "build",
        "backend": "codex",
        "model_override": "gpt-5.6-terra",
        "model_effort": "high",
    }
    run = RouteRun(RouteSpec(backend="codex", agent="build"), "t", "k", dict(requested))
    run.created = Created({"id": "m1", **record})
    run.record = record
    run.effort_attempts = [{"effort": "high", "accepted": True}]
    result = check_record_echoes_request(run)
    if result.outcome is Outcome.PASSED:
        assert record.get("backend") == "codex" and record.get("model_effort") == "high"
        assert record.get("agent") == "build"
        assert isinstance(record.get("model_override"), str) and "terra" in record["model_override"]
    dispatched = check_dispatched(run)
    assert dispatched.outcome in (Outcome.PASSED, Outcome.FAILED)


# ------------------------------------------------------------------ systemctl and tailscale


class _Shell:
    alias = "agent-core"

    def __init__(self, code: int, out: str, err: str) -> None:
        self.answer = CommandResult(code, out, err, 0.01)

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        return self.answer


UNIT_WORDS = st.sampled_from(["enabled", "disabled", "active", "inactive", "unknown", "static", "failed", ""])
noisy_text = st.one_of(
    st.text(max_size=60), UNIT_WORDS, st.builds(lambda w, t: f"{w}\n{t}", UNIT_WORDS, st.text(max_size=30))
)


@FAST
@given(
    verb=st.sampled_from(["is-enabled", "is-active"]),
    code=st.integers(-1, 255),
    out=noisy_text,
    err=st.text(max_size=60),
)
def test_systemctl_answers_pass_only_on_the_expected_state_and_exit_0(
    verb: str, code: int, out: str, err: str
) -> None:
    answer = probe_unit(_Shell(code, out, err), verb)
    result = _judge_unit("x", "agent-core", answer)
    if result.outcome is Outcome.PASSED:
        expected = "enabled" if verb == "is-enabled" else "active"
        assert code == 0 and out.strip().splitlines()[0].strip() == expected


IP = "100.77.4.93"
pong = st.builds(
    lambda ip, via, ms: f"pong from dgx-spark ({ip}) via {via} in {ms}ms",
    st.sampled_from([IP, "100.64.0.9", "10.0.0.1"]),
    st.sampled_from(["192.168.1.2:41641", "DERP(fra)"]),
    st.integers(1, 900),
)
ping_out = st.lists(st.one_of(pong, st.text(max_size=50), st.just(f'ping "{IP}" timed out')), max_size=4).map(
    "\n".join
)


@FAST
@given(code=st.integers(-1, 255), out=ping_out, err=st.text(max_size=60))
def test_ping_passes_only_with_a_pong_from_the_dgx(code: int, out: str, err: str) -> None:
    result = _judge_ping(
        "agent-core", IP, 20, "timeout 20 tailscale ping -c 2 " + IP, CommandResult(code, out, err, 0.01)
    )
    if result.outcome is Outcome.PASSED:
        assert any(
            re.match(rf"^pong from \S+ \({re.escape(IP)}\) via .+ in \S+$", ln.strip())
            for ln in out.splitlines()
        )


# ------------------------------------------------------------------ REST health bodies

health_body = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["ok", "degraded", "", "OK"]) | st.none() | st.integers(),
        "control_responsive": st.booleans() | st.none() | st.text(max_size=4),
        "disk_level": st.sampled_from(["ok", "warn", "critical", "weird"]) | st.none(),
        "disk_percent": st.floats(-5, 200, allow_nan=False) | st.none(),
        "disk_free_gib": st.floats(0, 2000, allow_nan=False) | st.none() | st.text(max_size=3),
        "disk_required_gib": st.floats(0, 500, allow_nan=False) | st.none(),
        "running": st.integers(-1, 9) | st.none(),
        "missions": json_value,
    },
)


@FAST
@given(body=health_body)
def test_fleet_health_passes_only_on_ok_responsive_and_disk_room(body: dict[str, Any]) -> None:
    try:
        fh = FleetHealth.model_validate(body)
    except ValidationError:
        return  # the client turns a body it cannot read into bad_response before any check sees it
    result = judge_fleet_health(fh)
    if result.outcome is Outcome.PASSED:
        assert fh.status == "ok" and fh.control_responsive is True and fh.disk_level == "ok"
        assert fh.disk_free_gib is not None and fh.disk_required_gib is not None
        assert fh.disk_free_gib >= fh.disk_required_gib
