"""sbxcheck's xdist scheduler only for a run that selects sbxcheck items: any other ``-n`` run is xdist's."""

from __future__ import annotations

import re

import pytest

UNRELATED = """
import pytest

@pytest.mark.parametrize("n", range(6))
def test_numbers(n):
    assert n != 4

@pytest.mark.xdist_group(name="db")
def test_grouped_a():
    pass

@pytest.mark.xdist_group(name="db")
def test_grouped_b():
    pass
"""

GATE_STUB = "import pytest\npytestmark = pytest.mark.gate\n\ndef test_stub():\n    pass\n"


def _run(pytester: pytest.Pytester, *args: str) -> tuple[str, dict[str, str], dict[str, int]]:
    """(the scheduler xdist names, each test's outcome, the counts) of one ``-n 2 -v`` run."""
    result = pytester.runpytest_subprocess("-n", "2", "-v", "-p", "no:cacheprovider", "-p", "no:randomly", *args)
    out = result.stdout.str()
    scheduler = re.search(r"scheduling tests via (\w+)", out)
    outcomes = dict(
        (m.group(2), m.group(1)) for m in re.finditer(r"\[gw\d\] \[\s*\d+%\] (PASSED|FAILED|ERROR) (\S+)", out)
    )
    return (scheduler.group(1) if scheduler else "none"), outcomes, result.parseoutcomes()


@pytest.mark.parametrize(
    ("dist", "scheduler"), [((), "LoadScheduling"), (("--dist", "loadgroup"), "LoadGroupScheduling")]
)
def test_an_unrelated_project_gets_xdists_own_scheduler_and_the_same_result(
    pytester: pytest.Pytester, dist: tuple[str, ...], scheduler: str
) -> None:
    pytester.makepyfile(test_unrelated=UNRELATED)
    with_sbxcheck = _run(pytester, *dist)
    without = _run(pytester, "-p", "no:sbxcheck", *dist)
    assert with_sbxcheck[0] == without[0] == scheduler
    assert with_sbxcheck[1] == without[1] and len(without[1]) == 8
    assert with_sbxcheck[2] == without[2] == {"passed": 7, "failed": 1}
    assert not (pytester.path / "sbxcheck-report").exists()


def test_a_run_with_sbxcheck_items_gets_sbxchecks_scheduler(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate_stub=GATE_STUB)
    scheduler, outcomes, counts = _run(pytester, "--sbx-sim")
    assert scheduler == "GroupScopeScheduling"
    assert outcomes == {"test_gate_stub.py::test_stub": "PASSED"} and counts == {"passed": 1}
