"""Mission lifecycle for the canary suite: dispatch every route at once, follow each, cancel at the end.

``MissionDispatcher.start()`` dispatches all route missions of the session concurrently (bounded by
``max_concurrency``); each pytest item then waits for its own route's ``RouteRun``. Polling reads
events with the ``since_seq`` cursor. Alternative-provider backends (opencode by default) are probed
with two routes first: when both crash at the same init boundary with the same signature, that is one
infrastructure incident and nothing more is dispatched to that backend. ``close()`` cancels every
mission this session created that is not terminal — on success, failure and interrupt alike.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sbxcheck.clients.channels import Created, MissionChannel
from sbxcheck.clients.sandboxed import MissionRejected, MissionSpec, NotFound
from sbxcheck.errors import CommandTimeout, SbxError
from sbxcheck.inventory import RouteSpec, SandboxedSection, WorkspaceCanarySpec
from sbxcheck.ledger import Ledger
from sbxcheck.redact import clip
from sbxcheck.results import Classification

TERMINAL = frozenset({"completed", "failed", "blocked", "not_feasible", "interrupted"})
EVIDENCE_EVENTS = frozenset({"tool_call", "tool_result", "assistant_message"})
EFFORT_LADDER = ("max", "xhigh", "high")
CANARY_STEPS_HEADER = (
    "sbxcheck workspace-visibility canary. Read-only: change nothing. Carry out exactly these steps, "
    "in order, with your tools, and report each output verbatim."
)


def effort_fallbacks(effort: str | None) -> list[str | None]:
    """The efforts to try in order: the requested one, then one step down at a time (§8.5)."""
    if effort not in EFFORT_LADDER:
        return [effort]
    return list(EFFORT_LADDER[EFFORT_LADDER.index(effort) :])


def crash_signature(events: list[dict[str, Any]]) -> str | None:
    """The error text of a mission that ended before any tool call, normalised (ids and numbers removed)."""
    if any(e.get("event_type") in ("tool_call", "tool_result") for e in events):
        return None
    errors = [str(e.get("content") or "") for e in events if e.get("event_type") == "error"]
    if not errors:
        return None
    lines = errors[-1].strip().splitlines()
    if not lines:  # an error event with no text has no signature to share
        return None
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27,}|\b\d+\b", "#", lines[0])
    return clip(text, 120, "")


@dataclass
class RouteRun:
    """Everything the session saw of one route's mission."""

    route: RouteSpec
    title: str
    idempotency_key: str
    requested: dict[str, str | None]
    effort_attempts: list[dict[str, Any]] = field(default_factory=list)
    created: Created | None = None
    rejection: MissionRejected | None = None
    error: SbxError | None = None
    record: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    waited_s: float = 0.0  # seconds from dispatch (the first create sent) until following stopped
    deadline_s: float = 0.0  # the one budget of this mission, counted from dispatch
    dispatched_at: float | None = None  # monotonic clock when the first create was sent
    skipped_incident: str | None = None
    settled_s: float | None = None  # seconds from the session's first dispatch until this run settled
    retry: Created | None = None
    retry_rejection: MissionRejected | None = None
    first_status_at_retry: str | None = None  # the first mission's status when the retry made a second
    check_idempotency: bool = True
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def mission_id(self) -> str | None:
        return str(self.created.mission["id"]) if self.created is not None else None

    @property
    def accepted_effort(self) -> str | None:
        accepted = [a["effort"] for a in self.effort_attempts if a["accepted"]]
        return accepted[-1] if accepted else None

    @property
    def deadline_at(self) -> float:
        """The one deadline of this mission: dispatch + ``deadline_s`` (never restarted by a later phase)."""
        start = self.dispatched_at if self.dispatched_at is not None else time.monotonic()
        return start + self.deadline_s

    def elapsed_s(self) -> float:
        """Seconds since dispatch (0 before it)."""
        return 0.0 if self.dispatched_at is None else time.monotonic() - self.dispatched_at

    @property
    def status(self) -> str | None:
        source = self.last or (self.created.mission if self.created else None)
        return str(source.get("status")) if source and source.get("status") else None


@dataclass
class CanaryRun:
    """A workspace-visibility canary mission and what it showed."""

    spec: WorkspaceCanarySpec
    workspace_id: str | None = None
    run: RouteRun | None = None
    exec_sha256: str | None = None
    exec_error: str | None = None
    skipped_incident: str | None = None
    error: SbxError | None = None
    done: threading.Event = field(default_factory=threading.Event)


def canary_prompt(spec: WorkspaceCanarySpec) -> str:
    """Explicit, checkable, read-only steps; their outputs (not the agent's summary) are the evidence."""
    steps = [f"STEP: ls -d {spec.checkout}", f"STEP: git -C {spec.checkout} rev-parse HEAD"]
    if spec.pin_file:
        steps.append(f"STEP: cat {spec.checkout}/{spec.pin_file}")
    steps.append(f"STEP: mcp read_file {spec.checkout}/{spec.mcp_file}")
    return "\n".join([CANARY_STEPS_HEADER, *steps])


class MissionDispatcher:
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
        list_missions: Callable[[], list[dict[str, Any]]] | None = None,
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
        self.ledger = ledger
        self._entries: dict[str, str] = {}  # mission id -> ledger entry
        # told what is waited on while an item waits (the progress line); None: wait silently
        self.on_wait: Callable[[tuple[dict[str, int], float, float] | None, float], None] | None = None
        self._unanswered: dict[str, RouteRun] = {}  # ledger entry -> run whose create never answered
        self._list_missions = list_missions
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
        self.started_at = time.monotonic()
        self._pool = cf.ThreadPoolExecutor(
            max_workers=self.section.max_concurrency, thread_name_prefix="sbx-mission"
        )
        by_backend: dict[str, list[RouteRun]] = {}
        for route in self.section.routes:
            run = self._new_run(route, route.prompt, f"route {route.label}")
            self.routes[route.label] = run
            by_backend.setdefault(route.backend, []).append(run)
        for backend in {r.backend for r in self.section.routes} | {c.backend for c in self.section.canaries}:
            self._backend_settled[backend] = threading.Event()
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
            if waiting is not None:
                self.on_wait(waiting, time.monotonic() - start)
                told = True
        if told:
            self.on_wait(None, time.monotonic() - start)  # the wait is over: the line goes

    def waiting(self) -> tuple[dict[str, int], float, float] | None:
        """What the session still waits on: unsettled missions by status (``dispatching`` before the
        create answered), seconds since the first dispatch, and the furthest deadline; None when nothing."""
        runs = [r for r in self.routes.values() if not r.done.is_set()]
        runs += [c.run for c in self.canaries.values() if c.run is not None and not c.done.is_set()]
        if not runs:
            return None
        states: dict[str, int] = {}
        for run in runs:
            state = run.status or ("dispatching" if run.created is None else "created")
            states[state] = states.get(state, 0) + 1
        dispatched = [r.dispatched_at for r in runs if r.dispatched_at is not None]
        elapsed = time.monotonic() - min(dispatched) if dispatched else 0.0
        return states, elapsed, max(r.deadline_s for r in runs)

    def close(self) -> dict[str, str]:
        """Cancel every non-terminal mission this session created; report what happened to each."""
        self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for thread in self._threads:
            thread.join(timeout=self.section.request_timeout_s * 2)
        outcome: dict[str, str] = {}
        for mission_id, via in list(self.created.items()):
            try:
                channel = self.channel_for(via)
                status = channel.get(mission_id).get("status")
                if status in TERMINAL:
                    how = f"already {status}"
                else:
                    how = "cancelled" if channel.cancel(mission_id) else "already gone"
            except NotFound:
                how = "already gone"
            except SbxError as exc:  # one failing cancel does not stop the others
                how = f"cancel failed: {exc.message}"
            outcome[mission_id] = how
            entry = self._entries.get(mission_id)
            if self.ledger is not None and entry is not None and not how.startswith("cancel failed"):
                # released as each one ends, so an abandoned close leaves the ledger exact; a failed
                # cancel stays open: the next session sees it
                self.ledger.mark_released(entry, how)
        outcome.update(self._close_unanswered())
        return outcome

    def _close_unanswered(self) -> dict[str, str]:
        """Creates that failed without an answer (a 500, a dropped connection) may still have made a
        mission: find it by its title in the mission list, then cancel it by id."""
        if not self._unanswered or self.ledger is None:
            return {}
        from sbxcheck.reconcile import resolve_mission

        outcome: dict[str, str] = {}
        try:
            listed = self._list_missions() if self._list_missions is not None else None
        except SbxError as exc:
            listed, reason = None, exc.message
        else:
            reason = "no way to list missions"
        entries = {e.id: e for e in self.ledger.state()}
        for entry_id, run in list(self._unanswered.items()):
            label = f"unanswered create of {run.title}"
            entry = entries.get(entry_id)
            if listed is None or entry is None:
                outcome[label] = f"cancel failed: cannot find what it made ({reason})"
                continue
            found = resolve_mission(entry, listed, claimed=set(self._entries))
            if found.status == "unmatched":
                self.ledger.mark_released(entry_id, f"never created: {found.why}")
                outcome[label] = "never created"
            elif found.status == "ambiguous" or found.ident is None:
                outcome[label] = f"cancel failed: {found.why}"
            else:
                self.ledger.mark_created(entry_id, found.ident)
                try:
                    how = "cancelled" if self.channel_for("rest").cancel(found.ident) else "already gone"
                except SbxError as exc:
                    outcome[found.ident] = f"cancel failed: {exc.message}"
                    continue
                self.ledger.mark_released(entry_id, f"{how} (found by title after an unanswered create)")
                outcome[found.ident] = f"{how} (its create was never answered)"
            self._unanswered.pop(entry_id, None)
        return outcome

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
            self._dispatch(run)
            if run.created is not None:
                self._follow(run)
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
            run.created = created
            self.created[str(created.mission["id"])] = route.via
            self._created(entry, str(created.mission["id"]))
            if created.idempotency_supported and run.check_idempotency:
                self._probe_idempotency(run, channel, spec)
            return

    def _probe_idempotency(self, run: RouteRun, channel: MissionChannel, spec: MissionSpec) -> None:
        """§8.2: a retry with the same key must return the same mission, never a second one.

        The server also coalesces an identical title from the same origin while the first mission is
        pending or active (§3.4 step 6), so an identical retry would pass even when the key is ignored.
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
            # the key lookup comes before every refusal but prompt validation (§3.4 step 5): a refused
            # retry means the key did not match
            run.retry_rejection = exc
            self._release(entry, f"retry refused: {exc.reason[:120]}")
            return
        run.retry = retry
        retry_id = str(retry.mission["id"])
        if retry_id in self.created:
            self._release(entry, f"retry coalesced with {retry_id}")
        else:
            self.created[retry_id] = run.route.via
            self._created(entry, retry_id)
            try:  # a held attempt that failed does not coalesce (§3.4 step 5): not an ignored key
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

        mcp = sys.modules.get("sbxcheck.clients.mcp")  # not loaded: no MCP server can have failed
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
        """Poll the record and the events (cursor) until the mission settles or its one deadline passes.

        Routes settle at execution evidence, a terminal state or ``awaiting_user``; with ``to_end``
        (canaries: every step must have run) only a terminal state or ``awaiting_user`` settles it. The
        deadline is the run's own, counted from dispatch; ``waited_s`` is the true time since dispatch.
        """
        channel = self.channel_for(run.route.via)
        mission_id = run.mission_id
        assert mission_id is not None
        cursor = 0
        run.record = channel.get(mission_id)
        try:
            while True:
                current = channel.get(mission_id)
                run.last = current
                status = str(current.get("status"))
                if not run.timeline or run.timeline[-1][1] != status:
                    run.timeline.append((round(run.elapsed_s(), 2), status))
                fresh = channel.events(mission_id, cursor)
                for event in fresh:
                    seq = event.get("sequence")
                    if isinstance(seq, int) and seq > cursor:
                        cursor = seq
                run.events.extend(fresh)
                has_evidence = any(e.get("event_type") in EVIDENCE_EVENTS for e in run.events)
                if status in TERMINAL or status == "awaiting_user":
                    return
                if status == "active" and has_evidence and not to_end:
                    return
                stopped = self._stop.is_set()
                if stopped or time.monotonic() >= run.deadline_at:
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
                time.sleep(max(0.0, min(self.section.poll_interval_s, run.deadline_at - time.monotonic())))
        finally:
            run.waited_s = round(run.elapsed_s(), 2)

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
        from sbxcheck.report import incident_id

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
                self._dispatch(run)
                if run.created is not None:
                    self._follow(run, to_end=True)
            if canary.workspace_id:
                try:
                    canary.exec_sha256 = self._exec_sha256(
                        canary.workspace_id, f"{spec.checkout}/{spec.mcp_file}"
                    )
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


def adapter_crash_cause(backend: str, signature: str) -> str:
    """The shared cause string of a shared adapter crash (items with it form one incident)."""
    return f"adapter-crash:{backend}:{signature}"
