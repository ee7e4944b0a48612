"""SSH transport: resolve aliases through ssh_config, connect with strict host-key checking, run commands.

Opening a connection (ssh_config, TCP, jump hosts, host keys, auth) is in :mod:`.ssh_connect`; this
module runs commands over it (:class:`SshHost`) and pools the connections (:class:`SshPool`).

Built on ``paramiko.Transport`` (not ``SSHClient``) so that every step is explicit and bounded:
TCP connect (DNS included), SSH banner and key exchange, host-key verification (before any
authentication), public-key authentication, and each command. No ssh-agent, no passwords,
never a host key accepted or written.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from sbxcheck.errors import (
    CommandTimeout,
    SbxError,
    TransportError,
)
from sbxcheck.transports.framing import frame_command, neutral_start, new_frame, unframe
from sbxcheck.transports.known_hosts import KnownHosts
from sbxcheck.transports.ssh_connect import (
    Connection,
    Connector,
    ResolvedHost,
    SshConfigFile,
    SshSettings,
    resolve_host,
    rewrap,
)

log = logging.getLogger(__name__)

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
_READ_CHUNK = 65536
_SEND_CHUNK = 32768

@dataclass(frozen=True)
class CommandResult:
    """What a remote command printed and how it exited."""

    exit_code: int
    stdout: str  # utf-8, errors="replace"
    stderr: str
    duration_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    framed: bool = False  # stdout/stderr are exactly what the command printed (see transports/framing.py)
    shell_noise_chars: int = 0  # what the remote shell printed around the command (dropped)


# --------------------------------------------------------------------------- connecting


# --------------------------------------------------------------------------- commands


class _Capture:
    """Bytes of one stream up to a limit; counts and discards the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", errors="replace")


_NOISE_ALLOWANCE = 65536  # bytes per stream a framed command may spend on its shell's noise and markers


def _cap(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` utf-8 bytes, and whether it was cut."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", errors="replace"), True


class _Wake(threading.Event):
    """The event both receive buffers of a channel set; paramiko also clears it when a buffer empties,
    which the reader must not miss, so clearing is left to the reader alone."""

    def clear(self) -> None:  # called by paramiko's BufferedPipe.read when a buffer runs empty
        pass

    def reset(self) -> None:
        super().clear()


class SshHost:
    """One pooled SSH connection to an alias; run commands on it."""

    def __init__(
        self,
        resolved: ResolvedHost,
        settings: SshSettings,
        connection: Connection,
        reconnect: Callable[[], Connection],
    ) -> None:
        self.alias = resolved.alias
        self.resolved = resolved
        self.connected_at = time.time()
        self._settings = settings
        self._conn: Connection | None = connection
        self._reconnect = reconnect
        self._lock = threading.Lock()
        self._sessions = threading.BoundedSemaphore(max(1, settings.max_sessions))
        self._failure: SbxError | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"SshHost({self.alias!r}, {self.resolved.address})"

    def _evidence(self, **extra: Any) -> dict[str, Any]:
        return {"alias": self.alias, "hostname": self.resolved.hostname, "port": self.resolved.port, **extra}

    def _transport(self) -> paramiko.Transport:
        """The live transport, reconnecting once if the pooled one died."""
        with self._lock:
            if self._closed:
                raise TransportError(f"SSH connection to {self.alias} was closed", evidence=self._evidence())
            if self._failure is not None:
                raise rewrap(self._failure, "", {"cached": True})
            if self._conn is not None and self._conn.is_active():
                return self._conn.transport
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            log.info("SSH connection to %s is gone; reconnecting once", self.alias)
            try:
                self._conn = self._reconnect()
            except SbxError as exc:
                self._failure = exc
                raise
            self.connected_at = time.time()
            return self._conn.transport

    def run(
        self,
        command: str,
        *,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        frame: bool = True,
    ) -> CommandResult:
        """Run ``command``; feed ``stdin`` (then EOF); wait at most ``timeout`` s (default from settings).

        ``frame`` (default) runs ``command`` in ``/bin/sh`` whatever the login shell, and reads its output
        between its own markers, apart from what the login shell prints around it (transports/framing.py);
        ``False`` sends ``command`` as it is, for an SSH endpoint that is not a shell (exe.dev's CLI).
        """
        limit = self._settings.command_timeout_s if timeout is None else timeout
        start = time.monotonic()
        deadline = start + limit
        transport = self._transport()
        # a server refuses channels beyond its MaxSessions: wait for a free one within the deadline
        if not self._sessions.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise CommandTimeout(
                f"{self.alias}: no free session slot within the {limit:g}s command deadline "
                f"({self._settings.max_sessions} commands already in flight)",
                evidence=self._evidence(timeout_s=limit, command=command[:200]),
            )
        try:
            return self._run_in_slot(transport, command, stdin, start, deadline, limit, frame)
        finally:
            self._sessions.release()

    def _run_in_slot(
        self,
        transport: paramiko.Transport,
        command: str,
        stdin: str | bytes | None,
        start: float,
        deadline: float,
        limit: float,
        frame: bool,
    ) -> CommandResult:
        log.debug("run on %s: %s", self.alias, command)
        try:
            channel = transport.open_session(
                timeout=max(0.001, min(self._settings.connect_timeout_s, deadline - time.monotonic()))
            )
        except (paramiko.SSHException, OSError, EOFError) as exc:
            elapsed = time.monotonic() - start
            if transport.is_active() and time.monotonic() >= deadline:
                raise CommandTimeout(
                    f"{self.alias}: no session channel within the {limit:g}s command deadline",
                    evidence=self._evidence(
                        elapsed_s=round(elapsed, 3), timeout_s=limit, command=command[:200]
                    ),
                ) from None
            raise TransportError(
                f"{self.alias}: cannot open an SSH session channel ({exc or type(exc).__name__})",
                evidence=self._evidence(elapsed_s=round(elapsed, 3), command=command[:200]),
            ) from None
        try:
            return self._run_on(channel, transport, command, stdin, start, deadline, limit, frame)
        finally:
            with contextlib.suppress(Exception):
                channel.close()

    def _run_on(
        self,
        channel: paramiko.Channel,
        transport: paramiko.Transport,
        command: str,
        stdin: str | bytes | None,
        start: float,
        deadline: float,
        limit: float,
        frame: bool,
    ) -> CommandResult:
        markers = new_frame() if frame else None  # the command's output apart from the shell's noise
        limit_bytes = self._settings.max_output_bytes
        out = _Capture(limit_bytes + (_NOISE_ALLOWANCE if markers else 0))
        err = _Capture(limit_bytes + (_NOISE_ALLOWANCE if markers else 0))

        def own(capture: _Capture) -> str:  # what the command itself printed so far
            return capture.text() if markers is None else unframe(capture.text(), markers).text

        def timed_out() -> CommandTimeout:
            while channel.recv_ready():  # what arrived up to the deadline counts in the evidence
                out.add(channel.recv(_READ_CHUNK))
            while channel.recv_stderr_ready():
                err.add(channel.recv_stderr(_READ_CHUNK))
            channel.close()
            return CommandTimeout(
                f"{self.alias}: command did not finish within {limit:g}s",
                evidence=self._evidence(
                    elapsed_s=round(time.monotonic() - start, 3),
                    timeout_s=limit,
                    command=command[:200],
                    stdout_chars=len(own(out)),
                    stderr_chars=len(own(err)),
                ),
            )

        def died(what: str) -> TransportError:
            return TransportError(
                f"{self.alias}: {what}",
                evidence=self._evidence(
                    elapsed_s=round(time.monotonic() - start, 3),
                    command=command[:200],
                    stdout_chars=len(own(out)),
                    stderr_chars=len(own(err)),
                ),
            )

        # exec_command waits for the server's reply without a deadline: a watchdog closes the
        # channel at the deadline, which wakes it.
        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), channel.close)
        watchdog.daemon = True
        watchdog.start()
        own_stdin = stdin.encode("utf-8") if isinstance(stdin, str) else (stdin or b"")
        if markers is None:
            line, head = command, b""
        else:  # the login shell parses one fixed line; the framed command reaches /bin/sh on stdin
            line, head = neutral_start(frame_command(command, markers))
        try:
            channel.exec_command(line)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if time.monotonic() >= deadline:
                raise timed_out() from None
            raise died(f"command was not started ({exc or type(exc).__name__})") from None
        finally:
            watchdog.cancel()

        pending = memoryview(head + own_stdin)
        if not pending:
            channel.shutdown_write()
        # Wait on the channel itself: both receive buffers set ``wake`` when data arrives or they
        # close (EOF, channel close, transport death), so no sleep-polling.
        wake = _Wake()
        channel.in_buffer.set_event(wake)
        channel.in_stderr_buffer.set_event(wake)
        while True:
            wake.reset()
            while channel.recv_ready():
                out.add(channel.recv(_READ_CHUNK))
            while channel.recv_stderr_ready():
                err.add(channel.recv_stderr(_READ_CHUNK))
            blocked = False  # stdin waits for window space (no event for that): a short wait
            if pending and not channel.closed:
                if channel.send_ready():
                    try:
                        sent = channel.send(pending[:_SEND_CHUNK].tobytes())
                    except (OSError, EOFError, paramiko.SSHException):
                        sent, pending = 0, memoryview(b"")  # remote closed its stdin; stop feeding
                    pending = pending[sent:]
                    if not pending:
                        channel.shutdown_write()
                    continue
                blocked = True
            drained = not channel.recv_ready() and not channel.recv_stderr_ready()
            if drained and (channel.closed or (channel.eof_received and channel.status_event.is_set())):
                break
            if not transport.is_active():
                raise died("SSH transport died during the command")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise timed_out()
            if channel.eof_received and drained:
                # output ended; the exit status follows (status_event has no hook into ``wake``)
                channel.status_event.wait(min(remaining, 0.05))
            else:
                wake.wait(min(remaining, 0.005 if blocked else 1.0))

        # paramiko sets status_event on close too; exit_status stays -1 unless the server sent one.
        if channel.exit_status < 0:
            if not transport.is_active():
                raise died("SSH transport died during the command")
            raise died("channel closed without an exit status (command killed by a signal?)")
        if markers is None:
            return CommandResult(
                exit_code=channel.exit_status,
                stdout=out.text(),
                stderr=err.text(),
                duration_s=time.monotonic() - start,
                stdout_truncated=out.truncated,
                stderr_truncated=err.truncated,
            )
        stdout, stderr = unframe(out.text(), markers, with_status=True), unframe(err.text(), markers)
        framed = stdout.framed and stdout.complete
        stdout_text, stdout_cut = _cap(stdout.text, limit_bytes)
        stderr_text, stderr_cut = _cap(stderr.text, limit_bytes)
        return CommandResult(
            exit_code=stdout.exit_code if framed and stdout.exit_code is not None else channel.exit_status,
            stdout=stdout_text,
            stderr=stderr_text,
            duration_s=time.monotonic() - start,
            stdout_truncated=out.truncated or stdout_cut,
            stderr_truncated=err.truncated or stderr_cut,
            framed=framed,
            shell_noise_chars=stdout.noise_chars + stderr.noise_chars,
        )

    def close(self) -> None:
        """Close the connection; later run() calls raise TransportError."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class SshPool:
    """Lazily opened, shared SSH connections: one per alias, failures remembered."""

    def __init__(self, settings: SshSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._alias_locks: dict[str, threading.Lock] = {}
        self._hosts: dict[str, SshHost] = {}
        self._failures: dict[str, SbxError] = {}
        self._opened: dict[str, int] = {}
        self._known_hosts: KnownHosts | None = None
        self._ssh_config: SshConfigFile | None = None
        self._closed = False

    @property
    def ssh_config(self) -> SshConfigFile:
        """The ssh_config file, parsed once per pool (an unreadable file raises InventoryError each time)."""
        with self._lock:
            if self._ssh_config is None:
                self._ssh_config = SshConfigFile(self.settings)
            return self._ssh_config

    @property
    def known_hosts(self) -> KnownHosts:
        """The known_hosts files, loaded once per pool (warnings are logged once)."""
        with self._lock:
            if self._known_hosts is None:
                paths = self.settings.known_hosts or (DEFAULT_KNOWN_HOSTS,)
                self._known_hosts = KnownHosts.load(paths)
                for warning in self._known_hosts.warnings:
                    log.warning("known_hosts: %s", warning)
            return self._known_hosts

    def _open(self, resolved: ResolvedHost) -> Connection:
        """Open a connection for ``resolved``; remember a failure; count a success."""
        alias = resolved.alias
        try:
            conn = Connector(self.settings, self.known_hosts, self.ssh_config).connect(resolved)
        except SbxError as exc:
            with self._lock:
                self._failures[alias] = exc
            log.info("SSH connect to %s failed: %s", alias, exc.message)
            raise
        with self._lock:
            self._opened[alias] = self._opened.get(alias, 0) + 1
        return conn

    def host(self, alias: str) -> SshHost:
        """The connected host for ``alias`` (connects on first use; a failure is re-raised from cache)."""
        with self._lock:
            if self._closed:
                raise TransportError("SSH pool is closed", evidence={"alias": alias})
            alias_lock = self._alias_locks.setdefault(alias, threading.Lock())
            self._opened.setdefault(alias, 0)
        with alias_lock:
            with self._lock:
                failure = self._failures.get(alias)
                existing = self._hosts.get(alias)
            if failure is not None:
                raise rewrap(failure, "", {"cached": True})
            if existing is not None:
                return existing
            try:
                resolved = resolve_host(alias, self.settings, self.ssh_config)
            except SbxError as exc:
                with self._lock:
                    self._failures[alias] = exc
                raise
            conn = self._open(resolved)
            host = SshHost(resolved, self.settings, conn, lambda: self._open(resolved))
            with self._lock:
                if self._closed:
                    conn.close()
                    raise TransportError("SSH pool is closed", evidence={"alias": alias})
                self._hosts[alias] = host
            return host

    def forget(self, alias: str) -> None:
        """Drop ``alias``'s cached connect failure (and close its connection), so the next
        :meth:`host` connects afresh — after a remediation that should have made it reachable."""
        with self._lock:
            self._failures.pop(alias, None)
            host = self._hosts.pop(alias, None)
        if host is not None:
            host.close()

    def stats(self) -> dict[str, int]:
        """Alias -> number of SSH connections successfully opened (jump hops not counted)."""
        with self._lock:
            return dict(self._opened)

    def close(self) -> None:
        """Close every connection; idempotent."""
        with self._lock:
            self._closed = True
            hosts = list(self._hosts.values())
            self._hosts.clear()
        for host in hosts:
            host.close()

    def __enter__(self) -> SshPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
