"""The gate's pi items on VMs running each pi release people run: 0.73.1 (@mariozechner), 0.83.0 (the exe.dev
image's, the default) and 1.6.0 (@earendil-works, whose live cost is OpenRouter's bill).

B and D are the items pi answers (A reads git, C and E curl): the child sessions select only them. On each
release a healthy VM passes both, a zero-rate models.json (``vm.zero-cost``) fails D, and a partial cost
block (``vm.partial-cost``: pi rejects the file) fails B and D, whatever pi's own total says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.gate_harness import GATE_SUITE, run_gate

from sbxcheck.sim.fleet import DEFAULT_SEED, SimFleet, plan_run_ids
from sbxcheck.sim.pi_releases import TESTED_PI_VERSIONS, pi_release

pytestmark = pytest.mark.slow  # end-to-end: a child session against a fleet per release

PI_ITEMS = "B_pi_models or D_cost_reported"


@pytest.mark.parametrize("version", TESTED_PI_VERSIONS)
def test_gate_on_each_pi_release(pytester: pytest.Pytester, tmp_path: Path, version: str) -> None:
    healthy, zero, partial = plan_run_ids(DEFAULT_SEED, 3)
    faults = [f"vm.zero-cost@{zero}", f"vm.partial-cost@{partial}"]
    with SimFleet(tmp_path / "fleet", faults, pi_version=version) as fleet:
        assert fleet.pi is not None and fleet.pi.version == version
        outcome = run_gate(pytester, fleet, "-k", PI_ITEMS)
    items = {(check, run): entry for (check, run, _), entry in outcome.items().items()}
    verdicts = {key: (e["outcome"], e["classification"]) for key, e in items.items()}
    failed = ("failed", "check_failed")
    want = {
        ("B_pi_models", healthy): ("passed", None),
        ("D_cost_reported", healthy): ("passed", None),
        ("B_pi_models", zero): ("passed", None),  # no cost block is valid: pi loads the models at $0
        ("D_cost_reported", zero): failed,
        ("B_pi_models", partial): failed,
        ("D_cost_reported", partial): failed,
    }
    assert verdicts == want, outcome.stdout[-3000:]
    release = pi_release(version)
    assert items[("B_pi_models", healthy)]["evidence"]["table_stream"] == release.metadata_stream
    cost = items[("D_cost_reported", zero)]
    assert "models.json has no rate table for the probe model" in cost["message"]
    assert cost["evidence"]["cost_at_rates"] == 0
    # 1.6.0 reports OpenRouter's bill as its total with zero rates: a non-zero live cost that fails D
    assert (cost["evidence"]["cost_total"] > 0) is release.reports_provider_cost
    assert cost["evidence"]["cost_from_provider"] is release.reports_provider_cost
    assert items[("B_pi_models", partial)]["message"].startswith("pi ")  # pi's own words: rejected, no models
    assert "cacheWrite" in str(items[("B_pi_models", partial)]["evidence"].get("models_json_errors", ""))
    paid = items[("D_cost_reported", healthy)]["evidence"]
    assert paid["cost_at_rates"] > 0 and paid["cost_from_provider"] is release.reports_provider_cost


def test_the_sim_pi_version_setting_chooses_what_the_embedded_vms_run(pytester: pytest.Pytester) -> None:
    """--sbx-sim-pi-version reaches the embedded fleet the plugin builds: 0.73.1 prints its table on stderr,
    and the header says which pi the VMs run and what it cannot do."""
    (pytester.path / "test_gate.py").write_text(GATE_SUITE.read_text(encoding="utf-8"), encoding="utf-8")
    result = pytester.runpytest_subprocess(
        "-m", "gate", "-p", "no:cacheprovider", "--sbx-sim-pi-version", "0.73.1", "--sbx-report",
        str(pytester.path / "r"), "-k", "B_pi_models", timeout=300,
    )  # fmt: skip
    result.stdout.fnmatch_lines(
        ["*simulated VMs run real pi 0.73.1 (@mariozechner/pi-coding-agent; *; pi 0.73.1 has no --session-id*"]
    )
    report = json.loads((pytester.path / "r" / "results.json").read_text(encoding="utf-8"))
    b_items = [c for c in report["checks"] if c["check"] == "B_pi_models"]
    assert len(b_items) == 3 and {c["outcome"] for c in b_items} == {"passed"}, result.outlines[-30:]
    assert {c["evidence"]["table_stream"] for c in b_items} == {"stderr"}
    assert report["inventory"]["details"]["pi"].startswith("real pi 0.73.1 (@mariozechner/pi-coding-agent;")
