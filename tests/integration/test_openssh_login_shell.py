"""The transport and a gate check against a real OpenSSH sshd whose user's login shell is fish.

OpenSSH runs every command as ``<login shell> -c "<command line>"``, the shell from the user's passwd
entry. Here a second sshd (the session's keys and config, its own port) runs in a mount namespace in
which /etc/passwd is a copy that gives the user fish as login shell and a throwaway home: nothing of
this machine's accounts changes. fish's config.fish prints on both streams and defines git, bash and env.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sbxcheck.checks.gate import GateTarget, check_git_integrity
from sbxcheck.results import Outcome
from sbxcheck.sim.personal import apply_personal_fault, write_startup_noise
from sbxcheck.sim.sshd import private_tmp_supported
from sbxcheck.transports.ssh import SshPool
from sbxcheck.transports.ssh_connect import SshSettings

if TYPE_CHECKING:
    from conftest import Sshd

ALIAS = "fish-vm"


def _wait_for_banner(port: int, proc: subprocess.Popen[bytes], log: Path, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"sshd exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.settimeout(2)
                if conn.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"sshd did not accept connections on 127.0.0.1:{port} within {deadline_s}s")


@pytest.fixture
def fish_sshd(sshd: Sshd, tmp_path: Path) -> Iterator[tuple[SshSettings, Path]]:
    """(settings reaching ALIAS, the user's home) for an sshd that starts fish as the login shell."""
    fish = shutil.which("fish", path="/usr/bin:/bin")
    if fish is None:
        if os.environ.get("CI"):
            pytest.fail("fish is not installed; CI installs it (.ci/run)")
        pytest.skip("fish is not installed (apt-get install fish)")
    if os.geteuid() != 0 or private_tmp_supported() is not None:
        pytest.skip("a passwd entry of its own for sshd needs root and a mount namespace (unshare)")
    home = tmp_path / "home"
    home.mkdir()
    passwd = tmp_path / "passwd"
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == sshd.user:
            fields[5], fields[6] = str(home), fish
        lines.append(":".join(fields))
    passwd.write_text("\n".join(lines) + "\n")
    port = sshd.free_port()
    config = (sshd.workdir / "sshd_config").read_text()
    config = re.sub(r"(?m)^Port \d+$", f"Port {port}", config)
    config = re.sub(r"(?m)^PidFile .*$", f"PidFile {tmp_path / 'sshd.pid'}", config)
    (tmp_path / "sshd_config").write_text(config)
    wrapper = f"mount --bind {passwd} /etc/passwd && exec /usr/sbin/sshd -D -e -f {tmp_path / 'sshd_config'}"
    log = tmp_path / "sshd.log"
    with log.open("wb") as log_fh:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", wrapper],
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_banner(port, proc, log)
        (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {sshd.host_keys['ssh-ed25519']}\n")
        (tmp_path / "ssh_config").write_text(
            f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {port}\n  User {sshd.user}\n"
            f"  IdentityFile {sshd.client_key}\n"
        )
        settings = SshSettings(
            config_file=tmp_path / "ssh_config",
            known_hosts=(tmp_path / "known_hosts",),
            connect_timeout_s=5.0,
            command_timeout_s=60.0,
        )
        yield settings, home
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def test_openssh_with_a_fish_login_shell_runs_the_command_and_the_gate_exactly(
    fish_sshd: tuple[SshSettings, Path],
) -> None:
    settings, home = fish_sshd
    write_startup_noise(home, "/usr/bin/fish")
    apply_personal_fault("vm.git-fsmonitor", home, "/usr/bin/fish")  # a hook that talks on stderr
    app = home / "app"
    app.mkdir()
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(app)}
    commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "i"]
    for args in (["init", "-q"], commit):
        subprocess.run(["git", *args], cwd=app, env=env, check=True, capture_output=True, timeout=30)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=app, env=env, check=True, capture_output=True, text=True, timeout=30
    ).stdout.strip()
    target = GateTarget(
        run_id="alpha-20261208-abcdef",
        host=ALIAS,
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
    with SshPool(settings) as pool:
        host = pool.host(ALIAS)
        raw = host.run("echo hi", frame=False)  # fish itself parses this one: its noise is real
        plain = host.run("echo \"it's\" '!' $HOME; echo err >&2; exit 3")
        result = check_git_integrity(host, target)
    assert "fish: welcome" in raw.stdout and "fisher plugins" in raw.stderr
    assert (plain.stdout, plain.stderr, plain.exit_code) == (f"it's ! {home}\n", "err\n", 3)
    assert result.outcome is Outcome.PASSED, (result.message, result.evidence)
    assert result.evidence["head"] == head and result.evidence["porcelain_lines"] == 0
