"""Control-plane and compute-fleet health over the REST client (specs/sandboxed-sh.md, 6 and 8.14).

``/api/health`` and ``/api/health/fleet`` answer HTTP 200 even when degraded, so the verdict comes
from the body: ``status``, ``control_responsive`` and the disk fields. Each remote node is one item:
online, not cordoned, a fresh ``last_seen`` heartbeat and, where labelled ``lean``, a ready Lean
runtime. :func:`machine_inventory` builds the report's inventory section, keeping SSH-reachable
machines apart from the subset registered as sandboxed.sh compute, every row dated.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from sbxcheck.checks.base import run_check
from sbxcheck.clients.sandboxed_models import FleetHealth, HealthInfo, RemoteFleet, RemoteNode
from sbxcheck.errors import NotServed, SbxError
from sbxcheck.results import CheckResult, Classification, Outcome

CHECK_HEALTH: Final = "control_plane_health"
CHECK_FLEET_HEALTH: Final = "fleet_health"
CHECK_REMOTE_FLEET: Final = "remote_fleet"
CHECK_NODE: Final = "remote_node"
DEFAULT_MAX_AGE_S: Final = 120.0
CLOCK_SKEW_S: Final = 60.0

# Fields a verdict rests on: absent from the body means "not checked", which fails. A release that reports
# no disk at all (no disk_* field: 1.3.0, before #590) lacks the capability: the disk is not judged, and
# the verdict says so; one that reports some disk fields and not others answered badly.
_FLEET_FIELDS: Final = ("control_responsive",)
_DISK_FIELDS: Final = ("disk_level", "disk_percent", "disk_free_gib", "disk_required_gib")
_NODE_FIELDS: Final = ("status", "last_seen", "labels")
# Node fields a release may not have (monitor.rs @1f98109 has neither): absent, they are named, not judged.
_NODE_CAPABILITIES: Final = {
    "cordoned": "this release does not cordon nodes",
    "lean_runtime_ready": "this release does not report Lean readiness",
}
_UNREACHABLE_STATUSES: Final = frozenset({"offline", "degraded"})


class FleetApi(Protocol):
    """The part of :class:`~sbxcheck.clients.sandboxed.SandboxedClient` these checks use."""

    def health(self) -> HealthInfo: ...

    def fleet_health(self) -> FleetHealth: ...

    def remote_nodes(self) -> RemoteFleet: ...


def utc_now_iso() -> str:
    """The current UTC time, RFC3339 with a literal ``Z`` (whole seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> datetime:
    """An RFC3339 timestamp as an aware datetime; ValueError when it is not one (or has no offset)."""
    parsed = datetime.fromisoformat(value.strip())
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no UTC offset")
    return parsed


# ---------------------------------------------------------------- /api/health


def check_health(client: FleetApi, *, target: str = "control-plane") -> CheckResult:
    """``GET /api/health`` answers with ``status: "ok"``."""

    def body() -> CheckResult:
        info = client.health()
        ev: dict[str, Any] = {
            "endpoint": "GET /api/health",
            "status": info.status,
            "version": info.version,
            "dev_mode": info.dev_mode,
            "auth_required": info.auth_required,
            "auth_mode": info.auth_mode,
            "checked_at": utc_now_iso(),
        }
        if info.status != "ok":
            return CheckResult.failed(
                CHECK_HEALTH, target, f"/api/health status is {info.status!r}, not 'ok'", ev
            )
        return CheckResult.passed(
            CHECK_HEALTH, target, f"/api/health status ok (version {info.version or 'not reported'})", ev
        )

    return run_check(CHECK_HEALTH, target, body)


# ---------------------------------------------------------------- /api/health/fleet


def check_fleet_health(client: FleetApi, *, target: str = "control-plane") -> CheckResult:
    """``GET /api/health/fleet``: status ok, control actor responsive, disk level ok and free >= required."""

    def body() -> CheckResult:
        fh = client.fleet_health()
        return judge_fleet_health(fh, target=target)

    return run_check(CHECK_FLEET_HEALTH, target, body)


def judge_fleet_health(fh: FleetHealth, *, target: str = "control-plane") -> CheckResult:
    """The verdict on one ``/api/health/fleet`` body (HTTP 200 even when degraded)."""
    absent = [f for f in (*_FLEET_FIELDS, *_DISK_FIELDS) if f not in fh.model_fields_set or getattr(fh, f) is None]
    no_disk = all(f in absent for f in _DISK_FIELDS) and not any(k.startswith("disk_") for k in fh.model_fields_set)
    missing = [f for f in absent if not (no_disk and f in _DISK_FIELDS)]
    ev: dict[str, Any] = {
        "endpoint": "GET /api/health/fleet",
        "status": fh.status,
        "control_responsive": fh.control_responsive,
        "running": fh.running,
        "queue_depth": fh.queue_depth,
        "disk_level": fh.disk_level,
        "disk_percent": fh.disk_percent,
        "disk_free_gib": fh.disk_free_gib,
        "disk_required_gib": fh.disk_required_gib,
        "disk_path": fh.disk_path,
        "missions": None if fh.missions is None else fh.missions.model_dump(),
        "checked_at": utc_now_iso(),
    }
    if missing:
        ev["missing_fields"] = missing
    if no_disk:
        ev["disk"] = "not reported by this release (its body has no disk_* field): the disk was not judged"
    problems: list[str] = []
    cause: str | None = None
    if fh.status != "ok":
        problems.append(f"status is {fh.status!r} (the control actor's probes did not answer)")
        cause = "control-plane-degraded"
    if fh.control_responsive is False:
        problems.append("control_responsive is false")
        cause = "control-plane-degraded"
    level = fh.disk_level
    if level is not None and level != "ok":
        word = level if level in ("warn", "critical") else f"unrecognised ({level!r})"
        problems.append(
            f"disk_level {word}: {fh.disk_percent}% used, {fh.disk_free_gib} GiB free, "
            f"{fh.disk_required_gib} GiB required"
        )
        cause = cause or "control-plane-disk"
    if (
        fh.disk_free_gib is not None
        and fh.disk_required_gib is not None
        and fh.disk_free_gib < fh.disk_required_gib
        and (level in (None, "ok"))
    ):
        problems.append(f"disk_free_gib {fh.disk_free_gib} is below disk_required_gib {fh.disk_required_gib}")
        cause = cause or "control-plane-disk"
    if missing:
        problems.append(f"the body lacks {', '.join(missing)}: those were not checked")
    if problems:
        cls = Classification.INFRASTRUCTURE if cause else Classification.BAD_RESPONSE
        return CheckResult.failed(
            CHECK_FLEET_HEALTH, target, "fleet health: " + "; ".join(problems), ev, cls, cause=cause
        )
    disk = (
        "the release reports no disk (no disk_* field), so the disk was not judged"
        if no_disk
        else f"disk {fh.disk_percent}% ({fh.disk_free_gib} GiB free, {fh.disk_required_gib} GiB required)"
    )
    return CheckResult.passed(CHECK_FLEET_HEALTH, target, f"fleet ok: control actor responsive, {disk}", ev)


# ---------------------------------------------------------------- /api/remote-nodes


def check_remote_fleet(fleet: RemoteFleet, *, target: str = "control-plane") -> CheckResult:
    """The remote-node fleet is enabled and lists at least one node (a pass must have checked one)."""
    ev: dict[str, Any] = {
        "endpoint": "GET /api/remote-nodes",
        "enabled": fleet.enabled,
        "nodes": sorted(n.id for n in fleet.nodes),
        "recent_jobs": len(fleet.recent_jobs),
    }
    if not fleet.enabled:
        return CheckResult.failed(CHECK_REMOTE_FLEET, target, "the remote-node fleet is disabled", ev)
    if not fleet.nodes:
        return CheckResult.failed(CHECK_REMOTE_FLEET, target, "the remote-node fleet lists no nodes", ev)
    return CheckResult.passed(CHECK_REMOTE_FLEET, target, f"{len(fleet.nodes)} remote node(s) registered", ev)


def check_remote_node(
    node: RemoteNode, *, now: datetime, max_age_s: float = DEFAULT_MAX_AGE_S, clock: str = "this machine"
) -> CheckResult:
    """One node: ``online``, not cordoned, ``last_seen`` within ``max_age_s`` of ``now``, Lean ready if ``lean``.

    Fields the verdict needs but the body lacks fail the item and are named. Fields sbxcheck does
    not know are listed in the evidence only (the API grows). ``offline``/``degraded``
    and a stale heartbeat are classified ``infra_unreachable`` (the DGX triage reads that).
    """
    check, target = CHECK_NODE, node.id
    missing = [f for f in _NODE_FIELDS if f not in node.model_fields_set]
    wanted = ["cordoned"] + (["lean_runtime_ready"] if "lean" in node.labels else [])
    unreported = [f for f in wanted if f not in node.model_fields_set]
    ev: dict[str, Any] = {
        "node": node.id,
        "status": node.status,
        "labels": list(node.labels),
        "cordoned": node.cordoned,
        "last_seen": node.last_seen,
        "lean_runtime_ready": node.lean_runtime_ready,
        "error": node.error,
        "capacity_available": node.capacity_available,
        "capacity_total": node.capacity_total,
        "checked_at": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "clock": clock,  # whose clock checked_at is read on
        "max_age_s": max_age_s,
    }
    if node.model_extra:
        ev["extra_fields"] = sorted(node.model_extra)
    if missing:
        ev["missing_fields"] = missing
    if unreported:  # the release lacks these: named, not judged
        ev["not_reported"] = {f: _NODE_CAPABILITIES[f] for f in unreported}
    if node.status == "disabled":
        return CheckResult(
            check=check,
            target=target,
            outcome=Outcome.SKIPPED,
            message=f"node {node.id}: the remote-node fleet is disabled (status 'disabled')",
            evidence=ev,
        )
    problems: list[str] = []
    unreachable = False
    if node.status != "online":
        problems.append(f"status {node.status!r}" + (f" ({node.error})" if node.error else ""))
        unreachable = node.status in _UNREACHABLE_STATUSES
    if node.cordoned:
        problems.append("cordoned: automatic placement skips it")
    if node.last_seen is not None:
        try:
            seen = parse_rfc3339(node.last_seen)
        except ValueError:
            return CheckResult.errored(
                check,
                target,
                f"node {node.id}: last_seen {node.last_seen!r} is not RFC3339",
                Classification.BAD_RESPONSE,
                ev,
            )
        age = (now - seen).total_seconds()
        ev["age_s"] = round(age, 1)
        if age > max_age_s:
            problems.append(f"last_seen {node.last_seen} is {age:.0f}s old (max {max_age_s:g}s)")
            unreachable = True
        elif age < -CLOCK_SKEW_S:
            problems.append(f"last_seen {node.last_seen} is {-age:.0f}s in the future (clock skew?)")
    if "lean" in node.labels and node.lean_runtime_ready is not True and "lean_runtime_ready" not in unreported:
        problems.append("labelled lean but lean_runtime_ready is not true")
    if missing:
        problems.append(f"the node lacks {', '.join(missing)}: not checked")
    if problems:
        cls = Classification.INFRA_UNREACHABLE if unreachable else Classification.CHECK_FAILED
        if not unreachable and missing and len(problems) == 1:
            cls = Classification.BAD_RESPONSE
        return CheckResult.failed(check, target, f"node {node.id}: " + "; ".join(problems), ev, cls)
    lean = ", lean runtime ready" if "lean" in node.labels and "lean_runtime_ready" not in unreported else ""
    cordon = "" if "cordoned" in unreported else ", not cordoned"
    notes = "".join(f"; {_NODE_CAPABILITIES[f]} ({f} absent): not judged" for f in unreported)
    return CheckResult.passed(
        check, target, f"node {node.id} online{cordon}, seen {ev['age_s']:.0f}s ago{lean}{notes}", ev
    )


def find_node(fleet: RemoteFleet, node_id: str) -> RemoteNode | None:
    """The node called ``node_id``, or None."""
    return next((n for n in fleet.nodes if n.id == node_id), None)


def check_expected_node(
    fleet: RemoteFleet, node_id: str, *, now: datetime | None = None, max_age_s: float = DEFAULT_MAX_AGE_S
) -> CheckResult:
    """:func:`check_remote_node` for a node the inventory expects; a node not registered fails.

    ``last_seen`` is written on the control plane's clock, so its age is read on that clock: the
    answer's ``Date`` (``fleet.answered_at``), not this machine's, which may be minutes off. Only a
    server that sends no usable ``Date`` is judged on this machine's clock (and the evidence says so).
    """
    node = find_node(fleet, node_id)
    if node is None:
        return CheckResult.failed(
            CHECK_NODE,
            node_id,
            f"node {node_id} is not registered in GET /api/remote-nodes",
            {"node": node_id, "registered": sorted(n.id for n in fleet.nodes)},
        )
    if now is not None:
        return check_remote_node(node, now=now, max_age_s=max_age_s)
    if fleet.answered_at is not None:
        clock = "the control plane's (the answer's Date header)"
        return check_remote_node(node, now=fleet.answered_at, max_age_s=max_age_s, clock=clock)
    clock = "this machine (the control plane sent no Date header)"
    return check_remote_node(node, now=datetime.now(UTC), max_age_s=max_age_s, clock=clock)


# ---------------------------------------------------------------- the machine-inventory section


@dataclass(frozen=True)
class SshReach:
    """One machine probed over SSH: reachable or not, and when that was checked (RFC3339 UTC)."""

    alias: str
    reachable: bool
    checked_at: str
    detail: str = ""

    @classmethod
    def from_result(cls, result: CheckResult, checked_at: str | None = None) -> SshReach:
        """From an SSH reachability item (e.g. :func:`~sbxcheck.checks.dgx.check_dgx_ssh`)."""
        return cls(
            alias=result.target,
            reachable=result.outcome is Outcome.PASSED,
            checked_at=checked_at or utc_now_iso(),
            detail=result.message,
        )


class _ComputeApi(Protocol):
    def fleet_health(self) -> FleetHealth: ...

    def remote_nodes(self) -> RemoteFleet: ...


@dataclass(frozen=True)
class ComputeLive:
    """What this run read live about registered compute: the nodes, and when each endpoint answered."""

    nodes: list[RemoteNode]
    nodes_checked_at: str | None  # None: the release serves no remote nodes
    fleet_health_checked_at: str | None
    fleet_health_error: str = ""
    nodes_not_served: str = ""

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "remote_nodes_checked_at": self.nodes_checked_at,
            "fleet_health_checked": self.fleet_health_checked_at is not None,
            "fleet_health_checked_at": self.fleet_health_checked_at,
        }
        if self.fleet_health_error:
            out["fleet_health_error"] = self.fleet_health_error
        if self.nodes_not_served:
            out["remote_nodes"] = self.nodes_not_served
        return out


def read_compute_live(client: _ComputeApi) -> ComputeLive:
    """Read ``GET /api/remote-nodes`` and ``GET /api/health/fleet`` now, dating each answer.

    A node listing failure propagates (the inventory cannot be built); a fleet-health failure only
    means the compute rows are dated, not live, and the reason is kept.
    """
    try:
        nodes = client.remote_nodes().nodes
    except NotServed as exc:  # a release without remote nodes registers no compute: the SSH rows stand
        return ComputeLive([], None, None, nodes_not_served=exc.message)
    nodes_at = utc_now_iso()
    try:
        client.fleet_health()
    except SbxError as exc:
        return ComputeLive(nodes, nodes_at, None, f"{exc.classification.value}: {exc.message}")
    return ComputeLive(nodes, nodes_at, utc_now_iso())


def machine_inventory(
    ssh_rows: Iterable[SshReach],
    nodes: Sequence[RemoteNode] | None,
    *,
    nodes_checked_at: str | None = None,
    fleet_health_checked_at: str | None = None,
) -> list[dict[str, Any]]:
    """The report's machine-inventory rows: SSH-reachable machines first, then registered compute.

    Two sections, never merged: ``ssh`` rows say what answered SSH in this run;
    ``sandboxed-compute`` rows say what ``GET /api/remote-nodes`` registered. A compute row is
    ``live`` only when both ``/api/remote-nodes`` and ``/api/health/fleet`` were read in this run;
    otherwise its ``checked_at`` is the date the claim rests on, and it says so.
    """
    node_ids = {n.id for n in nodes or ()}
    rows: list[dict[str, Any]] = []
    for reach in sorted(ssh_rows, key=lambda r: r.alias):
        rows.append(
            {
                "section": "ssh",
                "name": reach.alias,
                "ssh_reachable": reach.reachable,
                "registered_compute": reach.alias in node_ids,
                "checked_at": reach.checked_at,
                "detail": reach.detail,
            }
        )
    live = nodes_checked_at is not None and fleet_health_checked_at is not None
    for node in sorted(nodes or (), key=lambda n: n.id):
        rows.append(
            {
                "section": "sandboxed-compute",
                "name": node.id,
                "status": node.status,
                "labels": list(node.labels),
                "cordoned": node.cordoned,
                "last_seen": node.last_seen,
                "checked_at": nodes_checked_at or "not checked live in this run",
                "live": live,
                "note": ""
                if live
                else "currently-deployed claim is dated, not live "
                "(needs GET /api/remote-nodes and GET /api/health/fleet in this run)",
            }
        )
    return rows
