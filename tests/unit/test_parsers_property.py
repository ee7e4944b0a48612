"""Property tests for the gate's parsers of remote output: random and mutated answers never crash a
judge and never yield ``passed`` unless the pass condition is really in the answer.

Each judge is checked against an independent oracle (a few lines restating the pass condition).
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbxcheck.checks.curl_answer import split_http
from sbxcheck.checks.gate import (
    GateTarget,
    judge_git_integrity,
    judge_pi_models,
)
from sbxcheck.checks.gate_model import (
    judge_cost_reported,
    judge_credit_remaining,
    judge_model_answers,
)
from sbxcheck.checks.pi_output import parse_list_models, parse_pi_events
from sbxcheck.checks.script import ScriptRun
from sbxcheck.clients.runrecords import RECORD_FIELDS, parse_run_record
from sbxcheck.results import CheckResult, Outcome

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SHA = "d34db33f" * 5
ROSTER = ("deepseek/deepseek-v4-flash-0731", "google/gemini-3.6-flash")
TARGET = GateTarget(
    run_id="alpha-20261130-abcdef",
    host="alpha-20261130-abcdef.exe.xyz",
    commit_sha=SHA,
    roster=ROSTER,
    roster_config="adws/adw_sssf_config/sssf.config.yaml",
    openrouter_base_url="https://openrouter.ai/api/v1",
    credit_floor_usd=1.0,
    cost_probe_model=ROSTER[0],
    ping_timeout_s=60,
    pi_timeout_s=180,
)
MARKERS = [
    "SBX_END",
    "SBX_HEAD " + SHA,
    "SBX_STATUS_BEGIN",
    "SBX_STATUS_END 0",
    "SBX_NOAPP",
    "SBX_NOKEY",
    "SBX_PI /usr/bin/pi",
    "SBX_PI_EXIT 0",
    "SBX_RATES_BEGIN",
    "SBX_RATES_END",
    "SBX_PI_BEGIN",
    "SBX_PI_END 0",
    "SBX_STDERR_BEGIN",
    "SBX_STDERR_END",
    "SBX_CURL_RC 0",
    "SBX_HTTP 200",
    "SBX_SCRIPT_ERROR x",
    "provider  model  context  max-out  thinking  images",
    "openrouter  deepseek/deepseek-v4-flash-0731  1.0M  65.5K  yes  no",
    "No models available.",
    '{"data": {"limit": 50, "usage": 1}}',
    '{"choices": [{"message": {"content": "pong"}}]}',
    '{"type":"message_end","message":{"role":"assistant","usage":{"cost":{"total":0.001}}}}',
    "NaN",
    "",
]
lines = st.lists(st.one_of(st.sampled_from(MARKERS), st.text(max_size=40)), max_size=25)


def mutate(text: str, data: st.DataObject) -> str:
    """Delete, duplicate, replace or truncate lines of a valid answer."""
    out = text.splitlines()
    for _ in range(data.draw(st.integers(0, 4))):
        if not out:
            break
        i = data.draw(st.integers(0, len(out) - 1))
        op = data.draw(st.sampled_from(["delete", "dup", "replace", "cut", "swap"]))
        if op == "delete":
            del out[i]
        elif op == "dup":
            out.insert(i, out[i])
        elif op == "replace":
            out[i] = data.draw(st.one_of(st.sampled_from(MARKERS), st.text(max_size=30)))
        elif op == "cut":
            out[i] = out[i][: data.draw(st.integers(0, len(out[i])))]
        else:
            j = data.draw(st.integers(0, len(out) - 1))
            out[i], out[j] = out[j], out[i]
    return "\n".join(out) + "\n"


def run(stdout: str, stderr: str = "", code: int = 0) -> ScriptRun:
    return ScriptRun(TARGET.host, code, stdout, stderr)


def assert_result(result: CheckResult) -> None:
    assert isinstance(result, CheckResult)
    json.dumps(result.model_dump(mode="json"), allow_nan=False)  # the report can always be written


# ------------------------------------------------------------------ A: git rev-parse / status


def a_oracle(stdout: str) -> bool:
    ls = stdout.splitlines()
    if "SBX_END" not in ls or any(ln.startswith("SBX_SCRIPT_ERROR") for ln in ls):
        return False
    heads = [ln[len("SBX_HEAD ") :].strip() for ln in ls if ln.startswith("SBX_HEAD ")]
    if not heads or not heads[0].startswith(SHA) or "SBX_STATUS_BEGIN" not in ls:
        return False
    begin = ls.index("SBX_STATUS_BEGIN")
    rest = ls[begin + 1 :]
    ends = [i for i, ln in enumerate(rest) if ln.startswith("SBX_STATUS_END")]
    return (
        bool(ends) and rest[ends[0]] == "SBX_STATUS_END 0" and not any(ln.strip() for ln in rest[: ends[0]])
    )


GOOD_A = f"SBX_HEAD {SHA}\nSBX_STATUS_BEGIN\nSBX_STATUS_END 0\nSBX_END\n"


@SETTINGS
@given(lines)
def test_a_random(out: list[str]) -> None:
    result = judge_git_integrity(TARGET, run("\n".join(out)))
    assert_result(result)
    assert result.outcome is not Outcome.PASSED or a_oracle("\n".join(out))


@SETTINGS
@given(st.data())
def test_a_mutated(data: st.DataObject) -> None:
    out = mutate(GOOD_A, data)
    result = judge_git_integrity(TARGET, run(out))
    assert_result(result)
    assert result.outcome is not Outcome.PASSED or a_oracle(out)


# ------------------------------------------------------------------ B: pi --list-models


def b_oracle(stdout: str, stderr: str) -> bool:
    text = stdout + "\n" + stderr
    if "SBX_END" not in stdout.splitlines() or "no models available" in text.lower():
        return False
    rows = {tuple(ln.split()[:2]) for ln in text.splitlines() if len(ln.split()) == 6}
    return all(("openrouter", m) in rows for m in ROSTER)


GOOD_B = "\n".join(
    [
        "SBX_PI /usr/bin/pi",
        "provider    model                              context  max-out  thinking  images",
        *(f"openrouter  {m}  1.0M  65.5K  yes  no" for m in ROSTER),
        "SBX_PI_EXIT 0",
        "SBX_END",
    ]
)


@SETTINGS
@given(lines, st.text(max_size=200))
def test_b_random(out: list[str], err: str) -> None:
    result = judge_pi_models(TARGET, run("\n".join(out), err))
    assert_result(result)
    assert result.outcome is not Outcome.PASSED or b_oracle("\n".join(out), err)


@SETTINGS
@given(st.data())
def test_b_mutated(data: st.DataObject) -> None:
    out = mutate(GOOD_B, data)
    result = judge_pi_models(TARGET, run(out))
    assert_result(result)
    assert result.outcome is not Outcome.PASSED or b_oracle(out, "")


@SETTINGS
@given(st.text(max_size=300))
def test_list_models_parser_never_crashes(text: str) -> None:
    _header, rows, other = parse_list_models(text)
    assert len(rows) + len(other) <= len([ln for ln in text.splitlines() if ln.split()])


# ------------------------------------------------------------------ C and E: curl / HTTP answers

json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)


def http(status: int, body: str, rc: int = 0) -> str:
    return f"SBX_CURL_RC {rc}\n{body}\nSBX_HTTP {status}\nSBX_END\n"


def c_oracle(stdout: str) -> bool:
    rc, status, body, markers = split_http(stdout)
    if markers or rc != 0 or status != 200:
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    msg = doc["choices"][0]["message"]
    text = (msg.get("content") or "") + (msg.get("reasoning") or "")
    return bool(text.strip()) and text.strip() != "null"


@SETTINGS
@given(st.sampled_from([200, 400, 401, 402, 500]), json_values, st.integers(0, 60))
def test_c_random_bodies(status: int, doc: Any, rc: int) -> None:
    body = json.dumps({"choices": [{"message": {"content": doc, "reasoning": None}}]})
    for text in (body, json.dumps(doc)):
        out = http(status, text, rc)
        result = judge_model_answers(TARGET, ROSTER[0], run(out))
        assert_result(result)
        assert result.outcome is not Outcome.PASSED or c_oracle(out)


@SETTINGS
@given(st.data())
def test_c_mutated(data: st.DataObject) -> None:
    out = mutate(http(200, '{"choices": [{"message": {"content": "pong"}}]}'), data)
    result = judge_model_answers(TARGET, ROSTER[0], run(out))
    assert_result(result)
    assert result.outcome is not Outcome.PASSED or c_oracle(out)


def e_oracle(stdout: str) -> bool:
    rc, status, body, markers = split_http(stdout)
    if markers or rc != 0 or status != 200:
        return False
    try:
        data = json.loads(body, parse_constant=lambda c: float("nan"))["data"]
    except (ValueError, KeyError, TypeError):
        return False
    limit, usage = data.get("limit"), data.get("usage") or 0

    def num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not num(usage):
        return False
    return limit is None or (num(limit) and limit - usage >= TARGET.credit_floor_usd)


@SETTINGS
@given(st.sampled_from([200, 401, 402, 404]), json_values, json_values, st.booleans())
def test_e_random_bodies(status: int, limit: Any, usage: Any, wrap: bool) -> None:
    doc = {"data": {"limit": limit, "usage": usage}} if wrap else {"limit": limit, "usage": usage}
    out = http(status, json.dumps(doc))
    result = judge_credit_remaining(TARGET, run(out))
    assert_result(result)
    assert result.outcome is not Outcome.PASSED or e_oracle(out)


@SETTINGS
@given(st.data())
def test_e_mutated(data: st.DataObject) -> None:
    out = mutate(http(200, '{"data": {"limit": 50, "usage": 1}}'), data)
    result = judge_credit_remaining(TARGET, run(out))
    assert_result(result)
    assert result.outcome is not Outcome.PASSED or e_oracle(out)


# ------------------------------------------------------------------ D: pi JSON events (cost)

RATES = json.dumps(
    {
        "models": [
            {"id": "a", "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0.01, "cacheWrite": 0.0}},
        ],
        "providers": True,
    }
)


def d_out(events: list[str], rc: int = 0, rates: str = RATES) -> str:
    return "\n".join(
        [
            *("SBX_RATES_BEGIN", rates, "SBX_RATES_END", "SBX_PI_BEGIN", *events, f"SBX_PI_END {rc}"),
            *("SBX_STDERR_BEGIN", "SBX_STDERR_END", "SBX_END"),
        ]
    )


def d_oracle(stdout: str) -> bool:
    ls = stdout.splitlines()
    if "SBX_END" not in ls or any(m in ls for m in ("SBX_NOAPP", "SBX_NOKEY", "SBX_NOPI")):
        return False
    if "SBX_PI_BEGIN" not in ls or "SBX_PI_END 0" not in ls:
        return False
    costs = []
    for ln in ls[ls.index("SBX_PI_BEGIN") + 1 :]:
        try:
            doc = json.loads(ln, parse_constant=lambda c: float("nan"))
        except ValueError:
            continue
        try:
            if doc["type"] == "message_end" and doc["message"]["role"] == "assistant":
                if doc["message"].get("errorMessage"):
                    return False
                total = doc["message"]["usage"]["cost"]["total"]
                if isinstance(total, (int, float)) and not isinstance(total, bool) and math.isfinite(total):
                    costs.append(total)
        except (KeyError, TypeError, AttributeError):
            continue
    return bool(costs) and max(costs) > 0


def event(total: Any, role: Any = "assistant", error: Any = None) -> str:
    message: dict[str, Any] = {"role": role, "usage": {"cost": {"total": total}}}
    if error is not None:
        message["errorMessage"] = error
    return json.dumps({"type": "message_end", "message": message})


@SETTINGS
@given(
    st.lists(
        st.one_of(
            st.builds(
                event,
                json_values,
                st.sampled_from(["assistant", "user", 3]),
                st.none() | st.text(max_size=20),
            ),
            st.text(max_size=40),
            json_values.map(json.dumps),
        ),
        max_size=6,
    ),
    st.sampled_from([0, 1, 124]),
)
def test_d_random_events(events: list[str], rc: int) -> None:
    out = d_out(events, rc)
    result = judge_cost_reported(TARGET, run(out))
    assert_result(result)
    assert result.outcome is not Outcome.PASSED or d_oracle(out)
    for ln in events:  # the event parser alone never crashes and never reports a non-finite cost
        assert all(math.isfinite(c) for c in parse_pi_events([ln]).costs)


@SETTINGS
@given(st.data())
def test_d_mutated(data: st.DataObject) -> None:
    out = mutate(d_out(['{"type":"session"}', event(4.3e-05)]), data)
    result = judge_cost_reported(TARGET, run(out))
    assert_result(result)
    assert result.outcome is not Outcome.PASSED or d_oracle(out)


@SETTINGS
@given(json_values)
def test_d_random_rates_never_pass_without_positive_input_rates(rates: Any) -> None:
    out = d_out([event(0.001)], rates=json.dumps(rates))
    result = judge_cost_reported(TARGET, run(out))
    assert_result(result)
    if result.outcome is Outcome.PASSED:
        models = rates["models"]
        assert models and all(m["cost"]["input"] > 0 for m in models)


# ------------------------------------------------------------------ run records


@SETTINGS
@given(st.dictionaries(st.sampled_from([*RECORD_FIELDS, "extra"]), json_values, max_size=14) | json_values)
def test_run_records_random(doc: Any) -> None:
    if isinstance(doc, dict) and doc.get("run_id") is None and doc:
        doc["run_id"] = "alpha-20261130-abcdef"
    try:
        record = parse_run_record(doc, "x.json", "alpha-20261130-abcdef")
    except ValueError as exc:
        assert str(exc).startswith("x.json: ")
        return
    assert record.run_id == "alpha-20261130-abcdef"
    for name in ("limit", "spend"):
        value = getattr(record, name)
        assert value is None or math.isfinite(value)
    assert record.vm_name is None or isinstance(record.vm_name, str)
