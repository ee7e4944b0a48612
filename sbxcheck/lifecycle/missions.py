"""Mission lifecycle for the canary suite: dispatch every route at once, follow each, cancel at the end.

``MissionDispatcher.start()`` dispatches all route missions of the session concurrently (bounded by
``max_concurrency``); each pytest item then waits for its own route's ``RouteRun``. The session's one
live-stream subscription (``clients.stream``) says when a mission's verdict can be taken; the stored
record and events (read with the ``since_seq`` cursor) are the evidence. Without the stream, missions
are polled with backoff. Alternative-provider backends (opencode by default) are probed
with two routes first: when both crash at the same init boundary with the same signature, that is one
infrastructure incident and nothing more is dispatched to that backend. ``close()`` cancels every
mission this session created that is not terminal — on success, failure and interrupt alike; a
mission a create was answered with but did not make is someone else's and is never touched
(``lifecycle/closing.py``).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sbxcheck.clients.channels import MissionChannel
from sbxcheck.clients.missionruns import (
    TERMINAL,
    CanaryRun,
    RouteRun,
    adapter_crash_cause,
    crash_signature,
    new_events,
    settles,
    silent_end,
    stream_says_settle,
)
from sbxcheck.clients.sandboxed import MissionRejected
from sbxcheck.clients.sandboxed_models import MissionSpec
from sbxcheck.clients.stream import ControlStream
from sbxcheck.errors import CommandTimeout, RateLimited, SbxError
from sbxcheck.inventory import RouteSpec, SandboxedSection
from sbxcheck.lifecycle.closing import EVENT_PAGE, ClosingMixin
from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.lifecycle.listing import Page
from sbxcheck.lifecycle.prompts import DIRECT_OUTPUT_PROMPT, canary_prompt, contract_fields, effort_fallbacks
from sbxcheck.redact import clip
from sbxcheck.results import CheckResult, Classification, incident_id
from sbxcheck.spend import MissionCost
from sbxcheck.spend import mission_cost as cost_of_events
from sbxcheck.transports.http import pushback_until

EVIDENCE_EVENTS = frozenset({"tool_call", "tool_result", "assistant_message"})
MAX_POLL_S = 10.0  # polling backoff ceiling (without the live stream)
RECHECK_S = 1.0  # the stream said "settled" but the stored rows did not yet: read again after this
STREAM_SILENCE_S = 15.0  # the stream showed nothing of a mission this long after dispatch: read (doubling)
MAX_EVENT_PAGES = 50
MISSION_TAG = "sbxcheck"  # every mission a session creates carries it


class PromptRefused(SbxError):
    """The control plane's create dropped the prompt and its first message was refused: the mission
    would wait pending, so the route fails at once (the mission is cancelled at close)."""

    classification = Classification.CONFIG_DEFECT


@dataclass(frozen=True)
class WaitingState:
    """What a session is still waiting for (a read-only snapshot, e.g. for a progress line)."""

    open: int  # routes and canaries not settled yet
    by_status: dict[str, int]  # their missions' last known status ("not dispatched" before a create)
    elapsed_s: float  # the longest wait since dispatch among them
    deadline_s: float  # that run's deadline, counted from its dispatch
    followed_by: str  # "stream" or "polling"


class MissionDispatcher(ClosingMixin):
    """Owns this session's missions: concurrent dispatch, cursor polling, and cancellation at close."""

    def __init__(
        self,
        section: SandboxedSection,
        channel_for: Callable[[str], MissionChannel],
        session_tag: str,
        *,
        workspace_ids: Callable[[], dict[str, str]],
        exec_sha256: Callable[[str, str], str],
        ledger: Ledger | None = None,
        list_missions: Page | None = None,
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
        self.created: dict[str, str] = {}  # mission id -> via
        self.foreign: dict[str, str] = {}  # mission id -> via: another's, answered to a create (never ours)
        self._runs: dict[str, RouteRun] = {}  # mission id -> the run that created (and followed) it
        self.ledger = ledger
        self._entries: dict[str, str] = {}  # mission id -> ledger entry
        # told what is waited on while an item waits (the progress line); None: wait silently
        self.on_wait: Callable[[WaitingState | None, float], None] | None = None
        self._unanswered: dict[str, RouteRun] = {}  # ledger entry -> run whose create never answered
        self._list_missions = list_missions
        self._preflight = preflight  # a route that would fail readiness is not dispatched (no money spent)
        self.max_spend_usd = max_spend_usd  # with a cap, one mission at a time: each cost known before the next
        self.single_create = single_create  # --sbx-probe: one create per route, no keyed retry
        self.costs: dict[str, float | None] = {}  # mission id -> USD (None: not reported)
        self.cost_unreadable: dict[str, str] = {}  # mission id -> why its reported cost cannot be used
        self._stream = stream
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool: cf.ThreadPoolExecutor | None = None
        self._threads: list[threading.Thread] = []
        self._started = False
        self._ws_locks: dict[str, threading.Lock] = {}
        self._backend_settled: dict[str, threading.Event] = {}
        self._ws_map: dict[str, str] | None = None
        self.started_at = 0.0

    # ------------------------------------------------------------------ public

    def start(self) -> None:
        """Dispatch every route and canary of the inventory (once); returns at once."""
        with self._lock:
            if self._started:
                return
            self._started = True
        if self._stream is not None:  # subscribe before the first create: no event is missed
            self._stream.start(wait_s=self.section.request_timeout_s)
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
        if self.max_spend_usd is not None:  # capped runs go one by one, cost known before the next
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

    # ------------------------------------------------------------------ no-output rule

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

    # ------------------------------------------------------------------ spend

    @property
    def spent_usd(self) -> float:
        """What this session's missions reported costing so far (readable costs only)."""
        return round(sum(c for c in self.costs.values() if c is not None), 6)

    def _cap_result(self, label: str) -> CheckResult | None:
        """The not-run result once ``--sbx-max-spend`` is reached, else None. A mission whose cost
        could not be read counts as reaching the cap: what it spent is unknown, and guessing low
        would let the run pass the cap silently."""
        cap = self.max_spend_usd
        if cap is None:
            return None
        evidence: dict[str, Any] = {
            "cap_usd": cap,
            "spent_usd": self.spent_usd,
            "missions_before": len(self.costs),
        }
        if self.cost_unreadable:
            mission_id, why = next(iter(self.cost_unreadable.items()))
            evidence["cost_unreadable"] = dict(self.cost_unreadable)
            return CheckResult.errored(
                "spend_cap",
                label,
                f"not run: --sbx-max-spend ${cap:.4f} taken as reached: the cost of mission {mission_id} "
                f"could not be read ({why}), so what was spent is unknown",
                Classification.SPEND_CAP,
                evidence,
                recommendation="read the control plane's cost for that mission by hand before running more "
                "under a cap; nothing else was dispatched once a cost could not be read",
            )
        if self.spent_usd < cap:
            return None
        return CheckResult.errored(
            "spend_cap",
            label,
            f"not run: --sbx-max-spend ${cap:.4f} reached (${self.spent_usd:.4f} spent by "
            f"{len(self.costs)} mission(s) before it)",
            Classification.SPEND_CAP,
            evidence,
            recommendation="raise --sbx-max-spend deliberately or select fewer routes; nothing else was "
            "dispatched once the cap was reached",
        )

    def mission_cost(self, mission_id: str, via: str) -> MissionCost:
        """The mission's cost from its stored events (what its follower read, then what was stored
        since; bounded). Never the live stream's sum: an event the stream carried may not be what the
        mission stored."""
        return cost_of_events(self._stored_events(mission_id, self.channel_for(via))[0])

    def _settle_cost(self, run: RouteRun) -> None:
        """Capped runs: wait (bounded by the run's deadline) for the mission to end, then book its cost."""
        mission_id = run.mission_id
        if mission_id is None:
            return
        channel = self.channel_for(run.route.via)
        while not self._stop.is_set() and time.monotonic() < run.deadline_at:
            try:
                if str(channel.get(mission_id).get("status")) in TERMINAL:
                    break
            except SbxError:
                break
            time.sleep(self.section.poll_interval_s)
        self.book_cost(mission_id, self.mission_cost(mission_id, run.route.via))

    def _drive_capped(self, runs: list[RouteRun]) -> None:
        """Under ``--sbx-max-spend``: each route, then each canary, only while the cap is not reached."""
        for run in runs:
            run.not_dispatched = self._cap_result(run.route.label)
            if run.not_dispatched is not None:
                run.done.set()
                continue
            self._drive_route(run)
            self._settle_cost(run)
        for canary in self.canaries.values():
            canary.not_dispatched = self._cap_result(f"canary-{canary.spec.label}")
            if canary.not_dispatched is not None:
                canary.done.set()
                continue
            self._drive_canary(canary)
            if canary.run is not None and canary.run.mission_id is not None:
                self.book_cost(
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
        self._wait(run.done, timeout_s)
        return run

    def canary(self, label: str, timeout_s: float) -> CanaryRun:
        self.start()
        canary = self.canaries[label]
        self._wait(canary.done, timeout_s)
        return canary

    def _wait(self, done: threading.Event, timeout_s: float) -> None:
        """Wait (bounded) for ``done``, telling :attr:`on_wait` what is waited on about once a second
        (and ``None`` when the wait is over)."""
        if self.on_wait is None:
            done.wait(timeout_s)
            return
        start = time.monotonic()
        end = start + timeout_s
        told = False
        while not done.wait(max(0.0, min(1.0, end - time.monotonic()))):
            if time.monotonic() >= end:
                break
            waiting = self.waiting()
            if waiting.open:
                self.on_wait(waiting, time.monotonic() - start)
                told = True
        if told:
            self.on_wait(None, time.monotonic() - start)  # the wait is over: the line goes

    def waiting(self) -> WaitingState:
        """A read-only snapshot of the unsettled routes and canaries (no request is made)."""
        # copies: start() may still be filling them
        routes, canaries = list(self.routes.values()), list(self.canaries.values())
        runs = [r for r in routes if not r.done.is_set()]
        runs += [c.run for c in canaries if c.run is not None and not c.done.is_set()]
        waiting_canaries = sum(1 for c in canaries if c.run is None and not c.done.is_set())
        by_status: dict[str, int] = {}
        for run in runs:
            seen = self._stream.signal(run.mission_id) if self._stream and run.mission_id else None
            status = (seen.status if seen is not None else None) or run.status or "not dispatched"
            by_status[status] = by_status.get(status, 0) + 1
        if waiting_canaries:
            by_status["not dispatched"] = by_status.get("not dispatched", 0) + waiting_canaries
        longest = max(runs, key=lambda r: r.elapsed_s(), default=None)
        live = self._stream is not None and self._stream.live
        return WaitingState(
            open=len(runs) + waiting_canaries,
            by_status=by_status,
            elapsed_s=round(longest.elapsed_s(), 1) if longest else 0.0,
            deadline_s=longest.deadline_s if longest else 0.0,
            followed_by="stream" if live else "polling",
        )

    def close(self) -> dict[str, str]:
        """Cancel every non-terminal mission this session created; report what happened to each."""
        self._stop.set()
        if self._stream is not None:  # wakes every follower; its signals stay readable
            self._stream.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for thread in self._threads:
            thread.join(timeout=self.section.request_timeout_s * 2)
        with pushback_until(time.monotonic() + 60.0):
            return self._cancel_created()

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
                    self._follow(run)
                    self._retry_silent(run)  # the no-output rule: one bounded direct-output retry
        except SbxError as exc:
            run.error = self._of_control_plane(exc)
        except Exception as exc:  # a bug must not hang the items waiting on this run
            run.error = SbxError(f"internal error following {run.route.label}: {type(exc).__name__}: {exc}")
        finally:
            run.settled_s = round(time.monotonic() - self.started_at, 2)
            run.done.set()

    def _dispatch(self, run: RouteRun) -> None:
        route = run.route
        channel = self.channel_for(route.via)
        workspace_id = self._workspace_id(route.workspace)
        entry = self._intent(run)
        run.dispatched_at = time.monotonic()
        if self._stream is not None and self._stream.live:
            run.stream_generation = self._stream.generation
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
                tags=[MISSION_TAG],  # stored verbatim by a current create: its absence shows an older one
                **contract_fields(route),  # a dispatch contract: project/track/criteria or origin_session_id
            )
            try:
                created = channel.create(spec)
            except SbxError as exc:
                if not isinstance(exc, MissionRejected):
                    self._release_if_never_sent(entry, exc)
                    raise
                effort_error = "model_effort" in exc.reason
                run.effort_attempts.append(
                    {"effort": effort, "accepted": False, "reason": clip(exc.reason, 300)}
                )
                if effort_error and effort != effort_fallbacks(route.model_effort)[-1]:
                    continue
                run.rejection = exc
                self._release(entry, f"never created: {clip(exc.reason, 120)}")
                return
            run.effort_attempts.append({"effort": effort, "accepted": True})
            if self._joined_foreign(created, run, entry):
                raise self._foreign_error(created, run)
            run.created = created
            self.created[str(created.mission["id"])] = route.via
            self._runs[str(created.mission["id"])] = run
            self._created(entry, str(created.mission["id"]))
            if created.prompt_refused is not None:  # ours, cancelled at close; never followed into a timeout
                raise PromptRefused(created.prompt_refused, evidence={"mission_id": created.mission["id"]})
            if created.idempotency_supported and run.check_idempotency:
                self._probe_idempotency(run, channel, spec)
            return

    def _probe_idempotency(self, run: RouteRun, channel: MissionChannel, spec: MissionSpec) -> None:
        """A roadmap dispatch's retry with the same key must return the same mission, never a second one.

        The server also coalesces an identical title from the same origin while the first mission is
        pending or active (specs/sandboxed-sh.md, 3.4 step 6), so an identical retry would pass even when
        the key is ignored.
        The retry therefore changes the title and the prompt: only ``idempotency_key`` can match it.
        """
        retry_spec = replace(
            spec,
            title=f"{spec.title} (idempotency retry)",
            prompt=f"{spec.prompt}\n\n(sbxcheck idempotency retry: same key, different title)",
        )
        entry = self._intent(run)  # the retry may create a mission: the ledger knows before the request
        try:
            retry = channel.create(retry_spec)
        except SbxError as exc:
            if not isinstance(exc, MissionRejected):
                self._release_if_never_sent(entry, exc)
                raise
            # the key lookup comes before every refusal but prompt validation (spec 3.4 step 5): a refused
            # retry means the key did not match
            run.retry_rejection = exc
            self._release(entry, f"retry refused: {exc.reason[:120]}")
            return
        if self._joined_foreign(retry, run, entry):
            run.retry_joined = str(retry.mission.get("id"))  # reported; never followed or cancelled
            return
        run.retry = retry
        retry_id = str(retry.mission["id"])
        if retry_id in self.created:
            self._release(entry, f"retry coalesced with {retry_id}")
        else:
            self.created[retry_id] = run.route.via
            self._created(entry, retry_id)
            try:  # a held attempt that failed does not coalesce (spec 3.4 step 5): not an ignored key
                run.first_status_at_retry = str(channel.get(str(run.mission_id)).get("status"))
            except SbxError:
                run.first_status_at_retry = None

    def _intent(self, run: RouteRun) -> str | None:
        """The ledger entry written before a create is sent (None without a ledger)."""
        if self.ledger is None:
            return None
        entry = self.ledger.record_intent(
            "mission",
            run.idempotency_key,
            run_id=None,
            detail={"route": run.route.label, "via": run.route.via, "title": run.title},
        )
        self._unanswered[entry] = run  # until the create answers
        return entry

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

    def _release_if_never_sent(self, entry: str | None, exc: SbxError) -> None:
        """A create whose connection failed before the request was sent (refused, DNS, TLS) made
        nothing: its intent is closed now. One sent without an answer stays, for the listing to settle."""
        if exc.evidence.get("request_sent") is False:
            reason = exc.evidence.get("reason") or "connect failed"
            self._release(entry, f"never created: {reason} before the request was sent")

    def _release(self, entry: str | None, how: str) -> None:
        if self.ledger is not None and entry is not None:
            self._unanswered.pop(entry, None)
            self.ledger.mark_released(entry, how)

    def _created(self, entry: str | None, mission_id: str) -> None:
        if self.ledger is not None and entry is not None:
            self.ledger.mark_created(entry, mission_id)
            self._entries[mission_id] = entry
            self._unanswered.pop(entry, None)

    def _follow(self, run: RouteRun, *, to_end: bool = False) -> None:
        """Follow the mission until it settles or its one deadline passes.

        Routes settle at execution evidence, a terminal state or ``awaiting_user``; with ``to_end``
        (canaries: every step must have run) only a terminal state or ``awaiting_user`` settles it.
        With the live stream the stored record and events are read when the stream says the verdict
        can be taken, once after a lag or reconnect (a catch-up with the cursor; lags in a row are
        caught up at the polling pace, never one read per lag), and at the deadline; without it
        they are polled with backoff (``poll_interval_s`` doubling to 10 s, jittered; pushback is
        waited out by the transport). Either way the verdict rests on the
        stored rows, never on the stream's word. The deadline is the run's own, counted from
        dispatch; ``waited_s`` is the true time since dispatch.
        """
        channel = self.channel_for(run.route.via)
        mission_id = run.mission_id
        assert mission_id is not None
        stream = self._stream
        cursor = 0
        synced = run.stream_generation
        poll_s = self.section.poll_interval_s
        next_poll = 0.0
        recheck_at = 0.0
        recheck_s = RECHECK_S  # doubles while the stored rows keep disagreeing with the stream
        silence_s = STREAM_SILENCE_S
        silence_at = (run.dispatched_at or time.monotonic()) + silence_s
        statuses_seen = 0
        polled = False
        try:
            while True:
                now = time.monotonic()
                live = stream is not None and stream.live
                sig = stream.signal(mission_id) if stream is not None else None
                if sig is not None:
                    for at, seen in sig.statuses[statuses_seen:]:
                        self._note_status(run, seen, at)
                    statuses_seen = len(sig.statuses)
                stopped = self._stop.is_set()
                at_deadline = stopped or now >= run.deadline_at
                generation = stream.generation if stream is not None else 0
                if not live:
                    read, polled = now >= next_poll, True
                else:
                    read = (
                        # a lag or reconnect since the last read: catch up, at most at the polling pace
                        (generation != synced and now >= next_poll)
                        or (stream_says_settle(sig, to_end) and now >= recheck_at)
                        or (sig is None and now >= silence_at)  # a stream that never names it
                    )
                if read or at_deadline:
                    if live:
                        assert stream is not None
                        synced = stream.generation
                    cursor, status, has_evidence = self._read(run, channel, mission_id, cursor)
                    if settles(status, has_evidence, to_end):
                        return
                    if at_deadline:
                        if to_end:
                            why = (
                                f"when the session stopped ({run.elapsed_s():.0f}s after dispatch)"
                                if stopped
                                else f"after {run.elapsed_s():.0f}s (deadline {run.deadline_s:.0f}s from dispatch)"
                            )
                            raise CommandTimeout(
                                f"canary mission {mission_id} still {status} {why}",
                                evidence={"mission_id": mission_id, "status": status},
                            )
                        return
                    now = time.monotonic()
                    next_poll = now + poll_s * random.uniform(0.8, 1.2)
                    poll_s = min(poll_s * 2, MAX_POLL_S)
                    recheck_at = now + recheck_s
                    if live and stream_says_settle(sig, to_end):  # the stream's word, not confirmed
                        recheck_s = min(recheck_s * 2, MAX_POLL_S)
                    if sig is None and now >= silence_at:
                        silence_s *= 2
                        silence_at = now + silence_s
                wake = run.deadline_at
                if not live or generation != synced:
                    wake = min(wake, next_poll)
                if live and stream_says_settle(sig, to_end):
                    wake = min(wake, recheck_at)
                elif live and sig is None:
                    wake = min(wake, silence_at)
                timeout = max(0.0, wake - time.monotonic())
                if stream is not None and not stream.absent:  # a signal, a lag or the stream going up wakes it
                    stream.wait(mission_id, sig.version if sig is not None else 0, generation, timeout)
                else:
                    self._stop.wait(timeout)
        finally:
            run.waited_s = round(run.elapsed_s(), 2)
            if stream is None or stream.absent:
                reason = "no live stream" if stream is None else stream.why_absent
                run.followed_by = f"polling ({reason})"
            else:
                run.followed_by = "stream (and polling while it reconnected)" if polled else "stream"

    def _read(
        self, run: RouteRun, channel: MissionChannel, mission_id: str, cursor: int
    ) -> tuple[int, str, bool]:
        """One read of the stored record and the events after ``cursor``: (cursor, status, evidence).

        The verdict needs this read even at the deadline: pushback on it is waited out for at least
        ``request_timeout_s`` more (the item waits longer than the mission's deadline).
        """
        with pushback_until(max(run.deadline_at, time.monotonic() + self.section.request_timeout_s)):
            return self._read_now(run, channel, mission_id, cursor)

    def _read_now(
        self, run: RouteRun, channel: MissionChannel, mission_id: str, cursor: int
    ) -> tuple[int, str, bool]:
        current = channel.get(mission_id)
        run.reads += 1
        if run.record is None:
            run.record = current
        run.last = current
        status = str(current.get("status"))
        self._note_status(run, status)
        for _ in range(MAX_EVENT_PAGES):
            page = channel.events(mission_id, cursor)
            run.reads += 1
            fresh = new_events(run.events, page)  # each sequence once, whatever the server did with the cursor
            for event in fresh:
                seq = event.get("sequence")
                if isinstance(seq, int) and seq > cursor:
                    cursor = seq
            run.events.extend(fresh)
            if len(page) < EVENT_PAGE or not fresh:
                break
        has_evidence = any(e.get("event_type") in EVIDENCE_EVENTS for e in run.events)
        return cursor, status, has_evidence

    @staticmethod
    def _note_status(run: RouteRun, status: str, at: float | None = None) -> None:
        """Add ``status`` to the timeline (seconds after dispatch) when it differs from the last one."""
        if not run.timeline or run.timeline[-1][1] != status:
            start = run.dispatched_at if run.dispatched_at is not None else time.monotonic()
            when = (time.monotonic() if at is None else at) - start
            run.timeline.append((round(max(when, 0.0), 2), status))

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
            if canary.run is not None:
                canary.run.done.set()
            canary.done.set()

