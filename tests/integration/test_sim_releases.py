"""The simulated control plane's release profiles: v0.7.0, 1.3.0 and cba9502 serve what those releases
served (sim/controlplane/releases.py cites the source of each fact); today's is unchanged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sbxcheck.errors import SimError
from sbxcheck.sim.controlplane import ControlPlaneDouble
from sbxcheck.sim.controlplane.releases import PROFILES, release_profile
from sbxcheck.sim.httpserver import BackgroundServer

pytestmark = pytest.mark.xdist_group("controlplane-double")


def _served(
    root: Path, release: str | None, latency_scale: float = 0.02
) -> Iterator[tuple[ControlPlaneDouble, httpx.Client]]:
    double = ControlPlaneDouble(root, latency_scale=latency_scale, seed=7, release=release)
    with BackgroundServer(double.app, name="controlplane") as srv:
        token = httpx.post(f"{srv.url}/api/auth/login", json={"password": double.password}, timeout=5).json()
        with httpx.Client(
            base_url=srv.url, headers={"Authorization": f"Bearer {token['token']}"}, timeout=10
        ) as http:
            yield double, http
    double.stop()


@pytest.fixture(scope="module")
def v07(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlaneDouble, httpx.Client]]:
    yield from _served(tmp_path_factory.mktemp("cp07"), "v0.7")


@pytest.fixture(scope="module")
def v13(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlaneDouble, httpx.Client]]:
    yield from _served(tmp_path_factory.mktemp("cp13"), "1.3")


@pytest.fixture(scope="module")
def newest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlaneDouble, httpx.Client]]:
    yield from _served(tmp_path_factory.mktemp("cpnew"), "cba9502")


@pytest.fixture(scope="module")
def current(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlaneDouble, httpx.Client]]:
    yield from _served(tmp_path_factory.mktemp("cpnow"), None)


def _wait(http: httpx.Client, mission_id: str, status: str, timeout_s: float = 10.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while True:
        doc: dict[str, object] = http.get(f"/api/control/missions/{mission_id}").json()
        if doc["status"] == status or time.monotonic() > deadline:
            return doc
        time.sleep(0.05)


def test_profile_names_agree_with_the_setting() -> None:
    from sbxcheck.plugin.settings import CP_VERSIONS

    assert sorted(CP_VERSIONS) == sorted(PROFILES)
    assert release_profile("0.7.0").name == "v0.7"
    assert release_profile("1.3.0").name == release_profile("v1.3").name == "1.3"
    with pytest.raises(SimError, match=r"known: 1\.3, cba9502, current, v0\.7"):
        release_profile("v0.3")


def test_v07_reports_its_version_and_lacks_the_later_routes(
    v07: tuple[ControlPlaneDouble, httpx.Client],
) -> None:
    _, http = v07
    assert http.get("/api/health").json()["version"] == "0.7.0"
    for path in ("/api/health/fleet", "/api/remote-nodes", "/api/control/tracks", "/api/auth/status"):
        resp = http.get(path)
        assert (resp.status_code, resp.text) == (404, ""), path
    assert http.post("/api/nodes/babylon/cordon", json={}).status_code == 404
    integrity = http.get("/api/control/missions/integrity")
    assert integrity.status_code == 400 and "integrity" in integrity.text
    names = [c["name"] for c in http.get("/api/system/components").json()["components"]]
    assert "sandboxed_sh" in names and "assistant_mcp" not in names


def test_v07_create_drops_the_prompt_until_the_first_message(
    v07: tuple[ControlPlaneDouble, httpx.Client],
) -> None:
    double, http = v07
    created = http.post(
        "/api/control/missions",
        json={"title": "t07", "prompt": "say ok", "backend": "codex", "tags": ["x"], "model_effort": "high"},
    ).json()
    assert "tags" not in created and "model_effort" not in created and created["status"] == "pending"
    time.sleep(0.5)
    assert _wait(http, created["id"], "active", 0.3)["status"] == "pending"  # nothing reached it
    answer = http.post("/api/control/message", json={"content": "say ok", "mission_id": created["id"]})
    assert set(answer.json()) == {"id", "queued"}
    assert _wait(http, created["id"], "completed")["status"] == "completed"
    events = http.get(f"/api/control/missions/{created['id']}/events", params={"since_seq": 2}).json()
    assert events[0]["sequence"] == 1 and len(events) == len(double.events(created["id"]))  # cursor ignored
    assert (
        len(http.get(f"/api/control/missions/{created['id']}/events", params={"offset": 2}).json())
        == len(events) - 2
    )


def test_v07_list_ignores_its_query(v07: tuple[ControlPlaneDouble, httpx.Client]) -> None:
    _, http = v07
    for i in range(55):
        mid = http.post("/api/control/missions", json={"title": f"list {i}"}).json()["id"]
        http.post(f"/api/control/missions/{mid}/cancel", json={})
    first = http.get("/api/control/missions", params={"limit": 5, "status": "completed"}).json()
    again = http.get("/api/control/missions", params={"limit": 200, "offset": 50}).json()
    assert len(first) == 50 and [m["id"] for m in first] == [m["id"] for m in again]
    assert {m["status"] for m in first} == {"pending"}  # the cancels of missions not running changed nothing


def test_v07_cancel_of_a_mission_not_running_is_not_found_and_changes_nothing(
    v07: tuple[ControlPlaneDouble, httpx.Client],
) -> None:
    """v0.7.0 control.rs:3729: the actor cancels only what it runs; anything else is "not found"."""
    double, http = v07
    mid = http.post("/api/control/missions", json={"title": "waits"}).json()["id"]
    answer = http.post(f"/api/control/missions/{mid}/cancel", json={})
    assert (answer.status_code, answer.text) == (404, f"Mission {mid} not found")
    assert http.get(f"/api/control/missions/{mid}").json()["status"] == "pending"
    assert mid in double.missions_nonterminal()


def test_current_profile_keeps_todays_api(current: tuple[ControlPlaneDouble, httpx.Client]) -> None:
    _, http = current
    assert http.get("/api/health").json()["version"] != "0.7.0"
    assert http.get("/api/health/fleet").status_code == 200
    created = http.post(
        "/api/control/missions", json={"title": "now", "prompt": "say ok", "tags": ["x"]}
    ).json()
    assert "x" in created["tags"]
    assert _wait(http, created["id"], "completed")["status"] == "completed"
    events = http.get(f"/api/control/missions/{created['id']}/events", params={"since_seq": 2}).json()
    assert events[0]["sequence"] == 3
    names = [c["name"] for c in http.get("/api/system/components").json()["components"]]
    assert "assistant_mcp" in names


def test_v07_runs_one_mission_at_a_time_and_queues_a_second_message_on_the_running_one(
    tmp_path: Path,
) -> None:
    """Upstream's fallback: with every slot taken, a first message for B becomes a turn of A; /parallel says 409."""
    for double, http in _served(tmp_path, "v0.7", latency_scale=1.0):  # a runs for 1-3 s
        a = http.post("/api/control/missions", json={"title": "a", "backend": "codex"}).json()["id"]
        b = http.post("/api/control/missions", json={"title": "b", "backend": "codex"}).json()["id"]
        assert http.get("/api/control/parallel/config").json() == {"max_parallel_missions": 1, "running_count": 0}
        assert http.post(f"/api/control/missions/{a}/parallel", json={"content": "say ok"}).json() == {
            "ok": True,
            "mission_id": a,
        }
        assert http.get("/api/control/parallel/config").json()["running_count"] == 1
        refused = http.post(f"/api/control/missions/{b}/parallel", json={"content": "say ok"})
        assert (refused.status_code, refused.text) == (409, "Maximum parallel missions (1) reached. 1 running.")
        queued = http.post("/api/control/message", json={"content": "b's prompt", "mission_id": b}).json()
        assert queued["queued"] is True
        turns = double.parallel_state()
        assert "b's prompt" in turns[a]["user_turns"] and turns[b]["user_turns"] == []  # b's text ran in a
        assert _wait(http, a, "completed")["status"] == "completed"
        assert http.get(f"/api/control/missions/{b}").json()["status"] == "pending"
        assert http.post(f"/api/control/missions/{b}/parallel", json={"content": "say ok"}).status_code == 200
        assert _wait(http, b, "completed")["status"] == "completed"


def test_v07_slot_held_by_the_operators_own_mission(tmp_path: Path) -> None:
    for double, http in _served(tmp_path, "v0.7"):
        double.inject("cp.slot-held")
        b = http.post("/api/control/missions", json={"title": "b", "backend": "codex"}).json()["id"]
        assert http.get("/api/control/parallel/config").json() == {"max_parallel_missions": 1, "running_count": 1}
        refused = http.post(f"/api/control/missions/{b}/parallel", json={"content": "say ok"})
        assert refused.status_code == 409
        assert http.get(f"/api/control/missions/{b}").json()["status"] == "pending"


def test_v13_routes_and_fleet_health_as_its_source_has_them(v13: tuple[ControlPlaneDouble, httpx.Client]) -> None:
    _, http = v13
    assert http.get("/api/health").json()["version"] == "1.3.0"
    for path in ("/api/remote-nodes", "/api/control/tracks", "/api/control/parallel/config"):
        resp = http.get(path)
        assert (resp.status_code, resp.text) == (404, ""), path
    assert http.get("/api/control/missions/integrity").status_code == 400
    fleet = http.get("/api/health/fleet").json()
    assert not [k for k in fleet if k.startswith("disk_")]
    assert set(fleet["missions"]) == {"total", "active", "completed", "failed"}
    assert http.get("/api/auth/status").status_code == 200
    names = [c["name"] for c in http.get("/api/system/components").json()["components"]]
    assert "assistant_mcp" in names


def test_v13_create_keeps_tags_and_an_integer_pr_and_drops_the_prompt(
    v13: tuple[ControlPlaneDouble, httpx.Client],
) -> None:
    double, http = v13
    body = {
        "title": "t13", "prompt": "say ok", "backend": "codex", "tags": ["sbxcheck"], "github_pr": 42,
        "idempotency_key": "k-13", "origin": "sbxcheck", "project": "p", "track": "t",
    }  # fmt: skip
    resp = http.post("/api/control/missions", json=body)
    created = resp.json()
    assert "x-ignored-fields" not in resp.headers
    assert created["tags"] == ["sbxcheck"] and created["github_pr"] == 42 and created["status"] == "pending"
    assert "origin" not in created and (created["project"], created["track"]) == ("p", "t")
    again = http.post("/api/control/missions", json=body).json()
    assert again["id"] != created["id"]  # no idempotency lease: the same key makes a second mission
    time.sleep(0.3)
    assert http.get(f"/api/control/missions/{created['id']}").json()["status"] == "pending"  # no prompt reached it
    refused = http.post("/api/control/missions", json={**body, "github_pr": "owner/repo#42"})
    assert refused.status_code == 422 and "github_pr" in refused.text
    effort = http.post("/api/control/missions", json={"backend": "codex", "model_effort": "xhigh"})
    assert effort.status_code == 400 and "low, medium, high" in effort.text
    for mid in double.missions_nonterminal():
        double.set_mission_status(mid, "failed")


def test_v13_list_takes_one_exact_status_and_has_no_horizon(v13: tuple[ControlPlaneDouble, httpx.Client]) -> None:
    double, http = v13
    mid = http.post("/api/control/missions", json={"title": "listed"}).json()["id"]
    double.set_mission_status(mid, "completed")
    rows = http.get("/api/control/missions", params={"limit": 200}).json()
    assert mid in [m["id"] for m in rows]  # completed is listed without all=true
    assert http.get("/api/control/missions", params={"status": "completed,pending"}).json() == []
    assert mid in [m["id"] for m in http.get("/api/control/missions", params={"status": "completed"}).json()]


def test_v13_a_finished_turn_parks_awaiting_ack_and_a_cancel_leaves_it(
    v13: tuple[ControlPlaneDouble, httpx.Client],
) -> None:
    """1.3.0: a turn that went well ends awaiting_user (ack, turn_complete); its cancel is 404 and changes
    nothing; POST .../status acknowledged archives it."""
    _, http = v13
    mid = http.post("/api/control/missions", json={"title": "turn", "backend": "codex"}).json()["id"]
    assert http.post(f"/api/control/missions/{mid}/parallel", json={"content": "say ok"}).status_code == 200
    parked = _wait(http, mid, "awaiting_user")
    assert (parked["status"], parked["awaiting_kind"], parked["terminal_reason"]) == (
        "awaiting_user",
        "ack",
        "turn_complete",
    )
    answer = http.post(f"/api/control/missions/{mid}/cancel", json={})
    assert (answer.status_code, answer.text) == (404, f"Mission {mid} not found")
    assert http.get(f"/api/control/missions/{mid}").json()["status"] == "awaiting_user"
    assert http.post(f"/api/control/missions/{mid}/status", json={"status": "acknowledged"}).json() == {"ok": True}
    assert http.get(f"/api/control/missions/{mid}").json()["status"] == "acknowledged"


def test_v13_drops_a_first_message_when_every_slot_is_taken(tmp_path: Path) -> None:
    """1.3.0 control/mod.rs:10232-10252: the message is dropped with an error event; it is not queued elsewhere."""
    for double, http in _served(tmp_path, "1.3"):
        double.inject("cp.slot-held")
        b = http.post("/api/control/missions", json={"title": "b", "backend": "codex"}).json()["id"]
        answer = http.post("/api/control/message", json={"content": "b's prompt", "mission_id": b}).json()
        assert answer["queued"] is False
        errors = [e["content"] for e in double.events(b) if e["event_type"] == "error"]
        assert errors == [f"Cannot start mission {b}: max parallel missions (1) reached"]
        assert http.get(f"/api/control/missions/{b}").json()["status"] == "pending"
        turns = double.parallel_state()
        assert not [t for t in turns.values() if "b's prompt" in t["user_turns"]]


def test_cba9502_has_no_parallel_config_and_takes_the_prompt_at_create(
    newest: tuple[ControlPlaneDouble, httpx.Client],
) -> None:
    _, http = newest
    resp = http.get("/api/control/parallel/config")
    assert (resp.status_code, resp.text) == (404, "")
    nodes = http.get("/api/remote-nodes").json()["nodes"]
    assert nodes and all("cordoned" in n and "lean_runtime_ready" in n for n in nodes)
    created = http.post("/api/control/missions", json={"title": "new", "prompt": "say ok", "origin": "sbxcheck"})
    assert created.json()["origin"] == "sbxcheck"
    assert _wait(http, created.json()["id"], "completed")["status"] == "completed"
