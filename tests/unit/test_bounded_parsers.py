"""Every parser of outside data is depth- and size-bounded and cannot raise past the item that reads it.

``json`` raises RecursionError (not a ValueError) on deep nesting, which escaped every ``except
ValueError`` around it: in the mission close it left a traceback, no report and the ledger open.
Each reader of outside text goes through ``safeio.loads_bounded``; a guard keeps it so.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import httpx

import sbxcheck
from sbxcheck.checks.revocation import recorded_key
from sbxcheck.checks.script import ScriptRun
from sbxcheck.checks.vm_hygiene import judge_vm_scan
from sbxcheck.clients.stream import ControlStream
from sbxcheck.results import Classification, Outcome
from sbxcheck.spend import mission_cost

DEEP = '{"a": ' * 5000 + "1" + "}" * 5000
PACKAGE = Path(sbxcheck.__file__).parent
MID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def test_a_message_of_json_nested_5000_deep_reports_no_cost() -> None:
    events = [
        {"event_type": "assistant_message", "sequence": 1, "content": DEEP, "metadata": {}},
        {"event_type": "assistant_message", "sequence": 2, "content": "ok", "metadata": {"cost_cents": 12}},
    ]
    assert mission_cost(events).usd == 0.12 and mission_cost(events).unreadable is None


def test_a_hygiene_scan_of_json_nested_5000_deep_is_a_bad_response() -> None:
    from test_vm_hygiene import TARGET

    stdout = f"SBX_SCAN_BEGIN\n{DEEP}\nSBX_SCAN_END 0\nSBX_END\n"
    result = judge_vm_scan(TARGET, ScriptRun("vm", 0, stdout, ""))
    assert (result.outcome, result.classification) == (Outcome.ERROR, Classification.BAD_RESPONSE)


def test_a_run_record_of_json_nested_5000_deep_holds_no_key(tmp_path: Path) -> None:
    (tmp_path / "alpha.json").write_text(DEEP)
    assert recorded_key(tmp_path, "alpha") == (None, None)


def test_a_stream_event_of_json_nested_5000_deep_is_skipped_and_the_stream_reads_on() -> None:
    body = (
        f"event: assistant_message\ndata: {'[' * 5000}{']' * 5000}\n\n"
        f'event: mission_status_changed\ndata: {{"mission_id": "{MID}", "status": "active"}}\n\n'
    ).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=httpx.ByteStream(body))

    stream = ControlStream("http://cp.test", dict, transport=httpx.MockTransport(handler), max_connects=1)
    try:
        stream.start(wait_s=30.0)
        signal = stream.signal(MID)
        deadline_reads = 600
        while signal is None and not stream.absent and deadline_reads:
            deadline_reads -= 1
            stream.wait(MID, 0, stream.generation, 0.05)
            signal = stream.signal(MID)
        assert signal is not None and signal.status == "active", stream.why_absent
        assert stream.why_absent is None or "reader failed" not in stream.why_absent
    finally:
        stream.close()


# ---- the guard: outside text reaches json only through safeio.loads_bounded ------------------

#: Calls of a JSON parser that may stay, each with why: (module, function).
ALLOWED = {
    ("sbxcheck.safeio", "loads_bounded"),  # the bounded reader itself
    ("sbxcheck.lifecycle.ledger_format", "_loads_short"),  # a ledger status line under 256 bytes
    ("sbxcheck.plugin.xdist", "read_groups"),  # the groups file this run's own worker wrote
    ("sbxcheck.plugin.collector", "pytest_runtest_logreport"),  # this run's own worker's record
    # McpToolResult.json(): itself loads_bounded
    ("sbxcheck.plugin.suitework", "health"),  # (in mission_signal_scan)
    ("sbxcheck.clients.channels", "create"),
    ("sbxcheck.clients.channels", "_json"),
    ("sbxcheck.clients.mcp", "call_json"),
}
PARSERS = {"loads", "load", "json", "model_validate_json", "raw_decode"}


def _calls(path: Path) -> list[tuple[str, str, int]]:
    """(innermost function, parser, line) for each call of a JSON parser in ``path``."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PARSERS:
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if node.func.attr == "json" or node.func.attr == "model_validate_json" or name == "json":
                found.append((function, node.func.attr, node.lineno))  # tomllib.loads and the like: not JSON
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_outside_json_is_parsed_only_through_the_bounded_reader() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if "sim" in rel.parts:  # the simulator reads what sbxcheck sends it
            continue
        module = ".".join(rel.parts).removesuffix(".__init__")
        offenders += [
            f"{module}:{line} {function}() calls .{parser}("
            for function, parser, line in _calls(path)
            if (module, function) not in ALLOWED
        ]
    assert offenders == []


def test_the_guard_sees_a_plain_json_loads(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import json\n\ndef read(text):\n    return json.loads(text)\n")
    assert _calls(sample) == [("read", "loads", 4)]
    assert json.loads("1") == 1
