"""The gates suite needs the sbxcheck plugin: without it, one usage error says so instead of "fixture not found"."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbxcheck.suite import refuse_without_plugin


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    refuse_without_plugin(config, items, Path(__file__).resolve().parent)
