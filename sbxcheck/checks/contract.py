"""Dispatch contracts: what a roadmap or a conversational dispatch must carry and get back.

A route opts in with ``contract = "roadmap"`` (``project``, ``track``, ``acceptance_criteria``; its
retry-safe ``idempotency_key`` is the session's) or ``contract = "conversational"``
(``origin_session_id``). :func:`check_dispatch_contract` judges that route's mission:

* roadmap: the record echoes project and track; the keyed retry (different title and prompt)
  returned the original mission, never a second one; ``GET /api/control/tracks?project=`` shows
  the track reserved, and the track's missions listed (``GET /api/control/missions?project=&track=``)
  hold one for this session's intent (its create's title or its retry's: earlier nights' missions in
  the same track are theirs); and the evidence says that completion is not acceptance;
* conversational: the record carries the session's ``origin_session_id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol

from sbxcheck.checks.base import run_check
from sbxcheck.clients.missionruns import RETRY_TITLE_SUFFIX, RouteRun
from sbxcheck.clients.sandboxed_models import Mission, TrackRow
from sbxcheck.results import CheckResult, Classification, Outcome

CHECK_CONTRACT: Final = "dispatch_contract"
NOT_ACCEPTANCE: Final = (
    "mission completion alone does not satisfy the track: accepted criterion evidence at the governed "
    "artifact version must be recorded separately (this item never marks a track done)"
)
INTENT_PAGE: Final = 200  # the track's newest missions read for this session's intent (newest first)


class TrackReader(Protocol):
    """The two reads a roadmap contract makes of the control plane."""

    def tracks(self, project: str) -> Sequence[TrackRow]: ...

    def list_missions(
        self, *, all: bool = False, project: str | None = None, track: str | None = None, limit: int | None = None
    ) -> Sequence[Mission]: ...


def intent_missions(reader: TrackReader, run: RouteRun) -> list[Mission]:
    """The track's missions made for this run's intent: its create's title or its keyed retry's (every
    title carries the session's tag), from the track's newest ``INTENT_PAGE`` missions."""
    route = run.route
    titles = {run.title, run.title + RETRY_TITLE_SUFFIX}
    listed = reader.list_missions(all=True, project=route.project, track=route.track, limit=INTENT_PAGE)
    return [m for m in listed if m.title in titles and m.track in (None, route.track)]


#: what each contract needs the create to carry (the keyed retry: a create that takes idempotency_key)
CONTRACT_FIELDS: Final = {
    "roadmap": ("project", "track", "idempotency_key"),
    "conversational": ("origin_session_id",),
}


def _inexpressible(run: RouteRun, record: dict[str, Any]) -> list[str]:
    """What the route's contract needs that its create could not carry: a field the answer showed dropped
    (or an older create body did not store), or the keyed retry where the create takes no key."""
    created = run.created
    assert created is not None
    lacking = []
    for name in CONTRACT_FIELDS.get(run.route.contract, ()):
        if name == "idempotency_key":
            if not created.idempotency_supported and run.check_idempotency:
                lacking.append(name)
        elif name in created.dropped or (created.older_create and record.get(name) is None):
            lacking.append(name)
    return lacking


def _not_served(run: RouteRun) -> str:
    """What the create could not carry, in the words of the answer that showed it."""
    created = run.created
    assert created is not None
    if created.older_create:
        return created.older_create
    where = "this control plane" if run.route.via == "rest" else "the assistant MCP"
    return f"not served by {where}: {created.decided_by or 'its create dropped fields the contract needs'}"


def check_dispatch_contract(run: RouteRun, reader: TrackReader) -> CheckResult:
    """The route's mission honours its dispatch contract (see the module docstring)."""
    route = run.route
    target = route.label

    def body() -> CheckResult:
        from sbxcheck.checks.missions import check_dispatched

        if route.contract == "none":
            return CheckResult(
                check=CHECK_CONTRACT,
                target=target,
                outcome=Outcome.SKIPPED,
                message="the route declares no dispatch contract",
            )
        if run.created is None:
            dispatched = check_dispatched(run)
            return dispatched.model_copy(
                update={"check": CHECK_CONTRACT, "message": f"no mission to judge: {dispatched.message}"}
            )
        record = {**run.created.mission, **(run.record or {}), **(run.last or {})}
        lacking = _inexpressible(run, record)
        if lacking:  # the release (or the channel) cannot carry the contract: a skip naming what it lacks
            return CheckResult(
                check=CHECK_CONTRACT,
                target=target,
                outcome=Outcome.SKIPPED,
                message=f"{_not_served(run)}; the {route.contract} dispatch contract needs {', '.join(lacking)}",
                evidence={
                    "mission_id": run.created.mission.get("id"),
                    "contract": route.contract,
                    "capability": run.created.decided_by,
                    "lacking": lacking,
                },
            )
        mission_id = str(run.created.mission.get("id"))
        evidence: dict[str, Any] = {"mission_id": mission_id, "contract": route.contract}
        problems: list[str] = []
        if route.contract == "conversational":
            evidence["origin_session_id"] = {
                "sent": route.origin_session_id,
                "stored": record.get("origin_session_id"),
            }
            if record.get("origin_session_id") != route.origin_session_id:
                problems.append(
                    f"origin_session_id is {record.get('origin_session_id')!r}, sent {route.origin_session_id!r}"
                )
        else:
            stored = {k: record.get(k) for k in ("project", "track")}
            evidence.update(
                sent={
                    "project": route.project,
                    "track": route.track,
                    "acceptance_criteria": route.acceptance_criteria,
                },
                stored=stored,
                idempotency_key=run.idempotency_key,
                completion_is_not_acceptance=NOT_ACCEPTANCE,
            )
            for key, want in (("project", route.project), ("track", route.track)):
                if stored[key] != want:
                    problems.append(f"{key} is {stored[key]!r}, sent {want!r}")
            retry = run.retry
            if run.retry_rejection is not None:
                problems.append(f"the keyed retry was refused: {run.retry_rejection.reason[:160]}")
            elif run.retry_joined is not None:
                problems.append(f"the keyed retry was answered with another's mission {run.retry_joined[:8]}")
            elif retry is None:
                problems.append("the keyed retry was not made (--sbx-probe: one create per route)")
            else:
                retry_id = str(retry.mission.get("id"))
                evidence["retry"] = {"mission_id": retry_id, "coalesced_with": retry.coalesced_with}
                if retry_id != mission_id:
                    problems.append(f"reusing the idempotency key made a second mission {retry_id[:8]}")
            assert route.project is not None
            rows = [r for r in reader.tracks(route.project) if r.track == route.track]
            evidence["track_row"] = rows[0].model_dump() if rows else None
            if not rows or rows[0].total < 1:
                problems.append(
                    f"GET /api/control/tracks?project={route.project} shows no track {route.track!r}"
                )
            else:
                ours = intent_missions(reader, run)
                evidence["intent_missions"] = [m.id for m in ours]
                if len(ours) > 1:
                    problems.append(
                        f"track {route.track!r} holds {len(ours)} missions for one intent "
                        f"({', '.join(m.id[:8] for m in ours)})"
                    )
        if problems:
            return CheckResult.failed(
                CHECK_CONTRACT,
                target,
                f"{route.contract} dispatch contract broken: " + "; ".join(problems),
                evidence,
                Classification.CHECK_FAILED,
                recommendation=(
                    "the control plane does not honour the dispatch contract: retried roadmap dispatches "
                    "would duplicate work or lose their track — fix it before relying on retries or on "
                    "chat-origin fold-back"
                ),
            )
        if route.contract == "conversational":
            message = f"origin_session_id {route.origin_session_id!r} echoed on mission {mission_id[:8]}"
        else:
            message = (
                f"project {route.project!r} and track {route.track!r} echoed; the same key returned mission "
                f"{mission_id[:8]}; the track is reserved — completion is not acceptance"
            )
        return CheckResult.passed(CHECK_CONTRACT, target, message, evidence)

    return run_check(CHECK_CONTRACT, target, body)
