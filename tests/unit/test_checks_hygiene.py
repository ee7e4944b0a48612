"""Mission hygiene checks (issue 21 item 1): integrity, /running health, staleness verdicts, health signals."""

from __future__ import annotations

from typing import Any

import pytest

from sbxcheck.checks.hygiene import (
    SIGNALS,
    MissionHealth,
    SignalScan,
    check_mission_signal,
    check_missions_integrity,
    judge_integrity,
    judge_running,
    judge_verdicts,
    scan_signals,
    verdict_for,
)
from sbxcheck.clients.sandboxed_models import Mission, MissionsIntegrity, RunningEntry
from sbxcheck.errors import AuthFailed, BadResponseError, HostUnreachable
from sbxcheck.inventory import HygieneSection
from sbxcheck.report.incidents import build_incidents
from sbxcheck.results import CheckRecord, Classification, Outcome

T = HygieneSection()


def _integrity(**groups: int) -> MissionsIntegrity:
    doc: dict[str, Any] = {"generated_at": "2026-06-10T12:00:00Z", "scanned": 12, "healthy": True}
    for name in ("orphaned_pending", "stale_active", "scheduled_waiting", "stale_awaiting_user"):
        n = groups.get(name, 0)
        doc[name] = {
            "count": n,
            "missions": [{"id": f"{name}-{i}", "title": f"{name} {i}", "status": "x"} for i in range(n)],
        }
    if groups.get("orphaned_pending") or groups.get("stale_active"):
        doc["healthy"] = False
    return MissionsIntegrity.model_validate(doc)


def test_integrity_passes_and_reports_waiting_groups_as_evidence() -> None:
    result = judge_integrity(_integrity(scheduled_waiting=2, stale_awaiting_user=1))
    assert result.outcome is Outcome.PASSED
    assert "WARNING: 2 scheduled waiting, 1 stale awaiting user" in result.message
    assert result.evidence["scanned"] == 12 and result.evidence["scheduled_waiting"]["count"] == 2


@pytest.mark.parametrize("group", ["orphaned_pending", "stale_active"])
def test_integrity_fails_on_orphaned_or_stale_active(group: str) -> None:
    result = judge_integrity(_integrity(**{group: 3}))
    assert result.outcome is Outcome.FAILED
    assert f"3 {group.replace('_', ' ')}" in result.message
    assert result.recommendation and "operator's decision" in result.recommendation


def test_integrity_fails_when_the_server_says_unhealthy_without_groups() -> None:
    report = _integrity().model_copy(update={"healthy": False})
    assert judge_integrity(report).outcome is Outcome.FAILED


def test_integrity_without_its_groups_is_a_bad_response_not_a_pass() -> None:
    class Client:
        def missions_integrity(self) -> MissionsIntegrity:
            raise BadResponseError("GET /api/control/missions/integrity: response is not a MissionsIntegrity")

    result = check_missions_integrity(Client())  # type: ignore[arg-type]
    assert result.outcome is Outcome.ERROR and result.classification is Classification.BAD_RESPONSE
    with pytest.raises(ValueError):
        MissionsIntegrity.model_validate({"scanned": 3, "healthy": True})


def _row(mid: str, health: dict[str, Any] | None) -> RunningEntry:
    return RunningEntry.model_validate(
        {"mission_id": mid, "state": "running", "seconds_since_activity": 40, "health": health}
    )


def test_running_health_fails_on_severe_missing_deliverables_and_unexpected_end() -> None:
    rows = [
        _row("aaaaaaaa-1", {"status": "healthy"}),
        _row("bbbbbbbb-2", {"status": "stalled", "severity": "severe", "seconds_since_activity": 900}),
        _row("cccccccc-3", {"status": "missing_deliverables", "missing": ["PR link"]}),
        _row("dddddddd-4", {"status": "unexpected_end", "reason": "runner exited"}),
    ]
    result = judge_running(rows)
    assert result.outcome is Outcome.FAILED
    assert "3 of 4 live missions unhealthy" in result.message
    assert {f["health"] for f in result.evidence["failing"]} == {
        "stalled",
        "missing_deliverables",
        "unexpected_end",
    }


def test_running_health_stalled_warning_is_a_warning_not_a_failure() -> None:
    result = judge_running(
        [_row("aaaaaaaa-1", {"status": "stalled", "severity": "warning"}), _row("b", {"status": "healthy"})]
    )
    assert result.outcome is Outcome.PASSED
    assert "WARNING: 1 aaaaaaaa (stalled warning)" in result.message


@pytest.mark.parametrize(
    ("status", "idle", "want"),
    [
        ("active", 10, "working"),
        ("active", 400, "quiet"),
        ("active", 2000, "stalled"),
        ("pending", 100, "queued"),
        ("pending", 1000, "stuck_queued"),
        ("awaiting_user", 5000, "stalled_parked"),
        ("waiting_background", 30000, "stalled_background"),
        ("paused", 99999, "paused"),
        ("completed", 99999, None),
    ],
)
def test_verdict_thresholds_are_the_specs_defaults(status: str, idle: float, want: str | None) -> None:
    assert verdict_for(status, idle, T) == want


def _mission(status: str, idle: float | None, server: str | None = None, **extra: Any) -> Mission:
    doc: dict[str, Any] = {"id": f"{status}-{idle}", "status": status, "title": f"{status} mission"}
    if idle is not None:
        doc.update(idle_seconds=idle, idle_for=f"{int(idle)}s")
    if server is not None:
        doc["health_verdict"] = server
    return Mission.model_validate(doc | extra)


def test_verdicts_fail_on_any_stalled_kind_and_name_the_mission() -> None:
    missions = [_mission("active", 20, "working"), _mission("pending", 2000, "stuck_queued")]
    result = judge_verdicts(missions, T)
    assert result.outcome is Outcome.FAILED
    assert "1 of 2 non-terminal missions" in result.message and "stuck_queued" in result.message
    assert result.evidence["by_verdict"] == {"stuck_queued": 1, "working": 1}


def test_verdicts_use_the_inventorys_thresholds_over_the_servers_label() -> None:
    lenient = HygieneSection(stalled_s=7200, stuck_queued_s=3600)
    missions = [_mission("active", 2000, "stalled"), _mission("pending", 2000, "stuck_queued")]
    result = judge_verdicts(missions, lenient)
    assert result.outcome is Outcome.PASSED
    assert result.evidence["server_verdict_differs"] == 2


def test_verdicts_fall_back_to_the_server_label_without_idle_seconds() -> None:
    result = judge_verdicts([_mission("active", None, "stalled")], T)
    assert result.outcome is Outcome.FAILED


def test_verdicts_skip_terminal_missions_and_say_when_the_list_was_cut() -> None:
    result = judge_verdicts([_mission("completed", 99999), _mission("active", 5)], T, truncated=True)
    assert result.outcome is Outcome.PASSED
    assert result.evidence["non_terminal"] == 1 and "first 1000 only" in result.message


def test_hygiene_thresholds_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="quiet_s"):
        HygieneSection(quiet_s=4000, stalled_s=1800)


# ------------------------------------------------------------------ signals


def _health(mid: str, *signals: str, loop: str | None = None, backend: str = "claudecode") -> dict[str, Any]:
    return {
        "mission_id": mid,
        "title": f"lane {mid}",
        "status": "active",
        "backend": backend,
        "signals": {s: s in signals for s in SIGNALS},
        "suspected_loop": {"tool": loop, "repeats": 4, "args": "{}"} if loop else None,
        "recent_errors": [{"snippet": "401 Unauthorized: invalid api key"}]
        if "auth_error" in signals
        else [],
    }


def _scan(docs: dict[str, dict[str, Any]]) -> SignalScan:
    return scan_signals(lambda: list(docs), lambda mid: docs[mid], limit=50)


def test_an_auth_error_across_five_missions_is_one_credentials_incident() -> None:
    docs = {f"m{i}": _health(f"m{i}", "auth_error") for i in range(5)} | {"ok": _health("ok")}
    result = check_mission_signal(_scan(docs), "auth_error")
    assert result.outcome is Outcome.FAILED and result.classification is Classification.AUTH_FAILED
    assert "auth_error: 5 in-flight mission(s)" in result.message and "claudecode" in result.message
    assert (
        result.recommendation
        and "renew the refused provider credential for claudecode" in result.recommendation
    )
    record = CheckRecord(
        **result.model_dump(),
        nodeid="canaries/test_hygiene.py::test_mission_signals[auth_error]",
        suite="canary",
    )
    [incident] = build_incidents([record])
    assert incident.classification is Classification.AUTH_FAILED
    assert incident.recommendation == result.recommendation


def test_a_suspected_loop_names_the_repeated_tool() -> None:
    result = check_mission_signal(
        _scan({"m1": _health("m1", "suspected_loop", loop="bash")}), "suspected_loop"
    )
    assert result.outcome is Outcome.FAILED
    assert "`bash` (4x)" in result.message and "`bash` (4x)" in (result.recommendation or "")


def test_no_signal_passes_and_says_how_many_were_asked() -> None:
    result = check_mission_signal(_scan({"m1": _health("m1"), "m2": _health("m2")}), "rate_limited")
    assert result.outcome is Outcome.PASSED and "2 of 2 asked" in result.message


def test_scan_is_bounded_and_keeps_a_failed_ask_without_stopping() -> None:
    docs = {f"m{i}": _health(f"m{i}") for i in range(5)}

    def health(mid: str) -> dict[str, Any]:
        if mid == "m1":
            raise HostUnreachable("MCP server exited")
        return docs[mid]

    scan = scan_signals(lambda: list(docs), health, limit=3)
    assert scan.truncated and len(scan.scanned) == 2 and scan.errors[0].startswith("m1")


def test_every_ask_failing_is_could_not_tell_and_auth_stops_the_scan_once() -> None:
    def refused(mid: str) -> dict[str, Any]:
        raise AuthFailed("MCP get_mission_health: Invalid or expired token")

    with pytest.raises(AuthFailed):
        scan_signals(lambda: ["m1", "m2"], refused, limit=5)

    def broken(mid: str) -> dict[str, Any]:
        raise BadResponseError("not JSON")

    result = check_mission_signal(scan_signals(lambda: ["m1"], broken, limit=5), "auth_error")
    assert result.outcome is Outcome.ERROR and result.classification is Classification.BAD_RESPONSE
    errored = check_mission_signal(AuthFailed("refused"), "auth_error")
    assert errored.outcome is Outcome.ERROR and errored.classification is Classification.AUTH_FAILED


def test_a_health_answer_without_signals_is_rejected() -> None:
    with pytest.raises(BadResponseError):
        MissionHealth.from_json({"mission_id": "m1"})
