"""The pytest sessions tests start load sbxcheck and what it brings, not this session's other plugins."""

from __future__ import annotations

import os

import pytest


def test_a_pytester_child_loads_none_of_the_blocked_plugins(pytester: pytest.Pytester) -> None:
    words = os.environ.get("PYTEST_ADDOPTS", "").split()
    blocked = [words[i + 1].removeprefix("no:") for i, word in enumerate(words[:-1]) if word == "-p"]
    assert "hypothesispytest" in blocked  # tests/conftest.py blocks it (pytester would drop it otherwise)
    pytester.makepyfile(
        test_probe="""
def test_plugins(pytestconfig):
    names = {name for name, plugin in pytestconfig.pluginmanager.list_name_plugin() if plugin is not None}
    print("\\nPLUGINS", sorted(names))
    assert "sbxcheck" in names
"""
    )
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert result.ret == 0, result.outlines[-20:]
    [line] = [line for line in result.outlines if line.startswith("PLUGINS ")]
    assert not [name for name in blocked if f"'{name}'" in line], line
