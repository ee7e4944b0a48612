"""A real OpenSSH sshd on loopback, with throwaway host and client keys, for transport tests."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from sbxcheck.sim.ports import PortReservations
from sbxcheck.transports.ssh_connect import SshSettings

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"


_HELD_PORTS = PortReservations()  # this worker's ports: held until the process ends


def free_port() -> int:
    """A loopback TCP port held for this test process: nothing listens on it, nobody else takes it."""
    return _HELD_PORTS.reserve()


def keygen(path: Path, key_type: str, bits: int | None = None) -> str:
    """Generate an unencrypted key pair at ``path``; return the public key ``type base64``."""
    cmd = [SSH_KEYGEN, "-q", "-t", key_type, "-N", "", "-C", path.name, "-f", str(path)]
    if bits:
        cmd[2:2] = ["-b", str(bits)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    type_, b64 = path.with_suffix(".pub").read_text().split()[:2]
    return f"{type_} {b64}"


@dataclass(frozen=True)
class Sshd:
    """A running sshd and the files that describe how to reach it."""

    port: int
    workdir: Path
    user: str
    ssh_config: Path
    known_hosts: Path
    client_key: Path  # authorised
    stranger_key: Path  # never authorised
    host_keys: dict[str, str]  # key type -> "type base64" of the server's host keys
    other_key: str  # a host key the server does not have ("ssh-ed25519 ...")
    log: Path

    @staticmethod
    def free_port() -> int:
        return free_port()

    @property
    def name(self) -> str:
        """The known_hosts name of the server."""
        return f"[127.0.0.1]:{self.port}"

    def settings(self, **overrides: Any) -> SshSettings:
        base = SshSettings(
            config_file=self.ssh_config,
            known_hosts=(self.known_hosts,),
            connect_timeout_s=5.0,
            command_timeout_s=20.0,
        )
        return replace(base, **overrides)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"sshd exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.settimeout(2)
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"sshd did not accept connections on 127.0.0.1:{port} within {deadline_s}s")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """Start ``/usr/sbin/sshd -D`` on a free loopback port for the whole session."""
    if not SSHD.exists():
        reason = f"{SSHD} not found: install Debian's openssh-server to run the SSH integration tests"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must not skip these)")
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("sshd")
    user = getpass.getuser()
    host_keys = {
        "ssh-ed25519": keygen(work / "host_ed25519", "ed25519"),
        "ecdsa-sha2-nistp256": keygen(work / "host_ecdsa", "ecdsa", 256),
    }
    client_pub = keygen(work / "client_key", "ed25519")
    keygen(work / "stranger_key", "ed25519")
    other_key = keygen(work / "other_host_ed25519", "ed25519")
    rsa_key = keygen(work / "other_host_rsa", "rsa", 2048)
    (work / "authorized_keys").write_text(client_pub + "\n")

    port = free_port()
    ed, ecdsa = host_keys["ssh-ed25519"], host_keys["ecdsa-sha2-nistp256"]
    (work / "sshd_config").write_text(
        f"""ListenAddress 127.0.0.1
Port {port}
HostKey {work / "host_ed25519"}
HostKey {work / "host_ecdsa"}
AuthorizedKeysFile {work / "authorized_keys"}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
PidFile {work / "sshd.pid"}
AllowTcpForwarding yes
PrintMotd no
LogLevel ERROR
"""
    )
    known_hosts = work / "known_hosts"
    known_hosts.write_text(
        f"""# throwaway known_hosts for the integration sshd
[127.0.0.1]:{port} {ed}
sbx-vm.example {ed}
mismatch.example {other_key}
ecdsa.example {ecdsa}
rsa.example {rsa_key}
revoked.example {ed}
@revoked revoked.example {ed}
"""
    )
    common = f"  HostName 127.0.0.1\n  Port {port}\n  User {user}\n"
    ssh_config = work / "ssh_config"
    ssh_config.write_text(
        f"""Host sbx
{common}  IdentityFile {work / "client_key"}

Host sbx-alias
{common}  IdentityFile client_key
  HostKeyAlias sbx-vm.example

Host sbx-jump
{common}  IdentityFile {work / "client_key"}
  ProxyJump sbx

Host sbx-stranger
{common}  IdentityFile {work / "stranger_key"}

Host sbx-mismatch
{common}  IdentityFile {work / "stranger_key"}
  HostKeyAlias mismatch.example

Host sbx-unknown
{common}  IdentityFile {work / "client_key"}
  HostKeyAlias unknown.example

Host sbx-ecdsa-only
{common}  IdentityFile {work / "client_key"}
  HostKeyAlias ecdsa.example

Host sbx-rsa-only
{common}  IdentityFile {work / "client_key"}
  HostKeyAlias rsa.example

Host sbx-revoked
{common}  IdentityFile {work / "client_key"}
  HostKeyAlias revoked.example
"""
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    log = work / "sshd.log"
    with log.open("wb") as log_fh:
        proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(work / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_port(port, proc, log)  # sshd binds with SO_REUSEADDR, next to the reservation
        _HELD_PORTS.release(port)
        yield Sshd(
            port=port,
            workdir=work,
            user=user,
            ssh_config=ssh_config,
            known_hosts=known_hosts,
            client_key=work / "client_key",
            stranger_key=work / "stranger_key",
            host_keys=host_keys,
            other_key=other_key,
            log=log,
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
