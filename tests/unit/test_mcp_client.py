"""AssistantMcpClient against a tiny SDK (MCPServer) stdio server written to a temp dir.

Covers tool listing, prefixed/unprefixed resolution, isError results, non-JSON text, per-call
timeouts, a server that dies mid-call, startup failures, bounded stderr capture, no leftover
process after close, and that no env value reaches a message, evidence or repr.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbxcheck.clients.mcp import AssistantMcpClient, UnknownToolError
from sbxcheck.clients.mcp_stdio import McpCallTimeout, McpServerUnavailable
from sbxcheck.errors import BadResponseError, CommandTimeout, HostUnreachable

# its module-scoped servers start once, on one xdist worker (sbxcheck makes -n use loadgroup)
pytestmark = pytest.mark.xdist_group("mcp-client")

SECRET = "tok-unit-test-4f9c1d2e8a7b"

SERVER = """
import json, os, sys
import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("tiny")

@app.tool()
def echo(text: str) -> str:
    return json.dumps({"echo": text, "pid": os.getpid()})

@app.tool(name="mcp_sandboxed_assistant_ping")
def ping() -> str:
    return json.dumps({"pong": True})

@app.tool()
def fail(reason: str) -> str:
    raise ToolError(reason)

@app.tool(structured_output=False)
def leak() -> str:
    return "not json, and it shows " + os.environ["UNIT_TOKEN"]

@app.tool()
async def nap(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "rested"

@app.tool()
def die() -> str:
    os._exit(3)

@app.tool()
def shout(size: int) -> str:
    sys.stderr.write("A" * size + "\\nLAST LINE " + os.environ["UNIT_TOKEN"] + "\\n")
    sys.stderr.flush()
    return "ok"

print("server up, token " + os.environ["UNIT_TOKEN"], file=sys.stderr, flush=True)
app.run()
"""


@pytest.fixture(scope="module")
def server_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "tiny_server.py"
    path.write_text(SERVER)
    return path


def _client(script: Path, timeout_s: float = 30.0) -> AssistantMcpClient:
    return AssistantMcpClient(
        [sys.executable, str(script)], env={"UNIT_TOKEN": SECRET}, stderr_limit=4096, timeout_s=timeout_s
    )


@pytest.fixture(scope="module")
def client(server_script: Path) -> Iterator[AssistantMcpClient]:
    with _client(server_script, timeout_s=10.0) as c:
        yield c


def _gone(pid: int, within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def _assert_no_secret(*texts: object) -> None:
    for text in texts:
        assert SECRET not in str(text)


def test_list_tools_and_name_resolution(client: AssistantMcpClient) -> None:
    names = client.list_tools()
    assert {"echo", "mcp_sandboxed_assistant_ping", "fail", "nap"} <= set(names)
    assert client.resolve_tool("echo") == "echo"
    assert client.resolve_tool("mcp_sandboxed_assistant_echo") == "echo"  # prefix stripped
    assert client.resolve_tool("ping") == "mcp_sandboxed_assistant_ping"  # prefix added
    assert client.call("mcp_sandboxed_assistant_echo", {"text": "hi"}).json()["echo"] == "hi"
    assert client.call("ping").data == {"pong": True}
    with pytest.raises(UnknownToolError) as info:
        client.call("mcp_sandboxed_assistant_nothing")
    assert isinstance(info.value, BadResponseError) and "nothing" in str(info.value)
    assert "echo" in info.value.evidence["advertised"]


def test_calls_share_one_session(client: AssistantMcpClient) -> None:
    pids = {client.call("echo", {"text": str(i)}).json()["pid"] for i in range(5)}
    assert len(pids) == 1


def test_tool_errors_are_results_not_exceptions(client: AssistantMcpClient) -> None:
    result = client.call("fail", {"reason": "mission not found"})
    assert result.is_error and "mission not found" in result.text and result.data is None
    bad_args = client.call("echo", {})
    assert bad_args.is_error and "text" in bad_args.text


def test_non_json_text_is_a_redacted_bad_response(client: AssistantMcpClient) -> None:
    result = client.call("leak")  # plain call: fine, the caller did not ask for JSON
    assert not result.is_error and result.data is None and SECRET in result.text
    _assert_no_secret(repr(result))
    with pytest.raises(BadResponseError) as info:
        client.call_json("leak")
    assert "not JSON" in str(info.value)
    _assert_no_secret(info.value, info.value.evidence)


def test_per_call_timeout_keeps_the_session(client: AssistantMcpClient) -> None:
    started = time.monotonic()
    with pytest.raises(McpCallTimeout) as info:
        client.call("nap", {"seconds": 30}, timeout_s=0.5)
    assert time.monotonic() - started < 3.0
    assert isinstance(info.value, CommandTimeout) and "nap" in str(info.value)
    assert client.call("echo", {"text": "still here"}).json()["echo"] == "still here"


def test_stderr_is_captured_bounded_and_redacted(client: AssistantMcpClient) -> None:
    assert client.call("shout", {"size": 20_000}).text == "ok"
    deadline = time.monotonic() + 2.0
    while "LAST LINE" not in client.stderr_tail() and time.monotonic() < deadline:
        time.sleep(0.02)
    tail = client.stderr_tail()
    assert "LAST LINE [REDACTED]" in tail
    assert tail.startswith("[... ") and "earlier bytes dropped]" in tail
    assert len(tail) < 4096 + 200
    _assert_no_secret(tail, repr(client))


def test_crash_mid_call_then_close_leaves_no_process(server_script: Path) -> None:
    c = _client(server_script, timeout_s=10.0).start()
    try:
        pid = c.call("echo", {"text": "x"}).json()["pid"]
        with pytest.raises(McpServerUnavailable) as info:
            c.call("die")
        assert isinstance(info.value, HostUnreachable)
        assert "exited during call to tool die" in str(info.value)
        assert str(server_script) in str(info.value)  # names the command ...
        _assert_no_secret(info.value, info.value.evidence, repr(c))  # ... never its env
        assert "server up, token [REDACTED]" in info.value.evidence["stderr_tail"]
        with pytest.raises(McpServerUnavailable, match="has exited"):
            c.call("echo", {"text": "again"})
    finally:
        started = time.monotonic()
        c.close()
        assert time.monotonic() - started < 5.0
    assert _gone(pid)
    c.close()  # idempotent


def test_close_ends_a_live_server(server_script: Path) -> None:
    with _client(server_script) as c:
        pid = c.call("echo", {"text": "x"}).json()["pid"]
    assert _gone(pid)
    with pytest.raises(McpServerUnavailable, match="not started"):
        c.call("echo", {"text": "x"})


def test_server_that_cannot_start(tmp_path: Path) -> None:
    missing = AssistantMcpClient([str(tmp_path / "no-such-server")], env={"UNIT_TOKEN": SECRET})
    with pytest.raises(McpServerUnavailable, match="could not be started"):
        missing.start()
    quits = AssistantMcpClient(
        [sys.executable, "-c", "import os, sys; print('bye', os.environ['UNIT_TOKEN'], file=sys.stderr)"],
        env={"UNIT_TOKEN": SECRET},
        startup_timeout_s=5.0,
    )
    with pytest.raises(McpServerUnavailable) as info:
        quits.start()
    assert "before completing the handshake" in str(info.value) or "handshake" in str(info.value)
    assert "bye [REDACTED]" in info.value.evidence["stderr_tail"]
    _assert_no_secret(info.value, info.value.evidence)


def test_handshake_deadline(tmp_path: Path) -> None:
    silent = AssistantMcpClient(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], env={}, startup_timeout_s=0.5
    )
    started = time.monotonic()
    with pytest.raises(McpServerUnavailable, match=r"did not complete the handshake within 0\.5s"):
        silent.start()
    assert time.monotonic() - started < 5.0
