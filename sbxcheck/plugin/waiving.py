"""Waivers in a run: read once by the controller, handed to xdist workers, judged against the collected
items, and applied to each item's result.

A waived failure becomes what pytest's own tools understand: an *xfail* with the waiver's reason (the
terminal's ``x``, junit's ``<skipped type="pytest.xfail">``, Allure's skipped, xdist's report), and
``waived`` in sbxcheck's reports. A waived item that passes is an *xpass* ("waiver no longer needed").
A waiver whose pattern names a collected module but none of its items stops the run (exit 4).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import functools
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sbxcheck.plugin.stash import plain_nodeid

if TYPE_CHECKING:
    from sbxcheck.fleetsource import FleetSource
    from sbxcheck.plugin.settings import Settings
    from sbxcheck.results import CheckRecord
    from sbxcheck.waivers import PlacedWaiver

__all__ = ["WAIVERS_KEY", "RunWaivers", "WaiverChecks", "apply_waiver", "item_nodeids", "load_run_waivers"]


@dataclass(frozen=True)
class RunWaivers:
    """The run's waivers and the one instant they are judged at (the controller's start)."""

    waivers: tuple[PlacedWaiver, ...]
    now: dt.datetime

    def to_wire(self) -> dict[str, Any]:
        return {"now": self.now.isoformat(), "waivers": [w.to_wire() for w in self.waivers]}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RunWaivers:
        from sbxcheck.waivers import PlacedWaiver

        return cls(
            tuple(PlacedWaiver.from_wire(w) for w in data["waivers"]), dt.datetime.fromisoformat(data["now"])
        )


WAIVERS_KEY = pytest.StashKey[RunWaivers]()


#: The waivers file a run reads from its rootdir when no setting names one (``sbxcheck.waivers.WAIVERS_FILENAME``,
#: spelled here so that a run without waivers imports nothing of them).
DEFAULT_FILE = "sbxcheck-waivers.toml"


def load_run_waivers(settings: Settings, source: FleetSource) -> RunWaivers | None:
    """The inventory's ``[[waivers]]`` and the waivers file's, together (None when there are none).

    A bad waiver, a missing waivers file or one ``match`` in both is a UsageError (exit 4) naming the
    file and the waiver.
    """
    file = settings.waivers
    default = settings.rootdir / DEFAULT_FILE
    if file is None and default.is_file():
        file = default
    inventory_path = source.path if not source.simulated else None
    if file is None and inventory_path is None:
        return None  # an unrelated run (or the embedded fleet without a waivers file) reads nothing
    from sbxcheck.errors import SbxError
    from sbxcheck.waivers import PlacedWaiver, duplicate_problems, load_waivers_file

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    placed: list[PlacedWaiver] = []
    try:
        if inventory_path is not None:
            from sbxcheck.inventory import load_inventory

            inventory = load_inventory(inventory_path)
            placed += [PlacedWaiver(w, inventory.source, i) for i, w in enumerate(inventory.waivers, start=1)]
        if file is not None:
            placed += load_waivers_file(file, now=now)
    except SbxError as exc:
        where = settings.source("waivers") if file is not None and settings.waivers is not None else "waivers"
        raise pytest.UsageError(f"sbxcheck: {where}: {exc.message}") from None
    problems = duplicate_problems(placed)
    if problems:
        raise pytest.UsageError("sbxcheck: waivers: " + "; ".join(problems))
    return RunWaivers(tuple(placed), now) if placed else None


@functools.cache
def _shipped() -> tuple[tuple[str, Path], ...]:
    from sbxcheck.plugin.suites import shipped_dirs

    return tuple(shipped_dirs().items())


def item_nodeids(item: pytest.Item) -> list[str]:
    """The ids a waiver may name an item by: its node id, and for an installed shipped suite the id it
    has in a checkout (``canaries/test_routes.py::…``)."""
    plain = plain_nodeid(item)
    ids = [plain]
    path = Path(str(getattr(item, "path", ""))).resolve()
    for name, directory in _shipped():
        if path.is_relative_to(directory):
            alias = f"{name}/{path.relative_to(directory).as_posix()}::{plain.split('::', 1)[-1]}"
            if alias not in ids:
                ids.append(alias)
    return ids


def pattern_problems(
    waivers: Sequence[PlacedWaiver], collected: Sequence[Sequence[str]], now: dt.datetime
) -> list[str]:
    """One line per unexpired waiver whose pattern names a collected module and none of its items.

    A pattern whose module this run did not collect is a waiver of another suite's item: it is listed as
    matching nothing at the end of the run, not an error.
    """
    from sbxcheck.waivers import glob_match

    every = [n for ids in collected for n in ids]
    modules = sorted({n.split("::", 1)[0] for n in every})
    problems = []
    for placed in waivers:
        if placed.expired(now) or placed.matches(every):
            continue
        module = placed.waiver.match.split("::", 1)[0]
        named = [m for m in modules if glob_match(module, m)]
        if not named:
            continue
        close = difflib.get_close_matches(
            placed.waiver.match, [n for n in every if n.split("::", 1)[0] in named], 1, 0.5
        )
        hint = f" (closest: {close[0]})" if close else ""
        problems.append(f"{placed.label} matches no item of {', '.join(named[:3])}{hint}")
    return problems


class WaiverChecks:
    """Registered when a run has waivers: judges their patterns against the collected items (before
    ``-k``/``-m`` deselect any), on the controller or, under xdist, on each worker for the controller."""

    def __init__(self, config: pytest.Config, waivers: RunWaivers) -> None:
        self.config = config
        self.waivers = waivers
        self.problem_dir: Path | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        from sbxcheck.plugin.stash import suite_of

        collected = [item_nodeids(i) for i in items if suite_of(i) is not None]
        problems = pattern_problems(self.waivers.waivers, collected, self.waivers.now) if collected else []
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        if workerinput is None:
            if problems:
                raise pytest.UsageError("sbxcheck: waivers: " + "; ".join(problems))
            return
        where = workerinput.get("sbxcheck_waiver_problems")
        if where:  # the controller reads it when this worker's collection arrives
            Path(where, f"{workerinput.get('workerid')}.json").write_text(
                json.dumps(problems), encoding="utf-8"
            )

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.problem_dir is None:
            self.problem_dir = Path(tempfile.mkdtemp(prefix="sbxcheck-waivers-"))
        node.workerinput["sbxcheck_waivers"] = self.waivers.to_wire()
        node.workerinput["sbxcheck_waiver_problems"] = str(self.problem_dir)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.problem_dir is None:
            return
        found = self.problem_dir / f"{node.workerinput.get('workerid')}.json"
        with contextlib.suppress(OSError, ValueError):
            problems = json.loads(found.read_text(encoding="utf-8"))
            if isinstance(problems, list) and problems:
                pytest.exit("sbxcheck: waivers: " + "; ".join(str(p) for p in problems), returncode=4)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.problem_dir is not None:
            shutil.rmtree(self.problem_dir, ignore_errors=True)


def apply_waiver(item: pytest.Item, report: pytest.TestReport, record: CheckRecord) -> CheckRecord:
    """The record as the item's waiver makes it (unchanged without one); a waived failure becomes an
    xfail of pytest's report, a waived item that passed an xpass."""
    run = item.config.stash.get(WAIVERS_KEY, None)
    if run is None or report.when == "teardown":  # a teardown's error is the run's own, never the known failure
        return record
    from sbxcheck.redact import default_redactor
    from sbxcheck.waivers import decide

    decision = decide(run.waivers, item_nodeids(item), record, run.now)
    if decision is None:
        return record
    update: dict[str, Any] = {"waiver": decision.describe(record), "message": decision.message(record)}
    reason = default_redactor().redact_text(decision.pytest_reason())
    if decision.outcome is not None:
        update["outcome"] = decision.outcome
        report.outcome = "skipped"
        report.wasxfail = reason
    elif decision.status == "not needed" and report.when == "call":
        report.wasxfail = reason
    return record.model_copy(update=update)


def waivers_of_run(config: pytest.Config, records: Sequence[CheckRecord]) -> list[dict[str, Any]]:
    """Every waiver of the run with its status and items (results.json ``waivers``); [] without waivers."""
    run = config.stash.get(WAIVERS_KEY, None)
    if run is None:
        return []
    from sbxcheck.waivers import summarise

    return summarise(run.waivers, records, run.now)


def start(config: pytest.Config, settings: Settings, source: FleetSource | None) -> None:
    """Read the run's waivers (the controller; a worker takes its controller's) and judge them at collection."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        handed = workerinput.get("sbxcheck_waivers")
        waivers = RunWaivers.from_wire(handed) if handed else None
    else:
        waivers = load_run_waivers(settings, source) if source is not None else None
    if waivers is None:
        return
    config.stash[WAIVERS_KEY] = waivers
    config.pluginmanager.register(WaiverChecks(config, waivers), "sbxcheck-waivers")
