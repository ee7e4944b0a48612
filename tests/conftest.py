"""Shared test setup: ``tests/`` is on sys.path (``from support.gate_harness import ...``) and pytester is on."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from support.children import child_blocked_plugins

from sbxcheck.sim.fleet import SimFleet
from sbxcheck.sim.pi import default_cache_dir

pytest_plugins = ["pytester"]

# pytester points HOME at a fresh directory for every test, and with it the default pi cache
# (~/.cache/sbxcheck): without this, every fleet a pytester test starts would npm-install pi again
# (~20 s each). Pin the cache to the real one, once, before any HOME is changed; children inherit it.
os.environ.setdefault("SBXCHECK_CACHE", str(default_cache_dir()))
# The embedded control plane's simulated latencies (a mission's 1-2 s in pending, its steps) at a fifth:
# every verdict is the same, a canary child session takes ~5 s instead of ~13 s. A test about timing
# itself sets its own scale (monkeypatch.setenv) or builds its double with one.
os.environ.setdefault("SBXCHECK_SIM_LATENCY_SCALE", "0.2")


@pytest.fixture(scope="session")
def healthy_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    """One healthy embedded fleet, serving, shared by every test that only reads it (one per xdist worker).

    Tests that change it (faults, files, missions) make their own. Count connections as deltas.
    """
    with SimFleet(tmp_path_factory.mktemp("healthy-fleet")) as fleet:
        yield fleet


# A test that hangs (a blocking open() of a FIFO, a child that never exits) fails with its stack after
# this long instead of holding CI to its own limit with no output. No test comes near it.
TEST_TIMEOUT_S = 900


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test without its own ``timeout`` marker gets TEST_TIMEOUT_S (when pytest-timeout is there)."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))


@pytest.fixture(autouse=True)
def _children_skip_unused_plugins(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every pytest a test starts (pytester or subprocess) loads sbxcheck, xdist and allure, not the rest,
    and collects only the suites it is given.

    pytester deletes PYTEST_ADDOPTS when it is made, so it is made first and the option set after it
    (and undone before pytester restores the environment it found).
    """
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
    blocked = child_blocked_plugins()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTEST_ADDOPTS", f"{os.environ.get('PYTEST_ADDOPTS', '')} {blocked}".strip())
        # a child collects the suite its test wrote, not also the installed one beside it
        # (tests/plugin/test_shipped_suites.py deletes this to test that)
        env.setenv("SBXCHECK_SHIPPED_SUITES", os.environ.get("SBXCHECK_SHIPPED_SUITES", "no"))
        yield
