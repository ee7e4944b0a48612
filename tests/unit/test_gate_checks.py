"""The gate checks' judgement, against scripted remote answers (no SSH): every trap in specs §3."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest

from sbxcheck.checks.gate import (
    GateTarget,
    check_git_integrity,
    check_pi_models,
    check_roster_matches,
    git_integrity_script,
    pi_models_script,
    roster_script,
)
from sbxcheck.checks.gate_model import (
    check_cost_reported,
    check_credit_remaining,
    check_model_answers,
    cost_script,
    credit_script,
    model_answers_script,
)
from sbxcheck.checks.pi_output import parse_list_models, parse_pi_events
from sbxcheck.checks.script import NEUTRAL_BASH, GateScript
from sbxcheck.errors import CommandTimeout
from sbxcheck.results import Outcome
from sbxcheck.transports.ssh import CommandResult

SHA = "d34db33f" * 5
TARGET = GateTarget(
    run_id="alpha-20261130-abcdef",
    host="alpha-20261130-abcdef.exe.xyz",
    commit_sha=SHA,
    roster=("deepseek/deepseek-v4-flash-0731", "google/gemini-3.6-flash"),
    roster_config="adws/adw_sssf_config/sssf.config.yaml",
    openrouter_base_url="https://openrouter.ai/api/v1",
    credit_floor_usd=1.0,
    cost_probe_model="deepseek/deepseek-v4-flash-0731",
    ping_timeout_s=60,
    pi_timeout_s=180,
)
HEADER = "provider    model                              context  max-out  thinking  images"
ROWS = [
    "openrouter  deepseek/deepseek-v4-flash-0731    1.0M     65.5K    yes       no",
    "openrouter  google/gemini-3.6-flash            1.0M     65.5K    yes       yes",
]


@dataclass
class FakeShell:
    """Answers every command with one scripted result and remembers what it was sent."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    raises: Exception | None = None
    alias: str = "alpha-20261130-abcdef.exe.xyz"
    sent: list[tuple[str, str]] = field(default_factory=list)
    timeouts: list[float | None] = field(default_factory=list)

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        self.sent.append((command, stdin if isinstance(stdin, str) else ""))
        self.timeouts.append(timeout)
        if self.raises is not None:
            raise self.raises
        return CommandResult(self.exit_code, self.stdout, self.stderr, 0.01)


def git_out(head: str, porcelain: list[str]) -> str:
    """What the A script prints: each status entry prefixed, then their count."""
    entries = [f"| {entry}" for entry in porcelain]
    lines = [f"SBX_HEAD {head}", "SBX_STATUS_BEGIN", *entries, f"SBX_STATUS_COUNT {len(porcelain)}"]
    return "\n".join([*lines, "SBX_STATUS_END 0", "SBX_END"]) + "\n"


# ------------------------------------------------------------------ A


def test_a_passes_on_prefix_match_of_a_short_recorded_sha() -> None:
    target = GateTarget(**{**TARGET.__dict__, "commit_sha": SHA[:12]})
    result = check_git_integrity(FakeShell(git_out(SHA, [])), target)
    assert result.outcome is Outcome.PASSED
    assert result.evidence["match"] == "prefix"


@pytest.mark.parametrize("head", ["0" * 40, SHA.upper(), SHA[:20]])
def test_a_fails_when_head_does_not_start_with_the_sha(head: str) -> None:
    result = check_git_integrity(FakeShell(git_out(head, [])), TARGET)
    assert result.outcome is Outcome.FAILED
    assert "does not match the recorded commit_sha" in result.message


def test_a_fails_on_zero_byte_truncation_shown_as_modified() -> None:
    result = check_git_integrity(FakeShell(git_out(SHA, [" M adws/a.py", " M adws/b.py"])), TARGET)
    assert result.outcome is Outcome.FAILED
    assert result.evidence["porcelain_lines"] == 2
    assert "ssh alpha-20261130-abcdef.exe.xyz" in (result.recommendation or "")


def test_a_names_missing_app_and_damaged_git() -> None:
    assert "FILL never ran" in check_git_integrity(FakeShell("SBX_NOAPP\nSBX_END\n"), TARGET).message
    damaged = check_git_integrity(FakeShell("SBX_NOHEAD\n| fatal: not a git repository\nSBX_END\n"), TARGET)
    assert damaged.outcome is Outcome.FAILED and ".git is damaged" in damaged.message


def test_a_garbage_answer_is_an_error_not_a_pass() -> None:
    result = check_git_integrity(FakeShell("Welcome to Ubuntu 24.04\nSBX_END\n"), TARGET)
    assert result.outcome is Outcome.ERROR
    assert result.classification is not None and result.classification.value == "bad_response"


# ------------------------------------------------------------------ B


def pi_out(printed: str) -> str:
    return f"SBX_PI /usr/local/bin/pi\n{printed}\nSBX_PI_EXIT 0\nSBX_END\n"


def test_b_checks_command_v_pi_first() -> None:
    result = check_pi_models(FakeShell("SBX_NOPI\nSBX_END\n"), TARGET)
    assert result.outcome is Outcome.FAILED and result.message == "pi is not on PATH"


@pytest.mark.parametrize(
    "stdout",
    [
        "No models available. Use /login to log into a provider via OAuth or API key. See:\n  docs\n",
        "No models available. Set API keys in environment variables.\n",
    ],
)
def test_b_fails_on_no_models_available_with_exit_0(stdout: str) -> None:
    result = check_pi_models(FakeShell(pi_out(stdout), "", 0), TARGET)
    assert result.outcome is Outcome.FAILED
    assert "No models available" in result.message


def test_b_stderr_noise_alone_does_not_pass() -> None:
    noise = "reflection fetch failed: unrecognized reflection shape\n"
    result = check_pi_models(FakeShell(pi_out(""), noise, 0), TARGET)
    assert result.outcome is Outcome.FAILED
    assert result.evidence["other_lines"] == 1


def test_b_fails_when_a_roster_model_is_absent_from_the_list() -> None:
    result = check_pi_models(FakeShell(pi_out("\n".join([HEADER, ROWS[0]]))), TARGET)
    assert result.outcome is Outcome.FAILED
    assert "google/gemini-3.6-flash" in result.message


def test_b_passes_and_warns_on_default_limits() -> None:
    rows = [*ROWS[:1], "openrouter  google/gemini-3.6-flash  128K  16.4K  no  no"]
    result = check_pi_models(FakeShell(pi_out("\n".join([HEADER, *rows]))), TARGET)
    assert result.outcome is Outcome.PASSED
    assert result.evidence["warning_default_limits"] == ["google/gemini-3.6-flash"]


def test_parse_list_models_reads_columns() -> None:
    noise = "reflection fetch failed: x y unrecognized reflection shape"
    header, rows, other = parse_list_models("\n".join([noise, HEADER, *ROWS, noise, ""]))
    assert header and [r.model for r in rows] == [
        "deepseek/deepseek-v4-flash-0731",
        "google/gemini-3.6-flash",
    ]
    assert rows[0].context == "1.0M"
    assert other == [noise, noise]


def test_a_header_glued_to_a_wrappers_open_line_is_still_the_header() -> None:
    """A bash wrapper around pi (nvm, asdf) whose start-up file prints without a newline: pi's first line
    follows that text on the same line."""
    header, rows, _ = parse_list_models("\n".join(["direnv: export +VIRTUAL_ENV" + HEADER, *ROWS]))
    assert header and len(rows) == 2
    assert parse_list_models("\n".join(["text provider model context max-out thinking imagesX", *ROWS]))[0] is False


def test_a_pi_event_glued_to_an_open_line_is_read_and_noise_json_is_not_a_message_end() -> None:
    end = json.dumps({"type": "message_end", "message": {"role": "assistant", "stopReason": "stop",
                                                          "usage": {"cost": {"total": 0.0002}}}})  # fmt: skip
    lines = ["direnv: loading ~/.envrc" + end, '{"data": {"usage": 0, "limit": 999}}', "SBX_HTTP 200"]
    seen = parse_pi_events(lines)
    assert (seen.events, seen.non_json, seen.costs, seen.stop_reason) == (2, 1, [0.0002], "stop")


def test_b_reads_the_table_from_stderr_as_pi_prints_it_without_a_tty() -> None:
    result = check_pi_models(FakeShell(pi_out(""), "\n".join([HEADER, *ROWS])), TARGET)
    assert result.outcome is Outcome.PASSED, result.message


# ------------------------------------------------------------------ C


def http_out(status: int, body: object, rc: int = 0) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return f"SBX_CURL_RC {rc}\n{text}\nSBX_HTTP {status}\nSBX_END\n"


def answer(content: str | None, reasoning: str | None = None) -> dict[str, object]:
    return {
        "choices": [
            {
                "message": {"role": "assistant", "content": content, "reasoning": reasoning},
                "finish_reason": "stop",
            }
        ]
    }


def test_c_reasoning_only_answer_passes() -> None:
    result = check_model_answers(
        FakeShell(http_out(200, answer(None, "The user wants pong."))), TARGET, "m/x"
    )
    assert result.outcome is Outcome.PASSED
    assert result.evidence["answered_in"] == "reasoning"


def test_c_never_puts_the_key_on_a_command_line() -> None:
    shell = FakeShell(http_out(200, answer("pong")))
    check_model_answers(shell, TARGET, "google/gemini-3.6-flash")
    command, script = shell.sent[0]
    assert command.startswith(NEUTRAL_BASH + " -- ")
    assert "OPENROUTER_API_KEY" not in command and "Authorization" not in command
    assert "-H @-" in script  # the header travels on curl's stdin, not its argv


@pytest.mark.parametrize(
    ("status", "body", "needle"),
    [
        (400, {"error": {"message": "x/y is not a valid model ID", "code": 400}}, "not a valid model ID"),
        (404, {"error": {"message": "No endpoints found matching your data policy"}}, "data policy"),
        (200, answer(None, None), "no content and no error field"),
        (200, answer("", ""), "no content and no error field"),
    ],
)
def test_c_fails_with_the_servers_reason(status: int, body: object, needle: str) -> None:
    result = check_model_answers(FakeShell(http_out(status, body)), TARGET, "x/y")
    assert result.outcome is Outcome.FAILED
    assert needle in result.message


def test_c_402_is_grouped_as_credit_exhausted() -> None:
    body = {"error": {"message": "Insufficient credits", "code": 402}}
    result = check_model_answers(FakeShell(http_out(402, body)), TARGET, "x/y")
    assert result.outcome is Outcome.FAILED and result.cause == f"credit-exhausted:{TARGET.run_id}"


def test_c_unparseable_body_and_timeout() -> None:
    bad = check_model_answers(FakeShell(http_out(502, "<html>bad gateway</html>")), TARGET, "x/y")
    assert bad.outcome is Outcome.FAILED and "unparseable response" in bad.message
    slow = check_model_answers(FakeShell(http_out(0, "curl: (28) timed out", rc=28)), TARGET, "x/y")
    assert slow.classification is not None and slow.classification.value == "timeout"


def test_c_missing_key_in_env() -> None:
    result = check_model_answers(FakeShell("SBX_NOKEY\nSBX_END\n"), TARGET, "x/y")
    assert result.outcome is Outcome.FAILED and "OPENROUTER_API_KEY" in result.message


def test_transport_errors_propagate_to_the_plugin() -> None:
    with pytest.raises(CommandTimeout):
        check_model_answers(FakeShell(raises=CommandTimeout("timed out")), TARGET, "x/y")


def config_out(text: str) -> str:
    """What the roster script prints for a config holding ``text``: its size, then each line prefixed."""
    lines = [f"SBX_CONFIG_SIZE {len(text.encode())}", "SBX_CONFIG_BEGIN"]
    lines += [f"| {line}" for line in text.splitlines()]
    return "\n".join([*lines, "", "SBX_CONFIG_END 0", "SBX_END"]) + "\n"


def test_c_roster_matches_and_differs() -> None:
    cfg = (
        "defaults:\n  model: openrouter/deepseek/deepseek-v4-flash-0731\nagents:\n  - name: p\n"
        "    model: 'openrouter/google/gemini-3.6-flash'\n"
    )
    ok = check_roster_matches(FakeShell(config_out(cfg)), TARGET)
    assert ok.outcome is Outcome.PASSED, ok.message
    extra = cfg + "  - name: q\n    model: openrouter/z-ai/glm-5.2\n"
    bad = check_roster_matches(FakeShell(config_out(extra)), TARGET)
    assert bad.outcome is Outcome.FAILED and "z-ai/glm-5.2" in bad.message


# ------------------------------------------------------------------ D


def cost_out(rates: object, events: list[dict[str, object]], rc: int = 0) -> str:
    lines = ["SBX_RATES_BEGIN", json.dumps(rates), "SBX_RATES_END", "SBX_PI_BEGIN"]
    lines += [json.dumps(e) for e in events]
    lines += [f"SBX_PI_END {rc}", "SBX_STDERR_BEGIN", "SBX_STDERR_END", "SBX_END"]
    return "\n".join(lines) + "\n"


FULL = {"input": 0.09, "output": 0.18, "cacheRead": 0.018, "cacheWrite": 0.0}
RATES = {"models": [{"provider": "openrouter", "id": "a", "cost": FULL}], "providers": True}


def end(total: float, **extra: object) -> dict[str, object]:
    usage = {
        "input": 120,
        "output": 12,
        "cost": {"input": 1e-5, "output": 2e-6, "cacheRead": 0, "cacheWrite": 0, "total": total},
    }
    return {"type": "message_end", "message": {"role": "assistant", "usage": usage, **extra}}


def test_d_passes_on_a_tiny_nonzero_cost() -> None:
    result = check_cost_reported(FakeShell(cost_out(RATES, [{"type": "session"}, end(4.3e-05)])), TARGET)
    assert result.outcome is Outcome.PASSED, result.message
    assert result.evidence["cost_total"] == pytest.approx(4.3e-05)


def test_d_fails_on_zero_cost_and_on_partial_or_missing_rates() -> None:
    zero = check_cost_reported(FakeShell(cost_out(RATES, [end(0.0)])), TARGET)
    assert zero.outcome is Outcome.FAILED and "cost 0" in zero.message
    partial = {"models": [{"id": "a", "cost": {"input": 0.1, "output": 0.2}}], "providers": True}
    bad = check_cost_reported(FakeShell(cost_out(partial, [end(1e-4)])), TARGET)
    assert bad.outcome is Outcome.FAILED and "missing cacheRead, cacheWrite" in bad.message
    missing = check_cost_reported(FakeShell(cost_out({"missing": True}, [end(1e-4)])), TARGET)
    assert missing.outcome is Outcome.FAILED and "models.json is missing" in missing.message


def test_d_fails_on_pi_error_exit_or_no_message_end() -> None:
    err = check_cost_reported(
        FakeShell(cost_out(RATES, [end(0.0, errorMessage="402 Insufficient credits")], rc=1)), TARGET
    )
    assert err.outcome is Outcome.FAILED and "pi exited 1" in err.message and "Insufficient" in err.message
    none = check_cost_reported(FakeShell(cost_out(RATES, [{"type": "session"}])), TARGET)
    assert none.outcome is Outcome.FAILED and "no assistant message_end" in none.message


# ------------------------------------------------------------------ E


def key_body(limit: float | None, usage: float) -> dict[str, object]:
    return {"data": {"label": "sk-or-v1-abc...def", "limit": limit, "usage": usage}}


def test_e_capped_uncapped_and_below_floor() -> None:
    ok = check_credit_remaining(FakeShell(http_out(200, key_body(50.0, 0.0081))), TARGET)
    assert ok.outcome is Outcome.PASSED and ok.evidence["remaining_usd"] == pytest.approx(49.9919)
    assert "label" not in json.dumps(ok.evidence)
    uncapped = check_credit_remaining(FakeShell(http_out(200, key_body(None, 3.2))), TARGET)
    assert uncapped.outcome is Outcome.PASSED and uncapped.evidence["uncapped"] is True
    assert "uncapped" in uncapped.message
    low = check_credit_remaining(FakeShell(http_out(200, key_body(50.0, 49.5))), TARGET)
    assert low.outcome is Outcome.FAILED and "below the floor" in low.message


def test_e_error_body_is_not_uncapped() -> None:
    result = check_credit_remaining(
        FakeShell(http_out(401, {"error": {"message": "User not found"}})), TARGET
    )
    assert result.outcome is Outcome.FAILED
    assert result.classification is not None and result.classification.value == "auth_failed"


@pytest.mark.parametrize("body", ["", "not json"])
def test_e_empty_or_unparseable_body_is_an_error(body: str) -> None:
    result = check_credit_remaining(FakeShell(http_out(200, body)), TARGET)
    assert result.outcome is Outcome.ERROR


# ------------------------------------------------------------------ scripts: how they run, how they fail


def all_scripts() -> dict[str, GateScript]:
    return {
        "A": git_integrity_script(TARGET),
        "B": pi_models_script(TARGET),
        "C": model_answers_script(TARGET, "x/y"),
        "C_roster": roster_script(TARGET),
        "D": cost_script(TARGET),
        "E": credit_script(TARGET),
    }


@pytest.mark.parametrize("name", ["A", "B", "C", "C_roster", "D", "E"])
def test_no_script_uses_a_fixed_path_in_a_shared_directory(name: str) -> None:
    script = all_scripts()[name]
    assert not re.search(r"/tmp/|/var/tmp/|/dev/shm/", script.script)
    targets = {t.strip('"') for t in re.findall(r"\d?>>?\s*(\"?[^\s;)|&]+)", script.script)} - {"/dev/null"}
    for target in targets:  # every file a script writes is in its own mktemp directory, removed by a trap
        assert target.startswith("$sbx_tmp/"), target
    if targets:
        assert "mktemp -d" in script.script and "trap 'rm -rf -- \"$sbx_tmp\"' EXIT" in script.script
    assert "OPENROUTER_API_KEY" not in script.command and "sk-" not in script.command


def test_d_runs_pi_as_the_sdlc_does_from_app_with_the_key_from_app_env() -> None:
    script = cost_script(TARGET).script
    assert script.index('cd "$HOME/app"') < script.index("pi -p --mode json")
    assert "OPENROUTER_API_KEY=$key timeout" in script  # the key reaches pi through its environment
    assert 'mktemp -d "${TMPDIR:-/tmp}/sbxcheck.XXXXXXXX"' in script


@pytest.mark.parametrize(
    ("marker", "needle"),
    [("SBX_NOAPP", "FILL never ran"), ("SBX_NOKEY", "no OPENROUTER_API_KEY line in ~/app/.env")],
)
def test_d_says_what_c_and_e_say_when_the_run_cannot_get_its_key(marker: str, needle: str) -> None:
    out = f"{marker}\nSBX_END\n"
    d = check_cost_reported(FakeShell(out), TARGET)
    c = check_model_answers(FakeShell(out), TARGET, "x/y")
    e = check_credit_remaining(FakeShell(out), TARGET)
    assert {d.outcome, c.outcome, e.outcome} == {Outcome.FAILED}
    assert d.message == c.message == e.message and needle in d.message
    assert d.recommendation == e.recommendation and f"just sbx lifecycle fill {TARGET.run_id}" in (
        d.recommendation or ""
    )


@pytest.mark.parametrize(
    ("stdout", "stderr", "code"),
    [
        (
            "SBX_SCRIPT_ERROR mktemp -d failed in /tmp\n",
            "mktemp: failed to create directory: Permission denied\n",
            0,
        ),
        ("SBX_RATES_BEGIN\n", "bash: line 12: /tmp/x: Is a directory\n", 1),
        ("", "bash: command not found\n", 127),
    ],
)
def test_a_script_that_fails_itself_is_an_error_with_its_stderr(stdout: str, stderr: str, code: int) -> None:
    for check in (check_cost_reported, check_git_integrity, check_pi_models, check_credit_remaining):
        result = check(FakeShell(stdout, stderr, code), TARGET)
        assert result.outcome is Outcome.ERROR, (check.__name__, result.message)
        assert result.message.startswith("the check could not run on ")
        assert result.evidence["script_stderr"] == stderr
        assert "nothing about the gated system is known yet" in (result.recommendation or "")


def test_gate_timeouts_come_from_the_inventory() -> None:
    target = GateTarget(**{**TARGET.__dict__, "command_timeout_s": 17.0})
    scripts = {n: s for n, s in all_scripts().items()}
    for name in ("A", "B", "C_roster", "E"):
        script = {
            "A": git_integrity_script,
            "B": pi_models_script,
            "C_roster": roster_script,
            "E": credit_script,
        }[name](target)
        assert script.timeout_s == 17.0, name
    shell = FakeShell(git_out(SHA, []))
    check_git_integrity(shell, target)
    assert shell.timeouts == [17.0]
    assert scripts["D"].timeout_s == TARGET.pi_timeout_s + 30


def test_d_names_an_exhausted_key_not_a_missing_rate_table() -> None:
    events = [end(0.0, stopReason="error", errorMessage="402 Insufficient credits. Add more using https://x")]
    result = check_cost_reported(FakeShell(cost_out(RATES, events, rc=1)), TARGET)
    assert result.outcome is Outcome.FAILED
    assert "out of credit (HTTP 402)" in result.message and "rate table" not in result.message
    assert result.cause == f"credit-exhausted:{TARGET.run_id}"


def test_a_rejected_runtime_key_names_the_runtime_key_and_the_recipes() -> None:
    body = {"error": {"message": "User not found.", "code": 401}}
    for result in (
        check_model_answers(FakeShell(http_out(401, body)), TARGET, "x/y"),
        check_credit_remaining(FakeShell(http_out(401, body)), TARGET),
        check_cost_reported(
            FakeShell(cost_out(RATES, [end(0.0, errorMessage="401 User not found.")], 1)), TARGET
        ),
    ):
        assert result.cause == f"runtime-key-rejected:{TARGET.run_id}", result.message
        advice = result.recommendation or ""
        assert "runtime key" in advice and f"just sbx lifecycle fill {TARGET.run_id}" in advice
        assert "not a credential of the inventory" in advice


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_money_never_passes(value: str) -> None:
    nan_cost = cost_out(RATES, []).replace(
        "SBX_PI_BEGIN\n",
        'SBX_PI_BEGIN\n{"type":"message_end","message":{"role":"assistant","usage":'
        f'{{"cost":{{"total":{value}}}}}}}}}\n',
    )
    assert check_cost_reported(FakeShell(nan_cost), TARGET).outcome is Outcome.FAILED
    body = f'{{"data": {{"limit": {value}, "usage": 0}}}}'
    assert check_credit_remaining(FakeShell(http_out(200, body)), TARGET).outcome is Outcome.ERROR
    body = f'{{"data": {{"limit": 50, "usage": {value}}}}}'
    assert check_credit_remaining(FakeShell(http_out(200, body)), TARGET).outcome is Outcome.ERROR


def test_an_uncapped_key_passes_e_with_a_visible_warning() -> None:
    result = check_credit_remaining(FakeShell(http_out(200, key_body(None, 1.0))), TARGET)
    assert result.outcome is Outcome.PASSED and result.message.startswith("WARNING: ")
    assert "uncapped" in result.evidence["warning"]
