"""Framed remote output: a command's own bytes, apart from what a lived-in shell prints around it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sbxcheck.sim.hosts import LIVED_IN_BASHRC
from sbxcheck.transports.framing import Frame, frame_command, new_frame, unframe


def _run_like_sshd(tmp_path: Path, command: str, frame: Frame, stdin: bytes = b"") -> tuple[int, str, str]:
    """``bash -c`` with the lived-in ~/.bashrc read first, as Debian's bash does for ``ssh host CMD``."""
    (tmp_path / ".bashrc").write_text(LIVED_IN_BASHRC, encoding="utf-8")
    (tmp_path / "first-shell-only").write_text('unset BASH_ENV; . "$HOME/.bashrc"\n', encoding="utf-8")
    env = {
        "HOME": str(tmp_path),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "BASH_ENV": "first-shell-only",
    }
    proc = subprocess.run(
        ["bash", "-c", frame_command(command, frame)],
        cwd=tmp_path,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=20,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


@pytest.mark.parametrize(
    ("command", "out", "err", "status"),
    [
        ("echo hello; echo oops >&2", "hello\n", "oops\n", 0),
        (
            "printf 'no newline'; printf 'half' >&2; exit 3",
            "no newline",
            "half",
            3,
        ),  # exit inside: still framed
        ("true", "", "", 0),
        ("echo 'SBX_END'; echo '{\"data\": 1}'", 'SBX_END\n{"data": 1}\n', "", 0),
    ],
)
def test_noisy_shell_output_is_dropped_and_exit_status_kept(
    tmp_path: Path, command: str, out: str, err: str, status: int
) -> None:
    frame = new_frame()
    rc, raw_out, raw_err = _run_like_sshd(tmp_path, command, frame)
    assert "Welcome to Ubuntu" in raw_out and "logout" in raw_out and "nvm:" in raw_err  # the noise is real
    stdout, stderr = unframe(raw_out, frame, with_status=True), unframe(raw_err, frame)
    assert (stdout.text, stderr.text) == (out, err)
    assert stdout.complete and stderr.complete and stdout.exit_code == status == rc
    assert stdout.noise_chars > 0 and stderr.noise_chars > 0


def test_stdin_reaches_a_bash_s_script(tmp_path: Path) -> None:
    frame = new_frame()
    _, raw_out, _ = _run_like_sshd(tmp_path, "bash -s -- a1", frame, stdin=b'echo "arg=$1"; exit 4\n')
    got = unframe(raw_out, frame, with_status=True)
    assert (got.text, got.exit_code) == ("arg=a1\n", 4)


def test_a_command_that_prints_its_own_command_line_cannot_imitate_the_marker(tmp_path: Path) -> None:
    frame = new_frame()
    command = "set -x; echo traced"  # the trace (stderr) repeats the command line, nonce included
    wire = frame_command(command, frame)
    assert frame.begin not in wire and frame.end not in wire
    _, raw_out, raw_err = _run_like_sshd(tmp_path, command, frame)
    assert unframe(raw_out, frame, with_status=True).text == "traced\n"
    assert unframe(raw_err, frame).text == "+ echo traced\n"


def test_missing_markers_return_the_stream_as_it_came() -> None:
    frame = Frame("00ff")
    none = unframe("fish: Unknown command: printf\n", frame, with_status=True)
    assert (none.framed, none.complete, none.text, none.exit_code) == (
        False,
        False,
        "fish: Unknown command: printf\n",
        None,
    )
    cut = unframe(f"motd{frame.begin}\npartial out", frame, with_status=True)  # killed at the deadline
    assert (cut.framed, cut.complete, cut.text, cut.noise_chars) == (True, False, "partial out", 4)


def test_the_last_end_marker_wins_and_output_may_end_without_newline() -> None:
    frame = Frame("beef")
    text = f"x{frame.begin}\nbody{frame.end} 7\ntrailer\n"
    got = unframe(text, frame, with_status=True)
    assert (got.text, got.exit_code, got.noise_chars) == ("body", 7, 1 + len("trailer\n"))


def test_ssh_host_reads_only_the_commands_output_from_a_lived_in_vm(tmp_path: Path) -> None:
    """Through the real transport and the sim's sshd (which reads ~/.bashrc as Debian's bash does)."""
    from sbxcheck.sim.hosts import write_lived_in_shell
    from sbxcheck.sim.sshd import SimHost, SimSshServer, generate_keypair
    from sbxcheck.transports.ssh import SshPool
    from sbxcheck.transports.ssh_connect import SshSettings

    host_pub = generate_keypair(tmp_path / "host_key", "sim-host")
    client_pub = generate_keypair(tmp_path / "client_key", "sim-client")
    home = tmp_path / "vm"
    home.mkdir()
    write_lived_in_shell(home)
    received = tmp_path / "received.log"
    server = SimSshServer(authorized_keys=[client_pub], default_host_key=tmp_path / "host_key")
    server.start()
    try:
        port = server.add_host(SimHost(name="vm", home=home, source_bashrc=True, received_log=received))
        (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
        (tmp_path / "ssh_config").write_text(
            f"Host vm\n  HostName 127.0.0.1\n  Port {port}\n  User exedev\n  IdentityFile {tmp_path / 'client_key'}\n"
        )
        settings = SshSettings(
            config_file=tmp_path / "ssh_config", known_hosts=(tmp_path / "known_hosts",), command_timeout_s=20
        )
        with SshPool(settings) as pool:
            vm = pool.host("vm")
            res = vm.run("bash -s -- x", stdin='echo "got $1"; echo warn >&2; exit 5\n')
            raw = vm.run("echo hi", frame=False)
    finally:
        server.stop()
    assert (res.stdout, res.stderr, res.exit_code, res.framed) == ("got x\n", "warn\n", 5, True)
    assert res.shell_noise_chars > 0
    assert (
        "Welcome to Ubuntu" in raw.stdout and "SBX_END" in raw.stdout and not raw.framed
    )  # the noise is there
    assert b'echo "got $1"' in received.read_bytes()  # the sshd logs what it received
