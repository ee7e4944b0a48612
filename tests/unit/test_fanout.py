"""GateFanout without a network: one connection per VM, checks concurrent, results by item, cancel."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from support.in_flight import InFlight

from sbxcheck.checks.gate import GateTarget
from sbxcheck.clients.runrecords import RunEntry
from sbxcheck.errors import CommandTimeout, HostUnreachable
from sbxcheck.plugin.fanout import GateFanout, Planned
from sbxcheck.plugin.gateruns import GateRun
from sbxcheck.results import CheckResult


def _run(run_id: str) -> GateRun:
    target = GateTarget(run_id, f"{run_id}.vm", "abc", ("m1", "m2"), "cfg", "http://x", 1.0, "m1", 5.0, 5.0)
    return GateRun(RunEntry(run_id, Path(f"{run_id}.json"), None), target, None)


class _Host:
    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


class _Pool:
    """Counts connects; ``down`` aliases fail to connect."""

    def __init__(self, down: frozenset[str] = frozenset()) -> None:
        self.down = down
        self.connects: dict[str, int] = {}
        self.lock = threading.Lock()

    def host(self, alias: str) -> _Host:
        with self.lock:
            self.connects[alias] = self.connects.get(alias, 0) + 1
        if alias in self.down:
            raise HostUnreachable(f"cannot reach {alias}: connection refused", evidence={"alias": alias})
        return _Host(alias)


class _Probe:
    """Check functions that sleep and count how many ran at once (``calls``, see :class:`InFlight`)."""

    def __init__(self, seconds: float = 0.2, await_peak: int = 0) -> None:
        self.seconds = seconds
        self.calls = InFlight(await_peak)

    def check_a(self, host: Any, target: GateTarget) -> CheckResult:
        self.calls.hold(self.seconds)
        return CheckResult.passed("A", target.run_id, f"ok on {host.alias}", {"host": host.alias})

    def check_c(self, host: Any, target: GateTarget, model: str) -> CheckResult:
        self.check_a(host, target)
        return CheckResult.passed("C", f"{target.run_id}-{model}", "pong", {"model": model})

    def check_raises(self, host: Any, target: GateTarget) -> CheckResult:
        raise CommandTimeout(
            f"{host.alias}: command did not finish within 1s", evidence={"alias": host.alias}
        )


def _plan(runs: list[GateRun], probe: _Probe) -> list[Planned]:
    plan = []
    for run in runs:
        plan.append(Planned(f"A[{run.run_id}]", run, probe.check_a, None))
        plan += [Planned(f"C[{run.run_id}-{m}]", run, probe.check_c, m) for m in ("m1", "m2")]
    return plan


def test_every_vm_at_once_one_connection_each_and_results_by_item() -> None:
    probe, pool = _Probe(0.3, await_peak=15), _Pool()
    runs = [_run(f"r{i}") for i in range(5)]
    fanout = GateFanout(pool, max_parallel=32)  # type: ignore[arg-type]
    assert fanout.start(_plan(runs, probe)) == 15
    assert fanout.start(_plan(runs, probe)) == 0  # idempotent: the next items find theirs started
    results = {p.nodeid: fanout.result(p.nodeid) for p in _plan(runs, probe)}
    assert pool.connects == {f"r{i}.vm": 1 for i in range(5)}
    assert probe.calls.peak == 15  # all fifteen in flight at once: concurrent, not one after another
    c = results["C[r3-m2]"]
    assert (c.target, c.evidence["model"]) == ("r3-m2", "m2")
    assert c.duration_s == c.evidence["remote_s"] >= 0.29
    assert "wait_s" in c.evidence and "connect_s" in c.evidence
    fanout.close()


def test_max_parallel_bounds_the_vms_in_flight() -> None:
    probe, pool = _Probe(0.1), _Pool()
    runs = [_run(f"r{i}") for i in range(6)]
    fanout = GateFanout(pool, max_parallel=2)  # type: ignore[arg-type]
    plan = [Planned(f"A[{r.run_id}]", r, probe.check_a, None) for r in runs]
    fanout.start(plan)
    for p in plan:
        fanout.result(p.nodeid)
    assert probe.calls.peak == 2
    fanout.close()


def test_a_connect_failure_is_raised_for_the_vm_and_the_others_go_on() -> None:
    probe, pool = _Probe(0.05), _Pool(down=frozenset({"r1.vm"}))
    runs = [_run("r0"), _run("r1")]
    fanout = GateFanout(pool, max_parallel=4)  # type: ignore[arg-type]
    fanout.start(_plan(runs, probe))
    with pytest.raises(HostUnreachable, match="connection refused"):
        fanout.host(runs[1])
    assert fanout.host(runs[0]).alias == "r0.vm"
    assert fanout.result("A[r0]").outcome.value == "passed"
    assert pool.connects["r1.vm"] == 1  # tried once, not once per item
    fanout.close()


def test_an_exception_from_a_check_is_raised_in_the_item() -> None:
    probe, pool = _Probe(), _Pool()
    run = _run("r0")
    fanout = GateFanout(pool, max_parallel=4)  # type: ignore[arg-type]
    fanout.start([Planned("X[r0]", run, probe.check_raises, None)])
    with pytest.raises(CommandTimeout, match="did not finish"):
        fanout.result("X[r0]")
    fanout.close()


def test_cancel_stops_queued_checks_and_cuts_in_flight_ones() -> None:
    probe, pool = _Probe(0.5), _Pool()
    runs = [_run(f"r{i}") for i in range(4)]
    fanout = GateFanout(pool, max_parallel=1)  # type: ignore[arg-type]
    fanout.start(_plan(runs, probe))
    fanout.host(runs[0])
    assert probe.calls.wait_running(1)  # A[r0] has started (a loaded machine starts its thread late)
    fanout.cancel()
    states = {p.nodeid: fanout.state(p.nodeid) for p in _plan(runs, probe)}
    assert states["A[r0]"] == "cancelled while in flight"
    assert states["A[r3]"] == "cancelled before it started"
    assert fanout.start(_plan([_run("r9")], probe)) == 0  # nothing new after an interrupt
    assert fanout.state("never planned") is None
