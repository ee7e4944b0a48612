"""The SSH transport against a real OpenSSH sshd on loopback (see conftest.py for the server)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko
import pytest

from sbxcheck.errors import (
    AuthFailed,
    CommandTimeout,
    HostKeyMismatch,
    HostKeyUnknown,
    HostUnreachable,
    TransportError,
)
from sbxcheck.transports.known_hosts import fingerprint_sha256
from sbxcheck.transports.ssh import SshPool
from sbxcheck.transports.ssh_connect import SshSettings

if TYPE_CHECKING:
    from conftest import Sshd


def _fp(pub: str) -> str:
    import base64

    return fingerprint_sha256(base64.b64decode(pub.split()[1]))


@pytest.fixture
def pool(sshd: Sshd) -> Iterator[SshPool]:
    p = SshPool(sshd.settings())
    yield p
    p.close()


@pytest.fixture
def auth_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records the user of every public-key authentication attempt."""
    calls: list[str] = []
    original = paramiko.Transport.auth_publickey

    def spy(self: paramiko.Transport, username: str, key: paramiko.PKey, event: Any = None) -> list[str]:
        calls.append(username)
        return original(self, username, key, event)

    monkeypatch.setattr(paramiko.Transport, "auth_publickey", spy)
    return calls


def _config(tmp_path: Path, sshd: Sshd, body: str) -> Path:
    path = tmp_path / "ssh_config"
    path.write_text(body.replace("{key}", str(sshd.client_key)).replace("{user}", sshd.user))
    return path


# --------------------------------------------------------------------------- commands


def test_stdout_stderr_exit_code(pool: SshPool) -> None:
    result = pool.host("sbx").run("echo out; echo err >&2; exit 7")
    assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
    assert not result.stdout_truncated and not result.stderr_truncated
    assert 0 < result.duration_s < 5


def test_stdin_to_bash_and_cat(pool: SshPool) -> None:
    host = pool.host("sbx")
    script = host.run("bash -s", stdin="echo from-script $((6 * 7))\nexit 3\n")
    assert (script.exit_code, script.stdout) == (3, "from-script 42\n")
    blob = bytes(range(256)) * 4096  # 1 MiB, binary
    echoed = host.run("cat | sha256sum", stdin=blob)
    import hashlib

    assert echoed.stdout.split()[0] == hashlib.sha256(blob).hexdigest()
    # no stdin at all: the remote side still sees EOF at once
    assert host.run("cat; echo done", timeout=5).stdout == "done\n"


def test_output_truncated_but_drained(sshd: Sshd) -> None:
    with SshPool(sshd.settings(max_output_bytes=1000)) as pool:
        result = pool.host("sbx").run("head -c 300000 /dev/zero | tr '\\0' a; echo tail >&2; exit 4")
    assert result.exit_code == 4
    assert result.stdout == "a" * 1000 and result.stdout_truncated
    assert result.stderr == "tail\n" and not result.stderr_truncated


def test_command_timeout(pool: SshPool, tmp_path: Path) -> None:
    host = pool.host("sbx")
    pid_file = tmp_path / "sleep.pid"
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        # 3 s, not 1: on a loaded CI machine the session may take over a second to print its first line
        host.run(f"echo started; echo $$ > {pid_file}; exec sleep 30", timeout=3)
    assert time.monotonic() - t0 < 10
    assert info.value.evidence["alias"] == "sbx"
    assert info.value.evidence["stdout_chars"] == len("started\n")
    assert "within 3s" in info.value.message
    with contextlib.suppress(ProcessLookupError, FileNotFoundError, ValueError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the exact orphan we started, nothing else
    assert host.run("echo still-usable").stdout == "still-usable\n"
    assert pool.stats() == {"sbx": 1}


def test_transport_death_then_reconnect(pool: SshPool) -> None:
    host = pool.host("sbx")
    with pytest.raises(TransportError) as info:
        host.run("kill -9 $PPID; sleep 5", timeout=10)  # kills the sshd session process under us
    assert not isinstance(info.value, CommandTimeout)
    assert "transport died" in info.value.message
    assert host.run("echo back").stdout == "back\n"  # reconnects once
    assert pool.stats() == {"sbx": 2}


def test_command_killed_by_signal_has_no_exit_status(pool: SshPool) -> None:
    host = pool.host("sbx")
    with pytest.raises(TransportError) as info:
        host.run("kill -9 $$")
    assert "without an exit status" in info.value.message
    assert host.run("echo fine").stdout == "fine\n"
    assert pool.stats() == {"sbx": 1}


# --------------------------------------------------------------------------- pooling


def test_pool_one_connection_for_many_commands(pool: SshPool) -> None:
    for i in range(5):
        assert pool.host("sbx").run(f"echo {i}").stdout == f"{i}\n"
    assert pool.stats() == {"sbx": 1}
    assert pool.host("sbx") is pool.host("sbx")
    pool.close()
    pool.close()  # idempotent
    with pytest.raises(TransportError):
        pool.host("sbx")


def test_pool_is_thread_safe(pool: SshPool) -> None:
    outputs: list[str] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            outputs.append(pool.host("sbx").run(f"echo {i}").stdout)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors
    assert sorted(outputs) == sorted(f"{i}\n" for i in range(8))
    assert pool.stats() == {"sbx": 1}


def test_reconnect_when_transport_dropped(pool: SshPool) -> None:
    host = pool.host("sbx")
    first = host.connected_at
    assert host._conn is not None
    host._conn.transport.close()
    assert host.run("echo again").stdout == "again\n"
    assert pool.stats() == {"sbx": 2}
    assert host.connected_at >= first


# --------------------------------------------------------------------------- ssh_config


def test_ssh_config_alias_with_host_key_alias(pool: SshPool, sshd: Sshd) -> None:
    host = pool.host("sbx-alias")
    r = host.resolved
    assert (r.hostname, r.port, r.user, r.host_key_alias) == (
        "127.0.0.1",
        sshd.port,
        sshd.user,
        "sbx-vm.example",
    )
    assert r.identity_files == (sshd.workdir / "client_key",)  # relative to the config file
    assert r.known_hosts_name() == "sbx-vm.example"
    assert host.run("whoami").stdout.strip() == sshd.user


def test_proxy_jump(pool: SshPool, sshd: Sshd) -> None:
    host = pool.host("sbx-jump")
    assert host.resolved.proxy_jump == ("sbx",)
    result = host.run("echo $SSH_CONNECTION")
    # the target connection comes from the jump host (sshd itself, on loopback), not from us directly
    assert result.exit_code == 0 and result.stdout.split()[2:4] == ["127.0.0.1", str(sshd.port)]
    assert pool.stats() == {"sbx-jump": 1}


def test_proxy_jump_failures_name_the_hop(sshd: Sshd, tmp_path: Path) -> None:
    closed = sshd.free_port()
    cfg = _config(
        tmp_path,
        sshd,
        sshd.ssh_config.read_text()
        + f"\nHost behind-closed\n  HostName 127.0.0.1\n  Port {closed}\n  IdentityFile {{key}}\n"
        "  ProxyJump sbx\n"
        f"\nHost dead-jump\n  HostName 127.0.0.1\n  Port {closed}\n"
        f"\nHost via-dead-jump\n  HostName 127.0.0.1\n  Port {sshd.port}\n  IdentityFile {{key}}\n"
        "  ProxyJump dead-jump\n",
    )
    with SshPool(sshd.settings(config_file=cfg)) as pool:
        with pytest.raises(HostUnreachable) as tunnel:
            pool.host("behind-closed")
        assert tunnel.value.message.startswith(
            f"cannot reach behind-closed (127.0.0.1:{closed}) via sbx: the jump host could not open a tunnel"
        )
        with pytest.raises(HostUnreachable) as jump:
            pool.host("via-dead-jump")
        assert jump.value.message == (
            f"cannot reach via-dead-jump: jump host dead-jump (127.0.0.1:{closed}): connection refused"
        )
        assert jump.value.evidence["hop"] == "dead-jump"
        assert pool.stats() == {"behind-closed": 0, "via-dead-jump": 0}


def test_host_key_types_restricted_to_known_hosts(pool: SshPool) -> None:
    # the server prefers ed25519, but known_hosts only lists its ECDSA key for this name
    assert pool.host("sbx-ecdsa-only").run("true").exit_code == 0


# --------------------------------------------------------------------------- refusals


def test_host_key_mismatch_refused_before_auth(pool: SshPool, sshd: Sshd, auth_calls: list[str]) -> None:
    with pytest.raises(HostKeyMismatch) as info:
        pool.host("sbx-mismatch")
    message = info.value.message
    assert "mismatch.example" in message
    assert _fp(sshd.host_keys["ssh-ed25519"]) in message and "ssh-ed25519" in message
    assert f"{sshd.known_hosts}:4" in message  # the expected entry
    assert _fp(sshd.other_key) in message
    assert auth_calls == []  # refused before any authentication (the stranger key would fail auth)


def test_host_key_type_not_offered_is_a_mismatch(pool: SshPool, sshd: Sshd, auth_calls: list[str]) -> None:
    with pytest.raises(HostKeyMismatch) as info:
        pool.host("sbx-rsa-only")
    assert "rsa.example" in info.value.message and f"{sshd.known_hosts}:6" in info.value.message
    assert auth_calls == []


def test_revoked_host_key(pool: SshPool, sshd: Sshd, auth_calls: list[str]) -> None:
    with pytest.raises(HostKeyMismatch) as info:
        pool.host("sbx-revoked")
    assert "revoked" in info.value.message and f"{sshd.known_hosts}:8" in info.value.message
    assert auth_calls == []


def test_unknown_host(pool: SshPool, sshd: Sshd, auth_calls: list[str]) -> None:
    with pytest.raises(HostKeyUnknown) as info:
        pool.host("sbx-unknown")
    assert "unknown.example" in info.value.message
    assert _fp(sshd.host_keys["ssh-ed25519"]) in info.value.message
    assert auth_calls == []


def test_unknown_host_with_empty_known_hosts(sshd: Sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with SshPool(sshd.settings(known_hosts=(empty,))) as pool, pytest.raises(HostKeyUnknown):
        pool.host("sbx")


def test_wrong_identity_auth_failed(pool: SshPool, sshd: Sshd) -> None:
    with pytest.raises(AuthFailed) as info:
        pool.host("sbx-stranger")
    message = info.value.message
    assert sshd.user in message and str(sshd.stranger_key) in message
    assert "PRIVATE KEY" not in message and "PRIVATE KEY" not in repr(info.value.evidence)
    assert info.value.evidence["user"] == sshd.user


def test_identity_file_setting_used_without_config_identity(sshd: Sshd, tmp_path: Path) -> None:
    cfg = _config(tmp_path, sshd, f"Host plain\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {{user}}\n")
    settings = sshd.settings(config_file=cfg, identity_file=sshd.client_key)
    with SshPool(settings) as pool:
        assert pool.host("plain").run("echo ok").stdout == "ok\n"


def test_refused_port_fast_and_cached(sshd: Sshd, tmp_path: Path) -> None:
    port = sshd.free_port()
    cfg = _config(
        tmp_path, sshd, f"Host refused\n  HostName 127.0.0.1\n  Port {port}\n  IdentityFile {{key}}\n"
    )
    with SshPool(sshd.settings(config_file=cfg)) as pool:
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable) as first:
            pool.host("refused")
        assert time.monotonic() - t0 < 1
        assert first.value.message == f"cannot reach refused (127.0.0.1:{port}): connection refused"
        assert "cached" not in first.value.evidence
        t1 = time.monotonic()
        with pytest.raises(HostUnreachable) as second:
            pool.host("refused")
        assert time.monotonic() - t1 < 0.5  # no new connect attempt (a refused/silent one costs more)
        assert second.value.message == first.value.message
        assert second.value.evidence["cached"] is True
        assert second.value.evidence["port"] == port
        assert pool.stats() == {"refused": 0}


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never says a word."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        held: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            server.settimeout(0.1)
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    held.append(server.accept()[0])

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        yield int(server.getsockname()[1])
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()


def test_silent_server_is_unreachable_within_connect_timeout(
    sshd: Sshd, tmp_path: Path, silent_server: int
) -> None:
    cfg = _config(
        tmp_path, sshd, f"Host silent\n  HostName 127.0.0.1\n  Port {silent_server}\n  IdentityFile {{key}}\n"
    )
    with SshPool(sshd.settings(config_file=cfg, connect_timeout_s=1)) as pool:
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable) as info:
            pool.host("silent")
        elapsed = time.monotonic() - t0
        assert 0.9 < elapsed < 5  # the 1 s connect timeout held, with room for a loaded CI machine
        assert "no SSH banner" in info.value.message and f"127.0.0.1:{silent_server}" in info.value.message
        t1 = time.monotonic()
        with pytest.raises(HostUnreachable):
            pool.host("silent")
        assert time.monotonic() - t1 < 0.5  # no new connect attempt (a refused/silent one costs more)


def test_dns_failure_is_unreachable_and_bounded(sshd: Sshd, tmp_path: Path) -> None:
    cfg = _config(tmp_path, sshd, "Host nxdomain\n  HostName no-such-host.invalid\n  IdentityFile {key}\n")
    with SshPool(SshSettings(config_file=cfg, known_hosts=(sshd.known_hosts,), connect_timeout_s=2)) as pool:
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable) as info:
            pool.host("nxdomain")
        assert time.monotonic() - t0 < 3.5
        assert "DNS" in info.value.message
