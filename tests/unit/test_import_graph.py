"""The layout keeps its layers (ARCHITECTURE.md): no import circle, each layer imports only below it, no
module imports another module's ``_private`` name, no file over 600 lines outside the simulator.

Every module under ``sbxcheck/`` is parsed with ``ast``; every ``import`` / ``from ... import`` counts,
at any level (module top, inside functions and methods), except those under ``if TYPE_CHECKING:``
(annotations only: they never run). Importing ``a.b.c`` also runs the ``__init__`` of ``a.b``, so
that package is an edge too (except a module's own ancestors, which are always imported first).
``importlib.import_module`` strings (the lazy ``__getattr__`` of ``sbxcheck`` and ``sbxcheck.lifecycle``)
are not followed.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path

import sbxcheck

PACKAGE = Path(sbxcheck.__file__).parent
MAX_LINES = 600

#: The core: leaves every other layer builds on (they import only each other).
CORE = {
    "sbxcheck",
    "sbxcheck.commands",
    "sbxcheck.display",
    "sbxcheck.errors",
    "sbxcheck.ids",
    "sbxcheck.inventory",
    "sbxcheck.inventory_base",
    "sbxcheck.inventory_recipes",
    "sbxcheck.inventory_sandboxed",
    "sbxcheck.redact",
    "sbxcheck.results",
    "sbxcheck.safeio",
    "sbxcheck.secrets",
    "sbxcheck.spend",
    "sbxcheck.tools",
    "sbxcheck.waivers",
}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if "assets" in rel.parts:  # files the simulator copies onto its VMs, not modules of sbxcheck
            continue
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of every node under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) block."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            if name == "TYPE_CHECKING":
                for stmt in node.body:
                    hidden.update(id(n) for n in ast.walk(stmt))
    return hidden


def _source(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


@functools.cache
def _graph(with_type_checking: bool = False) -> dict[str, frozenset[str]]:
    """Module -> the sbxcheck modules it imports; ``with_type_checking`` adds the annotation-only ones."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, frozenset[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hidden = set() if with_type_checking else _type_checking_nodes(tree)
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                targets.update(t for a in node.names if a.name.startswith("sbxcheck") and (t := known(a.name)))
            elif isinstance(node, ast.ImportFrom):
                source = _source(module, is_package, node)
                if not source.startswith("sbxcheck"):
                    continue
                for alias in node.names:  # "from pkg import module" imports the module
                    full = f"{source}.{alias.name}"
                    target = full if full in modules else known(source)
                    if target:
                        targets.add(target)
        for target in list(targets):
            parts = target.split(".")
            for i in range(2, len(parts)):
                package = ".".join(parts[:i])
                if not module.startswith(package + "."):
                    targets.add(package)
        targets.discard(module)
        graph[module] = frozenset(targets)
    return graph


def _cycle(graph: dict[str, frozenset[str]]) -> list[str] | None:
    """One import circle, as a path that ends where it starts; None when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def _in(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _assert_only(rule: str, sources: set[str], allowed: Callable[[str], bool]) -> None:
    """Every import of ``sources`` is ``allowed``; the message lists each one that is not."""
    graph = _graph()
    bad = [f"{m} -> {t}" for m in sorted(sources) for t in sorted(graph[m]) if not allowed(t)]
    assert not bad, f"{rule}: " + "; ".join(bad)


def test_no_import_circle() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_no_import_circle_outside_the_simulator_even_for_annotations() -> None:
    """``TYPE_CHECKING`` imports may not close a circle either (outside ``sim/``): a circle of types is one
    of meaning, and the first runtime import along it would make it real. The simulator's resources name
    each other's types freely."""
    graph = {
        m: frozenset(t for t in targets if not _in(t, "sbxcheck.sim"))
        for m, targets in _graph(with_type_checking=True).items()
        if not _in(m, "sbxcheck.sim")
    }
    cycle = _cycle(graph)
    assert cycle is None, "import circle (TYPE_CHECKING imports counted): " + " -> ".join(cycle or [])


def test_the_core_imports_only_the_core() -> None:
    _assert_only("core", CORE, lambda t: t in CORE)


def test_transports_and_clients_stand_on_the_core() -> None:
    graph = _graph()
    transports = {m for m in graph if _in(m, "sbxcheck.transports")}
    clients = {m for m in graph if _in(m, "sbxcheck.clients")}
    _assert_only("transports", transports, lambda t: t in CORE or _in(t, "sbxcheck.transports"))
    _assert_only("clients", clients, lambda t: t in CORE or _in(t, "sbxcheck.transports", "sbxcheck.clients"))


def test_checks_never_import_the_plugin_or_the_lifecycle() -> None:
    checks = {m for m in _graph() if _in(m, "sbxcheck.checks")}
    forbidden = ("sbxcheck.plugin", "sbxcheck.lifecycle", "sbxcheck.report", "sbxcheck.sim")
    _assert_only("checks", checks, lambda t: not _in(t, *forbidden))


def test_the_lifecycle_uses_clients_never_the_plugin_or_checks() -> None:
    lifecycle = {m for m in _graph() if _in(m, "sbxcheck.lifecycle")}
    forbidden = ("sbxcheck.plugin", "sbxcheck.checks", "sbxcheck.report", "sbxcheck.sim")
    _assert_only("lifecycle", lifecycle, lambda t: not _in(t, *forbidden))


def test_report_reads_results_only() -> None:
    report = {m for m in _graph() if _in(m, "sbxcheck.report")}
    _assert_only("report", report, lambda t: t in CORE or _in(t, "sbxcheck.report"))


def test_nothing_outside_the_plugin_imports_it() -> None:
    outside = {m for m in _graph() if not _in(m, "sbxcheck.plugin") and m != FACADE}
    _assert_only("plugin", outside, lambda t: not _in(t, "sbxcheck.plugin"))


#: What a suite may import (the API over the plugin, the checks and the clients), and the results.
FACADE = "sbxcheck.suite"
SUITE_API = {FACADE, "sbxcheck.results"}
SHIPPED_SUITES = ("gates", "canaries")


def test_no_module_of_sbxcheck_imports_the_suite_facade() -> None:
    _assert_only("facade", set(_graph()) - {FACADE}, lambda t: t != FACADE)


def _sbxcheck_imports(path: Path) -> list[str]:
    """Every ``sbxcheck`` module one file imports, at any level (``from sbxcheck import x`` names x)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _in(a.name, "sbxcheck")]
        elif isinstance(node, ast.ImportFrom) and not node.level and _in(node.module or "", "sbxcheck"):
            module = node.module or ""
            found += [f"{module}.{a.name}" for a in node.names] if module == "sbxcheck" else [module]
    return found


def test_the_shipped_suites_import_only_the_suite_api() -> None:
    files = sorted(p for d in SHIPPED_SUITES for p in (PACKAGE.parent / d).glob("*.py"))
    assert len(files) >= 10  # gates/ and canaries/ are where the checkout keeps them
    bad = {str(p.relative_to(PACKAGE.parent)): hits for p in files if (hits := set(_sbxcheck_imports(p)) - SUITE_API)}
    assert bad == {}


def test_the_suite_rule_sees_every_spelling(tmp_path: Path) -> None:
    """Guards the rule: a lazy import, ``import sbxcheck.x`` and ``from sbxcheck import x`` all count."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "from sbxcheck.suite import Verdict\nfrom sbxcheck.results import CheckResult\nimport sbxcheck.errors\n"
        "def test_x():\n    from sbxcheck.plugin.session import SbxSession\n    from sbxcheck import checks\n"
    )
    assert set(_sbxcheck_imports(probe)) - SUITE_API == {
        "sbxcheck.errors", "sbxcheck.plugin.session", "sbxcheck.checks"
    }  # fmt: skip


def test_the_simulator_needs_nothing_of_the_plugin_or_the_lifecycle() -> None:
    sim = {m for m in _graph() if _in(m, "sbxcheck.sim")}
    forbidden = ("sbxcheck.plugin", "sbxcheck.lifecycle", "sbxcheck.checks", "sbxcheck.report")
    _assert_only("sim", sim, lambda t: not _in(t, *forbidden))


#: The one production module that may import the simulator (its packages are the ``[sim]`` extra).
SEAM = "sbxcheck.fleetsource"


def _imports_of_sim(path: Path) -> list[str]:
    """Every import of ``sbxcheck.sim`` in one file, TYPE_CHECKING ones too (a seam that leaks types is no seam)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
            else [a.name for a in node.names] if isinstance(node, ast.Import)
            else []
        )
        if isinstance(node, ast.ImportFrom) and node.module == "sbxcheck" and not node.level:
            names = [f"sbxcheck.{a.name}" for a in node.names]
        found += [f"line {node.lineno}: {n}" for n in names if _in(n, "sbxcheck.sim")]
    return found


def test_only_the_seam_imports_the_simulator() -> None:
    outside = {m: p for m, p in _modules().items() if not _in(m, "sbxcheck.sim") and m != SEAM}
    bad = {m: hits for m, p in sorted(outside.items()) if (hits := _imports_of_sim(p))}
    assert bad == {}
    assert _imports_of_sim(_modules()[SEAM]), "the seam itself imports the simulator"


def test_the_sim_rule_sees_every_spelling(tmp_path: Path) -> None:
    """Guards the rule: a lazy import, a TYPE_CHECKING one and ``from sbxcheck import sim`` all count."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sbxcheck.sim.fleet import SimFleet\n"
        "def f():\n    import sbxcheck.sim.pi\n    from sbxcheck import sim\n    from sbxcheck import inventory\n"
    )
    hits = [h.split(": ")[1] for h in _imports_of_sim(probe)]
    assert hits == ["sbxcheck.sim.fleet", "sbxcheck.sim.pi", "sbxcheck.sim"]


def test_the_graph_sees_every_kind_of_import() -> None:
    """Guards the test itself: function-level imports count, TYPE_CHECKING ones only when asked for."""
    graph = _graph()
    assert "sbxcheck.plugin.session" in graph["sbxcheck.plugin.stash"]  # inside get_session
    assert "sbxcheck.plugin.stash" in graph["sbxcheck.plugin.fixtures"]  # inside fixtures
    assert "sbxcheck.plugin.gateruns" not in graph["sbxcheck.plugin.params"]  # TYPE_CHECKING only
    assert "sbxcheck.plugin.gateruns" in _graph(with_type_checking=True)["sbxcheck.plugin.params"]
    assert "sbxcheck.lifecycle" in graph["sbxcheck.plugin.session"]  # a package's __init__ runs too


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_imports(path: Path, module: str) -> list[str]:
    """Every import of a ``_private`` name of sbxcheck in one file, at any level, ``TYPE_CHECKING`` ones too.

    ``from sbxcheck.x import _y`` (relative spellings resolved, one line or many) and ``import
    sbxcheck.x._y`` both count: what another module uses is its public surface, and a name with a
    leading underscore says nobody else does. Third-party private modules (pytest's ``_pytest``) are
    their projects' business.
    """
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            source = _source(module, path.name == "__init__.py", node)
            if not _in(source, "sbxcheck"):
                continue
            names = [f"{source}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if _in(a.name, "sbxcheck")]
        else:
            continue
        found += [f"line {node.lineno}: {n}" for n in names if any(_private(part) for part in n.split("."))]
    return found


def _suite_modules() -> dict[str, Path]:
    """sbxcheck's modules (the simulator too) and the shipped suites (``gates/``, ``canaries/``)."""
    suites = {
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts): path
        for folder in ("gates", "canaries")
        for path in sorted((PACKAGE.parent / folder).rglob("*.py"))
    }
    return {**_modules(), **suites}


def test_no_module_imports_another_modules_private_name() -> None:
    bad = {m: hits for m, p in sorted(_suite_modules().items()) if (hits := _private_imports(p, m))}
    assert bad == {}


def test_the_private_rule_sees_every_spelling(tmp_path: Path) -> None:
    """Guards the rule: many-line, relative, lazy, ``TYPE_CHECKING`` and dotted imports all count."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from sbxcheck.checks.gate import (\n    GateTarget,\n    _hidden,\n)\n"
        "from ..base import _trim as trim\n"
        "if TYPE_CHECKING:\n    from sbxcheck.clients.sandboxed import _Secret\n"
        "def f():\n    import sbxcheck.clients._wire\n    from sbxcheck import __version__, results\n"
        "from _pytest.nodes import Item\n"
    )
    hits = [h.split(": ")[1] for h in _private_imports(probe, "sbxcheck.checks.probe.inner")]
    assert hits == [
        "sbxcheck.checks.gate._hidden",
        "sbxcheck.checks.base._trim",
        "sbxcheck.clients.sandboxed._Secret",
        "sbxcheck.clients._wire",
    ]


def _lengths() -> dict[str, int]:
    """Lines of every module outside the simulator, by path from the repository root."""
    return {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
        if "sim" not in path.relative_to(PACKAGE).parts
    }


def test_no_module_outside_the_simulator_exceeds_the_cap() -> None:
    long = {path: n for path, n in _lengths().items() if n > MAX_LINES}
    assert long == {}, f"over {MAX_LINES} lines: split along an interface (a piece with a public surface of its own)"
