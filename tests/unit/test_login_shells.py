"""Whatever the VM user's login shell, the command line it parses is trivial and the work runs in /bin/sh.

sshd runs ``$SHELL -c "<command line>"``: the sim's sshd does the same with the host's configured shell,
whose start-up file prints on both streams, fakes the gate's markers and shadows git, bash, env, pi and
curl with functions or aliases (sim/personal.py). Each shell must give back exactly what the command
printed, its exit status and its stdin, for arguments that every shell quotes differently.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbxcheck.checks.gate import GateTarget, check_git_integrity
from sbxcheck.results import Outcome
from sbxcheck.sim.personal import write_startup_noise
from sbxcheck.sim.sshd import SimHost, SimSshServer, generate_keypair
from sbxcheck.transports.framing import NEUTRAL_LINE, neutral_start
from sbxcheck.transports.ssh import SshPool
from sbxcheck.transports.ssh_connect import SshSettings

SHELLS = ("bash", "sh", "dash", "zsh", "fish", "tcsh", "csh")
# every shell quotes these differently: fish has no $'…' and reads \ in single quotes, tcsh chokes on !
# and newlines, zsh expands {a,b}, every one expands $HOME
HOSTILE_ARGS = ("it's", "back\\slash", "bang!", "two\nlines", "$HOME", "{a,b}", "ü €", "%s %d", "`id`", "a;b|c&")


def shell_or_skip(name: str) -> str:
    """The shell's path; outside CI a missing shell skips visibly (CI installs them: .ci/run)."""
    path = shutil.which(name, path="/usr/bin:/bin")
    if path is None:
        reason = f"{name} is not installed (apt-get install {name})"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must have every login shell")
        pytest.skip(reason)
    return path


class Vm:
    """A sim sshd serving one home per login shell."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.host_pub = generate_keypair(tmp / "host_key", "sim-host")
        client_pub = generate_keypair(tmp / "client_key", "sim-client")
        self.server = SimSshServer(authorized_keys=[client_pub], default_host_key=tmp / "host_key")
        self.server.start()
        self.blocks: list[str] = []
        self.known: list[str] = []

    def add(self, name: str, shell: str, *, noise: bool = True) -> Path:
        home = self.tmp / name
        home.mkdir()
        if noise:
            write_startup_noise(home, shell)
        bashrc = os.path.basename(shell) == "bash" and (home / ".bashrc").is_file()
        port = self.server.add_host(SimHost(name=name, home=home, shell=shell, source_bashrc=bashrc))
        self.known.append(f"[127.0.0.1]:{port} {self.host_pub}")
        self.blocks.append(
            f"Host {name}\n  HostName 127.0.0.1\n  Port {port}\n  User exedev\n"
            f"  IdentityFile {self.tmp / 'client_key'}\n"
        )
        return home

    def pool(self) -> SshPool:
        (self.tmp / "known_hosts").write_text("\n".join(self.known) + "\n")
        (self.tmp / "ssh_config").write_text("\n".join(self.blocks))
        settings = SshSettings(
            config_file=self.tmp / "ssh_config", known_hosts=(self.tmp / "known_hosts",), command_timeout_s=60
        )
        return SshPool(settings)


@pytest.fixture
def vm(tmp_path: Path) -> Iterator[Vm]:
    server = Vm(tmp_path)
    try:
        yield server
    finally:
        server.server.stop()


def test_the_command_line_is_one_line_that_every_shell_reads_alike() -> None:
    line, head = neutral_start("echo 'it'\"'\"'s' \\\n!x $'y'")
    assert line == NEUTRAL_LINE  # the same words whatever the command: the command travels on stdin
    assert "\n" not in line and "!" not in line and "\\" not in line and "$'" not in line
    assert line.count("'") == 2  # one single-quoted word for /bin/sh, nothing a shell expands outside it
    assert head.split(b"\n", 1)[0] == str(len(head.split(b"\n", 1)[1])).encode()


@pytest.mark.parametrize("name", SHELLS)
def test_every_login_shell_gives_back_exactly_what_the_command_printed(vm: Vm, name: str) -> None:
    shell = shell_or_skip(name)
    vm.add("vm", shell)
    script = 'for a in "$@"; do printf "[%s]\\n" "$a"; done; read -r line; echo "stdin: $line"; echo err >&2; exit 7'
    command = "bash -s -- " + " ".join(shlex.quote(a) for a in HOSTILE_ARGS)
    with vm.pool() as pool:
        host = pool.host("vm")
        plain = host.run("printf 'out\\n'; printf 'err\\n' >&2; exit 3")
        res = host.run(command, stdin=f"{script}\nthe rest of stdin\n")
    assert (plain.stdout, plain.stderr, plain.exit_code, plain.framed) == ("out\n", "err\n", 3, True)
    expected = "".join(f"[{a}]\n" for a in HOSTILE_ARGS) + "stdin: the rest of stdin\n"
    assert (res.stdout, res.stderr, res.exit_code, res.framed) == (expected, "err\n", 7, True)
    if name not in ("sh", "dash"):  # they read no start-up file for a command; the others printed around it
        assert res.shell_noise_chars > 0


def test_the_shells_noise_is_real(vm: Vm) -> None:
    """What the start-up files print reaches the client unframed: the frame is what keeps it out."""
    shell = shell_or_skip("fish")
    vm.add("vm", shell)
    with vm.pool() as pool:
        raw = pool.host("vm").run("echo hi", frame=False)
    assert "fish: welcome" in raw.stdout and "SBX_END" in raw.stdout and "fisher plugins" in raw.stderr


def _app(home: Path) -> str:
    """A clean one-commit clone at ~/app; its HEAD."""
    app = home / "app"
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(app)}
    for args in (
        ["init", "-q", "-b", "main"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "i"],
    ):
        subprocess.run(["git", *args], cwd=app, env=env, check=True, capture_output=True, timeout=30)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=app, env=env, check=True, capture_output=True, text=True, timeout=30
    ).stdout.strip()


@pytest.mark.parametrize("name", ["bash", "zsh", "fish", "tcsh"])
def test_gate_a_passes_under_a_login_shell_that_shadows_git(vm: Vm, name: str) -> None:
    """bash exports a `git` function (BASH_FUNC_git%%), zsh aliases git, fish and tcsh define their own:
    none of them answers for git in the gate's bash."""
    shell = shell_or_skip(name)
    home = vm.add("vm", shell)
    (home / "app").mkdir()
    head = _app(home)
    target = GateTarget(
        run_id="alpha-20261208-abcdef",
        host="vm",
        commit_sha=head,
        roster=(),
        roster_config="cfg.yaml",
        openrouter_base_url="http://127.0.0.1:9/api/v1",
        credit_floor_usd=1.0,
        cost_probe_model="m/x",
        ping_timeout_s=5,
        pi_timeout_s=5,
        command_timeout_s=60,
    )
    with vm.pool() as pool:
        result = check_git_integrity(pool.host("vm"), target)
    assert result.outcome is Outcome.PASSED, (result.message, result.evidence)
    assert result.evidence["head"] == head and result.evidence["porcelain_lines"] == 0
