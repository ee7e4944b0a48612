"""Opening one SSH connection: ~/.ssh/config resolution, TCP (bounded, IPv4/IPv6), jump hosts, strict host
keys and key auth. :mod:`.ssh` runs commands over what this opens and pools the connections."""

from __future__ import annotations

import contextlib
import errno
import getpass
import ipaddress
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import paramiko
from paramiko.ssh_exception import IncompatiblePeer

from sbxcheck.errors import (
    AuthFailed,
    HostKeyMismatch,
    HostKeyUnknown,
    HostUnreachable,
    InventoryError,
    SbxError,
)
from sbxcheck.transports.known_hosts import KnownHosts

log = logging.getLogger("sbxcheck.transports.ssh")  # one logger for the SSH transport, as before the split

DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
_E = TypeVar("_E", bound=SbxError)


@dataclass(frozen=True)
class SshSettings:
    """How to reach hosts: ssh_config, known_hosts, default identity, and time/size limits."""

    config_file: Path | None = None  # an ssh_config file; None = no config (~/.ssh/config is NOT read)
    known_hosts: tuple[Path, ...] = ()  # empty = ~/.ssh/known_hosts
    identity_file: Path | None = None  # used when ssh_config gives no IdentityFile
    connect_timeout_s: float = 10.0  # TCP connect, SSH handshake, each auth attempt: each bounded by this
    command_timeout_s: float = 120.0  # default per-command deadline
    max_output_bytes: int = 1_000_000  # per stream; the rest is read and discarded, marked truncated
    max_sessions: int = 8  # commands in flight per connection (OpenSSH's MaxSessions defaults to 10)


@dataclass(frozen=True)
class ResolvedHost:
    """What ssh_config says about an alias."""

    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[Path, ...]
    proxy_jump: tuple[str, ...]
    host_key_alias: str | None

    def known_hosts_name(self) -> str:
        """The name looked up in known_hosts (OpenSSH semantics)."""
        if self.host_key_alias:
            return self.host_key_alias
        if self.port == 22:
            return self.hostname
        return f"[{self.hostname}]:{self.port}"

    @property
    def address(self) -> str:
        """``hostname:port`` for messages."""
        return f"{self.hostname}:{self.port}"


class SshConfigFile:
    """An ssh_config file read and parsed once; ``lookup`` answers for any alias."""

    def __init__(self, settings: SshSettings) -> None:
        self.path = Path(settings.config_file).expanduser() if settings.config_file is not None else None
        self._config: paramiko.SSHConfig | None = None
        if self.path is None:
            return
        try:
            self._config = paramiko.SSHConfig.from_path(str(self.path))
        except OSError as exc:
            raise InventoryError(
                f"cannot read ssh_config {self.path}: {exc.strerror or exc}",
                evidence={"ssh_config": str(self.path)},
            ) from None
        except paramiko.SSHException as exc:
            raise InventoryError(
                f"invalid ssh_config {self.path}: {exc}", evidence={"ssh_config": str(self.path)}
            ) from None

    def lookup(self, alias: str) -> dict[str, Any]:
        """The options ssh_config gives ``alias`` (empty without a config file)."""
        if self._config is None:
            return {}
        try:
            return dict(self._config.lookup(alias))
        except paramiko.SSHException as exc:
            raise InventoryError(
                f"invalid ssh_config {self.path}: {exc}",
                evidence={"ssh_config": str(self.path), "alias": alias},
            ) from None


def _identity_path(raw: str, config_dir: Path | None) -> Path:
    path = Path(raw).expanduser()
    if not path.is_absolute() and not path.exists() and config_dir is not None:
        return config_dir / path
    return path


def resolve_host(alias: str, settings: SshSettings, config: SshConfigFile | None = None) -> ResolvedHost:
    """Resolve ``alias`` through ``settings.config_file`` (if any) as OpenSSH would.

    ``config`` is the already parsed file (a pool parses it once per session); None reads it now.
    """
    options = (config if config is not None else SshConfigFile(settings)).lookup(alias)
    hostname = str(options.get("hostname") or alias)
    raw_port = options.get("port", "22")
    try:
        port = int(raw_port)
        if not 0 < port < 65536:
            raise ValueError(raw_port)
    except ValueError:
        raise InventoryError(
            f"ssh_config gives {alias} an invalid Port {raw_port!r}",
            evidence={"alias": alias, "ssh_config": str(settings.config_file)},
        ) from None
    user = str(options.get("user") or getpass.getuser())

    config_dir = Path(settings.config_file).expanduser().parent if settings.config_file else None
    raw_ids = options.get("identityfile") or []
    if isinstance(raw_ids, str):
        raw_ids = [raw_ids]
    identities: tuple[Path, ...] = tuple(_identity_path(str(p), config_dir) for p in raw_ids)
    if not identities and settings.identity_file is not None:
        identities = (Path(settings.identity_file).expanduser(),)
    if not identities:
        identities = tuple(p for p in (Path(d).expanduser() for d in DEFAULT_IDENTITIES) if p.exists())

    raw_jump = str(options.get("proxyjump") or "").strip()
    jumps: tuple[str, ...] = ()
    if raw_jump and raw_jump.lower() != "none":
        jumps = tuple(j.strip() for j in raw_jump.split(",") if j.strip())
    host_key_alias = options.get("hostkeyalias")
    return ResolvedHost(
        alias=alias,
        hostname=hostname,
        port=port,
        user=user,
        identity_files=identities,
        proxy_jump=jumps,
        host_key_alias=str(host_key_alias) if host_key_alias else None,
    )


def parse_jump_spec(spec: str) -> tuple[str | None, str, int | None]:
    """Split a ProxyJump element ``[user@]host[:port]`` or ``ssh://[user@]host[:port]``."""
    rest = spec.removeprefix("ssh://")
    user: str | None = None
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
    port: int | None = None
    if rest.startswith("["):  # [v6addr]:port
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":") and tail[1:].isdigit():
            port = int(tail[1:])
    elif rest.count(":") == 1 and rest.rsplit(":", 1)[1].isdigit():
        host, port_s = rest.rsplit(":", 1)
        port = int(port_s)
    else:
        host = rest
    if not host:
        raise InventoryError(f"invalid ProxyJump element {spec!r}", evidence={"proxy_jump": spec})
    return user or None, host, port


def _resolve_jump(spec: str, settings: SshSettings, config: SshConfigFile | None) -> ResolvedHost:
    user, host, port = parse_jump_spec(spec)
    base = resolve_host(host, settings, config)
    return ResolvedHost(
        alias=base.alias,
        hostname=base.hostname,
        port=port if port is not None else base.port,
        user=user if user is not None else base.user,
        identity_files=base.identity_files,
        proxy_jump=(),  # the chain is the target's ProxyJump list; a hop's own ProxyJump is ignored
        host_key_alias=base.host_key_alias,
    )


def rewrap(exc: _E, prefix: str, evidence: dict[str, Any]) -> _E:
    """A copy of ``exc`` with ``prefix`` before its message and ``evidence`` merged in."""
    return type(exc)(f"{prefix}{exc.message}", evidence={**exc.evidence, **evidence})


def _getaddrinfo(host: str, port: int, timeout: float) -> list[tuple[Any, ...]]:
    """``socket.getaddrinfo`` bounded by ``timeout`` (the resolver itself has no deadline)."""
    try:
        ipaddress.ip_address(host)
        return list(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
    except ValueError:
        pass
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["result"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            box["error"] = exc

    thread = threading.Thread(target=worker, name=f"sbxcheck-dns-{host}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"DNS lookup timed out after {timeout:g}s")
    if "error" in box:
        raise box["error"]
    return list(box["result"])


def _describe_os_error(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, socket.gaierror):
        return f"DNS lookup failed ({exc.strerror or exc})"
    if isinstance(exc, TimeoutError | socket.timeout):
        text = str(exc)
        return text if text.startswith("DNS") else f"TCP connect timed out after {timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError):
        if exc.errno == errno.EHOSTUNREACH:
            return "no route to host"
        if exc.errno == errno.ENETUNREACH:
            return "network unreachable"
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__


def _tcp_connect(host: ResolvedHost, timeout: float) -> socket.socket:
    """Open a TCP connection to ``host``; raises OSError/TimeoutError (DNS included)."""
    deadline = time.monotonic() + timeout
    infos = _getaddrinfo(host.hostname, host.port, timeout)
    last: BaseException = OSError(f"no addresses for {host.hostname}")
    for family, socktype, proto, _canon, sockaddr in infos:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"TCP connect timed out after {timeout:g}s")
        sock = socket.socket(family, socktype, proto)
        try:
            sock.settimeout(remaining)
            sock.connect(sockaddr)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last


@dataclass
class Connection:
    """An authenticated transport plus the jump-host transports it is tunnelled through."""

    transport: paramiko.Transport
    hops: list[paramiko.Transport] = field(default_factory=list)

    def is_active(self) -> bool:
        return self.transport.is_active() and all(t.is_active() for t in self.hops)

    def close(self) -> None:
        for t in [self.transport, *reversed(self.hops)]:
            with contextlib.suppress(Exception):
                t.close()


def _load_identity(path: Path) -> tuple[paramiko.PKey | None, str]:
    """Load a private key; returns (key, "") or (None, non-secret reason)."""
    if not path.exists():
        return None, "not found"
    try:
        return paramiko.PKey.from_path(path), ""
    except paramiko.PasswordRequiredException:
        return None, "encrypted (needs a passphrase)"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or type(exc).__name__})"
    except Exception:  # any format problem: try the per-type loaders below
        pass
    loaders: tuple[type[paramiko.PKey], ...] = (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey)
    for loader in loaders:
        try:
            return loader.from_private_key_file(str(path)), ""
        except paramiko.PasswordRequiredException:
            return None, "encrypted (needs a passphrase)"
        except (paramiko.SSHException, ValueError, TypeError, OSError):
            continue
    return None, "not a supported private key"


@dataclass(frozen=True)
class _Hop:
    """One SSH hop of a connection: a jump host or the target itself, with message labels."""

    host: ResolvedHost
    target: ResolvedHost
    via: str | None  # alias of the jump host this hop is reached through
    is_jump: bool

    @property
    def label(self) -> str:
        """Who this hop is, for "cannot reach <label>: <why>"."""
        if self.is_jump:
            return f"{self.target.alias}: jump host {self.host.alias} ({self.host.address})"
        via = f" via {self.via}" if self.via else ""
        return f"{self.target.alias} ({self.host.address}){via}"

    @property
    def prefix(self) -> str:
        """Message prefix for host-key and authentication errors."""
        if self.is_jump:
            return f"{self.target.alias}: jump host {self.host.alias}: "
        return f"{self.target.alias}: "

    def evidence(self, t0: float, **extra: Any) -> dict[str, Any]:
        hop = {"hop": self.host.alias, "hop_address": self.host.address} if self.is_jump else {}
        return {**hop, "elapsed_s": round(time.monotonic() - t0, 3), **extra}


class Connector:
    """Connects one ResolvedHost (through its jump chain) with fixed settings and known_hosts."""

    def __init__(
        self, settings: SshSettings, known_hosts: KnownHosts, config: SshConfigFile | None = None
    ) -> None:
        self.settings = settings
        self.known_hosts = known_hosts
        self.config = config

    def connect(self, target: ResolvedHost) -> Connection:
        t0 = time.monotonic()
        chain = [_resolve_jump(spec, self.settings, self.config) for spec in target.proxy_jump]
        hops: list[paramiko.Transport] = []
        try:
            for i, jump in enumerate(chain):
                via = chain[i - 1].alias if i else None
                hop = _Hop(jump, target, via, is_jump=True)
                hops.append(self._connect_hop(hop, hops[-1] if hops else None, t0))
            hop = _Hop(target, target, chain[-1].alias if chain else None, is_jump=False)
            transport = self._connect_hop(hop, hops[-1] if hops else None, t0)
        except SbxError as exc:
            for t in reversed(hops):
                with contextlib.suppress(Exception):
                    t.close()
            exc.evidence.setdefault("elapsed_s", round(time.monotonic() - t0, 3))
            base: dict[str, Any] = {"alias": target.alias, "hostname": target.hostname, "port": target.port}
            if self.settings.config_file is not None:  # the next step's ssh needs it to resolve the alias
                base["ssh_config"] = str(self.settings.config_file)
            for k, v in base.items():
                exc.evidence.setdefault(k, v)
            raise
        return Connection(transport, hops)

    def _unreachable(self, hop: _Hop, why: str, t0: float) -> HostUnreachable:
        return HostUnreachable(f"cannot reach {hop.label}: {why}", evidence=hop.evidence(t0, reason=why))

    def _open_sock(
        self, hop: _Hop, via: paramiko.Transport | None, t0: float
    ) -> socket.socket | paramiko.Channel:
        timeout = self.settings.connect_timeout_s
        if via is None:
            try:
                return _tcp_connect(hop.host, timeout)
            except (OSError, TimeoutError) as exc:
                raise self._unreachable(hop, _describe_os_error(exc, timeout), t0) from None
        try:
            return via.open_channel(
                "direct-tcpip", (hop.host.hostname, hop.host.port), ("127.0.0.1", 0), timeout=timeout
            )
        except paramiko.ChannelException as exc:
            why = f"the jump host could not open a tunnel ({exc.text or exc.code})"
            raise self._unreachable(hop, why, t0) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            why = f"tunnel through the jump host failed ({exc or type(exc).__name__})"
            raise self._unreachable(hop, why, t0) from None

    def _handshake(
        self, hop: _Hop, via: paramiko.Transport | None, t0: float, restrict_key_types: bool
    ) -> paramiko.Transport:
        """TCP/tunnel + SSH negotiation; returns an unauthenticated, not yet verified transport."""
        timeout = self.settings.connect_timeout_s
        sock = self._open_sock(hop, via, t0)
        transport = paramiko.Transport(sock)
        transport.banner_timeout = timeout
        transport.handshake_timeout = timeout
        transport.auth_timeout = timeout
        if restrict_key_types:
            # Offer only key types known_hosts can verify for this name (paramiko's order kept).
            wanted = self.known_hosts.host_key_algorithms(hop.host.known_hosts_name())
            options = transport.get_security_options()
            allowed = tuple(k for k in options.key_types if k in wanted)
            if allowed:
                options.key_types = allowed
        done = threading.Event()
        try:
            transport.start_client(event=done)
            finished = done.wait(timeout)
        except (paramiko.SSHException, OSError) as exc:
            transport.close()
            raise self._unreachable(hop, f"SSH negotiation failed ({exc})", t0) from None
        if not finished:
            transport.close()
            why = f"no SSH banner/handshake within {timeout:g}s (TCP connection accepted)"
            raise self._unreachable(hop, why, t0)
        if not transport.is_active():
            failure = transport.get_exception()
            transport.close()
            if isinstance(failure, IncompatiblePeer) and "host key" in str(failure):
                raise _NoCommonHostKeyType(str(failure))
            text = str(failure) if failure is not None else "connection closed"
            if "banner" in text.lower():
                why = f"no SSH banner within {timeout:g}s (TCP connection accepted)"
            else:
                why = f"SSH negotiation failed ({text or type(failure).__name__})"
            raise self._unreachable(hop, why, t0)
        return transport

    def _connect_hop(self, hop: _Hop, via: paramiko.Transport | None, t0: float) -> paramiko.Transport:
        try:
            transport = self._handshake(hop, via, t0, restrict_key_types=True)
        except _NoCommonHostKeyType:
            # The server offers none of the key types known_hosts lists for this name: negotiate
            # again without the restriction to learn what it presents, then refuse it below.
            transport = self._handshake(hop, via, t0, restrict_key_types=False)
        try:
            self.known_hosts.verify(hop.host.known_hosts_name(), transport.get_remote_server_key())
            self._authenticate(transport, hop, t0)
        except (HostKeyMismatch, HostKeyUnknown) as exc:
            transport.close()
            raise rewrap(exc, hop.prefix, hop.evidence(t0)) from None
        except BaseException:
            transport.close()
            raise
        log.debug(
            "SSH connection to %s (%s) established as %s", hop.host.alias, hop.host.address, hop.host.user
        )
        return transport

    def _authenticate(self, transport: paramiko.Transport, hop: _Hop, t0: float) -> None:
        host = hop.host
        tried: list[str] = []
        problems: list[str] = []

        def failed(why: str) -> AuthFailed:
            transport.close()
            return AuthFailed(
                f"{hop.prefix}authentication as {host.user} on {host.address} failed: {why}",
                evidence=hop.evidence(
                    t0, user=host.user, identity_files=[str(p) for p in host.identity_files], tried=tried
                ),
            )

        if not host.identity_files:
            raise failed("no identity file configured (IdentityFile in ssh_config, or identity_file)")
        for path in host.identity_files:
            key, why = _load_identity(path)
            if key is None:
                problems.append(f"{path}: {why}")
                continue
            tried.append(str(path))
            try:
                remaining = transport.auth_publickey(host.user, key)
            except paramiko.BadAuthenticationType as exc:
                allowed = ", ".join(exc.allowed_types) or "none"
                raise failed(f"the server does not accept public keys (allowed methods: {allowed})") from None
            except paramiko.AuthenticationException as exc:
                if "timeout" in str(exc).lower():
                    problems.append(f"{path}: no answer within {self.settings.connect_timeout_s:g}s")
                if not transport.is_active():
                    break
                continue
            except (paramiko.SSHException, OSError, EOFError):
                break
            if remaining:
                raise failed(f"the server requires more than a public key ({', '.join(remaining)})")
            if transport.is_authenticated():
                return
        refused = (
            f"the server refused identity files {', '.join(tried)}" if tried else "no usable identity file"
        )
        skipped = f" (skipped {'; '.join(problems)})" if problems else ""
        raise failed(refused + skipped)


class _NoCommonHostKeyType(Exception):
    """Internal: negotiation failed because no known host key type is offered."""
