"""A real SSH server for the simulated fleet: one asyncssh listener per simulated VM.

Each :class:`SimHost` is a home directory on this machine. ``ssh exedev@127.0.0.1 -p PORT cmd``
runs ``<login shell> -c cmd`` there with a clean environment, as OpenSSH's sshd does: the host's
configured login shell (``SimHost.shell``, bash unless a fault makes it fish, zsh, tcsh or dash), started
as ``argv[0]`` its base name, so the shell really parses the command line and reads its own start-up
files (``~/.zshenv``, ``config.fish``, ``~/.tcshrc``; Debian's bash ``~/.bashrc``, see ``source_bashrc``).
The server runs an asyncio loop in one daemon thread; the public methods are thread-safe and every
wait is bounded.

Process lifetime: every session runs in its own process group. When the client goes away
(or the host is removed, or the server stops) the group gets SIGTERM, then SIGKILL after a
short grace. Background jobs that outlive a finished session are left running, as on a real
VM, and are killed when their host is removed or the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shlex
import signal
import threading
import time
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import asyncssh

from sbxcheck.errors import SimError
from sbxcheck.sim.ports import PortReservations

__all__ = ["SimHost", "SimSshServer", "generate_keypair"]

_T = TypeVar("_T")

_BASE_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
_BASH = "/bin/bash"
_CHUNK = 65536
_KILL_GRACE_S = 1.0  # SIGTERM -> SIGKILL
_DRAIN_IDLE_S = 1.0  # after exit: give up on output pipes held open (idle) by leftovers
_LOGIN_TIMEOUT_S = 30.0
_CALL_TIMEOUT_S = 10.0  # add_host / remove_host
_CLOSE_WAIT_S = 2.0


@dataclass
class SimHost:
    """One simulated VM: a login name, a home directory and how its SSH port behaves."""

    name: str
    home: Path
    user: str = "exedev"
    path_dirs: tuple[Path, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    shell: str = "/bin/bash"  # the user's login shell (its absolute path): sshd runs `$SHELL -c CMD`
    mode: Literal["ok", "refuse", "silent"] = "ok"
    private_tmp: Path | None = None  # commands see this directory as /tmp (a mount namespace) ...
    private_tmp_keep: tuple[Path, ...] = ()  # ... with these directories under /tmp still in place
    # Debian's bash reads ~/.bashrc for every `ssh host CMD` (the first shell sshd starts, not its
    # children): True does the same here, so a lived-in home's start-up noise reaches the client
    source_bashrc: bool = False
    received_log: Path | None = None  # every command and stdin byte this host received is appended here


def generate_keypair(path: Path, comment: str) -> str:
    """Write an ed25519 key to ``path`` (OpenSSH format, 0600) and ``path.pub``; return the public line."""
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(key.export_private_key("openssh"))
    public = key.export_public_key("openssh")
    path.with_name(path.name + ".pub").write_bytes(public)
    return public.decode("ascii").strip()


def _read_host_key(path: Path) -> asyncssh.SSHKey:
    try:
        return asyncssh.read_private_key(path)
    except (OSError, asyncssh.KeyImportError) as exc:
        raise SimError(f"cannot read host key {path}: {exc}", evidence={"path": str(path)}) from exc


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True if the process group has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return True  # no /proc: a zombie-only group counts as alive
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


async def _terminate_group(pgid: int) -> None:
    """SIGTERM the process group, SIGKILL whatever is left after the grace period."""
    loop = asyncio.get_running_loop()
    _signal_group(pgid, signal.SIGTERM)
    deadline = loop.time() + _KILL_GRACE_S
    while _group_alive(pgid) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class _StdinProtocol(asyncio.BaseProtocol):
    """Write side of the child's stdin pipe, with drain support."""

    def __init__(self) -> None:
        self._writable = asyncio.Event()
        self._writable.set()
        self.lost = False

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._writable.set()

    async def drain(self) -> None:
        await self._writable.wait()


class _OutPump:
    """Copy one output pipe of the child to one SSH stream; remembers since when it is idle."""

    def __init__(self, src: asyncio.StreamReader, dst: asyncssh.SSHWriter[bytes]) -> None:
        self._src = src
        self._dst = dst
        self.idle_since: float | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.idle_since = loop.time()
            chunk = await self._src.read(_CHUNK)
            self.idle_since = None
            if not chunk:
                return
            try:
                self._dst.write(chunk)
                await self._dst.drain()
            except (OSError, asyncssh.Error):
                return  # the channel is gone; the session notices via wait_closed()


class _SilentProtocol(asyncio.Protocol):
    """Accept TCP and never answer (no SSH banner)."""

    def __init__(self, transports: set[asyncio.Transport]) -> None:
        self._transports = transports
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._transports.discard(self._transport)


@dataclass(eq=False)
class _Entry:
    """Loop-side state of one added host."""

    host: SimHost
    port: int
    acceptor: asyncssh.SSHAcceptor | None = None
    silent: asyncio.Server | None = None
    silent_transports: set[asyncio.Transport] = field(default_factory=set)
    conns: set[asyncssh.SSHServerConnection] = field(default_factory=set)
    sessions: set[asyncio.Task[None]] = field(default_factory=set)
    leftovers: set[int] = field(default_factory=set)  # pgids of finished sessions with live members


class _Server(asyncssh.SSHServer):
    """Per-connection auth policy: public key only, one login name."""

    def __init__(self, owner: SimSshServer, entry: _Entry) -> None:
        self._owner = owner
        self._entry = entry
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._entry.conns.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._entry.conns.discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == self._entry.host.user and key.public_data in self._owner._authorized

    def auth_completed(self) -> None:
        self._owner._count_auth(self._entry.host.name)


class SimSshServer:
    """SSH endpoints for simulated VMs, served from an asyncio loop in a daemon thread."""

    def __init__(self, *, authorized_keys: list[str], default_host_key: Path) -> None:
        self._authorized: frozenset[bytes] = frozenset(_parse_public_keys(authorized_keys))
        self._default_host_key_path = default_host_key
        self._default_host_key: asyncssh.SSHKey | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._hosts: dict[str, _Entry] = {}  # loop thread only
        self._pgids: set[int] = set()  # loop thread only (read after the thread ended)
        self._lock = threading.Lock()
        self._auth_counts: dict[str, int] = {}  # guarded by _lock
        self._refusing = PortReservations()  # refusing hosts' own ports: bound, never listening

    # -- public, thread-safe ------------------------------------------------------------

    def start(self, timeout_s: float = 10) -> None:
        """Load the default host key and start the event loop thread."""
        if self._thread is not None or self._stopped:
            raise SimError("SimSshServer.start() may be called only once")
        self._default_host_key = _read_host_key(self._default_host_key_path)
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        thread = threading.Thread(target=self._run, args=(loop, ready), name="sbxcheck-sim-sshd", daemon=True)
        self._loop, self._thread = loop, thread
        thread.start()
        if not ready.wait(timeout_s):
            self.stop(timeout_s=2)
            raise SimError(f"sim sshd loop did not start within {timeout_s}s")

    def add_host(self, host: SimHost, port: int = 0, *, host_key: Path | None = None) -> int:
        """Serve ``host`` on 127.0.0.1:``port`` (0 = any free port); return the real port."""
        if not host.home.is_dir():
            raise SimError(f"sim host {host.name}: home {host.home} is not a directory")
        key = _read_host_key(host_key) if host_key is not None else self._default_host_key
        if key is None:
            raise SimError("SimSshServer is not started")
        return self._call(self._add(host, port, key), _CALL_TIMEOUT_S, f"add_host({host.name})")

    def remove_host(self, name: str) -> None:
        """Stop serving ``name``: close its port and connections, kill its processes. No-op if unknown."""
        if self._loop is None or self._stopped:
            return
        self._call(self._remove(name), _CALL_TIMEOUT_S, f"remove_host({name})")

    def connections(self, name: str) -> int:
        """Number of SSH connections to ``name`` that completed authentication so far."""
        with self._lock:
            if name not in self._auth_counts:
                raise KeyError(name)
            return self._auth_counts[name]

    def stop(self, timeout_s: float = 10) -> None:
        """Close every listener and connection, kill every session process, end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or self._stopped:
            return
        self._stopped = True
        deadline = time.monotonic() + timeout_s
        error: SimError | None = None
        try:
            self._call(self._shutdown(), max(timeout_s - 1.0, 0.5), "stop()")
        except SimError as exc:
            error = exc
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        thread.join(max(deadline - time.monotonic(), 0.5))
        for pgid in list(self._pgids):  # last resort, in case shutdown did not finish
            _signal_group(pgid, signal.SIGKILL)
        self._refusing.close()
        if thread.is_alive():
            raise SimError(f"sim sshd thread did not end within {timeout_s}s")
        if error is not None:
            raise error

    # -- internals -------------------------------------------------------------------------

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _call(self, coro: Coroutine[Any, Any, _T], timeout_s: float, what: str) -> _T:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            coro.close()
            raise SimError(f"sim sshd: {what}: the server is not running")
        if threading.current_thread() is thread:
            coro.close()
            raise SimError(f"sim sshd: {what} called from the server's own loop thread")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout_s)
        except TimeoutError as exc:
            future.cancel()
            raise SimError(f"sim sshd: {what} did not finish within {timeout_s}s") from exc

    def _count_auth(self, name: str) -> None:
        with self._lock:
            self._auth_counts[name] = self._auth_counts.get(name, 0) + 1

    async def _add(self, host: SimHost, port: int, key: asyncssh.SSHKey) -> int:
        if host.name in self._hosts:
            raise SimError(f"sim host {host.name} is already added")
        entry = _Entry(host=host, port=port)
        try:
            if host.mode == "refuse":
                entry.port = port or self._refusing.reserve()
            elif host.mode == "silent":
                loop = asyncio.get_running_loop()
                entry.silent = await loop.create_server(
                    lambda: _SilentProtocol(entry.silent_transports), "127.0.0.1", port
                )
                entry.port = entry.silent.sockets[0].getsockname()[1]
            else:
                entry.acceptor = await asyncssh.listen(
                    "127.0.0.1",
                    port,
                    server_factory=functools.partial(_Server, self, entry),
                    process_factory=functools.partial(self._session, entry),
                    server_host_keys=[key],
                    encoding=None,
                    allow_pty=False,
                    agent_forwarding=False,
                    x11_forwarding=False,
                    allow_scp=False,
                    sftp_factory=None,
                    gss_host=None,
                    login_timeout=_LOGIN_TIMEOUT_S,
                )
                entry.port = entry.acceptor.get_port()
        except OSError as exc:
            raise SimError(f"sim host {host.name}: cannot listen on 127.0.0.1:{port}: {exc}") from exc
        self._hosts[host.name] = entry
        with self._lock:
            self._auth_counts.setdefault(host.name, 0)
        return entry.port

    async def _remove(self, name: str) -> None:
        entry = self._hosts.pop(name, None)
        if entry is not None:
            await self._close_entry(entry)

    async def _shutdown(self) -> None:
        entries = list(self._hosts.values())
        self._hosts.clear()
        await asyncio.gather(*(self._close_entry(e) for e in entries))
        current = asyncio.current_task()
        others = [t for t in asyncio.all_tasks() if t is not current]
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others, timeout=_CLOSE_WAIT_S)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loop.shutdown_default_executor(), _CLOSE_WAIT_S)

    async def _close_entry(self, entry: _Entry) -> None:
        """Close listeners and connections of one host and end all of its processes."""
        self._refusing.release(entry.port)
        if entry.acceptor is not None:
            entry.acceptor.close()
        if entry.silent is not None:
            entry.silent.close()
        for transport in list(entry.silent_transports):
            transport.abort()
        conns = list(entry.conns)
        for conn in conns:
            conn.close()  # sessions see their channel close and terminate their groups
        sessions = set(entry.sessions)
        if sessions:
            _, pending = await asyncio.wait(sessions, timeout=_KILL_GRACE_S + _CLOSE_WAIT_S)
            for task in pending:
                task.cancel()  # the session's finally SIGKILLs its group
            if pending:
                await asyncio.wait(pending, timeout=_CLOSE_WAIT_S)
        await asyncio.gather(*(_terminate_group(pgid) for pgid in entry.leftovers))
        self._pgids.difference_update(entry.leftovers)
        entry.leftovers.clear()
        waits = [asyncio.ensure_future(conn.wait_closed()) for conn in conns]
        if entry.acceptor is not None:
            waits.append(asyncio.ensure_future(entry.acceptor.wait_closed()))
        if entry.silent is not None:
            waits.append(asyncio.ensure_future(entry.silent.wait_closed()))
        if waits:
            _, pending_waits = await asyncio.wait(waits, timeout=_CLOSE_WAIT_S)
            for fut in pending_waits:
                fut.cancel()

    async def _session(self, entry: _Entry, process: asyncssh.SSHServerProcess[bytes]) -> None:
        """Run one exec/shell request as ``bash`` in the host's home with a clean environment."""
        task = asyncio.current_task()
        assert task is not None
        entry.sessions.add(task)
        try:
            if process.subsystem is not None:
                process.stderr.write(f"subsystem {process.subsystem!r} is not supported\n".encode())
                process.exit(1)
                return
            await self._run_command(entry, process)
        finally:
            entry.sessions.discard(task)

    async def _run_command(self, entry: _Entry, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command
        _log_received(entry.host, f"exec {command!r}\n".encode())
        shell = entry.host.shell
        argv = [os.path.basename(shell), "-c", command] if command is not None else [os.path.basename(shell)]
        executable: str | None = shell
        if entry.host.private_tmp is not None:
            argv = private_tmp_argv(entry.host.private_tmp, command, entry.host.private_tmp_keep, shell=shell)
            executable = None
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                executable=executable,
                stdin=in_r,
                stdout=out_w,
                stderr=err_w,
                cwd=entry.host.home,
                env=_command_env(entry.host),
                start_new_session=True,
            )
        except OSError as exc:
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            process.stderr.write(f"sbxcheck sim: cannot start {entry.host.shell}: {exc}\n".encode())
            process.exit(127)
            return
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        pgid = proc.pid  # start_new_session: the child leads its own process group
        self._pgids.add(pgid)
        try:
            await self._bridge(entry, process, proc, (in_w, out_r, err_r))
        finally:
            if pgid in self._pgids and pgid not in entry.leftovers:  # cancelled or failed mid-way
                _signal_group(pgid, signal.SIGKILL)
                self._pgids.discard(pgid)

    async def _bridge(
        self,
        entry: _Entry,
        process: asyncssh.SSHServerProcess[bytes],
        proc: asyncio.subprocess.Process,
        fds: tuple[int, int, int],
    ) -> None:
        """Connect the child's pipes (our ends: stdin, stdout, stderr) to the channel until it ends."""
        loop = asyncio.get_running_loop()
        pgid = proc.pid
        stdin_file, out_file, err_file = (
            os.fdopen(fd, mode, 0) for fd, mode in zip(fds, ("wb", "rb", "rb"), strict=True)
        )
        unowned = [stdin_file, out_file, err_file]  # files not yet handed over to a transport
        stdin_tr: asyncio.WriteTransport | None = None
        read_trs: list[asyncio.ReadTransport] = []
        tasks: list[asyncio.Future[Any]] = []
        try:
            stdin_tr, stdin_proto = await loop.connect_write_pipe(_StdinProtocol, unowned.pop(0))
            pumps: list[_OutPump] = []
            for dst in (process.stdout, process.stderr):
                reader = asyncio.StreamReader()
                read_tr, _ = await loop.connect_read_pipe(
                    functools.partial(asyncio.StreamReaderProtocol, reader), unowned.pop(0)
                )
                read_trs.append(read_tr)
                pumps.append(_OutPump(reader, dst))
            pump_tasks = [asyncio.ensure_future(p.run()) for p in pumps]
            closed = asyncio.ensure_future(process.channel.wait_closed())
            exited = asyncio.ensure_future(proc.wait())
            tasks += [*pump_tasks, closed, exited]
            tasks.append(asyncio.ensure_future(_pump_stdin(process, stdin_tr, stdin_proto, pgid, entry.host)))

            await asyncio.wait({exited, closed}, return_when=asyncio.FIRST_COMPLETED)
            if exited.done() and await _drain_outputs(pumps, pump_tasks, closed):
                if _group_alive(pgid):
                    entry.leftovers.add(pgid)  # background jobs keep running, as on a VM
                else:
                    self._pgids.discard(pgid)
                process.exit(_exit_status(exited.result()))
            else:  # the client went away (or the host / server is closing)
                await _terminate_group(pgid)
                self._pgids.discard(pgid)
                await asyncio.wait({exited}, timeout=_CLOSE_WAIT_S)  # let the child watcher reap it
        finally:
            for task in tasks:
                task.cancel()
            # a stdin transport that is closing with an empty buffer is already finishing (EOF)
            if stdin_tr is not None and (not stdin_tr.is_closing() or stdin_tr.get_write_buffer_size()):
                stdin_tr.abort()
            for read_tr in read_trs:
                read_tr.close()
            for file in unowned:
                file.close()


async def _pump_stdin(
    process: asyncssh.SSHServerProcess[bytes],
    transport: asyncio.WriteTransport,
    proto: _StdinProtocol,
    pgid: int,
    host: SimHost,
) -> None:
    """Copy client data to the child's stdin; client EOF closes it; client signals go to the group."""
    while not proto.lost:
        try:
            data = await process.stdin.read(_CHUNK)
        except asyncssh.SignalReceived as exc:
            sig = _signal_by_name(exc.signal)
            if sig is not None:
                _signal_group(pgid, sig)
            continue
        except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged):
            continue
        except (OSError, asyncssh.Error):
            break
        if not data:
            break
        _log_received(host, data)
        transport.write(data)
        await proto.drain()
    if not transport.is_closing():
        transport.close()


async def _drain_outputs(
    pumps: Sequence[_OutPump], tasks: Sequence[asyncio.Future[None]], closed: asyncio.Future[None]
) -> bool:
    """After the child exited, forward what is left. False if the client went away meanwhile.

    Output pipes still open but idle for ``_DRAIN_IDLE_S`` are held by background jobs: stop there.
    """
    loop = asyncio.get_running_loop()
    while not closed.done():
        live = [(p, t) for p, t in zip(pumps, tasks, strict=True) if not t.done()]
        if not live:
            return True
        now = loop.time()
        idle = [p.idle_since for p, _ in live]
        if all(i is not None and now - i >= _DRAIN_IDLE_S for i in idle):
            return True
        await asyncio.wait([t for _, t in live] + [closed], timeout=0.1, return_when=asyncio.FIRST_COMPLETED)
    return False


_SYSTEM_TMP = Path("/tmp")


def private_tmp_argv(
    tmp_dir: Path, command: str | None, keep: Sequence[Path] = (), *, shell: str = _BASH
) -> list[str]:
    """argv running ``shell -c command`` (None: the shell on stdin) in its own mount namespace with
    ``tmp_dir`` as /tmp.

    Directories in ``keep`` that live under /tmp (the VM homes, the pi cache) stay visible at their
    own paths. Root uses a plain mount namespace; anyone else a user namespace as well.
    """
    binds = []
    for path in keep:
        resolved = path.resolve()
        if resolved.is_relative_to(_SYSTEM_TMP):
            inside = tmp_dir / resolved.relative_to(_SYSTEM_TMP)
            inside.mkdir(parents=True, exist_ok=True)
            binds.append(
                f"mount --bind -- {shlex.quote(str(resolved))} {shlex.quote(str(inside))} || exit 125"
            )
    wrapper = "\n".join(
        [
            *binds,
            f"mount --rbind -- {shlex.quote(str(tmp_dir))} /tmp || exit 125",
            f'if [ $# -gt 0 ]; then exec {shlex.quote(shell)} -c "$1"; else exec {shlex.quote(shell)}; fi',
        ]
    )
    flags = ["--mount", "--propagation", "private"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    tail = [] if command is None else [command]
    return ["unshare", *flags, "--", _BASH, "-c", wrapper, "sbxcheck-sim-vm", *tail]


def private_tmp_supported(timeout_s: float = 10.0) -> str | None:
    """None when this machine can give a command a private /tmp, else why not (for a readable SimError)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sbxcheck-privtmp-") as tmp:
        try:
            proc = subprocess.run(
                private_tmp_argv(Path(tmp), "test -w /tmp && : > /tmp/probe"),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unshare is not usable: {exc}"
        if proc.returncode != 0 or not (Path(tmp) / "probe").exists():
            return f"unshare --mount failed (exit {proc.returncode}): {proc.stderr.strip()[:200]}"
    return None


def _command_env(host: SimHost) -> dict[str, str]:
    path = ":".join([*(str(d) for d in host.path_dirs), *_BASE_PATH])
    env = {
        "HOME": str(host.home),
        "USER": host.user,
        "LOGNAME": host.user,
        "SHELL": host.shell,
        "LANG": "C.UTF-8",
        "PATH": path,
    }
    if host.source_bashrc and os.path.basename(host.shell) == "bash":
        env["BASH_ENV"] = str(_debian_bashrc_shim(host))
    env.update(host.env)
    return env


def _debian_bashrc_shim(host: SimHost) -> Path:
    """A BASH_ENV file doing what Debian's bash does for a command run by sshd: read ~/.bashrc once."""
    shim = host.home / ".sim" / "sshd-bashrc"
    if not shim.exists():
        shim.parent.mkdir(parents=True, exist_ok=True)
        shim.write_text('unset BASH_ENV\n[ -f "$HOME/.bashrc" ] && . "$HOME/.bashrc"\n', encoding="utf-8")
    return shim


def _log_received(host: SimHost, data: bytes) -> None:
    """Append what the client sent to ``host.received_log`` (tests assert a secret never arrives)."""
    if host.received_log is not None:
        with open(host.received_log, "ab") as fh:
            fh.write(data)


def _signal_by_name(name: str) -> signal.Signals | None:
    try:
        return signal.Signals["SIG" + name.upper()]
    except KeyError:
        return None


def _parse_public_keys(lines: Iterable[str]) -> Iterable[bytes]:
    for line in lines:
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            yield asyncssh.import_public_key(text).public_data
        except asyncssh.KeyImportError as exc:
            raise SimError(f"invalid authorized key line: {exc}") from exc
