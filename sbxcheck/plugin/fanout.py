"""Gate fan-out: every selected VM's remote work starts at once; each item waits for its own result.

Like the route matrix (``lifecycle.MissionDispatcher``): when the first gate item of a session runs
(never at collection), :class:`GateFanout` connects every VM this process will gate — at most
``[ssh] max_parallel`` at a time, one connection each — and runs each item's check function on it,
the independent checks of one VM concurrently over that one connection (bounded per connection by
``[ssh] max_sessions``). The item then waits for its future and judges nothing itself: the result
is exactly what the same check function returns when called inline, so speed never changes an
outcome. A connect failure errors every item of that VM in setup, as the inline path does.

Under xdist each worker fans out over the items it was given (sbxcheck's scheduler sends a VM's
items to one worker together); nothing is started for items another worker owns.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from sbxcheck.results import CheckResult

if TYPE_CHECKING:
    from sbxcheck.checks.gate import GateTarget
    from sbxcheck.transports.ssh import SshHost, SshPool

GateCheck = Callable[..., CheckResult]


class GatedRun(Protocol):
    """What the fan-out reads of a gate run (``plugin.gateruns.GateRun``): its id and, if gateable, its target."""

    @property
    def run_id(self) -> str: ...

    @property
    def target(self) -> GateTarget | None: ...
REMOTE_MARK = "sbx_remote"


def remote_check(check: GateCheck) -> pytest.MarkDecorator:
    """Mark a gate test with the check function its item runs on the VM (``check(host, target[, model])``)."""
    mark: pytest.MarkDecorator = getattr(pytest.mark, REMOTE_MARK)
    return mark.with_args(check)


@dataclass(frozen=True)
class Planned:
    """What one collected gate item needs from its VM: a connection, and maybe one check."""

    nodeid: str
    run: GatedRun
    check: GateCheck | None  # None: the item needs the connection only (e.g. a run without roster)
    model: str | None

    @property
    def key(self) -> tuple[str, str, str | None] | None:
        if self.check is None:
            return None
        return (self.run.run_id, _check_name(self.check), self.model)


def _check_name(check: GateCheck) -> str:
    return getattr(check, "__qualname__", None) or repr(check)


@dataclass(eq=False)
class _Job:
    planned: Planned
    future: cf.Future[CheckResult] = field(default_factory=cf.Future)
    started: float | None = None
    finished: float | None = None


@dataclass(eq=False)
class _Vm:
    run: GatedRun
    alias: str
    connected: cf.Future[SshHost] = field(default_factory=cf.Future)
    pending: list[_Job] = field(default_factory=list)
    draining: bool = False  # its worker still takes jobs from ``pending``
    connect_s: float | None = None
    host: SshHost | None = None


class GateFanout:
    """Runs the planned gate checks of many VMs concurrently; items fetch their results by key."""

    def __init__(self, pool: SshPool, max_parallel: int, max_sessions: int = 8) -> None:
        self.pool = pool
        self.max_parallel = max(1, max_parallel)
        self._vm_pool = cf.ThreadPoolExecutor(self.max_parallel, thread_name_prefix="sbxcheck-vm")
        self._check_pool = cf.ThreadPoolExecutor(
            self.max_parallel * max(1, max_sessions), thread_name_prefix="sbxcheck-check"
        )
        self._lock = threading.Lock()
        self._vms: dict[str, _Vm] = {}
        self._jobs: dict[tuple[str, str, str | None], _Job] = {}
        self._nodeids: dict[str, tuple[str, str, str | None] | None] = {}
        self._cancelled = False
        self._at_cancel: dict[str, str | None] | None = None  # each item's state at the interrupt

    # ------------------------------------------------------------ starting

    def start(self, plan: Iterable[Planned]) -> int:
        """Start whatever of ``plan`` is not started yet; returns how many checks were added."""
        added = 0
        submit_vms: list[_Vm] = []
        direct: list[_Job] = []
        with self._lock:
            if self._cancelled:
                return 0
            for planned in plan:
                if planned.nodeid in self._nodeids:
                    continue
                key = planned.key
                self._nodeids[planned.nodeid] = key
                run = planned.run
                assert run.target is not None
                vm = self._vms.get(run.run_id)
                if vm is None:
                    vm = self._vms[run.run_id] = _Vm(run, run.target.host, draining=True)
                    submit_vms.append(vm)
                if key is None or key in self._jobs:
                    continue
                job = self._jobs[key] = _Job(planned)
                added += 1
                if vm.draining:
                    vm.pending.append(job)
                else:
                    direct.append(job)
        for vm in submit_vms:
            self._vm_pool.submit(self._drive_vm, vm)
        for job in direct:
            self._submit_job(job)
        return added

    def _drive_vm(self, vm: _Vm) -> None:
        """Connect one VM, then run its pending checks concurrently until none are left."""
        if self._cancelled:
            vm.connected.cancel()
            self._stop_draining(vm)
            return
        t0 = time.monotonic()
        try:
            host = self.pool.host(vm.alias)
        except BaseException as exc:  # every item of this VM errors in setup with this
            vm.connect_s = round(time.monotonic() - t0, 3)
            vm.connected.set_exception(exc)
            self._stop_draining(vm)
            return
        vm.connect_s, vm.host = round(time.monotonic() - t0, 3), host
        vm.connected.set_result(host)
        while True:
            with self._lock:
                batch, vm.pending = vm.pending, []
                if not batch:
                    vm.draining = False
                    return
            # the slowest check (D's live pi call) first, the rest behind it
            futures = [self._submit_job(job) for job in sorted(batch, key=_slow_first)]
            cf.wait(futures)

    def _stop_draining(self, vm: _Vm) -> None:
        with self._lock:
            vm.draining = False
            batch, vm.pending = vm.pending, []
        for job in batch:
            job.future.cancel()

    def _submit_job(self, job: _Job) -> cf.Future[Any]:
        try:
            return self._check_pool.submit(self._run_job, job)
        except RuntimeError:  # shut down (interrupted)
            job.future.cancel()
            done: cf.Future[Any] = cf.Future()
            done.set_result(None)
            return done

    def _run_job(self, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        planned = job.planned
        vm = self._vms[planned.run.run_id]
        try:
            host = vm.connected.result()
            assert planned.check is not None and planned.run.target is not None
            job.started = time.monotonic()
            args = (planned.model,) if planned.model is not None else ()
            result = planned.check(host, planned.run.target, *args)
        except BaseException as exc:
            job.finished = time.monotonic()
            job.future.set_exception(exc)
            return
        job.finished = time.monotonic()
        job.future.set_result(result)

    # ------------------------------------------------------------ waiting (the items)

    def host(self, run: GatedRun) -> SshHost:
        """The VM's connection, waiting for it; a connect failure is raised (the item errors in setup)."""
        vm = self._vms.get(run.run_id)
        if vm is None:
            raise KeyError(f"{run.run_id} was not planned")
        return vm.connected.result()

    def result(self, nodeid: str) -> CheckResult:
        """The planned check's result for ``nodeid``, with its remote time and this item's wait.

        ``duration_s`` is the check's own remote time; the evidence adds ``remote_s`` (the same),
        ``wait_s`` (how long this item waited for it) and ``connect_s`` (the VM's one connect).
        An exception the check raised is raised here, as if the item had called it.
        """
        key = self._nodeids.get(nodeid)
        if key is None:
            raise KeyError(f"{nodeid} has no planned check")
        job = self._jobs[key]
        t0 = time.monotonic()
        result = job.future.result()
        wait_s = round(time.monotonic() - t0, 3)
        assert job.started is not None and job.finished is not None
        remote_s = round(job.finished - job.started, 3)
        vm = self._vms[key[0]]
        evidence = {**result.evidence, "remote_s": remote_s, "wait_s": wait_s, "connect_s": vm.connect_s}
        return result.model_copy(update={"duration_s": remote_s, "evidence": evidence})

    # ------------------------------------------------------------ the end

    def cancel(self) -> None:
        """Interrupted: nothing new starts, queued checks are cancelled, in-flight commands are cut."""
        with self._lock:
            self._cancelled = True
            vms = list(self._vms.values())
            jobs = list(self._jobs.values())
            nodeids = list(self._nodeids)
        running = {id(job) for job in jobs if job.future.running()}
        now = {nodeid: self._state_now(nodeid) for nodeid in nodeids}
        self._at_cancel = {
            n: "cancelled before it started" if st == "never started" else st for n, st in now.items()
        }
        for job in jobs:
            job.future.cancel()  # only those not yet running
        for vm in vms:
            vm.connected.cancel()
            if vm.host is not None and any(id(j) in running for j in jobs if j.planned.run is vm.run):
                with contextlib.suppress(Exception):
                    vm.host.close()  # its running commands fail at once
        self._vm_pool.shutdown(wait=False, cancel_futures=True)
        self._check_pool.shutdown(wait=False, cancel_futures=True)

    def state(self, nodeid: str) -> str | None:
        """``never started``, ``in flight``, ``cancelled …``, ``finished …`` for an item; None if not planned.

        After ``cancel()`` this is the state the item was in at the interrupt.
        """
        if self._at_cancel is not None and nodeid in self._at_cancel:
            return self._at_cancel[nodeid]
        return self._state_now(nodeid)

    def _state_now(self, nodeid: str) -> str | None:
        if nodeid not in self._nodeids:
            return None
        key = self._nodeids[nodeid]
        if key is None:
            return "connection only"
        job = self._jobs[key]
        if job.future.cancelled():
            return "cancelled before it started"
        if job.future.done():
            return "finished on the VM but not judged"
        if job.future.running():
            return "cancelled while in flight"
        return "never started"

    def close(self) -> None:
        self._vm_pool.shutdown(wait=False, cancel_futures=True)
        self._check_pool.shutdown(wait=False, cancel_futures=True)


def _slow_first(job: _Job) -> int:
    name = _check_name(job.planned.check) if job.planned.check is not None else ""
    return 0 if "cost" in name else 1


def assigned_items(session: pytest.Session, current: pytest.Item) -> list[pytest.Item]:
    """The items this process will run: all of them, or under xdist those queued on this worker.

    xdist keeps a worker's queue in its WorkerInteractor (no public API); when that cannot be read,
    only the current item counts, so nothing another worker owns is ever started here.
    """
    if not hasattr(session.config, "workerinput"):
        return list(session.items)
    for plugin in session.config.pluginmanager.get_plugins():
        if type(plugin).__name__ != "WorkerInteractor":
            continue
        try:
            with plugin.torun.lock() as queue:
                indices = [i for i in queue if isinstance(i, int)]
            nxt = plugin.nextitem_index
            if isinstance(nxt, int):
                indices.append(nxt)
            return [current, *(session.items[i] for i in indices)]
        except Exception:  # xdist internals changed: fall back to the current item alone
            break
    return [current]
