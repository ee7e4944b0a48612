"""Installs that last: every sbxcheck module imports on a base install, and none imports a private module.

A base install is ``pip install -e .`` without the ``[test]`` extra: the child below refuses the extra's
packages, so a module that needs one fails here, not on a newcomer's machine.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import sbxcheck

PACKAGE = Path(sbxcheck.__file__).parent
#: Top-level modules only the ``[test]`` extra installs (and what they pull in).
TEST_EXTRA = ("hypothesis", "playwright", "check_jsonschema", "xmlschema", "ruamel", "mypy", "ruff")

CHILD = """
import importlib, importlib.abc, pkgutil, sys
blocked = set(sys.argv[1].split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (a [test]-extra package)")
        return None
sys.meta_path.insert(0, Refuse())
import sbxcheck
failed = []
names = [m.name for m in pkgutil.walk_packages(sbxcheck.__path__, "sbxcheck.")]
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print(len(names))
print("\\n".join(failed))
"""


def _modules() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if "assets" not in p.relative_to(PACKAGE).parts]


def test_every_module_imports_without_the_test_extra() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(TEST_EXTRA)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, *failures = proc.stdout.splitlines()
    assert int(count) == len(_modules()) - 1  # every module but sbxcheck/__init__.py, imported first
    assert [f for f in failures if f] == []


def test_default_collection_is_the_shipped_suites_and_they_need_no_test_extra() -> None:
    """`pytest -m gate` on a base install: testpaths name only gates/ and canaries/, whose modules
    (and conftests) import nothing of the [test] extra; the project's tests are named (pytest tests)."""
    import tomllib

    repo = PACKAGE.parent
    testpaths = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    assert testpaths == ["gates", "canaries"]
    for module in [p for d in testpaths for p in (repo / d).rglob("*.py")] + [repo / "conftest.py"]:
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not [n for n in names if n.split(".")[0] in TEST_EXTRA], f"{module}: {names}"


def test_no_module_imports_a_private_module_of_a_dependency() -> None:
    """``mcp.shared._stream_protocols`` and the like may move in a minor release."""
    offenders = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                parts = name.split(".")
                if parts[0] in ("sbxcheck", "_pytest"):  # _pytest: only its location, to hide frames
                    continue
                if any(part.startswith("_") and not part.startswith("__") for part in parts):
                    offenders.append(f"{path.relative_to(PACKAGE)}: {name}")
    assert offenders == []
