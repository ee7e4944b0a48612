"""Recipe templates, running them (no shell, timeouts, redaction), parsers and the teardown decision."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from sbxcheck.lifecycle.recipes import (
    RecipeTemplates,
    build_command,
    decide_teardown,
    parse_harvest_output,
    parse_mount_output,
    parse_teardown_output,
    run_recipe,
)

PY = shlex.quote(sys.executable)


def _script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    return f"{PY} {shlex.quote(str(path))}"


# -- templates ------------------------------------------------------------------------------


def test_defaults_are_the_upstream_recipes() -> None:
    t = RecipeTemplates()
    assert build_command(t, "mount", "fix-login") == ["just", "sbx", "mount", "fix-login"]
    assert build_command(t, "teardown", "r-a1b2c3") == ["just", "sbx", "lifecycle", "teardown", "r-a1b2c3"]
    assert build_command(t, "reap") == ["just", "sbx", "manage", "reap"]
    assert (t.timeout("mount"), t.timeout("teardown"), t.timeout("harvest"), t.timeout("list")) == (
        600,
        300,
        120,
        60,
    )


@pytest.mark.parametrize(
    "field, template",
    [
        ("reap", "just sbx manage reap --yes"),
        ("reap", "just sbx manage reap --YES"),
        ("list", "just sbx manage list --yes=1"),
        ("teardown", "just sbx lifecycle teardown {run_id} --yes"),
    ],
)
def test_yes_is_rejected(field: str, template: str) -> None:
    with pytest.raises(ValidationError, match="--yes"):
        RecipeTemplates.model_validate({field: template})


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"mount": "just sbx mount"}, "must contain"),
        ({"list": "just sbx manage list {run_id}"}, "takes no run id"),
        ({"harvest": "just sbx manage harvest {name}"}, "only placeholder"),
        ({"harvest": "just sbx manage harvest {run_id!r}"}, "only placeholder"),
        ({"harvest": "just sbx manage harvest '{run_id}'"}, "outside quotes"),
        ({"harvest": "just sbx manage harvest {run_id} && rm -rf /"}, "without a shell"),
        ({"list": "just 'sbx"}, "cannot split"),
        ({"list": "just }"}, "braces"),
        ({"bogus": "x"}, "Extra inputs"),
        ({"timeout_s": {"mount": 0}}, "greater than 0"),
    ],
)
def test_bad_templates_are_rejected(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        RecipeTemplates.model_validate(overrides)


def test_run_id_is_quoted_and_checked() -> None:
    t = RecipeTemplates()
    assert build_command(t, "harvest", "a; rm -rf /")[-1] == "a; rm -rf /"
    assert build_command(t, "harvest", "it's $(x) `y`")[-1] == "it's $(x) `y`"
    for bad in ("", "--yes", "-x", "a\nb"):
        with pytest.raises(ValueError):
            build_command(t, "teardown", bad)
    with pytest.raises(ValueError, match="needs a run id"):
        build_command(t, "mount")
    with pytest.raises(ValueError, match="takes no run id"):
        build_command(t, "list", "r")


# -- running --------------------------------------------------------------------------------


def test_hostile_run_id_is_one_argv_element_never_a_shell(tmp_path: Path) -> None:
    echo = _script(tmp_path, "echo_args.py", "import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    t = RecipeTemplates(harvest=f"{echo} harvest {{run_id}}", cwd=tmp_path)
    for hostile in ("a; rm -rf /", "$(touch pwned)", "x && touch pwned", "`touch pwned`", "a'b\"c"):
        result = run_recipe(t, "harvest", run_id=hostile)
        assert result.ok, result.stderr
        assert json.loads(result.stdout) == ["harvest", hostile]
        assert result.command[-1] == hostile
    assert not (tmp_path / "pwned").exists()


def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    fake = tmp_path / "slow.sh"
    fake.write_text("#!/bin/sh\nsleep 30 &\necho child $!\nwait\n")
    t = RecipeTemplates(list=f"sh {shlex.quote(str(fake))}", timeout_s={"list": 0.3})  # type: ignore[arg-type]
    start = time.monotonic()
    result = run_recipe(t, "list")
    assert time.monotonic() - start < 1.5
    assert result.timed_out and result.exit_code is None and not result.ok
    assert "killed after 0.3s timeout" in result.stderr
    child = int(result.stdout.split()[-1])
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and _running(child):
        time.sleep(0.05)
    assert not _running(child)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


def test_output_is_redacted(tmp_path: Path) -> None:
    hexkey = "0123456789abcdef" * 4
    leak = _script(
        tmp_path,
        "leak.py",
        f"import sys\nprint('key: sk-or-v1-{hexkey}')\nprint('err sk-or-v1-{hexkey}', file=sys.stderr)\n",
    )
    result = run_recipe(RecipeTemplates(list=leak), "list")
    assert result.ok
    assert hexkey not in result.stdout + result.stderr
    assert "[REDACTED]" in result.stdout and "[REDACTED]" in result.stderr
    assert hexkey not in json.dumps(result.evidence())


def test_exit_code_env_and_missing_program(tmp_path: Path) -> None:
    fail = _script(tmp_path, "fail.py", "import os, sys\nprint(os.environ['SBX_T'])\nsys.exit(3)\n")
    result = run_recipe(RecipeTemplates(list=fail), "list", env={"SBX_T": "hello"})
    assert (result.exit_code, result.stdout.strip(), result.timed_out, result.ok) == (
        3,
        "hello",
        False,
        False,
    )

    missing = run_recipe(RecipeTemplates(list="no-such-program-sbx list"), "list")
    assert missing.exit_code is None and not missing.ok and "cannot start" in (missing.error or "")
    gone = run_recipe(RecipeTemplates(list=fail, cwd=tmp_path / "absent"), "list")
    assert gone.exit_code is None and "absent" in (gone.error or "")


# -- parsers --------------------------------------------------------------------------------

MOUNT_OK = """\
run id:  fix-login-20260805-a1b2c3
record:  .sandbox/runs/fix-login-20260805-a1b2c3.json
vm:      fix-login-20260805-a1b2c3  ->  https://fix-login-20260805-a1b2c3.exe.xyz
key:     sbx-fix-login-20260805-a1b2c3  limit $50.00  hash 9f8e7d6c
ssh:     up after 6s
created  fix-login-20260805-a1b2c3  (no code and no secrets on the box yet)
[gate] A PASS  git integrity
  app  https://fix-login-20260805-a1b2c3.exe.xyz/
mounted: fix-login-20260805-a1b2c3
  execute:  just sbx lifecycle execute fix-login-20260805-a1b2c3 "PROMPT"
  agent:    just sbx run agent fix-login-20260805-a1b2c3 "PROMPT"
  harvest:  just sbx manage harvest fix-login-20260805-a1b2c3
  teardown: just sbx lifecycle teardown fix-login-20260805-a1b2c3
"""


def test_parse_mount_ok() -> None:
    info = parse_mount_output(MOUNT_OK)
    assert info.ok and info.reason is None
    assert info.run_id == "fix-login-20260805-a1b2c3"  # the printed id, not the typed "fix-login"
    assert info.vm == "fix-login-20260805-a1b2c3"
    assert info.url == "https://fix-login-20260805-a1b2c3.exe.xyz"
    assert len(info.lines) == 4 and info.lines[-1].endswith("teardown fix-login-20260805-a1b2c3")


def test_parse_mount_failures() -> None:
    half = MOUNT_OK.split("[gate]")[0] + "[setup] FAILED: gate C (exit 2)\n"
    info = parse_mount_output(half)
    assert (
        not info.ok and info.run_id == "fix-login-20260805-a1b2c3" and "did not finish" in (info.reason or "")
    )

    clash = MOUNT_OK.replace("mounted: fix-login-20260805-a1b2c3", "mounted: other-20260805-ffffff")
    assert "disagree" in (parse_mount_output(clash).reason or "")

    for garbage in ("", "\x00\xff random noise\n", "mounted: NOT VALID!\n", "run id:\n"):
        info = parse_mount_output(garbage)
        assert not info.ok and info.reason


def test_parse_harvest() -> None:
    ok = parse_harvest_output(
        "   harvest: 3 commit(s) -> refs/sandbox/fix-login-20260805-a1b2c3\n     bundle:  x.bundle\n",
        run_id="fix-login-20260805-a1b2c3",
    )
    assert (ok.ok, ok.status, ok.count, ok.ref) == (
        True,
        "harvested",
        3,
        "refs/sandbox/fix-login-20260805-a1b2c3",
    )

    wrong = parse_harvest_output("   harvest: 1 commit(s) -> refs/sandbox/other\n", run_id="mine")
    assert not wrong.ok

    assert parse_harvest_output("   harvest: NOREPO on fix-login\n").status == "norepo"
    nothing = parse_harvest_output("   harvest: NOCOMMITS — the run committed nothing\n")
    assert (nothing.ok, nothing.status, nothing.count) == (True, "nocommits", 0)

    for text in (
        "!! harvest: no run record for r-1\n",
        "!! harvest: unexpected reply from vm-1: huh\n",
        "!! harvest: could not reach vm-1\n",
        "   harvest: BUNDLEFAIL\n",
    ):
        failed = parse_harvest_output(text)
        assert (failed.ok, failed.status) == (False, "failed") and failed.reason

    for garbage in ("", "lorem ipsum\n", "harvest: many commit(s) -> refs/sandbox/x\n"):
        result = parse_harvest_output(garbage)
        assert (result.ok, result.status) == (False, "unknown") and result.reason


TEARDOWN_OK = """\
spend:   $1.96
artifacts: r-a1b2c3-artifacts/
   harvest: 1 commit(s) -> refs/sandbox/r-a1b2c3
key: revoked
vm:  destroyed r-a1b2c3
✓ gate: key absent from https://openrouter.ai/api/v1/keys
✓ teardown complete for r-a1b2c3
"""


def test_parse_teardown() -> None:
    ok = parse_teardown_output(TEARDOWN_OK, run_id="r-a1b2c3")
    assert (ok.ok, ok.run_id, ok.key, ok.gate, ok.reason) == (True, "r-a1b2c3", "revoked", "passed", None)

    again = parse_teardown_output(TEARDOWN_OK.replace("key: revoked", "key: already gone"))
    assert again.ok and again.key == "already_gone"

    live = parse_teardown_output(
        "key: revoked\n"
        "!! gate FAILED: 9f8e7d6c is still listed at https://openrouter.ai/api/v1/keys. The key is LIVE.\n"
    )
    assert (live.ok, live.gate) == (False, "failed") and "LIVE" in (live.reason or "")

    unverified = parse_teardown_output("key: revoked\n!! revocation UNVERIFIED: GET /keys failed\n")
    assert (unverified.ok, unverified.gate) == (False, "unverified")

    stopped = parse_teardown_output(
        "!! harvest FAILED — stopping before revoke and destroy. The VM is left alive.\n"
    )
    assert not stopped.ok and stopped.vm_left_alive and stopped.key is None

    assert not parse_teardown_output(TEARDOWN_OK, run_id="someone-else").ok
    for garbage in ("", "Segmentation fault\n", "teardown complete for\n"):
        result = parse_teardown_output(garbage)
        assert not result.ok and result.reason


# -- teardown decision ----------------------------------------------------------------------

OUTCOMES = {
    "all-passed": ["passed"] * 5,
    "one-failed": ["passed", "failed", "passed", "passed", "passed"],
    "one-error": ["passed", "error", "passed", "passed", "passed"],
    "skipped": ["passed", "skipped", "passed", "passed", "passed"],
    "no-items": [],
    "odd": ["passed", "xfailed"],
    "interrupted": ["passed"] * 7 + ["not-run"] * 2,  # 2 of 9 selected items never ran
}


@pytest.mark.parametrize(
    "policy, expected",
    [
        ("never", set()),
        ("on-pass", {"all-passed"}),
        ("always", {"all-passed", "skipped", "no-items", "interrupted"}),
    ],
)
def test_decide_teardown_matrix(policy: str, expected: set[str]) -> None:
    decisions = decide_teardown(policy, OUTCOMES)  # type: ignore[arg-type]
    assert set(decisions) == set(OUTCOMES)
    assert {run for run, d in decisions.items() if d.action == "teardown"} == expected
    assert all(d.why for d in decisions.values())
    for bad in ("one-failed", "one-error"):  # a failed gate never destroys, whatever the flag
        assert decisions[bad].action == "keep" and "failed gate" in decisions[bad].why


def test_on_pass_needs_every_selected_item_run() -> None:
    decision = decide_teardown("on-pass", {"r": ["passed"] * 7 + ["not-run"] * 2})["r"]
    assert decision.action == "keep" and "2 of 9 selected gate item(s) never ran" in decision.why


def test_missing_just_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no just anywhere: not on PATH, not in the interpreter's bin/
    monkeypatch.setattr("sbxcheck.tools.interpreter_bin_dirs", lambda: [tmp_path])
    result = run_recipe(RecipeTemplates(cwd=tmp_path), "list")
    assert result.error == "just is not installed (pip install rust-just or your package manager)"


def test_decide_teardown_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="policy"):
        decide_teardown("yes-please", {"r": ["passed"]})  # type: ignore[arg-type]
