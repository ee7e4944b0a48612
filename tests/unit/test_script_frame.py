"""A gate script's output is only what the script printed, even where every bash reads a noisy BASH_ENV."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sbxcheck.checks.script import END, PRELUDE, GateScript, run_script, script_failure
from sbxcheck.transports.ssh import CommandResult

NOISE = r"""printf 'Welcome\n{"data": {"usage": 0}}\nSBX_HTTP 200\nSBX_END\n'
printf 'nvm: using node\n' >&2
printf 'direnv: loading'
trap 'printf "\nSBX_END\nlogout\n"' EXIT
"""


class LocalBash:
    """Runs the command in a local bash whose environment names a noisy BASH_ENV, as such a VM does."""

    alias = "vm.test"

    def __init__(self, bash_env: Path) -> None:
        self.env = {"BASH_ENV": str(bash_env), "PATH": "/usr/bin:/bin"}

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> CommandResult:
        done = subprocess.run(
            ["bash", "-c", command], input=stdin, capture_output=True, text=True, env=self.env, timeout=30
        )
        return CommandResult(done.returncode, done.stdout, done.stderr, 0.0)


def test_bash_env_noise_and_its_exit_trap_are_not_the_scripts_output(tmp_path: Path) -> None:
    (tmp_path / "bash_env").write_text(NOISE)
    script = GateScript(PRELUDE + 'echo "answer $1"\necho "oops" >&2\n' + f'echo "{END}"\n', ("42",), 10, "t")
    run = run_script(LocalBash(tmp_path / "bash_env"), script)
    assert run.stdout == f"answer 42\n{END}\n"
    assert run.stderr == "oops\n"
    assert run.exit_code == 0


def test_a_script_that_dies_before_its_end_is_not_saved_by_a_trap_that_prints_the_end(tmp_path: Path) -> None:
    (tmp_path / "bash_env").write_text(NOISE)
    run = run_script(LocalBash(tmp_path / "bash_env"), GateScript(PRELUDE + "echo half\nexit 3\n", (), 10, "t"))
    assert run.stdout == "half\n" and run.exit_code == 3
    assert script_failure("c", "t", run, {}) is not None  # no end marker of its own: the check could not run


def test_the_exit_status_is_the_scripts_own_not_the_one_an_exit_trap_leaves(tmp_path: Path) -> None:
    (tmp_path / "bash_env").write_text("trap 'exit 7' EXIT\n")
    passed = run_script(LocalBash(tmp_path / "bash_env"), GateScript(PRELUDE + f'echo "{END}"\n', (), 10, "t"))
    assert (passed.stdout, passed.exit_code) == (f"{END}\n", 0)
    died = run_script(LocalBash(tmp_path / "bash_env"), GateScript(PRELUDE + "exit 3\n", (), 10, "t"))
    assert died.exit_code == 3
