"""Route-matrix wall time against the slowest single route and the sum of all routes.

    python benchmarks/canary_walltime.py

One embedded fleet; first every route in one session (the matrix), then each route alone. The
figure per session is the dispatcher's own clock: first dispatch until the last route settled
(``settled_s`` in the reaches_execution evidence), so pytest start-up is not counted.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _child import run_suite

from sbxcheck.sim.fleet import SimFleet


def run(fleet: SimFleet, tmp: Path, keyword: str) -> tuple[float, list[str]]:
    report = tmp / "report"
    proc = run_suite("canary", "canaries", fleet.inventory_path, report, "-k", keyword)
    checks = json.loads((report / "results.json").read_text())["checks"]
    settled = [c["evidence"]["settled_s"] for c in checks if c["check"] == "reaches_execution"]
    bad = [c["nodeid"] for c in checks if c["outcome"] != "passed"]
    if proc.returncode not in (0, 1) or not settled:
        print(proc.stdout[-2000:], file=sys.stderr)
    return max(settled), bad


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp_name, SimFleet(Path(tmp_name) / "fleet") as fleet:
        tmp = Path(tmp_name)
        from sbxcheck.inventory import load_inventory

        inv = load_inventory(fleet.inventory_path)
        assert inv.sandboxed is not None
        labels = [r.label for r in inv.sandboxed.routes]
        matrix, bad = run(fleet, tmp, "route_reaches_execution")
        singles = {label: run(fleet, tmp, f"route_reaches_execution and {label}]")[0] for label in labels}
        slowest = max(singles.values())
        print(f"routes: {len(labels)}; failing items: {bad or 'none'}")
        print("single routes (s): " + ", ".join(f"{k} {v:.2f}" for k, v in singles.items()))
        print(
            f"matrix: {matrix:.2f} s; slowest single route: {slowest:.2f} s "
            f"(ratio {matrix / slowest:.2f}); sum of routes: {sum(singles.values()):.2f} s "
            f"(ratio {matrix / sum(singles.values()):.2f})"
        )
        assert fleet.controlplane is not None
        print(f"missions left non-terminal: {len(fleet.controlplane.missions_nonterminal())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
