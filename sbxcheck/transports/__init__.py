"""Transports to remote hosts. SSH: strict host keys, bounded connects and commands, pooled connections."""

from sbxcheck.transports.known_hosts import KnownHostEntry, KnownHosts
from sbxcheck.transports.ssh import CommandResult, SshHost, SshPool
from sbxcheck.transports.ssh_connect import ResolvedHost, SshSettings, resolve_host

__all__ = [
    "CommandResult",
    "KnownHostEntry",
    "KnownHosts",
    "ResolvedHost",
    "SshHost",
    "SshPool",
    "SshSettings",
    "resolve_host",
]
