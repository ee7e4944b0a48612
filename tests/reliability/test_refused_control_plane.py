"""A refused control plane is one incident, creates nothing, and leaves nothing for the next run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.gate_harness import CANARY_SUITES, REPO
from support.lifecycle_harness import LEDGER_SUITE, child_argv, open_entries, run_child, suites_dir

from sbxcheck.sim.fleet import SimFleet
from sbxcheck.sim.httpserver import BackgroundServer

pytestmark = pytest.mark.slow  # two canary children against a fleet of its own


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[SimFleet]:
    with SimFleet(tmp_path / "fleet") as own:
        yield own


def _refuse(fleet: SimFleet) -> int:
    """Stop the control plane's server: its port is still reserved, so a connect is refused."""
    assert fleet.cp_http is not None
    port = fleet.cp_http.port
    fleet.cp_http.stop()
    return port


def test_refused_control_plane_is_one_incident_and_the_next_healthy_run_passes(
    fleet: SimFleet, tmp_path: Path
) -> None:
    port = _refuse(fleet)
    suites = suites_dir(tmp_path, *CANARY_SUITES, LEDGER_SUITE)
    select = ("-k", "codex-terra or gemini-flash or ledger")
    ret, out = run_child(
        child_argv(suites, fleet.inventory_path, tmp_path, *select, marks="canary"), tmp_path
    )
    report = json.loads((tmp_path / "report" / "results.json").read_text())
    assert ret == 1, out
    errored = [c for c in report["checks"] if c["outcome"] == "error"]
    assert errored and all(c["classification"] == "infra_unreachable" for c in errored), out
    [incident] = report["incidents"]  # one cause, one incident, naming the service
    assert f"127.0.0.1:{port}" in incident["summary"] and sorted(incident["checks"]) == sorted(
        c["nodeid"] for c in errored
    )
    assert "<target>" not in incident["recommendation"]
    # a refused connect never sent a create: nothing can exist, no intent stays open
    assert open_entries(tmp_path / "state") == []
    assert not [c for c in report["cleanup"] if not c.get("ok", True)], report["cleanup"]
    assert "cleanup: FAILED" not in out
    # the control plane is back: the next run on the same state dir is healthy, no leaked items
    assert fleet.controlplane is not None
    fleet.cp_http = BackgroundServer(fleet.controlplane.app, port=port)
    fleet.cp_http.start()
    ret, out = run_child(
        child_argv(suites, fleet.inventory_path, tmp_path, *select, marks="canary"), tmp_path
    )
    healthy = json.loads((tmp_path / "report" / "results.json").read_text())
    assert ret == 0, out
    assert healthy["incidents"] == [] and not [c for c in healthy["checks"] if "ledger" in c["nodeid"]]


def test_every_canary_against_a_refused_control_plane_is_one_incident_naming_no_empty_target(
    fleet: SimFleet, tmp_path: Path
) -> None:
    port = _refuse(fleet)
    suites = suites_dir(tmp_path, *sorted((REPO / "canaries").glob("test_*.py")))
    ret, out = run_child(child_argv(suites, fleet.inventory_path, tmp_path, marks="canary"), tmp_path)
    report = json.loads((tmp_path / "report" / "results.json").read_text())
    assert ret == 1, out
    errored = [c for c in report["checks"] if c["outcome"] == "error"]
    # readiness, fleet, hygiene, discovery and the routes all met the one refused URL: one cause key
    assert len(errored) > 20
    assert {c["cause"] for c in errored} == {f"infra_unreachable:http://127.0.0.1:{port}"}
    [incident] = report["incidents"]
    assert sorted(incident["checks"]) == sorted(c["nodeid"] for c in errored)
    names = incident["summary"].split(" on ", 1)[1].split(":", 1)[0].split(", ")
    assert "" not in names and " on , " not in incident["summary"], incident["summary"]
