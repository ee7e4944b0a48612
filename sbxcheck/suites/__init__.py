"""The shipped suites: ``sbxcheck.suites.gates`` and ``sbxcheck.suites.canaries``.

An install (wheel or sdist) holds them here; they are the repository's ``gates/`` and ``canaries/``
(the same files, mapped by the build). In a source checkout that was not installed (or was
installed before they were mapped) the two packages are taken from there, in place.

``pytest --pyargs sbxcheck.suites -m gate`` runs them from anywhere, and a run that asks for a
suite by marker with no test path of its own gets them from the plugin (:mod:`sbxcheck.plugin.suites`).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PACKAGES = ("gates", "canaries")


def _from_checkout(name: str, directory: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        f"{__name__}.{name}", directory / "__init__.py", submodule_search_locations=[str(directory)]
    )
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


for _name in PACKAGES:
    _checkout = Path(__file__).resolve().parents[2] / _name
    if (
        not (Path(__file__).parent / _name).is_dir()
        and (_checkout / "__init__.py").is_file()
        and importlib.util.find_spec(f"{__name__}.{_name}") is None  # not mapped by an editable install
    ):
        _from_checkout(_name, _checkout)
