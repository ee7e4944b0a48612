"""Shared test setup: ``tests/`` is on sys.path (so ``import gate_harness`` works) and pytester is on."""

pytest_plugins = ["pytester"]
