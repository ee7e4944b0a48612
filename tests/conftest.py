"""Shared test setup: ``tests/`` is on sys.path (so ``import gate_harness`` works) and pytester is on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sbxcheck.sim.fleet import SimFleet

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def healthy_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    """One healthy embedded fleet, serving, shared by every test that only reads it (one per xdist worker).

    Tests that change it (faults, files, missions) make their own. Count connections as deltas.
    """
    with SimFleet(tmp_path_factory.mktemp("healthy-fleet")) as fleet:
        yield fleet
