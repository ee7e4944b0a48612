"""What one canary run costs the control plane it watches, and how late its verdicts are.

    python benchmarks/canary_requests.py [--routes 4,40] [--slow 4] [--cp-version 1.3] [--fault cp.stream-absent]

One embedded fleet; for each N, the route and workspace canaries (``canaries/test_routes.py`` and
``canaries/test_workspaces.py``) run in a child pytest on an inventory with N healthy routes. The
figures come from the control plane's own request log (creates, mission reads, event reads, stream
subscriptions, everything else) and from the missions' stored events: the delay from each route's
first execution event (the server's timestamp) to the moment the dispatcher settled that route
(recorded in the child by a probe plugin that wraps ``MissionDispatcher._drive_route``).
``--slow K`` repeats the smallest N with missions K times slower to start: polling pays for the
wait, a stream does not. ``--cp-version`` picks the control plane's release profile; ``--fault
cp.stream-absent`` measures a control plane without the live stream (followers poll the mission
list). "Reads per create" counts mission and event reads (the record, its digest, its events) per
create; the stream subscription and list reads are counted apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

import tomli_w
from _child import run_suite

from sbxcheck.sim.fleet import SimFleet

TEMPLATES = ("codex-terra", "claudecode-opus", "codex-terra-mcp", "opencode-glm", "gemini-flash")
PROBE = '''
import json, os, time
from sbxcheck import lifecycle

_original = lifecycle.MissionDispatcher._drive_route


def _drive_route(self, run):
    try:
        _original(self, run)
    finally:
        with open(os.environ["SBX_BENCH_OUT"], "a", encoding="utf-8") as out:
            out.write(json.dumps({"label": run.route.label, "mission_id": run.mission_id,
                                  "settled_at": time.time()}) + "\\n")


lifecycle.MissionDispatcher._drive_route = _drive_route
'''
EVIDENCE = ("tool_call", "tool_result", "assistant_message")


def inventory_with_routes(source: Path, target: Path, n: int, deadline_s: float) -> None:
    """``source`` with N routes cycled from the healthy templates (unique names)."""
    doc = tomllib.loads(source.read_text(encoding="utf-8"))
    sandboxed = doc["sandboxed"]
    templates = {r["name"]: r for r in sandboxed["routes"]}
    routes = []
    for i in range(n):
        route = dict(templates[TEMPLATES[i % len(TEMPLATES)]])
        route["name"] = f"{route['name']}-{i:02d}"
        routes.append(route)
    sandboxed["routes"] = routes
    sandboxed["execution_deadline_s"] = deadline_s
    sandboxed["canary_deadline_s"] = max(deadline_s, sandboxed.get("canary_deadline_s", 30.0))
    target.write_text(tomli_w.dumps(doc), encoding="utf-8")


def category(method: str, path: str) -> str:
    if path == "/api/control/missions":
        return "create" if method == "POST" else "list"
    if path == "/api/control/stream":
        return "stream"
    if path.startswith("/api/control/missions/"):
        if path.endswith("/events"):
            return "event_reads"
        if path.endswith("/cancel"):
            return "cancel"
        if method != "GET":
            return "other"  # a first message in a slot (/parallel), an acknowledgement (/status)
        return "mission_reads"  # the record and its digest (MCP get_mission)
    return "other"


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def measure(fleet: SimFleet, tmp: Path, n: int, slow: float) -> dict[str, Any]:
    cp = fleet.controlplane
    assert cp is not None
    inventory = tmp / f"inventory-{n}-{slow:g}.toml"
    inventory_with_routes(fleet.inventory_path, inventory, n, deadline_s=10.0 * slow)
    out = tmp / f"settled-{n}-{slow:g}.jsonl"
    os.environ["SBX_BENCH_OUT"] = str(out)
    cp.latency_scale = slow
    cp.clear_requests()
    report = tmp / f"report-{n}-{slow:g}"
    proc = run_suite(
        "canary",
        "canaries",
        inventory,
        report,
        "-p",
        "sbx_bench_probe",
        "-k",
        "test_route_ or test_workspace",
    )
    cp.latency_scale = 1.0
    log = cp.requests
    counts: dict[str, int] = {}
    for rec in log:
        key = category(rec.method, rec.path)
        counts[key] = counts.get(key, 0) + 1
    rejected = sum(1 for rec in log if rec.status in (429, 503))
    checks = json.loads((report / "results.json").read_text())["checks"] if report.exists() else []
    bad = [c["nodeid"].split("::")[-1] for c in checks if c["outcome"] != "passed"]
    if proc.returncode not in (0, 1) or not checks:
        print(proc.stdout[-3000:], proc.stderr[-2000:], file=sys.stderr)
    delays = []
    for line in out.read_text(encoding="utf-8").splitlines() if out.exists() else []:
        row = json.loads(line)
        if row["mission_id"] is None:
            continue
        first = next((e for e in cp.events(row["mission_id"]) if e["event_type"] in EVIDENCE), None)
        if first is not None:
            delays.append(row["settled_at"] - epoch(first["timestamp"]))
    creates = counts.get("create", 0)
    reads = counts.get("mission_reads", 0) + counts.get("event_reads", 0)
    return {
        "n": n,
        "slow": slow,
        "requests": len(log),
        "counts": counts,
        "reads_per_create": reads / creates if creates else float("nan"),
        "delay_median_s": statistics.median(delays) if delays else float("nan"),
        "delay_max_s": max(delays) if delays else float("nan"),
        "failing": bad,
        "left_running": len(cp.missions_nonterminal()),
        "pushed_back": rejected,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="4,40", help="comma-separated route counts")
    parser.add_argument("--slow", type=float, default=4.0, help="slow-start factor for the smallest N (0: skip)")
    parser.add_argument("--fault", action="append", default=[], help="a sim fault for the whole fleet")
    parser.add_argument("--cp-version", default=None, help="the control plane's release profile (sim)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.routes.split(",") if x]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "sbx_bench_probe.py").write_text(PROBE, encoding="utf-8")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")])
        with SimFleet(tmp / "fleet", faults=args.fault, cp_version=args.cp_version) as fleet:
            runs = [measure(fleet, tmp, n, 1.0) for n in sizes]
            if args.slow:
                runs.append(measure(fleet, tmp, min(sizes), args.slow))
    for r in runs:
        c = r["counts"]
        print(
            f"N={r['n']:>3} start x{r['slow']:g}: {r['requests']} requests "
            f"(creates {c.get('create', 0)}, mission reads {c.get('mission_reads', 0)}, "
            f"event reads {c.get('event_reads', 0)}, stream {c.get('stream', 0)}, "
            f"cancels {c.get('cancel', 0)}, list {c.get('list', 0)}, other {c.get('other', 0)}; "
            f"pushed back (429/503) {r['pushed_back']}); mission+event reads per create {r['reads_per_create']:.2f}; "
            f"evidence->verdict median {r['delay_median_s']:.3f} s, max {r['delay_max_s']:.3f} s; "
            f"failing items: {r['failing'] or 'none'}; left running: {r['left_running']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
