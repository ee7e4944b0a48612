"""A one-item run's cost against an empty ledger and against one of 1 M closed entries (size must not slow a run).

    python benchmarks/ledger_scale.py [--entries 1000000] [--repeat 5]

Each measurement is a child ``pytest`` of one sbxcheck item that records an intent, releases it and
reads the open entries (what every session does), with ``--sbx-state`` on a scratch state dir; its
wall time, CPU time and peak RSS come from ``os.wait4`` (CPU is the steadier figure on a shared
machine). Scenarios, interleaved, medians printed:

- ``empty``: no ledger yet;
- ``legacy-1M``: a ledger of N closed entries (intent + released lines, ~300 bytes each, as the
  sessions of years would write them) that was never compacted: the first run compacts it, once;
- ``after-1M``: the same ledger after that compaction (what every later run sees);
- ``ceiling``: a ledger just under the automatic-compaction size (the worst steady state).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _child import foreign_plugins

from sbxcheck.lifecycle import ledger as ledger_module

ITEM = """
import pytest
from sbxcheck.results import CheckResult

pytestmark = pytest.mark.triage


def test_one(sbx_session, sbx_verdict):
    ledger = sbx_session.ledger()
    entry = ledger.record_intent("mission", "bench", run_id=None, detail={"title": "bench"})
    ledger.mark_released(entry, "done")
    open_now = len(ledger.open_entries())
    sbx_verdict(CheckResult.passed("ledger_bench", "-", "ledger used", {"open_entries": open_now}))
"""


def _write_closed_entries(path: Path, n: int) -> int:
    """Write N closed entries (an intent and a released line each), as real sessions write them.

    Streamed to disk: the benchmark's own memory stays small, so its children's peak RSS (which
    Linux carries over a fork) is theirs.
    """
    with path.open("wb") as out:
        for i in range(n):
            eid = uuid.UUID(int=i).hex
            ts = "2025-01-01T00:00:00Z"
            intent = {
                "v": 1, "ts": ts, "op": "intent", "id": eid, "kind": "mission",
                "ident": f"sbxcheck-{eid}", "run_id": None, "owner": f"{1000 + i % 30000}@ci-runner-7",
                "owner_start": "123456", "session": eid,
                "detail": {"route": "codex-terra", "via": "rest", "title": f"sbxcheck {eid[:8]} route codex-terra"},
            }  # fmt: skip
            released = {"v": 1, "ts": ts, "op": "released", "id": eid, "how": "cancelled"}
            out.write((json.dumps(intent, separators=(",", ":")) + "\n").encode())
            out.write((json.dumps(released, separators=(",", ":")) + "\n").encode())
    return path.stat().st_size


def _run(suite: Path, state: Path, report: Path, blocked: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (MiB) of one child run."""
    argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *blocked, "-m", "triage", str(suite),
        "--sbx-inventory", str(suite.parent / "inventory.toml"),  # no fleet at all: only the ledger is used
        "--sbx-state", str(state), "--sbx-report", str(report),
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=suite.parent)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"child exited {proc.returncode}:\n{out.decode(errors='replace')[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sbx-ledger-bench-"))
    try:
        suite = root / "test_one.py"
        suite.write_text(ITEM)
        (root / "inventory.toml").write_text("# nothing but the ledger is used\n")
        blocked = foreign_plugins()
        legacy = root / "legacy.jsonl"
        size = _write_closed_entries(legacy, args.entries)
        below = root / "below.jsonl"
        _write_closed_entries(below, int(ledger_module.COMPACT_ABOVE_BYTES / (size / args.entries)) - 50)
        print(f"legacy ledger: {size / 2**20:.0f} MiB, {args.entries} closed entries", flush=True)
        names = ("empty", "legacy-1M", "after-1M", "ceiling")
        samples: dict[str, list[tuple[float, float, float]]] = {k: [] for k in names}
        for i in range(args.repeat):
            for name in samples:
                state = root / f"state-{name}-{i}"
                state.mkdir()
                if name in ("legacy-1M", "after-1M"):
                    shutil.copyfile(legacy, state / "ledger.jsonl")
                    if name == "after-1M":  # in a child: the benchmark's own memory stays small
                        compact = [sys.executable, "-m", "sbxcheck.cli", "ledger", "compact", str(state)]
                        subprocess.run(compact, check=True, capture_output=True, timeout=900)
                        (state / "ledger.jsonl.old").unlink()
                elif name == "ceiling":
                    shutil.copyfile(below, state / "ledger.jsonl")
                samples[name].append(_run(suite, state, root / "report", blocked))
                shutil.rmtree(state)
        base = [statistics.median(v[k] for v in samples["empty"]) for k in range(3)]
        for name, values in samples.items():
            wall, cpu, rss = (statistics.median(v[k] for v in values) for k in range(3))
            print(
                f"{name:10} wall {wall:6.2f} s ({(wall / base[0] - 1) * 100:+6.1f}%)  "
                f"cpu {cpu:6.2f} s ({(cpu / base[1] - 1) * 100:+6.1f}%)  "
                f"peak RSS {rss:7.1f} MiB ({(rss / base[2] - 1) * 100:+6.1f}%)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
