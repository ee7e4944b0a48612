"""SSH transport costs that grow with the fleet: ssh_config parsed once per pool, bounded sessions."""

from __future__ import annotations

import threading
from pathlib import Path

import paramiko
import pytest
from support.in_flight import InFlight

from sbxcheck.errors import CommandTimeout, HostUnreachable
from sbxcheck.sim.ports import PortReservations
from sbxcheck.transports.ssh import CommandResult, SshHost, SshPool
from sbxcheck.transports.ssh_connect import SshSettings


def test_ssh_config_is_parsed_once_per_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ports = PortReservations()  # bound, never listening: every connect is refused at once
    try:
        aliases = [f"vm{i}" for i in range(5)]
        config = tmp_path / "ssh_config"
        config.write_text(
            "".join(f"Host {a}\n  HostName 127.0.0.1\n  Port {ports.reserve()}\n" for a in aliases),
            encoding="utf-8",
        )
        parses = []
        original = paramiko.SSHConfig.from_path

        def counting(path: str) -> paramiko.SSHConfig:
            parses.append(path)
            return original(path)

        monkeypatch.setattr(paramiko.SSHConfig, "from_path", staticmethod(counting))
        pool = SshPool(SshSettings(config_file=config, known_hosts=(tmp_path / "kh",), connect_timeout_s=2))
        for alias in aliases:
            with pytest.raises(HostUnreachable) as info:
                pool.host(alias)
            assert info.value.evidence["port"] != 22  # resolved through the config
        assert len(parses) == 1
    finally:
        ports.close()


class _FakeHost(SshHost):
    """An SshHost whose commands take a while and record how many run at once (no network)."""

    def __init__(self, settings: SshSettings) -> None:
        self._settings = settings
        self._sessions = threading.BoundedSemaphore(settings.max_sessions)
        self.alias = "fake"
        # each command holds its slot until the bound is reached (at most 2 s): a loaded machine that
        # starts the threads late still shows the bound, and a bound that does not hold shows more
        self.calls = InFlight(await_peak=settings.max_sessions, wait_s=2)

    def _transport(self) -> paramiko.Transport:  # type: ignore[override]
        return None  # type: ignore[return-value]

    def _run_in_slot(self, *args: object) -> CommandResult:  # type: ignore[override]
        self.calls.hold(0.05)
        return CommandResult(0, "", "", 0.05)

    def _evidence(self, **extra: object) -> dict[str, object]:
        return dict(extra)


def test_commands_in_flight_per_connection_are_bounded() -> None:
    host = _FakeHost(SshSettings(max_sessions=3))
    threads = [threading.Thread(target=host.run, args=("true",)) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert host.calls.peak == 3


def test_waiting_for_a_session_slot_respects_the_deadline() -> None:
    host = _FakeHost(SshSettings(max_sessions=1))
    host._sessions.acquire()
    with pytest.raises(CommandTimeout, match="no free session slot"):
        host.run("true", timeout=0.1)
