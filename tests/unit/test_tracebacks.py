"""An SbxError's traceback ends where it entered sbxcheck; any other exception keeps all of it."""

from __future__ import annotations

from pathlib import Path

import pytest

import sbxcheck
from sbxcheck.errors import InventoryError
from sbxcheck.inventory import load_inventory
from sbxcheck.plugin.itemreport import hide_sbxcheck_frames

PACKAGE = Path(sbxcheck.__file__).resolve().parent


def _in_package(excinfo: pytest.ExceptionInfo[BaseException]) -> list[Path]:
    return [e.path for e in excinfo.traceback if isinstance(e.path, Path) and e.path.is_relative_to(PACKAGE)]


def test_an_sbxerror_keeps_the_callers_frame_and_drops_sbxchecks() -> None:
    with pytest.raises(InventoryError) as excinfo:
        load_inventory(Path("/nonexistent/sbxcheck.toml"))
    assert _in_package(excinfo)  # raised two frames deep inside sbxcheck
    hide_sbxcheck_frames(excinfo)
    [caller] = excinfo.traceback
    assert caller.name == test_an_sbxerror_keeps_the_callers_frame_and_drops_sbxchecks.__name__
    assert not _in_package(excinfo)


def test_any_other_exception_keeps_its_whole_traceback() -> None:
    def deep() -> None:
        load_inventory(None)  # type: ignore[arg-type]  # a bug: a TypeError inside sbxcheck

    with pytest.raises(TypeError) as excinfo:
        deep()
    before = [(e.path, e.lineno) for e in excinfo.traceback]
    hide_sbxcheck_frames(excinfo)
    assert [(e.path, e.lineno) for e in excinfo.traceback] == before
    assert _in_package(excinfo)


def test_an_installed_suites_frame_is_kept_as_a_checkouts_is() -> None:
    """Installed, a suite module lives under sbxcheck/suites/: its frame is the test's own, not sbxcheck's."""
    suite_file = PACKAGE / "suites" / "__init__.py"  # a file there, standing in for an installed suite module
    code = compile("def test_item():\n    load_inventory(Path('/nonexistent/sbxcheck.toml'))\n", suite_file, "exec")
    scope: dict[str, object] = {"load_inventory": load_inventory, "Path": Path}
    exec(code, scope)
    with pytest.raises(InventoryError) as excinfo:
        scope["test_item"]()  # type: ignore[operator]
    hide_sbxcheck_frames(excinfo)
    assert [e.name for e in excinfo.traceback][-1] == "test_item"
    assert _in_package(excinfo) == [suite_file]
