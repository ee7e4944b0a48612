"""The shipped suites in a run: found in the installed package and added to what pytest collects.

After ``pip install sbxcheck``, ``pytest -m gate --sbx-inventory=fleet.toml`` in any directory runs the
shipped gate: when ``-m`` asks for a suite and pytest was given no test path (no argument, no
``testpaths``), the directory holding ``sbxcheck.suites`` is added to pytest's arguments, after the
invocation directory. pytest then collects it as it collects ``--pyargs sbxcheck.suites``, node ids
included (``gates/test_gate.py::test_gate_A_git_integrity[...]``, as in a source checkout).

The user's own checks in that directory run beside them. Nothing is added where the shipped suites
are collected already (a checkout, ``testpaths``, ``--pyargs sbxcheck.suites``), and where the
directory holds its own copy of a shipped suite module (a module of the same file name): then that
directory is the suite. ``--sbx-shipped-suites=yes`` adds them to any run, ``no`` never.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from sbxcheck.preflight import names_a_suite

#: the package that holds the shipped suites, and its subpackages: the repository's gates/ and canaries/
SUITES_PACKAGE = "sbxcheck.suites"
SUITE_PACKAGES = ("gates", "canaries")


def shipped_dirs() -> dict[str, Path]:
    """Each shipped suite package's directory (an install's ``sbxcheck/suites/<name>``, a checkout's ``<name>/``)."""
    found: dict[str, Path] = {}
    for name in SUITE_PACKAGES:
        try:
            module = importlib.import_module(f"{SUITES_PACKAGE}.{name}")  # only its docstring: cheap
        except ImportError:
            continue
        if module.__file__ is not None:
            found[name] = Path(module.__file__).resolve().parent
    return found


def name_the_suite_packages(config: pytest.Config) -> None:
    """Turn ``--pyargs sbxcheck.suites`` into its suite packages where they live outside that directory.

    An install holds them in ``sbxcheck/suites/``; a checkout (or an editable install) maps the
    repository's gates/ and canaries/ to them, and pytest, collecting the package's own directory,
    would find no test there. The bare name is replaced by ``sbxcheck.suites.gates`` and
    ``sbxcheck.suites.canaries``, which pytest resolves in either layout.
    """
    if not config.getoption("pyargs", False) or SUITES_PACKAGE not in config.args:
        return
    package_file = importlib.import_module(SUITES_PACKAGE).__file__
    dirs = shipped_dirs()
    if package_file is None or not dirs:
        return
    package_dir = Path(package_file).resolve().parent
    if all(d.is_relative_to(package_dir) for d in dirs.values()):
        return
    at = config.args.index(SUITES_PACKAGE)
    config.args[at : at + 1] = [f"{SUITES_PACKAGE}.{name}" for name in dirs]


@dataclass(eq=False)  # a plugin object: pytest keeps it in sets, by identity
class ShippedSuites:
    """Adds the shipped suites' directory to a run's arguments and keeps it to those suites.

    ``root`` is the directory added (it holds the suite packages; in a checkout it is the repository,
    whose other directories are not collected). ``modules`` are the shipped suite modules' file names.
    """

    root: Path
    dirs: tuple[Path, ...]
    modules: frozenset[str]
    local_copy: Path | None = None  # the first local module named like a shipped one

    @classmethod
    def for_run(cls, config: pytest.Config, mode: str) -> ShippedSuites | None:
        """The suites to add to this run, or None (not asked for, already collected, or not installed)."""
        if mode == "no":
            return None
        if mode == "auto":
            if config.args_source is not pytest.Config.ArgsSource.INVOCATION_DIR:
                return None  # the user named what to collect: paths, testpaths or --pyargs
            if not names_a_suite(str(config.getoption("markexpr", "") or "")):
                return None
        dirs = shipped_dirs()
        if not dirs or _collected_already(config, tuple(dirs.values())):
            return None
        parents = {d.parent for d in dirs.values()}
        if len(parents) != 1:
            return None  # not one installed package (a partial install): pytest --pyargs still works
        root = parents.pop()
        modules = frozenset(p.name for d in dirs.values() for p in d.glob("test_*.py"))
        return cls(root, tuple(dirs.values()), modules)

    def add_to(self, config: pytest.Config) -> None:
        """Collect the suites after what pytest was asked for."""
        config.args.append(str(self.root))

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        """Note a local module of a shipped suite module's name: that directory has its own copy."""
        path = getattr(collector, "path", None)
        if (
            isinstance(collector, pytest.Module)
            and isinstance(path, Path)
            and path.name in self.modules
            and not path.resolve().is_relative_to(self.root)
            and self.local_copy is None
        ):
            self.local_copy = path

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """Under the added directory only the suite packages are collected, and none beside a local copy."""
        path = collection_path.resolve()
        if path == self.root or not path.is_relative_to(self.root):
            return None
        if not any(path.is_relative_to(d) for d in self.dirs):
            return True  # a checkout's tests/, benchmarks/, conftest.py; the package's __init__.py
        return True if self.local_copy is not None else None


def _collected_already(config: pytest.Config, dirs: tuple[Path, ...]) -> bool:
    """Whether pytest's arguments hold a shipped suite already (as a path or a ``--pyargs`` name)."""
    for arg in config.args:
        text = str(arg).split("::")[0]
        if text.startswith("sbxcheck.suites"):
            return True
        where = Path(text)
        if where.exists():
            where = where.resolve()
            if any(d.is_relative_to(where) or where.is_relative_to(d) for d in dirs):
                return True
    return False
