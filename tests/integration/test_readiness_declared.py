"""Readiness keeps a route back only on what the server declared, never on sbxcheck's catalog reading.

A codex route whose model is an alias codex expands (the catalog lists only what it expands to) is
dispatched and passes; a model the server itself refuses still fails, with the server's valid ids.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.gate_harness import REPO

from sbxcheck.inventory import RouteSpec
from sbxcheck.sim.fleet import CODEX_ALIAS_ROUTE, SimFleet

pytestmark = pytest.mark.slow  # end-to-end: a child session against a fleet

REFUSED_ROUTE = RouteSpec(name="codex-unknown", agent="build", backend="codex", model_override="gpt-5.9")
SUITES = (REPO / "canaries" / "test_routes.py", REPO / "canaries" / "test_readiness.py")


def test_an_alias_route_is_dispatched_and_a_refused_model_fails_with_the_servers_ids(tmp_path: Path) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    for suite in SUITES:
        shutil.copy(suite, suites / suite.name)
    with SimFleet(tmp_path / "fleet", extra_routes=[CODEX_ALIAS_ROUTE, REFUSED_ROUTE]) as fleet:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-m", "canary",
             str(suites), "-k", "codex-alias or codex-unknown", f"--sbx-inventory={fleet.inventory_path}",
             f"--sbx-report={tmp_path / 'report'}", f"--sbx-state={tmp_path / 'state'}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        cp = fleet.controlplane
        assert cp is not None
        creates = [r for r in cp.requests if (r.method, r.path) == ("POST", "/api/control/missions")]
        stored = {m: cp._missions[m].record.get("model_override") for m in cp.mission_ids()}
    document = json.loads((tmp_path / "report" / "results.json").read_text(encoding="utf-8"))
    checks: dict[str, dict[str, Any]] = {c["nodeid"].split("::", 1)[1]: c for c in document["checks"]}
    for name in ("route_dispatched", "route_record_echoes_request", "route_reaches_execution"):
        item = checks[f"test_{name}[codex-alias]"]
        assert item["outcome"] == "passed", (item["message"], proc.stdout[-3000:])
    catalog = checks["test_catalog[codex-alias]"]
    assert catalog["outcome"] == "passed" and "WARNING" in catalog["message"]  # a warning, nothing kept back
    assert list(stored.values()) == ["gpt-5.6-sol"]  # codex expanded the alias
    # the server's own word decides the refused model: its 400 and its valid ids
    refused = checks["test_route_dispatched[codex-unknown]"]
    assert (refused["outcome"], refused["classification"]) == ("failed", "config_defect")
    assert "valid ids: gpt-5.6-terra, gpt-5.6-sol, gpt-6-astra" in refused["message"]
    # the refused create was sent once; the alias's keyed retry returned the one mission (stored above)
    assert [r.status for r in creates].count(400) == 1 and len(stored) == 1
