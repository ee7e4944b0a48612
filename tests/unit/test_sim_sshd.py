"""The simulated fleet's SSH server, driven by the real OpenSSH client."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from sbxcheck.sim.sshd import SimHost, SimSshServer, generate_keypair

SSH_TIMEOUT_S = 15


@dataclass
class Sim:
    server: SimSshServer
    tmp: Path
    host_pub: str
    client_key: Path
    port: int  # host "alpha"
    home: Path


def _known_hosts(tmp: Path, port: int, host_pub: str) -> Path:
    path = tmp / f"known_hosts-{port}"
    path.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    return path


def ssh(
    sim: Sim,
    command: str,
    *,
    port: int | None = None,
    user: str = "exedev",
    key: Path | None = None,
    stdin: bytes | None = None,
    opts: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    port = sim.port if port is None else port
    return subprocess.run(
        _ssh_argv(sim, command, port=port, user=user, key=key, opts=opts),
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=SSH_TIMEOUT_S,
        env=env,
    )


def _ssh_argv(
    sim: Sim,
    command: str,
    *,
    port: int,
    user: str = "exedev",
    key: Path | None = None,
    opts: Sequence[str] = (),
) -> list[str]:
    known_hosts = _known_hosts(sim.tmp, port, sim.host_pub)
    argv = ["ssh", "-F", "/dev/null"]
    for opt in opts:  # first value wins in OpenSSH: caller options go first
        argv += ["-o", opt]
    for opt in (
        "BatchMode=yes",
        "StrictHostKeyChecking=yes",
        f"UserKnownHostsFile={known_hosts}",
        "GlobalKnownHostsFile=/dev/null",
        "IdentitiesOnly=yes",
        "ConnectTimeout=5",
    ):
        argv += ["-o", opt]
    argv += ["-i", str(key or sim.client_key), "-p", str(port), f"{user}@127.0.0.1", command]
    return argv


def _make_home(root: Path, name: str) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    shim = home / "bin" / "pi"
    shim.write_text("#!/bin/sh\necho pi-shim\n")
    shim.chmod(0o755)
    return home


def _pgrep(pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, timeout=5).stdout
    return out.split()


def _wait_for(predicate: Callable[[], object], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    tmp = tmp_path_factory.mktemp("sshd")
    host_pub = generate_keypair(tmp / "host_key", "sim-host")
    client_pub = generate_keypair(tmp / "client_key", "sim-client")
    server = SimSshServer(authorized_keys=[client_pub], default_host_key=tmp / "host_key")
    server.start()
    home = _make_home(tmp, "alpha")
    host = SimHost(
        name="alpha-20261130-1a2b3c.exe.xyz", home=home, path_dirs=(home / "bin",), env={"SBX_VM": "alpha"}
    )
    port = server.add_host(host)
    try:
        yield Sim(server, tmp, host_pub, tmp / "client_key", port, home)
    finally:
        server.stop()


def test_generate_keypair(tmp_path: Path) -> None:
    line = generate_keypair(tmp_path / "k", "me@test")
    assert line.startswith("ssh-ed25519 ") and line.endswith(" me@test")
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "k").read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert (tmp_path / "k.pub").read_text().strip() == line


def test_stdout_stderr_exit_code(sim: Sim) -> None:
    r = ssh(sim, "echo out; echo err >&2; printf '\\000\\377'; exit 7")
    assert r.returncode == 7
    assert r.stdout == b"out\n\x00\xff"
    assert r.stderr == b"err\n"


def test_signal_death_is_128_plus_n(sim: Sim) -> None:
    assert ssh(sim, "kill -TERM $$").returncode == 143


def test_stdin_to_cat_binary(sim: Sim) -> None:
    payload = bytes(range(256)) * 2048  # 512 KiB, every byte value
    r = ssh(sim, "cat", stdin=payload)
    assert r.returncode == 0
    assert r.stdout == payload


def test_stdin_script_to_bash_s(sim: Sim) -> None:
    r = ssh(sim, "bash -s", stdin=b"echo from-script $((6 * 7))\nexit 3\n")
    assert (r.returncode, r.stdout) == (3, b"from-script 42\n")


def test_clean_environment(sim: Sim, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SBX_SIM_LEAK", "leaked")  # in the server's own process, and sent via SendEnv
    r = ssh(
        sim,
        "env; echo cwd=$(pwd); echo pi=$(command -v pi); pi",
        opts=["SendEnv=SBX_SIM_LEAK"],
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    env = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith(("cwd=", "pi=")))
    assert "SBX_SIM_LEAK" not in env
    assert set(env) - {"PWD", "SHLVL", "_"} == {"HOME", "USER", "LOGNAME", "SHELL", "LANG", "PATH", "SBX_VM"}
    assert env["HOME"] == str(sim.home)
    assert env["PATH"] == f"{sim.home / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    fixed = {k: env[k] for k in ("USER", "LOGNAME", "SHELL", "LANG")}
    assert fixed == {"USER": "exedev", "LOGNAME": "exedev", "SHELL": "/bin/bash", "LANG": "C.UTF-8"}
    assert env["SBX_VM"] == "alpha"
    assert f"cwd={sim.home}" in lines
    assert f"pi={sim.home / 'bin' / 'pi'}" in lines
    assert lines[-1] == "pi-shim"


def test_wrong_user_rejected(sim: Sim) -> None:
    r = ssh(sim, "true", user="root")
    assert r.returncode == 255
    assert b"Permission denied" in r.stderr


def test_wrong_key_rejected(sim: Sim) -> None:
    generate_keypair(sim.tmp / "stranger_key", "stranger")
    r = ssh(sim, "true", key=sim.tmp / "stranger_key")
    assert r.returncode == 255
    assert b"Permission denied" in r.stderr


def test_changed_host_key_fails_verification(sim: Sim) -> None:
    generate_keypair(sim.tmp / "other_host_key", "other-host")
    home = _make_home(sim.tmp, "changed")
    port = sim.server.add_host(SimHost(name="changed", home=home), host_key=sim.tmp / "other_host_key")
    r = ssh(sim, "true", port=port)  # known_hosts lists the default host key for this port
    assert r.returncode == 255
    assert b"Host key verification failed" in r.stderr
    assert sim.server.connections("changed") == 0


def test_refuse_mode_refuses_quickly(sim: Sim) -> None:
    port = sim.server.add_host(SimHost(name="down", home=_make_home(sim.tmp, "down"), mode="refuse"))
    started = time.monotonic()
    r = ssh(sim, "true", port=port)
    assert r.returncode == 255
    assert b"Connection refused" in r.stderr
    assert time.monotonic() - started < 2


def test_silent_mode_times_out(sim: Sim) -> None:
    port = sim.server.add_host(SimHost(name="mute", home=_make_home(sim.tmp, "mute"), mode="silent"))
    started = time.monotonic()
    r = ssh(sim, "true", port=port, opts=["ConnectTimeout=2"])
    elapsed = time.monotonic() - started
    assert r.returncode == 255
    assert b"timed out" in r.stderr, r.stderr
    assert 1.5 <= elapsed < 6


def test_connection_counter(sim: Sim) -> None:
    port = sim.server.add_host(SimHost(name="counted", home=_make_home(sim.tmp, "counted")))
    assert sim.server.connections("counted") == 0
    for _ in range(3):
        assert ssh(sim, "true", port=port).returncode == 0
    assert ssh(sim, "true", port=port, user="nobody").returncode == 255  # not authenticated: not counted
    assert sim.server.connections("counted") == 3
    with pytest.raises(KeyError):
        sim.server.connections("never-added")


def test_killed_client_kills_remote_process_group(sim: Sim) -> None:
    # `; echo` keeps bash as the group leader with `sleep` as its child: both must go.
    argv = _ssh_argv(sim, "sleep 301.5; echo never", port=sim.port)
    client = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _wait_for(lambda: _pgrep(r"^sleep 301\.5$"), 5), "remote sleep never started"
    finally:
        client.kill()
        client.communicate(timeout=5)
    assert _wait_for(lambda: not _pgrep(r"sleep 301\.5"), 5), "remote processes survived their client"


def test_remove_host_closes_port_and_kills_sessions(sim: Sim) -> None:
    port = sim.server.add_host(SimHost(name="doomed", home=_make_home(sim.tmp, "doomed")))
    argv = _ssh_argv(sim, "sleep 304.5; echo never", port=port)
    client = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _wait_for(lambda: _pgrep(r"^sleep 304\.5$"), 5)
        sim.server.remove_host("doomed")
        client.communicate(timeout=5)
    finally:
        client.kill()
    assert client.returncode == 255
    assert not _pgrep(r"sleep 304\.5")
    assert b"Connection refused" in ssh(sim, "true", port=port).stderr
    assert sim.server.connections("doomed") == 1  # the count survives removal
    sim.server.remove_host("doomed")  # unknown now: no-op


def test_stop_ends_everything(tmp_path: Path) -> None:
    threads_before = set(threading.enumerate())
    host_pub = generate_keypair(tmp_path / "host_key", "h")
    client_pub = generate_keypair(tmp_path / "client_key", "c")
    server = SimSshServer(authorized_keys=[client_pub], default_host_key=tmp_path / "host_key")
    server.start()
    port = server.add_host(SimHost(name="solo", home=_make_home(tmp_path, "solo")))
    sim = Sim(server, tmp_path, host_pub, tmp_path / "client_key", port, tmp_path / "solo")
    # a finished session leaving a background job behind, and a session still running
    assert ssh(sim, "nohup sleep 303.5 >/dev/null 2>&1 & echo bg").stdout == b"bg\n"
    client = subprocess.Popen(
        _ssh_argv(sim, "sleep 302.5; echo never", port=port),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert _wait_for(lambda: _pgrep(r"^sleep 302\.5$") and _pgrep(r"^sleep 303\.5$"), 5)
        started = time.monotonic()
        server.stop(timeout_s=5)
        assert time.monotonic() - started < 4
        client.communicate(timeout=5)
    finally:
        client.kill()
    assert client.returncode == 255
    assert not _pgrep(r"sleep 30[23]\.5")
    assert _wait_for(lambda: set(threading.enumerate()) <= threads_before, 2), threading.enumerate()
    assert b"Connection refused" in ssh(sim, "true").stderr
    server.stop()  # idempotent
