"""Gate wall time on the healthy embedded fleet (3 runs × 3 models) and SSH connections per VM.

    python benchmarks/gate_walltime.py [--repeat 3] [--workers 0]

Starts one fleet, runs ``pytest -m gate`` against it ``--repeat`` times in a child process, and
prints each wall time, the median, and the connections each VM accepted per session.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _child import run_suite

from sbxcheck.sim.fleet import SimFleet


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (0 = serial)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, SimFleet(Path(tmp) / "fleet") as fleet:
        times, per_session = [], []
        for _ in range(args.repeat):
            before = {r: fleet.connections(r) for r in fleet.run_ids}
            extra = ["-n", str(args.workers), "--dist", "loadgroup"] if args.workers else []
            started = time.perf_counter()
            proc = run_suite("gate", "gates", fleet.inventory_path, Path(tmp) / "report", *extra)
            times.append(time.perf_counter() - started)
            per_session.append({r: fleet.connections(r) - before[r] for r in fleet.run_ids})
            if proc.returncode != 0:
                print(proc.stdout[-2000:], file=sys.stderr)
                return 1
        print(f"pi: {fleet.pi.kind if fleet.pi else '?'}; workers: {args.workers or 'serial'}")
        print("wall times (s): " + ", ".join(f"{t:.2f}" for t in times))
        print(f"median: {statistics.median(times):.2f} s for 27 items (3 runs x 3 models)")
        print(f"SSH connections per VM per session: {per_session}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
