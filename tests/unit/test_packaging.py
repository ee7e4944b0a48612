"""The wheel and sdist carry every package of sbxcheck/ and the shipped suites as ``sbxcheck.suites``."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_of_sbxcheck_is_listed_for_the_build() -> None:
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "sbxcheck").rglob("__init__.py")}
    assert found <= set(SETUPTOOLS["packages"]), sorted(found - set(SETUPTOOLS["packages"]))


def test_the_shipped_suites_are_the_repositorys_gates_and_canaries() -> None:
    assert SETUPTOOLS["package-dir"] == {
        "sbxcheck.suites.gates": "gates",
        "sbxcheck.suites.canaries": "canaries",
    }
    assert {"sbxcheck.suites", *SETUPTOOLS["package-dir"]} <= set(SETUPTOOLS["packages"])
    for name, directory in SETUPTOOLS["package-dir"].items():
        module = importlib.import_module(name)  # a checkout finds them in place, installed or not
        assert Path(module.__file__ or "").parent == REPO / directory
