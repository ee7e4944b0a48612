"""Fleet checks: /api/health, /api/health/fleet (200 even when degraded), one item per remote node, inventory."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from sbxcheck.checks.fleet import (
    SshReach,
    check_expected_node,
    check_fleet_health,
    check_health,
    check_remote_fleet,
    check_remote_node,
    machine_inventory,
)
from sbxcheck.clients.sandboxed import SandboxedClient
from sbxcheck.clients.sandboxed_models import FleetHealth, HealthInfo, RemoteFleet, RemoteNode
from sbxcheck.errors import HostUnreachable
from sbxcheck.results import Classification, Outcome
from sbxcheck.transports.http import http_date

NOW = datetime(2026, 6, 10, 12, 0, 0, tzinfo=UTC)

FLEET_OK: dict[str, Any] = {
    "status": "ok",
    "version": "0.14.2",
    "control_responsive": True,
    "running": 1,
    "queue_depth": 0,
    "missions": {"total": 5, "active": 1, "completed": 3, "failed": 1, "acknowledged": 0},
    "webhook_forwarder_configured": False,
    "offload_configured": False,
    "disk_used": 400,
    "disk_total": 1000,
    "disk_percent": 40.0,
    "disk_level": "ok",
    "disk_path": "/var/lib/sandboxed",
    "disk_filesystem": "ext4",
    "disk_free_gib": 600.0,
    "disk_required_gib": 128.0,
}


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def node(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": "babylon",
        "base_url": "http://babylon.tailnet:7878",
        "token_env": "SANDBOXED_REMOTE_NODE_BABYLON_TOKEN",
        "status": "online",
        "labels": ["lean"],
        "capacity_total": 4,
        "capacity_available": 4,
        "lean_runtime_ready": True,
        "last_seen": iso(NOW - timedelta(seconds=4)),
        "error": None,
        "cordoned": False,
    }
    doc.update(over)
    return doc


class FakeApi:
    def __init__(self, health: dict[str, Any] | None = None, fleet: dict[str, Any] | None = None) -> None:
        self._health = health or {"status": "ok", "version": "0.14.2"}
        self._fleet = fleet or FLEET_OK
        self.fail: Exception | None = None

    def health(self) -> HealthInfo:
        if self.fail:
            raise self.fail
        return HealthInfo.model_validate(self._health)

    def fleet_health(self) -> FleetHealth:
        return FleetHealth.model_validate(self._fleet)

    def remote_nodes(self) -> RemoteFleet:
        return RemoteFleet.model_validate({"enabled": True, "nodes": [node()]})


# ---------------------------------------------------------------- /api/health


def test_health_ok_and_not_ok() -> None:
    r = check_health(FakeApi())
    assert r.outcome is Outcome.PASSED and r.evidence["status"] == "ok"
    r = check_health(FakeApi(health={"status": "starting"}))
    assert r.outcome is Outcome.FAILED and "'starting'" in r.message


def test_health_unreachable_is_an_error() -> None:
    api = FakeApi()
    api.fail = HostUnreachable("GET /api/health: cannot connect")
    r = check_health(api)
    assert r.outcome is Outcome.ERROR and r.classification is Classification.INFRA_UNREACHABLE


# ---------------------------------------------------------------- /api/health/fleet


def test_fleet_ok() -> None:
    r = check_fleet_health(FakeApi())
    assert r.outcome is Outcome.PASSED, r.message
    assert r.evidence["disk_percent"] == 40.0 and r.evidence["control_responsive"] is True


def test_fleet_degraded_200_is_read_from_the_body() -> None:
    body = {
        **FLEET_OK,
        "status": "degraded",
        "control_responsive": False,
        "running": None,
        "queue_depth": None,
    }

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/health/fleet"
        return httpx.Response(200, json=body)

    with SandboxedClient(
        "http://cp.invalid", token="t" * 20, transport=httpx.MockTransport(handler)
    ) as client:
        r = check_fleet_health(client)
    assert r.outcome is Outcome.FAILED
    assert r.classification is Classification.INFRASTRUCTURE
    assert "degraded" in r.message and "control_responsive is false" in r.message
    assert r.cause == "control-plane-degraded"


@pytest.mark.parametrize("level", ["warn", "critical"])
def test_fleet_disk_level_fails_with_numbers(level: str) -> None:
    body = {**FLEET_OK, "disk_level": level, "disk_percent": 96.0, "disk_free_gib": 40.0}
    r = check_fleet_health(FakeApi(fleet=body))
    assert r.outcome is Outcome.FAILED and r.classification is Classification.INFRASTRUCTURE
    assert f"disk_level {level}" in r.message
    assert "96.0% used" in r.message and "40.0 GiB free" in r.message and "128.0 GiB required" in r.message
    assert r.evidence["disk_free_gib"] == 40.0 and r.evidence["disk_required_gib"] == 128.0


def test_fleet_free_below_required_fails_even_at_level_ok() -> None:
    r = check_fleet_health(FakeApi(fleet={**FLEET_OK, "disk_free_gib": 100.0}))
    assert r.outcome is Outcome.FAILED and "below disk_required_gib" in r.message


def test_fleet_missing_fields_fail_and_are_named() -> None:
    body = {k: v for k, v in FLEET_OK.items() if k not in ("disk_level", "control_responsive")}
    r = check_fleet_health(FakeApi(fleet=body))
    assert r.outcome is Outcome.FAILED
    assert r.evidence["missing_fields"] == ["control_responsive", "disk_level"]
    assert "control_responsive, disk_level" in r.message


def test_fleet_health_of_a_release_that_reports_no_disk_passes_naming_what_it_did_not_judge() -> None:
    """1.3.0's /api/health/fleet has no disk_* field (disk reporting came with #590): a healthy plane passes,
    and the verdict says the disk was not judged; it still fails on what it does report."""
    body = {k: v for k, v in FLEET_OK.items() if not k.startswith("disk_")}
    r = check_fleet_health(FakeApi(fleet=body))
    assert r.outcome is Outcome.PASSED, r.message
    assert "no disk_* field" in r.message and "not judged" in r.evidence["disk"]
    assert "missing_fields" not in r.evidence
    down = check_fleet_health(FakeApi(fleet={**body, "status": "degraded", "control_responsive": False}))
    assert down.outcome is Outcome.FAILED and down.cause == "control-plane-degraded"


# ---------------------------------------------------------------- remote nodes


def check(doc: dict[str, Any], **kw: Any) -> Any:
    return check_remote_node(RemoteNode.model_validate(doc), now=NOW, **kw)


def test_node_online_fresh_lean_ready_passes() -> None:
    r = check(node())
    assert r.outcome is Outcome.PASSED, r.message
    assert r.target == "babylon" and r.evidence["age_s"] == 4.0
    assert r.evidence["checked_at"] == "2026-06-10T12:00:00Z"


def test_node_offline_is_unreachable() -> None:
    r = check(
        node(id="dgx-spark", status="offline", last_seen=iso(NOW - timedelta(minutes=10)), error="timed out")
    )
    assert r.outcome is Outcome.FAILED and r.classification is Classification.INFRA_UNREACHABLE
    assert "status 'offline' (timed out)" in r.message and "600s old" in r.message


def test_node_cordoned_fails() -> None:
    r = check(node(cordoned=True))
    assert r.outcome is Outcome.FAILED and r.classification is Classification.CHECK_FAILED
    assert "cordoned" in r.message


def test_node_stale_heartbeat_fails_even_when_online() -> None:
    r = check(node(last_seen=iso(NOW - timedelta(seconds=300))), max_age_s=120)
    assert r.outcome is Outcome.FAILED and r.classification is Classification.INFRA_UNREACHABLE


def test_node_lean_not_ready_fails_and_cpu_node_needs_no_lean() -> None:
    r = check(node(lean_runtime_ready=False))
    assert r.outcome is Outcome.FAILED and "lean_runtime_ready" in r.message
    cpu = {k: v for k, v in node(labels=["cpu"]).items() if k != "lean_runtime_ready"}
    assert check(cpu).outcome is Outcome.PASSED


def test_node_missing_fields_are_named() -> None:
    doc = {k: v for k, v in node().items() if k not in ("last_seen", "lean_runtime_ready")}
    r = check(doc)
    assert r.outcome is Outcome.FAILED
    assert r.evidence["missing_fields"] == ["last_seen"]
    assert "last_seen" in r.message and "lean_runtime_ready" in r.evidence["not_reported"]


def test_node_of_a_release_without_cordon_or_lean_readiness_passes_naming_both() -> None:
    """monitor.rs @1f98109 serves no cordoned and no lean_runtime_ready: a healthy node passes, and the
    verdict names both as not judged (every node failed before)."""
    doc = {k: v for k, v in node().items() if k not in ("cordoned", "lean_runtime_ready")}
    r = check(doc)
    assert r.outcome is Outcome.PASSED, r.message
    assert set(r.evidence["not_reported"]) == {"cordoned", "lean_runtime_ready"}
    assert "does not cordon" in r.message and "does not report Lean readiness" in r.message
    offline = check({**doc, "status": "offline", "last_seen": iso(NOW - timedelta(minutes=10))})
    assert offline.outcome is Outcome.FAILED and offline.classification is Classification.INFRA_UNREACHABLE


def test_node_bad_timestamp_is_an_error_and_nanoseconds_parse() -> None:
    r = check(node(last_seen="yesterday"))
    assert r.outcome is Outcome.ERROR and r.classification is Classification.BAD_RESPONSE
    assert check(node(last_seen="2026-06-10T11:59:58.123456789Z")).outcome is Outcome.PASSED
    assert check(node(last_seen="2026-06-10T13:59:58+02:00")).outcome is Outcome.PASSED


def test_node_extra_fields_go_to_evidence_and_disabled_skips() -> None:
    r = check(node(gpu_count=1, drain_reason=None))
    assert r.outcome is Outcome.PASSED and r.evidence["extra_fields"] == ["drain_reason", "gpu_count"]
    r = check(node(status="disabled", last_seen=None))
    assert r.outcome is Outcome.SKIPPED


def test_remote_fleet_and_expected_node() -> None:
    fleet = RemoteFleet.model_validate({"enabled": True, "nodes": [node()]})
    assert check_remote_fleet(fleet).outcome is Outcome.PASSED
    assert check_remote_fleet(RemoteFleet(enabled=True)).outcome is Outcome.FAILED
    assert check_remote_fleet(RemoteFleet(enabled=False, nodes=fleet.nodes)).outcome is Outcome.FAILED
    assert check_expected_node(fleet, "babylon", now=NOW).outcome is Outcome.PASSED
    missing = check_expected_node(fleet, "dgx-spark", now=NOW)
    assert missing.outcome is Outcome.FAILED and missing.evidence["registered"] == ["babylon"]


def test_a_heartbeat_is_judged_on_the_clock_that_wrote_it() -> None:
    """last_seen and the answer's Date are both the control plane's clock: 15 minutes behind this
    machine's, a 4 s old heartbeat is 4 s old; with no Date, this machine's clock, and the evidence says so."""
    behind = NOW - timedelta(minutes=15)
    doc = {"enabled": True, "nodes": [node(last_seen=iso(behind - timedelta(seconds=4)))]}
    fleet = RemoteFleet.model_validate(doc).answered(behind)
    r = check_expected_node(fleet, "babylon")
    assert r.outcome is Outcome.PASSED and r.evidence["age_s"] == 4.0, r.message
    assert r.evidence["clock"].startswith("the control plane's")
    dateless = check_expected_node(RemoteFleet.model_validate(doc), "babylon")
    assert dateless.outcome is Outcome.FAILED and "this machine" in dateless.evidence["clock"]


def test_a_body_cannot_claim_the_answers_time() -> None:
    fleet = RemoteFleet.model_validate({"enabled": True, "nodes": [], "answered_at": "2020-01-01T00:00:00Z"})
    assert fleet.answered_at is None


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Sun, 06 Dec 2026 01:30:00 GMT", datetime(2026, 12, 6, 1, 30, tzinfo=UTC)),
        ("yesterday", None),
        (None, None),
        ("x" * 500, None),
    ],
)
def test_http_date(header: str | None, expected: datetime | None) -> None:
    assert http_date(header) == expected


# ---------------------------------------------------------------- inventory section


def test_machine_inventory_keeps_sections_apart_and_dates_rows() -> None:
    nodes = [RemoteNode.model_validate(node(id=i)) for i in ("dgx-spark", "babylon")]
    ssh = [
        SshReach("old-agent", True, "2026-06-10T11:59:00Z"),
        SshReach("dgx-spark", False, "2026-06-10T11:59:05Z", "connection timed out"),
    ]
    rows = machine_inventory(
        ssh, nodes, nodes_checked_at="2026-06-10T12:00:00Z", fleet_health_checked_at="2026-06-10T12:00:01Z"
    )
    assert [(r["section"], r["name"]) for r in rows] == [
        ("ssh", "dgx-spark"),
        ("ssh", "old-agent"),
        ("sandboxed-compute", "babylon"),
        ("sandboxed-compute", "dgx-spark"),
    ]
    assert all(r["checked_at"] for r in rows)
    assert rows[1]["registered_compute"] is False and rows[0]["registered_compute"] is True
    assert rows[2]["live"] is True
    json.dumps(rows)

    dated = machine_inventory(ssh, nodes, nodes_checked_at="2026-06-10T12:00:00Z")
    compute = [r for r in dated if r["section"] == "sandboxed-compute"]
    assert all(r["live"] is False and "dated" in r["note"] for r in compute)
