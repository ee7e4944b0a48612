"""The shipped suites run from any directory: ``pytest -m gate --sbx-inventory=...`` needs no checkout.

Each child runs in an empty pytester directory (no ini, no tests of its own unless the test writes them),
as an operator's own directory is after ``pip install sbxcheck``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbxcheck.sim.fleet import SimFleet

REPO = Path(__file__).resolve().parents[2]
OWN_CHECK = (
    "import pytest\n\n@pytest.mark.gate\ndef test_my_extra(sbx_inventory):\n    assert sbx_inventory.ssh\n"
)


@pytest.fixture(autouse=True)
def _shipped_suites_as_installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("SBXCHECK_SHIPPED_SUITES", raising=False)  # tests/conftest.py turns them off
    yield


def _ids(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line and not line.startswith(" ")]


def _collect(pytester: pytest.Pytester, fleet: SimFleet, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--collect-only", "-q", "-p", "no:cacheprovider", f"--sbx-inventory={fleet.inventory_path}", *args
    )


def _checkout_ids(fleet: SimFleet, marker: str) -> list[str]:
    """What ``pytest -m MARKER`` collects from the checkout's root (its testpaths: gates/, canaries/)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker,
         f"--sbx-inventory={fleet.inventory_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_an_empty_directory_collects_the_shipped_suites_with_the_checkouts_node_ids(
    pytester: pytest.Pytester, healthy_fleet: SimFleet
) -> None:
    for marker, where in (("gate", "gates/"), ("canary", "canaries/")):
        result = _collect(pytester, healthy_fleet, "-m", marker)
        assert result.ret == pytest.ExitCode.OK, result.outlines[-10:]
        ids = _ids(result)
        assert ids and all(i.startswith(where) for i in ids), ids[:5]
        assert ids == _checkout_ids(healthy_fleet, marker)


def test_the_shipped_gate_runs_green_from_an_empty_directory(
    pytester: pytest.Pytester, healthy_fleet: SimFleet
) -> None:
    result = pytester.runpytest_subprocess(
        "-m", "gate", "-p", "no:cacheprovider", f"--sbx-inventory={healthy_fleet.inventory_path}"
    )
    outcomes = result.parseoutcomes()
    assert result.ret == pytest.ExitCode.OK, result.outlines[-20:]
    assert outcomes.get("passed", 0) == len(healthy_fleet.run_ids) * 10, outcomes  # 10 items per open run
    assert set(outcomes) <= {"passed", "skipped", "deselected"}  # the closed run's record: a skip


def test_a_users_own_checks_run_beside_them(pytester: pytest.Pytester, healthy_fleet: SimFleet) -> None:
    pytester.makepyfile(test_mine=OWN_CHECK)
    ids = _ids(_collect(pytester, healthy_fleet, "-m", "gate"))
    assert "test_mine.py::test_my_extra" in ids
    assert [i for i in ids if i != "test_mine.py::test_my_extra"] == _checkout_ids(healthy_fleet, "gate")


def test_a_local_copy_of_a_suite_is_the_suite(pytester: pytest.Pytester, healthy_fleet: SimFleet) -> None:
    shutil.copy(REPO / "gates" / "test_gate.py", pytester.path / "test_gate.py")
    ids = _ids(_collect(pytester, healthy_fleet, "-m", "gate"))
    assert ids and all(i.startswith("test_gate.py::") for i in ids), ids[:5]


def test_nothing_is_added_unless_a_suite_is_asked_for(
    pytester: pytest.Pytester, healthy_fleet: SimFleet
) -> None:
    pytester.makepyfile(test_mine=OWN_CHECK)
    assert _ids(_collect(pytester, healthy_fleet)) == ["test_mine.py::test_my_extra"]  # no -m
    assert _ids(_collect(pytester, healthy_fleet, "-m", "not gate")) == []
    assert _ids(_collect(pytester, healthy_fleet, "-m", "gate", "test_mine.py")) == [
        "test_mine.py::test_my_extra"
    ]
    assert _ids(_collect(pytester, healthy_fleet, "-m", "gate", "--sbx-shipped-suites=no")) == [
        "test_mine.py::test_my_extra"
    ]
    named = _ids(_collect(pytester, healthy_fleet, "-m", "gate", "--sbx-shipped-suites=yes", "test_mine.py"))
    assert named == ["test_mine.py::test_my_extra", *_checkout_ids(healthy_fleet, "gate")]


def test_a_run_for_a_fleet_that_collects_nothing_says_how_to_run_the_suites(
    pytester: pytest.Pytester, healthy_fleet: SimFleet
) -> None:
    for extra in ((), ("-m", "gate", "--sbx-shipped-suites=no")):
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", f"--sbx-inventory={healthy_fleet.inventory_path}", *extra
        )
        assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
        result.stdout.fnmatch_lines(["sbxcheck: no tests ran. The shipped suites run with `pytest -m gate`*"])
    pytester.makepyfile(test_mine=OWN_CHECK)
    deselected = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--sbx-inventory={healthy_fleet.inventory_path}", "-k", "no_such_item"
    )
    assert deselected.ret == pytest.ExitCode.NO_TESTS_COLLECTED and "sbxcheck: no" not in deselected.stdout.str()
    unrelated = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "nothing")  # no inventory, no suite
    assert unrelated.ret == pytest.ExitCode.NO_TESTS_COLLECTED and "sbxcheck: " not in unrelated.stdout.str()


def test_the_pyargs_name_it_advises_collects_the_suites_in_a_checkout_too(
    pytester: pytest.Pytester, healthy_fleet: SimFleet
) -> None:
    """``pytest --pyargs sbxcheck.suites -m gate`` (the no-tests advice): an editable install maps the
    repository's gates/ and canaries/ to the package, whose own directory holds no test."""
    for marker in ("gate", "canary"):
        result = _collect(pytester, healthy_fleet, "--pyargs", "sbxcheck.suites", "-m", marker)
        assert result.ret == pytest.ExitCode.OK, result.outlines[-10:]
        tests = [i.split("::", 1)[1] for i in _ids(result)]
        assert tests and tests == [i.split("::", 1)[1] for i in _checkout_ids(healthy_fleet, marker)]
