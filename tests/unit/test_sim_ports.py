"""Port reservations: a port named in the inventory is nobody else's until its server listens."""

from __future__ import annotations

import socket

import pytest

from sbxcheck.sim.ports import PortReservations


def _bind_plain(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


def test_a_reserved_port_cannot_be_taken_by_another_socket() -> None:
    ports = PortReservations()
    try:
        port = ports.reserve()
        with pytest.raises(OSError):
            _bind_plain(port)
    finally:
        ports.close()


def test_a_reserved_port_refuses_connections() -> None:
    ports = PortReservations()
    try:
        port = ports.reserve()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        ports.close()


def test_the_server_listens_while_the_reservation_is_held_then_it_is_released() -> None:
    ports = PortReservations()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        port = ports.reserve()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        ports.release(port)
        assert ports.held() == []
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        ports.release(port)  # releasing twice is a no-op
    finally:
        server.close()
        ports.close()


def test_close_releases_everything_held() -> None:
    ports = PortReservations()
    held = [ports.reserve(), ports.reserve()]
    assert ports.held() == sorted(held)
    ports.close()
    assert ports.held() == []
    for port in held:
        _bind_plain(port).close()
