"""Mission lifecycle for the canary suite: dispatch every route at once, follow each, cancel at the end.

``MissionDispatcher.start()`` dispatches all route missions of the session concurrently (bounded by
``max_concurrency``); each pytest item then waits for its own route's ``RouteRun``. Alternative-provider
backends (opencode by default) are probed with two routes first: when both crash at the same init
boundary with the same signature, that is one infrastructure incident and nothing more is dispatched to
that backend. The dispatcher composes what it does not decide itself: the ledger intents of its creates
(``lifecycle/intents.py``), the spend cap (``lifecycle/spendcap.py``), the follow loop
(``lifecycle/following.py``) and the ownership and cancellation of what it made
(``lifecycle/closing.py``): ``close()`` cancels every mission this session created that is not
terminal, on success, failure and interrupt alike.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sbxcheck.clients.channels import MissionChannel
from sbxcheck.clients.missionruns import (
    RETRY_TITLE_SUFFIX,
    TERMINAL,
    CanaryRun,
    RouteRun,
    adapter_crash_cause,
    crash_signature,
    silent_end,
)
from sbxcheck.clients.sandboxed import MissionRejected, SlotsFull
from sbxcheck.clients.sandboxed_models import MissionSpec
from sbxcheck.clients.stream import ControlStream
from sbxcheck.errors import CommandTimeout, RateLimited, SbxError
from sbxcheck.inventory import RouteSpec, SandboxedSection
from sbxcheck.lifecycle.closing import OwnedMissions
from sbxcheck.lifecycle.following import FirstMessageDropped, MissionFollower, WaitingState, wait_telling
from sbxcheck.lifecycle.intents import MissionIntents
from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.lifecycle.listing import MissionList
from sbxcheck.lifecycle.listwatch import ListWatch
from sbxcheck.lifecycle.prompts import DIRECT_OUTPUT_PROMPT, canary_prompt, contract_fields, effort_fallbacks
from sbxcheck.lifecycle.slots import SlotQueue, started
from sbxcheck.lifecycle.spendcap import SpendCap
from sbxcheck.redact import clip
from sbxcheck.results import CheckResult, Classification, incident_id
from sbxcheck.spend import MissionCost
from sbxcheck.spend import mission_cost as cost_of_events
from sbxcheck.transports.http import pushback_until

MISSION_TAG = "sbxcheck"  # every mission a session creates carries it


class PromptRefused(SbxError):
    """The control plane's create dropped the prompt and its first message was refused: the mission
    would wait pending, so the route fails at once (the mission is cancelled at close)."""

    classification = Classification.CONFIG_DEFECT


class MissionDispatcher:
    """Owns this session's missions: concurrent dispatch, following, the spend cap, and cancellation at close."""

    def __init__(
        self,
        section: SandboxedSection,
        channel_for: Callable[[str], MissionChannel],
        session_tag: str,
        *,
        workspace_ids: Callable[[], dict[str, str]],
        exec_sha256: Callable[[str, str], str],
        ledger: Ledger | None = None,
        list_missions: MissionList | None = None,
        preflight: Callable[[RouteSpec], CheckResult | None] | None = None,
        max_spend_usd: float | None = None,
        single_create: bool = False,
        stream: ControlStream | None = None,
    ) -> None:
        self.section = section
        self.channel_for = channel_for
        self.session_tag = session_tag
        self._workspace_ids = workspace_ids
        self._exec_sha256 = exec_sha256
        self.routes: dict[str, RouteRun] = {}
        self.canaries: dict[str, CanaryRun] = {}
        self.blocked_backends: dict[str, str] = {}
        self.ledger = ledger
        # told what is waited on while an item waits (the progress line); None: wait silently
        self.on_wait: Callable[[WaitingState | None, float], None] | None = None
        self._preflight = preflight  # a route that would fail readiness is not dispatched (no money spent)
        self.single_create = single_create  # --sbx-probe: one create per route, no keyed retry
        self._stop = threading.Event()
        self.intents = MissionIntents(ledger)
        self.spend = SpendCap(max_spend_usd)
        self.owned = OwnedMissions(channel_for, self.intents, self.spend, list_missions)
        # without a live stream, one list read a tick wakes every follower (not two reads per mission)
        watch = (
            ListWatch(lambda rows: list_missions.page(rows, 0), section.poll_interval_s)
            if list_missions is not None
            else None
        )
        self.follower = MissionFollower(section, stream, self._stop, watch)
        # an older release with every slot taken: missions wait their turn while the session's queue moves
        self.slots = SlotQueue(section.execution_deadline_s + section.request_timeout_s, self._stop)
        self._lock = threading.Lock()
        self._pool: cf.ThreadPoolExecutor | None = None
        self._threads: list[threading.Thread] = []
        self._started = False
        self._ws_locks: dict[str, threading.Lock] = {}
        self._backend_settled: dict[str, threading.Event] = {}
        self._ws_map: dict[str, str] | None = None
        self.started_at = 0.0

    # ------------------------------------------------------------------ what the collaborators keep

    @property
    def created(self) -> dict[str, str]:
        """Mission id -> via, of every mission this session's creates made."""
        return self.owned.created

    @property
    def foreign(self) -> dict[str, str]:
        """Mission id -> via, of missions a create was answered with but did not make (never touched)."""
        return self.owned.foreign

    @property
    def costs(self) -> dict[str, float | None]:
        """Mission id -> USD (None: not reported)."""
        return self.spend.costs

    @property
    def cost_unreadable(self) -> dict[str, str]:
        """Mission id -> why its reported cost cannot be used."""
        return self.spend.cost_unreadable

    @property
    def max_spend_usd(self) -> float | None:
        return self.spend.cap_usd

    @property
    def spent_usd(self) -> float:
        """What this session's missions reported costing so far (readable costs only)."""
        return self.spend.spent_usd

    def book_cost(self, mission_id: str, cost: MissionCost) -> None:
        """Record what ``mission_id`` cost; an unreadable cost is kept with its reason, never summed."""
        self.spend.book(mission_id, cost)

    def mission_cost(self, mission_id: str, via: str) -> MissionCost:
        """The mission's cost from its stored events (what its follower read, then what was stored
        since; bounded). Never the live stream's sum: an event the stream carried may not be what the
        mission stored."""
        return cost_of_events(self.owned.stored_events(mission_id, self.channel_for(via))[0])

    # ------------------------------------------------------------------ public

    def start(self) -> None:
        """Dispatch every route and canary of the inventory (once); returns at once."""
        with self._lock:
            if self._started:
                return
            self._started = True
        self.follower.start()  # subscribe before the first create: no event is missed
        self.started_at = time.monotonic()
        self._pool = cf.ThreadPoolExecutor(
            max_workers=self.section.max_concurrency, thread_name_prefix="sbx-mission"
        )
        by_backend: dict[str, list[RouteRun]] = {}
        for route in self.section.routes:
            run = self._new_run(route, route.prompt, f"route {route.label}")
            run.check_idempotency = not self.single_create
            self.routes[route.label] = run
            run.not_dispatched = self._doomed(route)
            if run.not_dispatched is not None:
                run.done.set()
                continue
            by_backend.setdefault(route.backend, []).append(run)
        for backend in {r.backend for r in self.section.routes} | {c.backend for c in self.section.canaries}:
            self._backend_settled[backend] = threading.Event()
        if self.spend.cap_usd is not None:  # capped runs go one by one, cost known before the next
            for settled in self._backend_settled.values():
                settled.set()
            self.canaries = {spec.label: CanaryRun(spec) for spec in self.section.canaries}
            self._spawn(self._drive_capped, [r for runs in by_backend.values() for r in runs])
            return
        for backend, runs in by_backend.items():
            alternative = backend in self.section.alternative_backends
            first, rest = (runs[:2], runs[2:]) if alternative and len(runs) > 2 else (runs, [])
            for run in first:
                self._pool.submit(self._drive_route, run)
            self._spawn(self._settle_backend, backend, first, rest)
        for backend, settled in self._backend_settled.items():
            if backend not in by_backend:
                settled.set()
        for spec in self.section.canaries:
            canary = CanaryRun(spec)
            self.canaries[spec.label] = canary
            self._spawn(self._drive_canary, canary)

    def _doomed(self, route: RouteSpec) -> CheckResult | None:
        """The readiness failure that would doom ``route``, else None; a failing look dooms nothing."""
        if self._preflight is None:
            return None
        try:
            return self._preflight(route)
        except SbxError:
            return None

    def _retry_silent(self, run: RouteRun) -> None:
        """The no-output rule: a mission that ended without any assistant content on a no-output error is retried
        once, on the same route (never another model), with a bounded direct-output prompt."""
        if run.status not in TERMINAL or not silent_end(run.events):
            return
        retry = self._new_run(run.route, DIRECT_OUTPUT_PROMPT, f"route {run.route.label} direct-output retry")
        retry.check_idempotency = False
        run.output_retry = retry
        self._dispatch(retry)
        if retry.created is not None:
            try:
                self._follow(retry, to_end=True)
            except CommandTimeout as exc:
                retry.error = exc

    def _settle_cost(self, run: RouteRun) -> None:
        """Capped runs: wait (bounded by the run's deadline) for the mission to end, then book its cost."""
        mission_id = run.mission_id
        if mission_id is None:
            return
        self.follower.wait_for_end(mission_id, run.deadline_at, self.channel_for(run.route.via))
        self.spend.book(mission_id, self.mission_cost(mission_id, run.route.via))

    def _drive_capped(self, runs: list[RouteRun]) -> None:
        """Under ``--sbx-max-spend``: each route, then each canary, only while the cap is not reached."""
        for run in runs:
            run.not_dispatched = self.spend.refusal(run.route.label)
            if run.not_dispatched is not None:
                run.done.set()
                continue
            self._drive_route(run)
            self._settle_cost(run)
        for canary in self.canaries.values():
            canary.not_dispatched = self.spend.refusal(f"canary-{canary.spec.label}")
            if canary.not_dispatched is not None:
                canary.done.set()
                continue
            self._drive_canary(canary)
            if canary.run is not None and canary.run.mission_id is not None:
                self.spend.book(
                    canary.run.mission_id, self.mission_cost(canary.run.mission_id, canary.run.route.via)
                )

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        """Coordination work (probe gating, canaries) runs beside the pool, never holding a dispatch slot."""
        thread = threading.Thread(target=target, args=args, daemon=True, name="sbx-coordinator")
        self._threads.append(thread)
        thread.start()

    def route(self, label: str, timeout_s: float) -> RouteRun:
        """Wait (bounded) for a route's run to settle."""
        self.start()
        run = self.routes[label]
        self._wait(run.done, timeout_s, lambda: run)
        return run

    def canary(self, label: str, timeout_s: float) -> CanaryRun:
        self.start()
        canary = self.canaries[label]
        self._wait(canary.done, timeout_s, lambda: canary.run)
        return canary

    def _wait(self, done: threading.Event, timeout_s: float, run_of: Callable[[], RouteRun | None]) -> None:
        """Wait ``timeout_s`` for ``done``, and longer for a run that queued for a slot: its own bound
        (while the session's queue moves, then its whole deadline from when it started)."""
        end = time.monotonic() + timeout_s
        while True:
            wait_telling(done, max(0.0, end - time.monotonic()), self.on_wait, self.waiting)
            owed = None if done.is_set() else self._queued_until(run_of())
            if owed is None or owed <= time.monotonic():
                return
            end = owed

    def _queued_until(self, run: RouteRun | None) -> float | None:
        """When a run that queued for a slot settles at the latest (None: it did not queue)."""
        margin = self.section.request_timeout_s + 30.0
        if run is None:
            return None
        if run.awaiting_slot:
            left = max(0.0, self.slots.stall_s - self.slots.stalled_for())
            return time.monotonic() + left + run.deadline_s + margin
        return run.deadline_at + margin if run.slot_waited_s is not None else None

    def waiting(self) -> WaitingState:
        """A read-only snapshot of the unsettled routes and canaries (no request is made)."""
        return self.follower.waiting(self.routes.values(), self.canaries.values())

    def close(self) -> dict[str, str]:
        """Cancel every non-terminal mission this session created; report what happened to each."""
        self._stop.set()
        self.slots.wake()  # a mission waiting for a slot looks up now
        self.follower.close()  # wakes every follower; the stream's signals stay readable
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for thread in self._threads:
            thread.join(timeout=self.section.request_timeout_s * 2)
        with pushback_until(time.monotonic() + 60.0):
            return self.owned.cancel_all()

    # ------------------------------------------------------------------ routes

    def _new_run(self, route: RouteSpec, prompt: str, title: str) -> RouteRun:
        key = hashlib.sha256(f"{self.session_tag}\x00{title}".encode()).hexdigest()[:32]
        return RouteRun(
            route=route.model_copy(update={"prompt": prompt}),
            title=f"sbxcheck {self.session_tag[:8]} {title}",
            idempotency_key=f"sbxcheck-{key}",
            requested={
                "agent": route.agent,
                "backend": route.backend,
                "model_override": route.model_override,
                "model_effort": route.model_effort,
            },
            deadline_s=self.section.execution_deadline_s,
        )

    def _workspace_id(self, name: str | None) -> str | None:
        if name is None:
            return None
        if self._ws_map is None:
            self._ws_map = self._workspace_ids()
        return self._ws_map.get(name, name)

    def _drive_route(self, run: RouteRun) -> None:
        try:
            with pushback_until(time.monotonic() + run.deadline_s):  # pushback is absorbed within it
                self._dispatch(run)
                if run.created is not None:
                    try:
                        self._follow(run)
                    except FirstMessageDropped as dropped:  # no slot was free: wait for one, send it again
                        self._start_in_a_slot(run, self.channel_for(run.route.via), dropped.text)
                        self._follow(run)
                    self._retry_silent(run)  # the no-output rule: one bounded direct-output retry
        except SbxError as exc:
            run.error = self._of_control_plane(exc)
        except Exception as exc:  # a bug must not hang the items waiting on this run
            run.error = SbxError(f"internal error following {run.route.label}: {type(exc).__name__}: {exc}")
        finally:
            run.settled_s = round(time.monotonic() - self.started_at, 2)
            if started(run):  # it may have freed a slot: whatever waits for one has waited for something
                self.slots.moved()
            run.done.set()

    def _dispatch(self, run: RouteRun) -> None:
        route = run.route
        channel = self.channel_for(route.via)
        workspace_id = self._workspace_id(route.workspace)
        entry = self.intents.intent(run)
        self.follower.dispatched(run)
        for effort in effort_fallbacks(route.model_effort):
            spec = MissionSpec(
                title=run.title,
                prompt=route.prompt,
                workspace_id=workspace_id,
                agent=route.agent,
                backend=route.backend,
                model_override=route.model_override,
                model_effort=effort,
                idempotency_key=run.idempotency_key,
                tags=[MISSION_TAG],
                # origin (which system made it) is stored by every create that takes a prompt: its absence
                # from the record shows an older create body (clients/channels.py, create_took)
                **{"origin": MISSION_TAG, **contract_fields(route)},  # a contract: project/track or origin_session_id
            )
            try:
                created = channel.create(spec)
            except SbxError as exc:
                if not isinstance(exc, MissionRejected):
                    self.intents.release_if_made_nothing(entry, exc)
                    raise
                effort_error = "model_effort" in exc.reason
                run.effort_attempts.append(
                    {"effort": effort, "accepted": False, "reason": clip(exc.reason, 300)}
                )
                if effort_error and effort != effort_fallbacks(route.model_effort)[-1]:
                    continue
                run.rejection = exc
                self.intents.release(entry, f"never created: {clip(exc.reason, 120)}")
                return
            run.effort_attempts.append({"effort": effort, "accepted": True})
            if self.owned.joined_foreign(created, run, entry, channel):
                raise self.owned.foreign_error(created, run)
            run.created = created
            self.owned.claim(str(created.mission["id"]), route.via, run)
            self.intents.created(entry, str(created.mission["id"]))
            if created.awaiting_slot is not None:
                self._start_in_a_slot(run, channel, created.awaiting_slot)
            if created.prompt_refused is not None:  # ours, cancelled at close; never followed into a timeout
                raise PromptRefused(created.prompt_refused, evidence={"mission_id": created.mission["id"]})
            if created.idempotency_supported and run.check_idempotency:
                self._probe_idempotency(run, channel, spec)
            return

    def _start_in_a_slot(self, run: RouteRun, channel: MissionChannel, why: str) -> None:
        """Every slot was taken when the mission was created (``why``: the plane's words): wait for one
        (:class:`SlotQueue`), then its deadline counts from its start. Its prompt is only ever sent to it,
        never queued on another."""
        assert run.created is not None
        mission_id = str(run.created.mission["id"])
        run.slot_refusal = why
        refused = SlotsFull("POST /api/control/missions/:id/parallel", 409, why)
        run.awaiting_slot = True
        try:
            run.slot_waited_s = self.slots.wait_for_slot(
                mission_id, lambda: channel.start(mission_id, run.route.prompt), refused
            )
        finally:
            run.awaiting_slot = False
        self.follower.dispatched(run)

    def _probe_idempotency(self, run: RouteRun, channel: MissionChannel, spec: MissionSpec) -> None:
        """A roadmap dispatch's retry with the same key must return the same mission, never a second one.

        The server also coalesces an identical title from the same origin while the first mission is
        pending or active (specs/sandboxed-sh.md, 3.4 step 6), so an identical retry would pass even when
        the key is ignored.
        The retry therefore changes the title and the prompt: only ``idempotency_key`` can match it.
        """
        retry_spec = replace(
            spec,
            title=f"{spec.title}{RETRY_TITLE_SUFFIX}",
            prompt=f"{spec.prompt}\n\n(sbxcheck idempotency retry: same key, different title)",
        )
        entry = self.intents.intent(run)  # the retry may create a mission: the ledger knows before the request
        try:
            retry = channel.create(retry_spec)
        except SbxError as exc:
            if not isinstance(exc, MissionRejected):
                self.intents.release_if_made_nothing(entry, exc)
                raise
            # the key lookup comes before every refusal but prompt validation (spec 3.4 step 5): a refused
            # retry means the key did not match
            run.retry_rejection = exc
            self.intents.release(entry, f"retry refused: {exc.reason[:120]}")
            return
        if self.owned.joined_foreign(retry, run, entry, channel):
            run.retry_joined = str(retry.mission.get("id"))  # reported; never followed or cancelled
            return
        run.retry = retry
        retry_id = str(retry.mission["id"])
        if retry_id in self.owned.created:
            self.intents.release(entry, f"retry coalesced with {retry_id}")
        else:
            self.owned.claim(retry_id, run.route.via)
            self.intents.created(entry, retry_id)
            try:  # a held attempt that failed does not coalesce (spec 3.4 step 5): not an ignored key
                run.first_status_at_retry = str(channel.get(str(run.mission_id)).get("status"))
            except SbxError:
                run.first_status_at_retry = None

    def _of_control_plane(self, exc: SbxError) -> SbxError:
        """A refused connect or token met on the way to the control plane (over REST or through the MCP
        server) names the control plane as its service: one cause, one incident, across channels."""
        import sys

        from sbxcheck.errors import AuthFailed, HostUnreachable
        from sbxcheck.transports.http import service_of

        mcp = sys.modules.get("sbxcheck.clients.mcp_stdio")  # not loaded: no MCP server can have failed
        mcp_server_down = mcp is not None and isinstance(exc, mcp.McpServerUnavailable)
        if isinstance(exc, (AuthFailed, HostUnreachable)) and not mcp_server_down:
            exc.evidence.setdefault("service", service_of(self.section.url))
        return exc

    def _follow(self, run: RouteRun, *, to_end: bool = False) -> None:
        """Follow ``run``'s mission until it settles or its deadline passes (:meth:`MissionFollower.follow`)."""
        self.follower.follow(run, self.channel_for(run.route.via), to_end=to_end)

    def _settle_backend(self, backend: str, first: list[RouteRun], rest: list[RouteRun]) -> None:
        """Wait for the probe routes; on a shared crash signature block the backend, else dispatch the rest."""
        budget = self.section.execution_deadline_s + 60
        for run in first:
            run.done.wait(budget)
        if backend in self.section.alternative_backends:
            signatures = [crash_signature(r.events) for r in first if r.status in TERMINAL]
            shared = [s for s in signatures if s]
            if len(shared) >= 2 and len(set(shared)) == 1:
                self.blocked_backends[backend] = shared[0]
        incident = self.incident_for(backend)
        for run in rest:
            if incident is not None:
                run.skipped_incident = incident
                run.done.set()
            else:
                self._drive_route(run)
        self._backend_settled[backend].set()

    def shared_crash(self, backend: str, timeout_s: float) -> str | None:
        """The crash signature ``backend``'s probe routes shared (it blocks the backend), else None; on
        a backend whose crashes are compared, known only once they have all settled (waited, bounded), so
        a route's verdict never depends on whether its sibling happened to settle first."""
        self.start()
        settled = self._backend_settled.get(backend)
        if settled is not None and backend in self.section.alternative_backends:
            wait_telling(settled, timeout_s, self.on_wait, self.waiting)
        return self.blocked_backends.get(backend)

    def incident_for(self, backend: str) -> str | None:
        """The incident id that blocks ``backend``, computed as the report computes it (same cause)."""
        signature = self.blocked_backends.get(backend)
        if signature is None:
            return None
        return incident_id(Classification.INFRASTRUCTURE, adapter_crash_cause(backend, signature))

    # ------------------------------------------------------------------ canaries

    def _drive_canary(self, canary: CanaryRun) -> None:
        spec = canary.spec
        try:
            self._backend_settled[spec.backend].wait(self.section.execution_deadline_s + 120)
            incident = self.incident_for(spec.backend)
            if incident is not None:
                canary.skipped_incident = incident
                return
            canary.not_dispatched = self._doomed(
                RouteSpec(
                    name=f"canary-{spec.label}",
                    backend=spec.backend,
                    agent=spec.agent,
                    model_override=spec.model_override,
                    workspace=spec.workspace,
                )
            )
            if canary.not_dispatched is not None:
                return
            canary.workspace_id = self._workspace_id(spec.workspace)
            lock = self._ws_locks.setdefault(spec.workspace, threading.Lock())
            with lock:  # one live mission per workspace: the control plane refuses a second (409)
                route = RouteSpec(
                    name=f"canary-{spec.label}",
                    backend=spec.backend,
                    agent=spec.agent,
                    model_override=spec.model_override,
                    workspace=spec.workspace,
                )
                run = self._new_run(route, canary_prompt(spec), f"canary {spec.label}")
                run.deadline_s = self.section.canary_deadline_s
                run.check_idempotency = False  # a canary's retry would only meet its own workspace lease
                canary.run = run
                with pushback_until(time.monotonic() + run.deadline_s):
                    self._dispatch(run)
                    if run.created is not None:
                        self._follow(run, to_end=True)
            if canary.workspace_id:
                try:
                    with pushback_until(max(run.deadline_at, time.monotonic() + self.section.request_timeout_s)):
                        canary.exec_sha256 = self._exec_sha256(
                            canary.workspace_id, f"{spec.checkout}/{spec.mcp_file}"
                        )
                except RateLimited:
                    raise  # pushback until the deadline: an error of the canary, not a workspace defect
                except SbxError as exc:
                    canary.exec_error = exc.message
        except SbxError as exc:
            canary.error = self._of_control_plane(exc)
        except Exception as exc:
            canary.error = SbxError(f"internal error in canary {spec.label}: {type(exc).__name__}: {exc}")
        finally:
            if canary.run is not None and started(canary.run):
                self.slots.moved()
            if canary.run is not None:
                canary.run.done.set()
            canary.done.set()

