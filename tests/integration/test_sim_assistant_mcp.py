"""The simulated assistant MCP over real stdio, in front of a minimal fake REST API.

Every tool is called once through :class:`AssistantMcpClient`; the fake records each request, so
the test checks the REST method, path, query, body and Bearer token behind the tool, and the shape
of what the tool returns.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

import sbxcheck
from sbxcheck.clients.mcp import AssistantMcpClient, McpToolResult
from sbxcheck.sim.assistant_mcp import NEWEST_PAGE, NO_TOKEN_MESSAGE, TOOL_NAMES
from sbxcheck.sim.httpserver import BackgroundServer

# its module-scoped servers start once, on one xdist worker (sbxcheck makes -n use loadgroup)
pytestmark = pytest.mark.xdist_group("mcp-server")

TOKEN = "sim-assistant-token-0123456789"
MID = "11111111-2222-3333-4444-555555555555"
BUSY = "99999999-8888-7777-6666-555555555555"  # settings PATCH answers 409 for this one
GONE = "00000000-dead-beef-0000-000000000000"  # unknown to the fake: 404
WS = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
THREAD = "12345678-1234-1234-1234-123456789abc"
ENV_SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2
REPO = Path(sbxcheck.__file__).resolve().parents[1]


@dataclass(frozen=True)
class Seen:
    """One request the fake REST API received."""

    method: str
    path: str
    query: dict[str, str]
    auth: str | None
    body: Any


def _mission(mid: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": mid,
        "title": f"mission {status}",
        "status": status,
        "backend": "codex",
        "agent": "build",
        "model_effort": "medium",
        "model_override": "gpt-5.6-terra",
        "workspace_id": WS,
        "workspace_name": "assistant",
        "updated_at": "2026-06-01T00:00:00Z",
        "mission_mode": "task",
        **extra,
    }


class FakeRest:
    """Just enough of the sandboxed.sh REST API (spec §3, §4, §6) to answer every tool once."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.acknowledged = False
        self.saved: dict[str, Any] = {}
        routes = [
            Route("/api/workspaces", self.workspaces, methods=["GET", "POST"]),
            Route("/api/workspaces/{wid}", self.workspace, methods=["GET", "PUT", "DELETE"]),
            Route("/api/workspaces/{wid}/exec", self.exec, methods=["POST"]),
            Route("/api/workspaces/{wid}/apply-template", self.echo_template, methods=["POST"]),
            Route("/api/workspaces/{wid}/build", self.build, methods=["POST"]),
            Route("/api/library/workspace-template", self.templates, methods=["GET"]),
            Route("/api/library/workspace-template/{name}", self.template, methods=["GET", "PUT", "DELETE"]),
            Route("/api/control/missions", self.missions, methods=["GET", "POST"]),
            Route("/api/control/missions/{mid}/digest", self.digest, methods=["GET"]),
            Route("/api/control/missions/{mid}/events", self.events, methods=["GET"]),
            Route("/api/control/missions/{mid}/cancel", self.cancel, methods=["POST"]),
            Route("/api/control/missions/{mid}/ask", self.ask, methods=["POST"]),
            Route("/api/control/missions/{mid}/status", self.status, methods=["POST"]),
            Route("/api/control/missions/{mid}/settings", self.settings, methods=["PATCH"]),
            Route("/api/control/missions/{mid}/resume", self.resume, methods=["POST"]),
            Route("/api/control/message", self.message, methods=["POST"]),
            Route("/api/control/running", self.running, methods=["GET"]),
            Route("/api/remote-nodes", self.remote_nodes, methods=["GET"]),
            Route("/api/fs/download", self.download, methods=["GET"]),
        ]
        self.app = Starlette(routes=routes)
        self.app.add_middleware(_Recorder, fake=self)

    def take(self) -> list[Seen]:
        with self.lock:
            seen, self.seen = self.seen, []
        return seen

    # -- workspaces (REST returns env_vars VALUES, spec §4)

    async def workspaces(self, request: Request) -> Response:
        if request.method == "POST":
            return JSONResponse({"id": WS, **(await request.json())})
        return JSONResponse(
            [{"id": WS, "name": "assistant", "status": "ready", "env_vars": {"GH_TOKEN": ENV_SECRET}}]
        )

    async def workspace(self, request: Request) -> Response:
        if request.method == "DELETE":
            return Response(status_code=200)
        if request.method == "PUT":
            return JSONResponse({"id": WS, **(await request.json())})
        return JSONResponse({"id": WS, "name": "assistant", "status": "ready"})

    async def exec(self, request: Request) -> Response:
        return JSONResponse({"exit_code": 0, "stdout": "ok\n", "stderr": "", "timed_out": False})

    async def echo_template(self, request: Request) -> Response:
        return JSONResponse({"template": (await request.json()).get("template") or "base"})

    async def build(self, request: Request) -> Response:
        return JSONResponse({"status": "building"})

    async def templates(self, request: Request) -> Response:
        return JSONResponse([{"name": "base"}])

    async def template(self, request: Request) -> Response:
        name = request.path_params["name"]
        if request.method == "DELETE":
            self.saved.pop(name, None)
            return Response(status_code=200)
        if request.method == "PUT":
            self.saved[name] = {"name": name, **(await request.json())}
            return Response(status_code=200)
        if name in self.saved:
            return JSONResponse(self.saved[name])
        if name == "fresh":
            return PlainTextResponse("template not found", status_code=404)
        return JSONResponse({"name": name, "path": "/x", "distro": "ubuntu-noble", "skills": ["a"]})

    # -- missions

    async def missions(self, request: Request) -> Response:
        if request.method == "POST":
            return JSONResponse(_mission(MID, "pending", title=(await request.json()).get("title")))
        statuses = ["active", "completed", "pending", "awaiting_user", "blocked", "paused"]
        return JSONResponse(
            [_mission(f"{i:08d}-0000-0000-0000-000000000000", s) for i, s in enumerate(statuses)]
        )

    async def digest(self, request: Request) -> Response:
        mid = request.path_params["mid"]
        if mid == GONE:
            return PlainTextResponse(f"Mission {mid} not found", status_code=404)
        if self.acknowledged:
            return JSONResponse({"id": mid, "status": "acknowledged", "title": "t"})
        return JSONResponse(
            {"id": mid, "status": "awaiting_user", "awaiting_kind": "ack", "title": "t", "backend": "codex"}
        )

    async def events(self, request: Request) -> Response:
        shared = {
            "shared_files": [{"name": "r.png", "url": "/api/fs/download?path=/w/r.png", "kind": "image"}]
        }
        rows: list[dict[str, Any]] = [
            {"sequence": 1, "event_type": "assistant_message", "content": "done", "metadata": shared},
            {"sequence": 2, "event_type": "error", "content": "HTTP 429 Too Many Requests", "metadata": {}},
        ]
        rows += [
            {"sequence": 3 + i, "event_type": "tool_call", "tool_name": "read", "content": '{"p":1}'}
            for i in range(3)
        ]
        return JSONResponse(rows, headers={"X-Max-Sequence": "5"})

    async def cancel(self, request: Request) -> Response:
        mid = request.path_params["mid"]
        if mid == GONE:
            return PlainTextResponse(f"Mission {mid} not found", status_code=404)
        return JSONResponse({"ok": True, "cancelled": mid})

    async def ask(self, request: Request) -> Response:
        return JSONResponse({"thread_id": THREAD, "answer": "42", "messages": [{"role": "user"}]})

    async def status(self, request: Request) -> Response:
        self.acknowledged = True
        return JSONResponse({"ok": True})

    async def settings(self, request: Request) -> Response:
        if request.path_params["mid"] == BUSY:
            return PlainTextResponse("mission is running", status_code=409)
        return JSONResponse(_mission(request.path_params["mid"], "awaiting_user", **(await request.json())))

    async def resume(self, request: Request) -> Response:
        return JSONResponse(_mission(request.path_params["mid"], "pending"))

    async def message(self, request: Request) -> Response:
        body = await request.json()
        return JSONResponse(
            {"id": "m1", "queued": True, "message_accepted": True, "mission_id": body["mission_id"]}
        )

    async def running(self, request: Request) -> Response:
        return JSONResponse([{"mission_id": MID, "state": "running", "health": {"status": "healthy"}}])

    async def remote_nodes(self, request: Request) -> Response:
        node = {
            "id": "babylon",
            "status": "online",
            "labels": ["lean"],
            "capacity_total": 4,
            "capacity_available": 3,
            "active_jobs": 1,
            "queued_jobs": 2,
            "token_env": "NODE_TOKEN",
        }
        return JSONResponse({"enabled": True, "nodes": [node], "recent_jobs": []})

    async def download(self, request: Request) -> Response:
        return Response(b"PNGDATA", media_type="image/png")


class _Recorder:
    """ASGI middleware: record every request, refuse any without the right Bearer token (plain text)."""

    def __init__(self, app: Callable[..., Any], fake: FakeRest) -> None:
        self.app = app
        self.fake = fake

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        auth = request.headers.get("authorization")
        with self.fake.lock:
            self.fake.seen.append(
                Seen(request.method, request.url.path, dict(request.query_params), auth, body)
            )
        if auth != f"Bearer {TOKEN}":
            await PlainTextResponse("Invalid or expired token", status_code=401)(scope, receive, send)
            return

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeRest, str]]:
    rest = FakeRest()
    server = BackgroundServer(rest.app, port=0, name="fake-sandboxed-rest").start()
    try:
        yield rest, server.url
    finally:
        server.stop()


def _client(url: str, **env: str) -> AssistantMcpClient:
    return AssistantMcpClient(
        [sys.executable, "-m", "sbxcheck.sim.assistant_mcp"],
        env={"SANDBOXED_API_URL": url + "/", **env},
        timeout_s=15.0,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def mcp(fake: tuple[FakeRest, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[AssistantMcpClient]:
    artifacts = tmp_path_factory.mktemp("artifacts")
    with _client(
        fake[1],
        SANDBOXED_API_TOKEN=TOKEN,
        HERMES_DEFAULT_WORKSPACE_ID=WS,
        HERMES_ASSISTANT_ARTIFACT_DIR=str(artifacts),
    ) as client:
        yield client


@pytest.fixture
def rest(fake: tuple[FakeRest, str]) -> FakeRest:
    fake[0].take()
    fake[0].acknowledged = False
    fake[0].saved.clear()
    return fake[0]


def _ok(result: McpToolResult) -> Any:
    assert not result.is_error, result.text
    return result.json()


def _take(rest: FakeRest) -> list[Seen]:
    """The requests since the last take; each must carry the Bearer token."""
    seen = rest.take()
    assert all(s.auth == f"Bearer {TOKEN}" for s in seen)
    return seen


def _paths(seen: list[Seen]) -> list[tuple[str, str]]:
    return [(s.method, s.path) for s in seen]


def test_server_identity_and_tool_table(mcp: AssistantMcpClient) -> None:
    assert mcp.server_info == ("sandboxed-hermes-assistant", "0.1.0")
    assert mcp.list_tools() == list(TOOL_NAMES)
    assert len(TOOL_NAMES) == 28
    assert mcp.resolve_tool("mcp_sandboxed_assistant_start_mission") == "start_mission"


def test_version_flag() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sbxcheck.sim.assistant_mcp", "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (0, "assistant-mcp 0.1.0\n")


def test_list_workspaces_passes_env_values_through(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    data = _ok(mcp.list_workspaces())
    assert _paths(_take(rest)) == [("GET", "/api/workspaces")]
    assert data == {
        "workspaces": [
            {"id": WS, "name": "assistant", "status": "ready", "env_vars": {"GH_TOKEN": ENV_SECRET}}
        ]
    }


def test_start_mission_body_and_default_workspace(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    data = _ok(mcp.start_mission("t1", "do it", agent="codex", tags=["a"], writer=True))
    seen = _take(rest)
    assert _paths(seen) == [("POST", "/api/control/missions")]
    body = seen[0].body
    assert body["title"] == "t1" and body["prompt"] == "do it"
    assert body["workspace_id"] == WS  # HERMES_DEFAULT_WORKSPACE_ID
    assert body["backend"] == "codex"  # a native agent name implies the backend
    assert body["tags"] == ["a"] and body["writer"] is True
    assert body["model_effort"] is None and "origin_session_id" not in body
    assert data["mission"]["id"] == MID


@pytest.mark.parametrize("tool", ["get_mission", "get_mission_digest"])
def test_digest_tools(mcp: AssistantMcpClient, rest: FakeRest, tool: str) -> None:
    data = _ok(mcp.call(tool, {"mission_id": MID.upper()}))
    assert _paths(_take(rest)) == [("GET", f"/api/control/missions/{MID}/digest")]
    assert data["status"] == "awaiting_user"
    gone = mcp.call(tool, {"mission_id": GONE})
    assert gone.is_error and gone.text == "Mission not found: 404 Not Found"


def test_get_mission_events_cursors(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    events = _ok(mcp.get_mission_events(MID))
    assert isinstance(events, list) and events[0]["sequence"] == 1
    _ok(mcp.get_mission_events(MID, since_seq=3, view="trace", limit=500))
    _ok(mcp.get_mission_events(MID, since_seq=3, before_seq=9))
    queries = [s.query for s in _take(rest)]
    assert queries[0] == {
        "limit": "40",
        "view": "transcript",
        "include_counts": "false",
        "before_seq": str(NEWEST_PAGE),
    }
    assert queries[1] == {"limit": "200", "view": "trace", "include_counts": "false", "since_seq": "3"}
    assert queries[2]["before_seq"] == "9" and "since_seq" not in queries[2]
    bad = mcp.get_mission_events(MID, view="everything")
    assert bad.is_error
    assert bad.text == "Invalid view 'everything'; expected one of: transcript, trace, history, all"


def test_list_missions_compacts_and_forwards_filters(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    data = _ok(mcp.list_missions(status="failed", limit=500, project="verity x", tag="c3"))
    seen = _take(rest)
    assert _paths(seen) == [("GET", "/api/control/missions")]
    assert seen[0].query == {
        "limit": "100",
        "offset": "0",
        "status": "failed",
        "project": "verity x",
        "tag": "c3",
    }
    first = data["missions"][0]
    assert "agent" not in first and "model_effort" not in first
    assert first["tags"] == [] and set(first) >= {
        "id",
        "status",
        "backend",
        "model_override",
        "workspace_name",
    }


def test_list_active_missions_filters_inflight(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    data = _ok(mcp.list_active_missions(limit=3))
    assert _take(rest)[0].query == {"limit": "50", "offset": "0"}
    assert [m["status"] for m in data["missions"]] == ["active", "pending", "awaiting_user"]


def test_cancel_mission(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    assert _ok(mcp.cancel_mission(MID)) == {"success": True, "cancelled": MID}
    seen = _take(rest)
    assert [(s.method, s.path, s.body) for s in seen] == [("POST", f"/api/control/missions/{MID}/cancel", {})]
    gone = mcp.cancel_mission(GONE)
    assert gone.is_error and gone.text == f"Failed to cancel mission: Mission {GONE} not found"


def test_message_and_ask(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    sent = _ok(mcp.send_message_to_mission(MID, "hello"))
    assert sent["mission_id"] == MID
    answer = _ok(mcp.call("ask_mission", {"mission_id": MID, "content": "why?", "thread_id": THREAD}))
    assert answer == {"thread_id": THREAD, "answer": "42"}
    seen = _take(rest)
    assert _paths(seen) == [
        ("POST", "/api/control/message"),
        ("POST", f"/api/control/missions/{MID}/ask"),
    ]
    assert seen[0].body == {"mission_id": MID, "content": "hello"}
    assert seen[1].body == {"content": "why?", "sandbox": False, "thread_id": THREAD}


def test_acknowledge_mission_reads_back(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    data = _ok(mcp.call("acknowledge_mission", {"mission_id": MID}))
    assert data == {"success": True, "acknowledged": MID, "already_acknowledged": False}
    seen = _take(rest)
    assert [(s.method, s.path.rsplit("/", 1)[-1]) for s in seen] == [
        ("GET", "digest"),
        ("POST", "status"),
        ("GET", "digest"),
    ]
    assert seen[1].body == {"status": "acknowledged"}


def test_shared_files_and_download(mcp: AssistantMcpClient, rest: FakeRest, tmp_path: Path) -> None:
    files = _ok(mcp.call("list_mission_shared_files", {"mission_id": MID}))
    assert files["mission_id"] == MID
    assert files["shared_files"] == [
        {
            "name": "r.png",
            "url": "/api/fs/download?path=/w/r.png",
            "kind": "image",
            "mission_id": MID,
            "event_sequence": 1,
        }
    ]
    url = "http://elsewhere.example/api/fs/download?path=%2Fw%2Fr.png"
    got = _ok(mcp.call("download_shared_file", {"mission_id": MID, "url": url, "output_dir": str(tmp_path)}))
    assert got == {"mission_id": MID, "path": str(tmp_path / MID / "r.png"), "bytes": 7}
    assert (tmp_path / MID / "r.png").read_bytes() == b"PNGDATA"
    seen = _take(rest)
    assert _paths(seen)[-1] == ("GET", "/api/fs/download")
    bad = mcp.call("download_shared_file", {"mission_id": MID, "url": "/etc/passwd"})
    assert bad.is_error and "Invalid shared file URL" in bad.text
    outside = mcp.call("download_shared_file", {"mission_id": MID, "url": url, "output_dir": "/var/x"})
    assert outside.is_error and outside.text == "output_dir must be under /tmp"


def test_compute_fleet_is_compacted(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    data = _ok(mcp.call("get_compute_fleet"))
    assert _paths(_take(rest)) == [("GET", "/api/remote-nodes")]
    assert data["summary"] == {
        "nodes_total": 1,
        "nodes_online": 1,
        "lean_nodes_online": 1,
        "lean_slots_total": 4,
        "lean_slots_available": 3,
        "active_remote_jobs": 1,
        "queued_remote_jobs": 2,
    }
    assert "token_env" not in data["nodes"][0] and set(data) == {
        "enabled",
        "summary",
        "placement_policy",
        "nodes",
        "recent_jobs",
    }


def test_workspace_crud(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    assert _ok(mcp.call("get_workspace", {"workspace_id": WS}))["workspace"]["id"] == WS
    created = _ok(mcp.call("create_workspace", {"name": " lab ", "distro": "ubuntu-noble", "bogus": 1}))
    assert created["workspace"]["name"] == "lab"
    updated = _ok(mcp.call("update_workspace", {"workspace_id": WS, "init_scripts": ["base"]}))
    assert updated["workspace"]["init_scripts"] == ["base"]
    assert _ok(mcp.call("delete_workspace", {"workspace_id": WS, "confirm": True})) == {
        "deleted": True,
        "workspace_id": WS,
    }
    seen = _take(rest)
    assert _paths(seen) == [
        ("GET", f"/api/workspaces/{WS}"),
        ("POST", "/api/workspaces"),
        ("PUT", f"/api/workspaces/{WS}"),
        ("DELETE", f"/api/workspaces/{WS}"),
    ]
    assert seen[1].body == {"name": "lab", "distro": "ubuntu-noble"}
    refused = mcp.call("delete_workspace", {"workspace_id": WS})
    assert refused.is_error and refused.text == "Workspace deletion requires confirm=true"
    empty = mcp.call("update_workspace", {"workspace_id": WS})
    assert empty.is_error and empty.text == "No workspace fields supplied to update"
    assert _take(rest) == []


def test_workspace_templates(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    assert _ok(mcp.call("list_workspace_templates")) == {"templates": [{"name": "base"}]}
    assert _ok(mcp.call("get_workspace_template", {"name": "base"}))["template"]["distro"] == "ubuntu-noble"
    saved = _ok(mcp.call("save_workspace_template", {"name": "fresh", "skills": ["b"]}))
    assert saved == {"saved": True, "template": {"name": "fresh", "skills": ["b"]}}
    assert _ok(mcp.call("delete_workspace_template", {"name": "base", "confirm": True})) == {
        "deleted": True,
        "name": "base",
    }
    rebuilt = _ok(mcp.call("rebuild_workspace_from_template", {"workspace_id": WS, "confirm": True}))
    assert rebuilt == {
        "workspace_id": WS,
        "template_applied": "base",
        "status": "building",
        "rebuild_started": True,
    }
    seen = _take(rest)
    assert _paths(seen) == [
        ("GET", "/api/library/workspace-template"),
        ("GET", "/api/library/workspace-template/base"),
        ("GET", "/api/library/workspace-template/fresh"),
        ("PUT", "/api/library/workspace-template/fresh"),
        ("GET", "/api/library/workspace-template/fresh"),
        ("DELETE", "/api/library/workspace-template/base"),
        ("POST", f"/api/workspaces/{WS}/apply-template"),
        ("POST", f"/api/workspaces/{WS}/build"),
    ]
    assert seen[3].body == {"skills": ["b"]}
    assert seen[7].body == {"rebuild": True}


def test_workspace_bash(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    data = _ok(mcp.workspace_bash("echo ok", cwd="repo"))
    assert data == {"exit_code": 0, "stdout": "ok\n", "stderr": "", "timed_out": False}
    seen = _take(rest)
    assert [(s.method, s.path, s.body) for s in seen] == [
        ("POST", f"/api/workspaces/{WS}/exec", {"command": "echo ok", "cwd": "repo", "timeout_secs": None})
    ]
    empty = mcp.workspace_bash("   ")
    assert empty.is_error and empty.text == "Command is empty"


def test_mission_health_and_diagnostics(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    health = _ok(mcp.get_mission_health(MID))
    assert set(health) == {
        "mission_id",
        "title",
        "status",
        "backend",
        "model_override",
        "model_effort",
        "live",
        "live_warning",
        "signals",
        "recent_errors",
        "suspected_loop",
        "trace_tool_calls",
        "last_assistant_message",
        "recommendation",
    }
    assert health["signals"]["rate_limited"] is True and health["signals"]["suspected_loop"] is True
    assert health["suspected_loop"] == {"tool": "read", "repeats": 3, "args": '{"p":1}'}
    assert health["live"]["state"] == "running" and health["last_assistant_message"] == "done"
    paths = [s.path for s in _take(rest)]
    assert paths[:2] == [f"/api/control/missions/{MID}/digest", "/api/control/running"]
    diag = _ok(mcp.call("get_mission_diagnostics", {"mission_id": MID, "limit": 1}))
    assert diag["tool_counts"] == [{"tool": "read", "count": 3}]
    assert diag["repeated_calls"] == [{"tool": "read", "repeats": 3, "args": '{"p":1}'}]
    assert diag["errors"][0]["signals"] == ["rate_limited"]
    assert _take(rest)[0].query["limit"] == "10"


def test_settings_and_resume(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    updated = _ok(
        mcp.call("update_mission_settings", {"mission_id": MID, "backend": " opencode ", "agent": ""})
    )
    assert updated["mission"]["backend"] == "opencode" and "agent" not in updated["mission"]
    assert _take(rest)[0].body == {"backend": "opencode", "agent": ""}
    busy = mcp.call("update_mission_settings", {"mission_id": BUSY, "model_effort": "high"})
    assert busy.is_error and busy.text.startswith("Mission is running, so settings cannot change mid-turn")
    nothing = mcp.call("update_mission_settings", {"mission_id": MID})
    assert nothing.is_error and nothing.text.startswith("No settings provided.")
    _take(rest)
    resumed = _ok(mcp.call("resume_mission", {"mission_id": MID, "content": "keep going"}))
    assert resumed["steered"] is True and resumed["steer_warning"] is None
    seen = _take(rest)
    assert _paths(seen) == [
        ("POST", f"/api/control/missions/{MID}/resume"),
        ("POST", "/api/control/message"),
    ]
    assert seen[0].body == {"clean_workspace": False, "skip_message": True}


def test_argument_errors_match_the_real_server(mcp: AssistantMcpClient, rest: FakeRest) -> None:
    missing = mcp.call("start_mission", {"title": "x"})
    assert missing.is_error and missing.error_code == -32000
    assert missing.text == "Invalid params: missing field `prompt`"
    assert mcp.call("get_mission", {"mission_id": "nope"}).text == "Invalid UUID: nope"
    wrong = mcp.call("list_missions", {"limit": "ten"})
    assert wrong.is_error and wrong.text.startswith("Invalid params: invalid type: string")
    assert _take(rest) == []


def test_without_token_every_rest_tool_fails_clearly(fake: tuple[FakeRest, str]) -> None:
    rest, url = fake
    _take(rest)
    with _client(url, SANDBOXED_API_TOKEN="   ") as client:
        for tool, args in [("list_workspaces", {}), ("get_mission", {"mission_id": MID})]:
            result = client.call(tool, args)
            assert result.is_error and result.text == NO_TOKEN_MESSAGE
    assert _take(rest) == []


def test_scrub_switch_and_start_extras(fake: tuple[FakeRest, str]) -> None:
    rest, url = fake
    env = {"HERMES_SANDBOXED_API_TOKEN": TOKEN, "SANDBOXED_API_TOKEN": "ignored-because-hermes-wins"}
    with _client(url, SBXCHECK_SIM_MCP_SCRUB="1", SBXCHECK_SIM_MCP_START_EXTRAS="1", **env) as client:
        listed = _ok(client.list_workspaces())
        assert listed["workspaces"][0]["env_vars"] == {"GH_TOKEN": "[redacted]"}
        assert ENV_SECRET not in client.list_workspaces().text
        _ok(client.start_mission("t", "p", workspace_id=WS, origin="hermes", origin_session_id="s-1"))
    bodies = [s.body for s in _take(rest) if s.method == "POST"]  # _take: HERMES_ token won
    assert bodies[-1]["origin"] == "hermes" and bodies[-1]["origin_session_id"] == "s-1"
