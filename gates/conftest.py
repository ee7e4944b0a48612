"""The gates suite needs the sbxcheck plugin: without it, one usage error says so instead of "fixture not found"."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("sbxcheck.plugin.fixtures") or not any(
        Path(item.path).resolve().is_relative_to(HERE) for item in items
    ):
        return
    raise pytest.UsageError(
        f"sbxcheck: the suites in {HERE.parent} need the sbxcheck pytest plugin (its fixtures sbx_verdict, "
        "sbx_session, ...), which is not loaded (-p no:sbxcheck, or PYTEST_DISABLE_PLUGIN_AUTOLOAD): "
        "drop -p no:sbxcheck or add -p sbxcheck"
    )
