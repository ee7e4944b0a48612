"""The run items' judges (issue 22), against scripted remote answers and probes: no SSH, no HTTP."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sbxcheck.checks.gate import GateTarget
from sbxcheck.checks.observe import (
    HttpProbe,
    check_observe_app,
    check_observe_obs,
    judge_observe_app,
    judge_observe_obs,
    observe_ports,
    observe_url,
)
from sbxcheck.checks.run import (
    FATAL_CLASSES,
    FATAL_GREP,
    check_run_alive,
    check_run_log_clean,
    classify_line,
    finish_outcome,
    judge_run_alive,
    judge_run_log_clean,
    parse_ps,
)
from sbxcheck.checks.script import NEUTRAL_BASH, ScriptRun
from sbxcheck.results import Classification, Outcome
from sbxcheck.transports.ssh import CommandResult

RUN = "alpha-20261130-abcdef"
TARGET = GateTarget(
    run_id=RUN,
    host=f"{RUN}.exe.xyz",
    commit_sha="d34db33f" * 5,
    roster=("deepseek/deepseek-v4-flash-0731",),
    roster_config="adws/adw_sssf_config/sssf.config.yaml",
    openrouter_base_url="https://openrouter.ai/api/v1",
    credit_floor_usd=1.0,
    cost_probe_model="deepseek/deepseek-v4-flash-0731",
    ping_timeout_s=60,
    pi_timeout_s=180,
    ssh_config="/fleet/ssh_config",
    pid=4242,
    ports={"app": 41001, "obs": 41002},
    https_url=f"https://{RUN}.exe.xyz",
)
APP = "/home/exedev/app"
SDLC = "just --shell bash --shell-arg -c adw sdlc build the thing"
LINES = {
    "credits": 'Error: 402 {"error":{"message":"This request requires more credits, or fewer max_tokens.","code":402}}',
    "dead_key": 'Error: 401 {"error":{"message":"Unauthorized: the API key is disabled or revoked","code":401}}',
    "data_policy": '{"error":{"message":"No endpoints found matching your data policy (Zero data retention)"}}',
    "provisioning_key": 'Error: 401 {"error":{"message":"User not found.","code":401}}',
}


def probe_output(
    ps: str | None = f"4242 Sl 12 {SDLC}",
    cwd: str | None = APP,
    log: list[str] | None = None,
    noise: str = "",
) -> str:
    """What the run probe prints on the VM (``log`` None: no run.log)."""
    out = [f"{noise}SBX_APP {APP}", "SBX_PS_BEGIN", *([f"| {ps}"] if ps else []), "SBX_PS_END"]
    if cwd:
        out.append(f"SBX_CWD {cwd}")
    if log is None:
        out.append("SBX_NOLOG")
    else:
        out += [f"SBX_LOG {sum(len(x) + 1 for x in log)} {len(log)}", "SBX_TAIL_BEGIN"]
        out += [f"| {x}" for x in log[-30:]] + ["", "SBX_TAIL_END", "SBX_MATCH_BEGIN"]
        out += [f"| {n}:{x}" for n, x in enumerate(log, 1) if classify_line(x) or "401" in x]
        out += ["", "SBX_MATCH_END"]
    return "\n".join([*out, "SBX_END", ""])


def ran(stdout: str) -> ScriptRun:
    return ScriptRun(TARGET.host, 0, stdout, "")


HEALTHY_LOG = ["[adw] sdlc: starting", "[adw] plan: wrote specs/plan.md", "[adw] build: builder"]


# ---------------------------------------------------------------- run.log classes


@pytest.mark.parametrize("name", list(LINES))
def test_each_fatal_line_is_one_class(name: str) -> None:
    fatal = classify_line(f"[pi] planner: {LINES[name]}")
    assert fatal is not None and fatal.name == name
    import re

    assert re.search(FATAL_GREP, LINES[name], re.I), "the VM's grep must let the line through"


@pytest.mark.parametrize(
    "line",
    [
        "[adw] build: handle HTTP 401 in the login form (add a test)",  # code about 401, not an error
        "[adw] plan: credits page shows the balance",
        "[adw] sdlc: starting",
        "",
    ],
)
def test_ordinary_lines_are_not_fatal(line: str) -> None:
    assert classify_line(line) is None


def test_user_not_found_is_the_provisioning_key_even_with_401() -> None:
    fatal = classify_line(LINES["provisioning_key"])
    assert fatal is not None and fatal.classification is Classification.CONFIG_DEFECT
    assert FATAL_CLASSES[0].name == "provisioning_key"


@pytest.mark.parametrize(
    ("name", "classification", "advice"),
    [
        ("credits", Classification.CHECK_FAILED, "top up the OpenRouter account or raise the key's limit"),
        ("dead_key", Classification.AUTH_FAILED, f"`just sbx lifecycle teardown {RUN}`"),
        ("data_policy", Classification.CONFIG_DEFECT, "zero-data-retention endpoint"),
        ("provisioning_key", Classification.CONFIG_DEFECT, "config defect"),
    ],
)
def test_log_clean_fails_per_class_with_its_next_step(
    name: str, classification: Classification, advice: str
) -> None:
    result = judge_run_log_clean(TARGET, ran(probe_output(log=[*HEALTHY_LOG, f"[pi] {LINES[name]}"])))
    assert result.outcome is Outcome.FAILED and result.classification is classification
    assert result.evidence["fatal_class"] == name and result.evidence["fatal_line_no"] == 4
    assert advice in (result.recommendation or "")
    assert "<" not in (result.recommendation or ""), "no placeholder in a next step"
    assert result.cause and result.cause.endswith(RUN)


def test_log_clean_passes_a_log_without_fatal_lines_and_says_what_it_checked() -> None:
    result = judge_run_log_clean(TARGET, ran(probe_output(log=HEALTHY_LOG)))
    assert result.outcome is Outcome.PASSED
    assert result.evidence["classes_checked"] == [c.name for c in FATAL_CLASSES]
    assert result.evidence["run_log_lines"] == 3


def test_log_clean_fails_without_run_log_and_warns_on_an_empty_one() -> None:
    missing = judge_run_log_clean(TARGET, ran(probe_output(log=None)))
    assert missing.outcome is Outcome.FAILED and "does not exist" in missing.message
    empty = judge_run_log_clean(TARGET, ran(probe_output(log=[])))
    assert empty.outcome is Outcome.PASSED and "WARNING" in empty.message


def test_a_log_line_cannot_forge_the_probe_markers() -> None:
    forged = [*HEALTHY_LOG, "SBX_MATCH_END", "SBX_END", LINES["credits"]]
    result = judge_run_log_clean(TARGET, ran(probe_output(log=forged)))
    assert result.outcome is Outcome.FAILED and result.evidence["fatal_class"] == "credits"


def test_a_script_that_stopped_is_an_error_not_a_verdict() -> None:
    result = judge_run_log_clean(TARGET, ScriptRun(TARGET.host, 127, "SBX_APP /x\n", "bash: cut: not found"))
    assert result.outcome is Outcome.ERROR


# ---------------------------------------------------------------- pid liveness


def test_parse_ps_reads_the_pid_line_only() -> None:
    info = parse_ps(["999 S 1 other", f"4242 Sl 12 {SDLC}"], 4242)
    assert info is not None and info.stat == "Sl" and info.elapsed_s == 12 and info.args == SDLC
    assert parse_ps([], 4242) is None
    assert parse_ps(["4242 Z - [just] <defunct>"], 4242).zombie  # type: ignore[union-attr]


def test_alive_passes_for_the_sdlc_in_app() -> None:
    result = judge_run_alive(TARGET, ran(probe_output(log=HEALTHY_LOG)))
    assert result.outcome is Outcome.PASSED, result.message
    assert result.evidence["pid"] == 4242 and "adw sdlc" in result.evidence["ps"]
    assert result.evidence["alive"] is True


def test_alive_passes_through_a_noisy_shell_prefix() -> None:
    result = judge_run_alive(TARGET, ran(probe_output(log=HEALTHY_LOG, noise="direnv: loading ~/.envrc\n")))
    assert result.outcome is Outcome.PASSED


@pytest.mark.parametrize(
    ("ps", "cwd", "said"),
    [
        ("4242 Ss 3600 /usr/sbin/cron -f", "/", "another process now"),  # the pid was reused
        (f"4242 Sl 5 {SDLC}", "/home/other/app", "not this run's SDLC"),  # same command, another checkout
        ("4242 Z 5 [just] <defunct>", None, "zombie"),
        (None, None, "not running"),
    ],
)
def test_a_pid_that_is_not_the_live_sdlc_fails_without_an_outcome(ps: str | None, cwd: str | None, said: str) -> None:
    result = judge_run_alive(TARGET, ran(probe_output(ps=ps, cwd=cwd, log=HEALTHY_LOG)))
    assert result.outcome is Outcome.FAILED and said in result.message
    assert "no outcome" in result.message and result.recommendation


def test_dead_with_a_normal_finish_passes_with_that_evidence() -> None:
    log = [*HEALTHY_LOG, "[adw] sdlc: completed"]
    result = judge_run_alive(TARGET, ran(probe_output(ps=None, log=log)))
    assert result.outcome is Outcome.PASSED and "finished" in result.message
    assert result.evidence["outcome_line"] == "[adw] sdlc: completed" and result.evidence["alive"] is False


def test_a_prompt_echoed_in_a_start_line_is_not_an_outcome() -> None:
    log = ["[adw] sdlc: starting in /app — prompt: make sure the tests are done", "[adw] plan: done planning"]
    assert finish_outcome(log) is None
    result = judge_run_alive(TARGET, ran(probe_output(ps=None, log=log)))
    assert result.outcome is Outcome.FAILED and "no outcome" in result.message


def test_dead_with_a_failed_outcome_fails() -> None:
    log = [*HEALTHY_LOG, "[adw] sdlc: FAILED in build", "error: Recipe `adw` failed on line 5 with exit code 1"]
    result = judge_run_alive(TARGET, ran(probe_output(ps=None, log=log)))
    assert result.outcome is Outcome.FAILED and "the run ended" in result.message
    last = "[adw] sdlc: FAILED again"
    assert finish_outcome(["[adw] sdlc: completed", last]) == ("failed", last)


def test_dead_after_spawn_takes_the_fatal_lines_class_and_cause() -> None:
    log = [*HEALTHY_LOG, f"[pi] {LINES['credits']}", "[adw] sdlc: FAILED in plan"]
    result = judge_run_alive(TARGET, ran(probe_output(ps=None, log=log)))
    clean = judge_run_log_clean(TARGET, ran(probe_output(ps=None, log=log)))
    assert result.outcome is Outcome.FAILED and "died" in result.message
    assert result.cause == clean.cause == f"credit-exhausted:{RUN}"  # one incident for both items
    assert result.recommendation == clean.recommendation


def test_alive_but_a_fatal_line_fails_the_log_item_only() -> None:
    log = [*HEALTHY_LOG, f"[pi] {LINES['data_policy']}"]
    assert judge_run_alive(TARGET, ran(probe_output(log=log))).outcome is Outcome.PASSED
    assert judge_run_log_clean(TARGET, ran(probe_output(log=log))).outcome is Outcome.FAILED


def test_dead_without_run_log_fails() -> None:
    result = judge_run_alive(TARGET, ran(probe_output(ps=None, log=None)))
    assert result.outcome is Outcome.FAILED and "run.log does not exist" in result.message


def test_no_ps_and_no_proc_is_an_error() -> None:
    result = judge_run_alive(TARGET, ran(f"SBX_APP {APP}\nSBX_NOPS\nSBX_END\n"))
    assert result.outcome is Outcome.ERROR


# ---------------------------------------------------------------- preconditions and the wire


@dataclasses.dataclass
class Shell:
    stdout: str
    alias: str = TARGET.host
    sent: list[str] = dataclasses.field(default_factory=list)

    def run(self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None) -> CommandResult:
        self.sent.append(command)
        assert timeout is not None and timeout > 0, "every remote call is bounded"
        return CommandResult(exit_code=0, stdout=self.stdout, stderr="", duration_s=0.01)


def test_not_executed_and_not_observed_skip_without_touching_the_vm() -> None:
    bare = dataclasses.replace(TARGET, pid=None, ports=None)
    shell = Shell("")
    for check in (check_run_alive, check_run_log_clean, check_observe_app, check_observe_obs):
        result = check(shell, bare)
        assert result.outcome is Outcome.SKIPPED
        assert "not executed" in result.message or "not observed" in result.message
    assert shell.sent == []


def test_the_pid_goes_to_the_script_as_an_argument() -> None:
    shell = Shell(probe_output(log=HEALTHY_LOG))
    assert check_run_alive(shell, TARGET).outcome is Outcome.PASSED
    assert shell.sent == [f"{NEUTRAL_BASH} -- 4242 30 '{FATAL_GREP}' 400"]


# ---------------------------------------------------------------- observe: ports and status rules


def test_ports_come_from_the_record_never_assumed() -> None:
    assert observe_ports({"app": 41001, "obs": 41002}) == (41001, 41002)
    for bad in ([4501, 4600], {"app": "4501", "obs": 4600}, {"app": True, "obs": 4600}, {"app": 4501}, "x"):
        assert isinstance(observe_ports(bad), str)
    assert observe_url(TARGET, "app", 41001) == f"https://{RUN}.exe.xyz/"
    assert observe_url(TARGET, "obs", 41002) == f"https://{RUN}.exe.xyz:41002/"
    local = dataclasses.replace(TARGET, observe_probe="vm")
    assert observe_url(local, "app", 41001) == "http://127.0.0.1:41001/"


def test_malformed_ports_are_an_error_naming_them() -> None:
    result = check_observe_app(Shell(""), dataclasses.replace(TARGET, ports=[4501, 4600]))
    assert result.outcome is Outcome.ERROR and "ports" in result.message


def probe(status: int, body: str = "<title>inkwell</title>", error: str = "", location: str = "") -> HttpProbe:
    return HttpProbe("http://127.0.0.1:41001/", "curl on vm", status, error, body, location)


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (200, "<!doctype html><title>inkwell</title>", Outcome.PASSED),
        (0, "", Outcome.FAILED),
        (502, "Bad Gateway", Outcome.FAILED),
        (307, "", Outcome.FAILED),  # anonymously means no login redirect
        (401, "", Outcome.FAILED),
        (200, "", Outcome.FAILED),  # 200 with nothing is not the app
        (200, "<html><title>502 Bad Gateway</title></html>", Outcome.FAILED),  # a proxy's error page
        (200, "upstream connect error or disconnect/reset before headers", Outcome.FAILED),
    ],
)
def test_app_status_rule(status: int, body: str, outcome: Outcome) -> None:
    result = judge_observe_app(TARGET, probe(status, body, "curl exit 7: refused" if status == 0 else ""), 41001)
    assert result.outcome is outcome, result.message
    assert result.evidence["http_status"] == status and result.evidence["url"] == "http://127.0.0.1:41001/"
    if outcome is Outcome.FAILED:
        assert f"`just sbx lifecycle observe {RUN}`" in (result.recommendation or "")


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(307, Outcome.PASSED), (401, Outcome.PASSED), (200, Outcome.PASSED), (404, Outcome.PASSED),
     (0, Outcome.FAILED), (500, Outcome.FAILED), (502, Outcome.FAILED), (503, Outcome.FAILED)],
)  # fmt: skip
def test_obs_status_rule(status: int, outcome: Outcome) -> None:
    result = judge_observe_obs(TARGET, probe(status, ""), 41002)
    assert result.outcome is outcome
    if outcome is Outcome.FAILED:
        assert f"{status:03d}" in result.message and result.cause == f"obs-down:{RUN}"


def test_vm_probe_parses_curl_through_the_shell() -> None:
    out = "\n".join(
        ["SBX_CURL_RC 0", "SBX_HTTP 307", "SBX_LOCATION /login", "SBX_BODY_BEGIN", "", "SBX_BODY_END",
         "SBX_ERR_BEGIN", "", "SBX_ERR_END", "SBX_END", ""]
    )  # fmt: skip
    local = dataclasses.replace(TARGET, observe_probe="vm")
    shell = Shell(out)
    result = check_observe_obs(shell, local)
    assert result.outcome is Outcome.PASSED and result.evidence["location"] == "/login"
    assert "http://127.0.0.1:41002/" in shell.sent[0]


# ---------------------------------------------------------------- the inventory field and the suite's identity


def test_observe_probe_defaults_to_https_and_accepts_only_https_or_vm(tmp_path: Path) -> None:
    from sbxcheck.errors import InventoryError
    from sbxcheck.inventory import load_inventory

    roster = tmp_path / "adws" / "adw_sssf_config" / "sssf.config.yaml"
    roster.parent.mkdir(parents=True)
    roster.write_text("agents: []\n")
    inv = tmp_path / "fleet.toml"
    inv.write_text(f'[sssf]\ncheckout = "{tmp_path}"\n')
    sssf = load_inventory(inv).sssf
    assert sssf is not None and sssf.observe_probe == "https" and sssf.observe_timeout_s == 20
    inv.write_text(f'[sssf]\ncheckout = "{tmp_path}"\nobserve_probe = "vm"\n')
    assert load_inventory(inv).sssf.observe_probe == "vm"  # type: ignore[union-attr]
    inv.write_text(f'[sssf]\ncheckout = "{tmp_path}"\nobserve_probe = "ftp"\n')
    with pytest.raises(InventoryError, match="observe_probe"):
        load_inventory(inv)


def test_a_run_item_keeps_its_identity_across_nights() -> None:
    from sbxcheck.report.history import item_identity
    from sbxcheck.results import CheckRecord

    record = CheckRecord(
        nodeid=f"gates/test_run.py::test_run_alive[{RUN}]", suite="run", check="alive", target=RUN,
        outcome=Outcome.PASSED,
    )  # fmt: skip
    assert item_identity(record) == "run/alive@alpha"


def test_the_host_probe_follows_no_redirect_and_reports_nothing_as_000() -> None:
    import http.server
    import threading

    from sbxcheck.checks.observe import probe_https
    from sbxcheck.sim.ports import PortReservations
    from sbxcheck.sim.run_services import _Handler

    obs = type("Obs", (_Handler,), {"service": "obs", "fault": ""})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), obs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    held = PortReservations()
    try:
        got = probe_https(f"http://127.0.0.1:{server.server_address[1]}/", 5)
        assert (got.status, got.location) == (307, "/login")
        refused = probe_https(f"http://127.0.0.1:{held.reserve()}/", 5)
        assert refused.status == 0 and "ConnectError" in refused.error
    finally:
        server.shutdown()
        server.server_close()
        held.close()



def test_the_host_probe_is_bounded_by_its_deadline_and_reads_only_the_page_start() -> None:
    """Headers dribbled a byte at a time cannot hold the probe past its deadline; a large page is cut."""
    import socket
    import threading
    import time

    from sbxcheck.checks.observe import BODY_CHARS, probe_https

    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
    big = b"<html>" + b"x" * (BODY_CHARS * 20)
    dribble, whole = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def dribbler() -> None:  # one header byte every 50 ms: each read returns within any read timeout
        conn, _ = dribble.accept()
        with conn:
            conn.recv(4096)
            for byte in head * 50:
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:  # the probe gave up and closed: what this test wants
                    return
                time.sleep(0.05)

    def answerer() -> None:
        conn, _ = whole.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(head + f"Content-Length: {len(big)}\r\n\r\n".encode() + big)

    for serve in (dribbler, answerer):
        threading.Thread(target=serve, daemon=True).start()
    try:
        started = time.monotonic()
        slow = probe_https(f"http://127.0.0.1:{dribble.getsockname()[1]}/", 1.5)
        assert time.monotonic() - started < 4
        assert slow.status == 0 and "no complete answer within 1.5s" in slow.error
        page = probe_https(f"http://127.0.0.1:{whole.getsockname()[1]}/", 5)
        assert page.status == 200 and page.body.startswith("<html>") and len(page.body) == BODY_CHARS
    finally:
        stop.set()
        dribble.close()
        whole.close()
