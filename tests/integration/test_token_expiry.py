"""A token that expires during the run: logged in again once per refused request, or one incident.

With a password the session logs in again when a request is answered 401 and sends that request
once more (a refused create made nothing: no mission is made twice); the MCP server is restarted
with the fresh token. With a static token there is nothing to renew: the expiry is one incident.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.gate_harness import CANARY_SUITES

from sbxcheck.sim.fleet import SimFleet

pytestmark = pytest.mark.slow  # end-to-end: child sessions against a fleet

ROUTES, CANARIES = 7, 3
CREATE = ("POST", "/api/control/missions")


def _run(tmp: Path, fleet: SimFleet, env: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    suites = tmp / "suites"
    suites.mkdir()
    for suite in CANARY_SUITES:
        shutil.copy(suite, suites / suite.name)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-m", "canary",
         str(suites), f"--sbx-inventory={fleet.inventory_path}", f"--sbx-report={tmp / 'report'}",
         f"--sbx-state={tmp / 'state'}"],
        cwd=tmp, capture_output=True, text=True, timeout=400, check=False, env={**os.environ, **(env or {})},
    )  # fmt: skip
    document = json.loads((tmp / "report" / "results.json").read_text(encoding="utf-8"))
    return proc.stdout, document


def test_with_a_password_an_expired_token_is_renewed_and_every_item_passes(tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet", ["cp.token-expires"]) as fleet:
        cp = fleet.controlplane
        assert cp is not None
        stdout, document = _run(tmp_path, fleet)
        log = list(cp.requests)
        created, left = cp.mission_ids(), cp.missions_nonterminal()
    refused = [r for r in log if r.status == 401]
    logins = [r for r in log if (r.method, r.path) == ("POST", "/api/auth/login")]
    print(f"token-expires: {len(refused)} requests answered 401, {len(logins)} logins, {len(log)} requests")
    print(sorted({(r.method, r.path) for r in refused}))
    assert refused, "the token never expired during the run: the fault was not met"
    assert len(logins) >= 2
    outcomes = {c["nodeid"].split("::")[1]: (c["outcome"], c["message"]) for c in document["checks"]}
    assert {o for o, _ in outcomes.values()} == {"passed"}, {k: v for k, v in outcomes.items() if v[0] != "passed"}
    assert len(outcomes) >= 3 * ROUTES + CANARIES and document["incidents"] == []
    # no create made twice: one mission per route and canary (a keyed retry returns the same one)
    assert len(created) == ROUTES + CANARIES and left == [], stdout[-3000:]


def test_a_static_token_that_expires_is_one_incident(tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet", ["cp.token-expires"]) as fleet:
        cp = fleet.controlplane
        assert cp is not None
        token = httpx.post(f"{cp_url(fleet)}/api/auth/login", json={"password": cp.password}, timeout=10)
        inventory = fleet.inventory_path.read_text(encoding="utf-8")
        static = re.sub(r'(?m)^password_file = .*$', 'token_env = "SBX_TEST_STATIC_TOKEN"', inventory)
        assert static != inventory
        fleet.inventory_path.write_text(static, encoding="utf-8")
        stdout, document = _run(tmp_path, fleet, {"SBX_TEST_STATIC_TOKEN": token.json()["token"]})
    errors = [c for c in document["checks"] if c["outcome"] != "passed"]
    assert errors and all(c["classification"] == "auth_failed" for c in errors), stdout[-3000:]
    [incident] = document["incidents"]
    assert incident["classification"] == "auth_failed" and len(incident["checks"]) == len(errors)
    assert " on , " not in incident["summary"] and "Invalid or expired token" in json.dumps(errors)


def cp_url(fleet: SimFleet) -> str:
    text = fleet.inventory_path.read_text(encoding="utf-8")
    match = re.search(r'(?m)^url = "(http://[^"]+)"', text)
    assert match is not None, text
    return match.group(1)
