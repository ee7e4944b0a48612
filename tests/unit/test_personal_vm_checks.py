"""The gate's remote work on a person's VM, run for real in a temp home (no SSH; tests/support/local_vm.py):
git's answer whatever the user's git config, environment and locale; curl's and python's answer whatever
their wrappers say on stderr or ~/.curlrc asks; the roster read as YAML in any spelling, bounded."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.local_vm import LocalVm

from sbxcheck.checks.curl_answer import split_http
from sbxcheck.checks.gate import GateTarget, check_git_integrity, check_roster_matches
from sbxcheck.checks.gate_model import check_credit_remaining, check_model_answers
from sbxcheck.checks.vm_hygiene import check_vm_hygiene
from sbxcheck.clients.roster import MAX_CONFIG_BYTES, RosterError, parse_roster, roster_from_checkout
from sbxcheck.results import Classification, Outcome
from sbxcheck.sim.fleet import ROSTER_CONFIG, ROSTER_YAML
from sbxcheck.sim.personal import LOCALE_ENV, ROSTER_FLOW_YAML, apply_personal_fault

ROSTER = ("deepseek/deepseek-v4-flash-0731", "google/gemini-3.6-flash", "openai/gpt-5.6-luna")
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
GIT_ENV |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def target(**changes: object) -> GateTarget:
    base = GateTarget(
        run_id="alpha-20261208-abcdef",
        host="alpha-20261208-abcdef.exe.xyz",
        commit_sha="",
        roster=ROSTER,
        roster_config=ROSTER_CONFIG,
        openrouter_base_url="http://127.0.0.1:9/api/v1",
        credit_floor_usd=1.0,
        cost_probe_model=ROSTER[0],
        ping_timeout_s=20,
        pi_timeout_s=20,
        command_timeout_s=60,
    )
    return GateTarget(**{**base.__dict__, **changes})


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def make_app(home: Path) -> str:
    """~/app: a clone with the block-style roster and a README, committed; its HEAD."""
    app = home / "app"
    (app / ROSTER_CONFIG).parent.mkdir(parents=True)
    (app / ROSTER_CONFIG).write_text(ROSTER_YAML)
    (app / "README.md").write_text("# inkwell\n")
    (app / ".gitignore").write_text(".env\n")
    git(app, "init", "-q", "-b", "main")
    git(app, "add", "-A")
    git(app, "commit", "-q", "-m", "baseline")
    return git(app, "rev-parse", "HEAD")


def locale_or_skip(*names: str) -> None:
    have = subprocess.run(["locale", "-a"], capture_output=True, text=True, timeout=10).stdout.lower()
    missing = [n for n in names if n.lower().replace("utf-8", "utf8") not in have]
    if missing:
        reason = f"locale(s) {missing} not generated here (localedef -i de_DE -f UTF-8 de_DE.UTF-8, as .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


# ------------------------------------------------------------------ A: git, whatever the user's config


def test_git_answer_is_the_same_whatever_the_users_git_config_and_environment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    head = make_app(home)
    for fault in ("vm.git-fsmonitor", "vm.git-config", "vm.git-hooks"):  # ~/.gitconfig, hooks, global ignores
        apply_personal_fault(fault, home, "/bin/bash")
    personal = {"GIT_TRACE": "1", "GIT_DIR": str(tmp_path / "elsewhere"), "GIT_PAGER": "cat -A", **LOCALE_ENV}
    vm = LocalVm(home, env=personal)
    clean = check_git_integrity(vm, target(commit_sha=head))
    assert clean.outcome is Outcome.PASSED, (clean.message, clean.evidence)
    assert clean.evidence["porcelain_lines"] == 0 and clean.evidence["head"] == head
    # what a person's config would hide or garble: an untracked file their global ignores and
    # status.showUntrackedFiles=no hide, a UTF-8 name core.quotepath would octal-escape, a modified file
    (home / "app" / "notes.txt").write_text("left behind\n")
    (home / "app" / "über.md").write_text("ü\n")
    (home / "app" / "README.md").write_text("# edited on the VM\n")
    dirty = check_git_integrity(vm, target(commit_sha=head))
    assert dirty.outcome is Outcome.FAILED and "3 path(s)" in dirty.message, dirty.message
    assert sorted(dirty.evidence["porcelain_sample"]) == [" M README.md", "?? notes.txt", "?? über.md"]
    assert "watchman" not in json.dumps(dirty.evidence)  # the fsmonitor hook never ran: its talk is nowhere


def test_a_hook_or_fsmonitor_talking_on_stderr_is_not_a_changed_file(tmp_path: Path) -> None:
    """The independent fleet's case: git answers on stdout; what it or its hook says on stderr is evidence."""
    home = tmp_path / "home"
    head = make_app(home)
    app = home / "app"
    hook = app / ".git" / "hooks" / "talker"
    hook.write_text("#!/bin/sh\necho 'a repository-local fsmonitor talks' >&2\nprintf 'tok\\0/\\0'\n")
    hook.chmod(0o755)
    git(app, "config", "core.fsmonitor", str(hook))  # repository config: -c on the command line wins
    result = check_git_integrity(LocalVm(home), target(commit_sha=head))
    assert result.outcome is Outcome.PASSED, (result.message, result.evidence)


@pytest.mark.skipif(os.geteuid() != 0, reason="a clone owned by another user needs chown (root)")
def test_gits_refusal_is_named_in_any_locale(tmp_path: Path) -> None:
    """git says 'dubious ownership' in German under LANGUAGE=de; the gate still names it, with its fix."""
    locale_or_skip("tr_TR.UTF-8")
    home = tmp_path / "home"
    head = make_app(home)
    for dirpath, dirnames, filenames in os.walk(home / "app"):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), 65534, -1)
    os.lchown(home / "app", 65534, -1)
    result = check_git_integrity(LocalVm(home, env=dict(LOCALE_ENV)), target(commit_sha=head))
    assert (result.outcome, result.classification) == (Outcome.FAILED, Classification.CONFIG_DEFECT)
    assert "detected dubious ownership" in result.message and "safe.directory" in (result.recommendation or "")


def test_no_clone_in_app_is_not_read_from_a_dotfiles_repository_in_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_app(home)
    git(home, "init", "-q")  # a person keeps their dotfiles in a repository at ~
    subprocess.run(["rm", "-rf", str(home / "app" / ".git")], check=True, timeout=30)
    result = check_git_integrity(LocalVm(home), target(commit_sha="0" * 40))
    assert result.outcome is Outcome.FAILED and "not a git repository" in result.message, result.message


# ------------------------------------------------------------------ C, E: curl's answer is its stdout


class _OpenRouter(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # /chat/completions
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._json({"choices": [{"message": {"content": "pong"}, "finish_reason": "stop"}]})

    def do_GET(self) -> None:  # /key
        self._json({"data": {"usage": 1.5, "limit": 50.0}})

    def _json(self, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def openrouter() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenRouter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/v1"
    finally:
        server.shutdown()
        server.server_close()


def _shim_home(tmp_path: Path) -> Path:
    """A home whose login PATH starts with a version manager's shims (curl, python3) and a ~/.curlrc."""
    home = tmp_path / "home"
    make_app(home)
    (home / "app" / ".env").write_text("OPENROUTER_API_KEY=sk-or-v1-" + "ab" * 32 + "\n")
    apply_personal_fault("vm.tool-shims", home, "/bin/bash")
    (home / ".curlrc").write_text("include\nverbose\nwrite-out = \"curlrc was read\\n\"\n")
    return home


def test_curl_wrapper_talk_and_a_curlrc_are_not_the_answer(tmp_path: Path, openrouter: str) -> None:
    home = _shim_home(tmp_path)
    path = f"{home / '.local/share/mise/shims'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    vm = LocalVm(home, env={"PATH": path})
    answered = check_model_answers(vm, target(openrouter_base_url=openrouter), ROSTER[0])
    assert answered.outcome is Outcome.PASSED, (answered.message, answered.evidence)
    assert "mise: curl resolved" in answered.evidence["curl_stderr"]  # kept as evidence, not read as the body
    credit = check_credit_remaining(vm, target(openrouter_base_url=openrouter))
    assert credit.outcome is Outcome.PASSED and credit.evidence["remaining_usd"] == 48.5, credit.message


def test_python_wrapper_talk_is_not_the_hygiene_scans_answer(tmp_path: Path) -> None:
    home = _shim_home(tmp_path)
    path = f"{home / '.local/share/mise/shims'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    scan = check_vm_hygiene(LocalVm(home, env={"PATH": path, "PYTHONSTARTUP": "/nonexistent"}), target())
    assert scan.outcome is Outcome.PASSED, (scan.message, scan.evidence)


def test_a_status_line_forged_in_the_body_does_not_count() -> None:
    out = "SBX_CURL_RC 0\nSBX_CURL_STDERR_BEGIN\n| warn\n\nSBX_CURL_STDERR_END\n"
    out += '{"x": 1}\nSBX_HTTP 200\nSBX_HTTP 500\nSBX_END\n'
    assert split_http(out) == (0, 500, '{"x": 1}\nSBX_HTTP 200', [])


# ------------------------------------------------------------------ the roster is YAML


QUOTED_BLOCK = """\
defaults:
  model: "openrouter/deepseek/deepseek-v4-flash-0731"  # quoted
agents:
- {name: planner, model: 'openrouter/google/gemini-3.6-flash'}
- name: reviewer
  model: &r openrouter/openai/gpt-5.6-luna
- name: checker
  model: *r
- name: builder   # no model: the default
"""


@pytest.mark.parametrize("text", [ROSTER_YAML, ROSTER_FLOW_YAML, QUOTED_BLOCK], ids=["block", "flow", "mixed"])
def test_the_roster_is_read_as_yaml_in_any_spelling(text: str) -> None:
    assert parse_roster(text) == list(ROSTER)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("agents: [" * 200 + "]" * 200, "nested more than"),
        ("agents: [" + "a," * 120_000 + "]", "more than 100000"),
        ("defaults: {model: 5}", "defaults.model is int"),
        ("defaults: {model: [a, b]}", "defaults.model is list"),
        ("agents: [{name: a, model: x}", "not valid YAML"),
        ("model: a\n---\nmodel: b\n", "not valid YAML"),
        ("x: !!python/object/apply:os.system ['true']", "not valid YAML"),
        ("# " + "x" * MAX_CONFIG_BYTES, "above the 256 KiB"),
    ],
)
def test_the_roster_reading_is_bounded_and_says_what_is_wrong(text: str, said: str) -> None:
    started = time.monotonic()
    with pytest.raises(RosterError, match=said):
        parse_roster(text)
    assert time.monotonic() - started < 30


def test_aliases_are_walked_once_not_expanded() -> None:
    """A billion-laughs roster: ten levels of ten aliases each is 10^10 paths, one node each."""
    lines = ["a0: &a0 {model: openrouter/x/y}"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 11)]
    started = time.monotonic()
    assert parse_roster("\n".join(lines)) == ["x/y"]
    assert time.monotonic() - started < 5


def test_the_vms_flow_style_roster_matches_and_a_broken_one_fails_for_its_reason(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_app(home)
    config = home / "app" / ROSTER_CONFIG
    config.write_text(ROSTER_FLOW_YAML)
    ok = check_roster_matches(LocalVm(home), target())
    assert ok.outcome is Outcome.PASSED and ok.evidence["vm_roster"] == list(ROSTER), ok.message
    config.write_text(ROSTER_FLOW_YAML.replace("]\n", ""))  # the flow sequence never closes
    broken = check_roster_matches(LocalVm(home), target())
    assert (broken.outcome, broken.classification) == (Outcome.FAILED, Classification.CONFIG_DEFECT)
    assert "cannot be read as the factory reads it: not valid YAML" in broken.message
    config.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 1) + ROSTER_FLOW_YAML)
    big = check_roster_matches(LocalVm(home), target())
    assert big.outcome is Outcome.FAILED and "above the 256 KiB" in big.message
    assert big.evidence["config_bytes"] > MAX_CONFIG_BYTES


def test_the_host_reads_a_flow_style_roster_at_the_runs_commit(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_app(home)
    app = home / "app"
    (app / ROSTER_CONFIG).write_text(ROSTER_FLOW_YAML)
    git(app, "commit", "-q", "-am", "roster: flow style")
    source = roster_from_checkout(app, ROSTER_CONFIG, git(app, "rev-parse", "HEAD"))
    assert source.models == ROSTER and source.problem is None
    (app / ROSTER_CONFIG).write_text("agents: [")
    git(app, "commit", "-q", "-am", "roster: broken")
    broken = roster_from_checkout(app, ROSTER_CONFIG, git(app, "rev-parse", "HEAD"))
    assert broken.models == () and "not valid YAML" in (broken.problem or "")
