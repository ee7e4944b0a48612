"""Print the gate fault matrix as observed: for each fault, the items it turned and how.

    python benchmarks/gate_fault_matrix.py

Each fault runs on its own run of a three-run fleet (three faults per session); every item not
listed passed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _child import run_suite

from sbxcheck.sim.faults import FAULTS
from sbxcheck.sim.fleet import DEFAULT_SEED, SimFleet, plan_run_ids


def main() -> int:
    names = list(FAULTS)
    runs = plan_run_ids(DEFAULT_SEED, 3)
    for start in range(0, len(names), 3):
        group = dict(zip(runs, names[start : start + 3], strict=False))
        with tempfile.TemporaryDirectory() as tmp:
            specs = [f"{fault}@{run}" for run, fault in group.items()]
            with SimFleet(Path(tmp) / "fleet", specs) as fleet:
                report_dir = Path(tmp) / "report"
                run_suite("gate", "gates", fleet.inventory_path, report_dir)
            checks = json.loads((report_dir / "results.json").read_text())["checks"]
        for run, fault in group.items():
            turned = [c for c in checks if c["target"].startswith(run) and c["outcome"] != "passed"]
            passed = sum(1 for c in checks if c["target"].startswith(run) and c["outcome"] == "passed")
            print(f"{fault}  ({passed} other items of its run passed)")
            for c in turned:
                param = c["nodeid"].split("[", 1)[1].rstrip("]").removeprefix(run).lstrip("-")
                item = c["check"] + (f"[{param}]" if param else "")
                print(f"    {c['outcome']:6} {c['classification']:18} {item}: {c['message'][:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
