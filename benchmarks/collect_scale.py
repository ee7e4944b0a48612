"""`pytest -m gate --collect-only` on a large embedded fleet: wall time from start to exit.

    python benchmarks/collect_scale.py [--runs 1000] [--repeat 5]

Writes a fleet of ``--runs`` VMs to disk (nothing is served: collecting opens no connection), then
times ``pytest -m gate --collect-only -q`` on its inventory ``--repeat`` times in a child process.
Prints each wall time, pytest's own figure, the item count and the medians (target: ≤ 5 s wall
for 1,000 VMs, 9,000 items).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _child import REPO

from sbxcheck.sim.fleet import SimFleet


def collect_once(inventory: Path) -> tuple[float, float, int]:
    """(wall seconds, pytest's reported seconds, items collected) of one collect-only child."""
    argv = [sys.executable, "-m", "pytest", "-m", "gate", "--collect-only", "-q", "-p", "no:cacheprovider"]
    argv += [f"--sbx-inventory={inventory}", str(REPO / "gates" / "test_gate.py")]
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, cwd=REPO)
    wall = time.perf_counter() - started
    found = re.search(r"(\d+)(?:/\d+)? tests? collected.* in ([\d.]+)s", proc.stdout)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"collect-only failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return wall, float(found.group(2)), int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        built = time.perf_counter()
        fleet = SimFleet(Path(tmp) / "fleet", runs=args.runs)
        inventory = fleet.materialize()
        print(f"fleet of {args.runs} VMs written in {time.perf_counter() - built:.1f}s")
        walls, reported = [], []
        for _ in range(args.repeat):
            wall, own, items = collect_once(inventory)
            walls.append(wall)
            reported.append(own)
            print(f"  wall {wall:.2f}s  pytest {own:.2f}s  items {items}")
        print(f"median wall {statistics.median(walls):.2f}s, pytest {statistics.median(reported):.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
