"""The simulated control plane's release profiles: v0.7.0 serves what that release served, today's is unchanged."""

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
    with pytest.raises(SimError, match=r"known: current, v0\.7"):
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
    first = http.get("/api/control/missions", params={"limit": 5, "status": "pending"}).json()
    again = http.get("/api/control/missions", params={"limit": 200, "offset": 50}).json()
    assert len(first) == 50 and [m["id"] for m in first] == [m["id"] for m in again]
    assert {m["status"] for m in first} == {"interrupted"}


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
