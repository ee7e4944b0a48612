"""Gate B and D on what each pi release prints (0.73.1, 0.83.0, 1.6.0; sbxcheck/sim/pi_releases.py has the
facts): the model table on either stream and noise on the other, pi's own "errors loading models.json",
and a live cost that OpenRouter billed (``totalFromProvider``, pi-ai 1.5.0 on) while models.json's rates
priced it at 0. The event shapes below are the ones the real releases print against the OpenRouter double."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sbxcheck.checks.gate import GateTarget, judge_pi_models
from sbxcheck.checks.gate_model import judge_cost_reported
from sbxcheck.checks.pi_output import parse_pi_events, read_model_table
from sbxcheck.checks.script import ScriptRun
from sbxcheck.results import Outcome

DEEPSEEK, GEMINI = "deepseek/deepseek-v4-flash-0731", "google/gemini-3.6-flash"
TARGET = GateTarget(
    run_id="alpha-20261130-abcdef",
    host="alpha-20261130-abcdef.exe.xyz",
    commit_sha="d34db33f" * 5,
    roster=(DEEPSEEK, GEMINI),
    roster_config="adws/adw_sssf_config/sssf.config.yaml",
    openrouter_base_url="https://openrouter.ai/api/v1",
    credit_floor_usd=1.0,
    cost_probe_model=DEEPSEEK,
    ping_timeout_s=60,
    pi_timeout_s=180,
)
HEADER = "provider    model                              context  max-out  thinking  images"
DEEPSEEK_ROW = f"openrouter  {DEEPSEEK}    1.0M     65.5K    yes       no"
GEMINI_ROW = f"openrouter  {GEMINI}            1.0M     65.5K    yes       yes"
SCHEMA_ERRORS = [
    "Warning: errors loading models.json:",
    "Invalid models.json schema:",
    "  - providers.openrouter.models.0.cost.cacheRead: must have required properties cacheRead, cacheWrite",
    "",
    "File: /home/exedev/.pi/agent/models.json",
]


def run(stdout: str, stderr: str = "") -> ScriptRun:
    return ScriptRun(TARGET.host, 0, stdout, stderr)


def listed(printed: list[str]) -> str:
    return "\n".join(["SBX_PI /usr/local/bin/pi", *printed, "", "SBX_PI_EXIT 0", "SBX_END"]) + "\n"


# ------------------------------------------------------------------ B


@pytest.mark.parametrize(
    ("release", "stdout", "stderr"),
    [
        ("0.73.1", [], [HEADER, DEEPSEEK_ROW, GEMINI_ROW]),
        ("0.83.0", [HEADER, DEEPSEEK_ROW, GEMINI_ROW], []),
        ("1.6.0", [HEADER, DEEPSEEK_ROW, GEMINI_ROW], ["reflection fetch failed: unrecognized reflection shape"]),
    ],
)
def test_b_reads_the_table_from_the_stream_each_release_prints_it_on(
    release: str, stdout: list[str], stderr: list[str]
) -> None:
    result = judge_pi_models(TARGET, run(listed(stdout), "\n".join(stderr)))
    assert result.outcome is Outcome.PASSED, (release, result.message)
    assert result.evidence["table_stream"] == ("stderr" if release == "0.73.1" else "stdout")


def test_b_a_row_on_the_other_stream_is_noise_not_a_listed_model() -> None:
    """pi 0.83+ prints the table on stdout: a row-shaped line on stderr (a wrapper, an extension) lists nothing."""
    noise = f"openrouter  {GEMINI}  1.0M  65.5K  yes  yes"
    result = judge_pi_models(TARGET, run(listed([HEADER, DEEPSEEK_ROW]), noise))
    assert result.outcome is Outcome.FAILED
    assert GEMINI in result.message and "missing from pi --list-models" in result.message
    assert result.evidence["table_stream"] == "stdout" and result.evidence["rows"] == 1


def test_b_fails_when_pi_rejects_models_json_even_if_its_catalog_lists_the_roster() -> None:
    """pi 1.6.0's built-in catalog lists every roster id: a rejected models.json (partial cost blocks) still
    fails B, naming pi's own reason, on the release that prints the table on stdout as on 0.73.1's stderr."""
    for stdout, stderr in (
        ([HEADER, DEEPSEEK_ROW, GEMINI_ROW], SCHEMA_ERRORS),
        ([], [*SCHEMA_ERRORS, HEADER, DEEPSEEK_ROW, GEMINI_ROW]),
    ):
        result = judge_pi_models(TARGET, run(listed(stdout), "\n".join(stderr)))
        assert result.outcome is Outcome.FAILED, result.message
        assert result.message.startswith(
            "pi rejected ~/.pi/agent/models.json (providers.openrouter.models.0.cost.cacheRead: must have "
            "required properties cacheRead, cacheWrite): none of its models loaded; 2 roster model(s) listed "
            "only from pi's built-in catalog"
        )
        assert result.evidence["models_json_errors"][0] == "Invalid models.json schema:"


def test_the_model_table_keeps_the_stream_with_the_header() -> None:
    table = read_model_table("\n".join([HEADER, DEEPSEEK_ROW]), f"{GEMINI_ROW}\nstray noise")
    assert table.stream == "stdout" and [r.model for r in table.rows] == [DEEPSEEK]
    assert len(table.other) == 2 and not table.no_models and not table.models_json_errors
    assert read_model_table("", "").stream is None


# ------------------------------------------------------------------ D

FULL = {"input": 0.09, "output": 0.18, "cacheRead": 0.018, "cacheWrite": 0.0}


def rates_doc(cost: dict[str, Any] | None) -> str:
    entry: dict[str, Any] = {"provider": "openrouter", "id": DEEPSEEK}
    if cost is not None:
        entry["cost"] = cost
    return json.dumps({"models": [entry], "providers": True})


def assistant_end(release: str, *, rates: dict[str, float] | None, billed: float | None) -> dict[str, Any]:
    """The assistant ``message_end`` a release prints for 576 input and 15 output tokens."""
    tokens = {"input": 576, "output": 15, "cacheRead": 0, "cacheWrite": 0}
    parts = {k: (rates[k] * tokens[k] / 1e6 if rates else 0) for k in tokens}
    cost: dict[str, Any] = {**parts, "total": sum(parts.values())}
    usage: dict[str, Any] = {**tokens, "totalTokens": 591, "cost": cost}
    message: dict[str, Any] = {
        "role": "assistant", "content": [{"type": "text", "text": "ok"}], "provider": "openrouter",
        "model": DEEPSEEK, "usage": usage, "stopReason": "stop",
    }  # fmt: skip
    if release != "0.73.1":
        usage["reasoning"] = 0
        message["rawStopReason"] = "stop"
    if release == "1.6.0":
        cost["totalFromProvider"] = billed is not None
        if billed is not None:
            cost["total"] = billed
        message.update(durationMs=37, thinkingLevel="medium")
    return {"type": "message_end", "message": message}


def events(release: str, end: dict[str, Any]) -> list[dict[str, Any]]:
    """The event sequence around ``end``, in the release's shapes."""
    seq: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": "x"}, {"type": "agent_start"}]
    if release == "1.6.0":  # a leading system message, and updates carrying usage instead of the message
        seq.append({"type": "message_end", "message": {"role": "system", "content": "", "sections": {}}})
        seq.append({"type": "message_update", "usage": end["message"]["usage"], "assistantMessageEvent": {}})
    else:
        seq.append({"type": "message_update", "message": end["message"], "assistantMessageEvent": {}})
    seq += [end, {"type": "turn_end", "message": end["message"]}, {"type": "agent_end", "messages": []}]
    if release != "0.73.1":
        seq.append({"type": "agent_settled"})
    return seq


def cost_out(rates: str, lines: list[dict[str, Any]]) -> str:
    return "\n".join(
        ["SBX_RATES_BEGIN", rates, "SBX_RATES_END", "SBX_PI_BEGIN", *map(json.dumps, lines), "", "SBX_PI_END 0",
         "SBX_STDERR_BEGIN", "SBX_STDERR_END", "SBX_END"]
    )  # fmt: skip


@pytest.mark.parametrize("release", ["0.73.1", "0.83.0", "1.6.0"])
def test_d_passes_on_each_releases_healthy_call(release: str) -> None:
    billed = 5.454e-05 if release == "1.6.0" else None
    end = assistant_end(release, rates=FULL, billed=billed)
    result = judge_cost_reported(TARGET, run(cost_out(rates_doc(FULL), events(release, end))))
    assert result.outcome is Outcome.PASSED, result.message
    assert result.evidence["assistant_messages"] == 1
    assert result.evidence["cost_from_provider"] is (release == "1.6.0")
    assert result.evidence["cost_at_rates"] == pytest.approx((576 * 0.09 + 15 * 0.18) / 1e6)


@pytest.mark.parametrize("rates", [None, {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}])
@pytest.mark.parametrize("release", ["0.73.1", "0.83.0", "1.6.0"])
def test_d_fails_a_zero_rate_models_json_whatever_pi_reports(release: str, rates: dict[str, float] | None) -> None:
    """1.6.0 reports OpenRouter's bill as its total with zero rates: a non-zero live cost, and still D fails."""
    billed = 5.454e-05 if release == "1.6.0" else None
    end = assistant_end(release, rates=None, billed=billed)
    result = judge_cost_reported(TARGET, run(cost_out(rates_doc(rates), events(release, end))))
    assert result.outcome is Outcome.FAILED
    assert "models.json has no rate table for the probe model" in result.message
    if release == "1.6.0":
        assert result.message.startswith("pi reported $5.454e-05 from OpenRouter's bill (cost.totalFromProvider)")
        assert result.evidence["cost_total"] == pytest.approx(5.454e-05) and result.evidence["cost_at_rates"] == 0


def test_d_a_provider_billed_cost_does_not_pass_when_pi_priced_nothing_at_the_files_rates() -> None:
    """models.json reads right, but pi did not load it (its rates priced the call at 0): OpenRouter's bill as
    pi's total must not make a pass."""
    end = assistant_end("1.6.0", rates=None, billed=5.454e-05)
    result = judge_cost_reported(TARGET, run(cost_out(rates_doc(FULL), events("1.6.0", end))))
    assert result.outcome is Outcome.FAILED
    assert result.evidence["rate_problems"] == []
    assert "at models.json's rates the call cost 0" in result.message


def test_d_fails_when_pi_priced_the_call_at_rates_that_are_not_models_jsons() -> None:
    """pi's built-in catalog priced the probe (models.json not loaded): the components disagree with the file."""
    built_in = {"input": 0.14, "output": 0.28, "cacheRead": 0.028, "cacheWrite": 0.0}
    for release in ("0.73.1", "1.6.0"):
        end = assistant_end(release, rates=built_in, billed=5.9e-05 if release == "1.6.0" else None)
        result = judge_cost_reported(TARGET, run(cost_out(rates_doc(FULL), events(release, end))))
        assert result.outcome is Outcome.FAILED, release
        assert "pi priced input at $0.14 per million tokens, models.json says $0.09" in result.message


def test_events_of_every_release_yield_one_assistant_message() -> None:
    for release in ("0.73.1", "0.83.0", "1.6.0"):
        end = assistant_end(release, rates=FULL, billed=1e-4 if release == "1.6.0" else None)
        seen = parse_pi_events([json.dumps(e) for e in events(release, end)])
        assert len(seen.messages) == 1 and seen.stop_reason == "stop" and seen.non_json == 0
        assert seen.messages[0].tokens["input"] == 576
