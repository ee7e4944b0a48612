"""What the installed plugin costs a project that does not use it: one unrelated test, with and without.

    python benchmarks/idle_cost.py [--repeat 7]

Runs ``pytest -q test_unrelated.py`` in a scratch directory (no inventory, no sbxcheck markers)
with the plugin and with ``-p no:sbxcheck``, interleaved, and prints both medians and the
difference (target <= 300 ms).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(cwd: Path, *extra: str) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, "test_unrelated.py"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"pytest {' '.join(extra)} exited {proc.returncode}:\n{proc.stdout[-2000:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "test_unrelated.py").write_text("def test_arithmetic():\n    assert 1 + 1 == 2\n")
        _run(cwd)  # warm the file cache and bytecode once, for both
        with_plugin, without = [], []
        for _ in range(args.repeat):
            with_plugin.append(_run(cwd))
            without.append(_run(cwd, "-p", "no:sbxcheck"))
    on, off = statistics.median(with_plugin), statistics.median(without)
    print("with plugin (s):    " + ", ".join(f"{t:.3f}" for t in with_plugin))
    print("-p no:sbxcheck (s): " + ", ".join(f"{t:.3f}" for t in without))
    print(
        f"median with {on:.3f} s, without {off:.3f} s: the plugin costs {1000 * (on - off):.0f} ms (target <= 300)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
