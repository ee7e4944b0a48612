"""What earlier sessions left in the ledger: reconcile each open entry with the run records or the control
plane, then release it (``--sbx-sweep``) or report it. Never touches a live owner's entries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from sbxcheck.commands import commands, shell_command
from sbxcheck.errors import SbxError
from sbxcheck.lifecycle.ledger import Ledger, LedgerEntry
from sbxcheck.lifecycle.listing import every_owners_missions, missions_since, resolve_listed
from sbxcheck.lifecycle.mounts import MountManager
from sbxcheck.lifecycle.reconcile import RecordFact, Resolution, parse_ts, resolve_mission, resolve_mount
from sbxcheck.plugin.interrupts import finish_before_interrupt
from sbxcheck.safeio import loads_bounded, read_text_file

if TYPE_CHECKING:
    from sbxcheck.clients.sandboxed import SandboxedClient
    from sbxcheck.inventory import Inventory

RECORD_MAX_BYTES = 1 << 20  # a run record is a dozen fields; anything larger is not one
TERMINAL_MISSION_STATES = frozenset({"completed", "failed", "blocked", "not_feasible", "interrupted"})


@dataclass(frozen=True)
class EntryReview:
    """The verdict on one ledger entry another session left: what was found and done."""

    outcome: Literal["passed", "failed", "skipped"]
    message: str
    evidence: dict[str, Any]
    recommendation: str | None = None
    commands: tuple[str, ...] = ()  # sbxcheck's own (sbxcheck.commands), never read out of the prose


def _release_hint(entry: LedgerEntry, ident: str | None) -> str:
    """The command a person would type to release what ``entry`` stands for."""
    if entry.kind == "mount":
        run_id = ident or f"{entry.intended_ident}-<id>"
        return f"just sbx manage harvest {run_id} && just sbx lifecycle teardown {run_id}"
    return f"POST /api/control/missions/{ident or '<id>'}/cancel"


class Reviewing(Protocol):
    """What a review needs of the session's ledger (:class:`~sbxcheck.plugin.ledgermounts.LedgerMounts`)."""

    sweep: bool

    def ledger(self) -> Ledger: ...

    def inventory(self) -> Inventory: ...

    def sandboxed_client(self) -> SandboxedClient: ...

    def mount_manager(self) -> MountManager: ...


def _record_facts(session: Reviewing) -> list[RecordFact]:
    """Every run record's id and times (open and closed), read leniently: reconciling only needs these."""
    sssf = session.inventory().sssf
    if sssf is None or not sssf.runs_path.is_dir():
        return []
    facts = []
    for path in sorted(sssf.runs_path.glob("*.json")):
        try:
            doc = loads_bounded(read_text_file(path, RECORD_MAX_BYTES))
        except (OSError, ValueError):  # not a regular file, too large or deep, not JSON (UnsafeInput is one)
            continue
        if isinstance(doc, dict) and isinstance(doc.get("run_id"), str):
            created, closed = doc.get("created_at"), doc.get("closed_at")
            facts.append(
                RecordFact(
                    doc["run_id"],
                    created if isinstance(created, str) else None,
                    closed if isinstance(closed, str) else None,
                )
            )
    return facts

def reconcile(session: Reviewing, entry: LedgerEntry) -> Resolution:
    """What ``entry`` stands for, from the run records or the control plane's mission list."""
    others = [e for e in session.ledger().state() if e.id != entry.id and e.kind == entry.kind]
    claimed = {e.ident for e in others if e.ident != e.intended_ident or e.state in ("created", "kept")}
    if entry.kind == "mount":
        sssf = session.inventory().sssf
        timeout = sssf.recipe_templates().timeout("mount") if sssf is not None else 600.0
        return resolve_mount(entry, _record_facts(session), claimed=claimed, max_duration_s=timeout)
    if entry.ident != entry.intended_ident or entry.state == "created":
        return resolve_mission(entry, [])
    # newest first: paged back until the list reaches the intent
    listing = missions_since(every_owners_missions(session.sandboxed_client()), parse_ts(entry.opened_at))
    return resolve_listed(entry, listing, claimed=claimed)

def review_entry(session: Reviewing, entry: LedgerEntry) -> EntryReview:
    """Decide about one entry another session left: skip a live owner's, reconcile, then release or report.

    Nothing is released without ``--sbx-sweep``; ledger bookkeeping for facts (a record already
    closed, an intent that made nothing) is written either way.
    """
    ledger = session.ledger()
    evidence: dict[str, Any] = {
        "entry": entry.id,
        "kind": entry.kind,
        "ident": entry.ident,
        "state": entry.state,
        "owner": entry.owner,
        "opened_at": entry.opened_at,
    }
    if entry.why:
        evidence["why"] = entry.why
    alive = ledger.owner_alive(entry)
    evidence["owner_alive"] = alive
    if alive:
        return EntryReview(
            "skipped",
            f"not touched: {entry.kind} {entry.ident} belongs to the live session {entry.owner} "
            f"(its owner lock is held; opened {entry.opened_at})",
            evidence,
        )
    try:
        res = reconcile(session, entry)
    except SbxError as exc:
        evidence["reconcile_error"] = exc.message
        return EntryReview(
            "failed", f"could not reconcile {entry.kind} {entry.ident}: {exc.message}", evidence
        )
    evidence["reconcile"] = {"status": res.status, "why": res.why, "candidates": res.candidates}
    what = f"{entry.kind} {entry.intended_ident}"
    if res.status == "ambiguous":
        return EntryReview(
            "failed", f"ambiguous: {res.why}; nothing done", evidence, _release_hint(entry, None)
        )
    if res.status == "unmatched":
        ledger.mark_unmatched(entry.id, res.why)
        return EntryReview(
            "failed",
            f"unmatched: {what}: {res.why}; nothing to release; recorded as unmatched, not reported again",
            evidence,
            "check `just sbx manage list` and the orphan audit (pytest -m canary -k orphan) to be sure",
            tuple(commands(shell_command("just", "sbx", "manage", "list"))),
        )
    ident = res.ident
    assert ident is not None
    if ident != entry.ident:
        ledger.mark_created(entry.id, ident)
        evidence["ident"] = ident
    if entry.kind == "mount":
        return _review_mount(session, entry, ident, res, evidence)
    return _review_mission(session, entry, ident, evidence)

def _review_mount(
    session: Reviewing, entry: LedgerEntry, run_id: str, res: Resolution, evidence: dict[str, Any]
) -> EntryReview:
    if res.closed:
        session.ledger().mark_released(entry.id, f"already closed: {res.why}")
        return EntryReview("passed", f"run {run_id} is already torn down ({res.why})", evidence)
    if entry.state == "kept":
        return EntryReview(
            "skipped",
            f"kept on purpose: run {run_id} ({entry.why}), still open since {entry.opened_at}; "
            f"release it: {_release_hint(entry, run_id)} (--sbx-sweep leaves kept runs alone)",
            evidence,
        )
    if not session.sweep:
        return EntryReview(
            "failed",
            f"leaked: mount {entry.intended_ident} → {run_id} left {entry.state} "
            f"by {entry.owner} at {entry.opened_at}",
            evidence,
            "re-run with --sbx-sweep to release it through the same recipes, or: "
            + _release_hint(entry, run_id),
        )
    with finish_before_interrupt(f"the sweep of {run_id}", reraise=True):
        ok, detail = session.mount_manager().release(entry, run_id)
    evidence.update(detail)
    if ok:
        return EntryReview("passed", f"released by --sbx-sweep: mount {run_id}", evidence)
    return EntryReview("failed", f"--sbx-sweep could not release mount {run_id}", evidence)

def _review_mission(session: Reviewing, entry: LedgerEntry, mission_id: str, evidence: dict[str, Any]) -> EntryReview:
    from sbxcheck.clients.sandboxed import NotFound

    client = session.sandboxed_client()
    try:
        status = client.get_mission(mission_id).status
    except NotFound:
        status = "gone"
    except SbxError as exc:
        return EntryReview("failed", f"could not read mission {mission_id}: {exc.message}", evidence)
    evidence["status"] = status
    if status == "gone" or status in TERMINAL_MISSION_STATES:
        session.ledger().mark_released(entry.id, f"already {status}")
        return EntryReview("passed", f"mission {mission_id} is already {status}", evidence)
    if not session.sweep:
        return EntryReview(
            "failed",
            f"leaked: mission {mission_id} still {status}, left by {entry.owner} at {entry.opened_at}",
            evidence,
            f"re-run with --sbx-sweep to cancel it, or: {_release_hint(entry, mission_id)}",
        )
    try:
        with finish_before_interrupt(f"the cancel of mission {mission_id}", reraise=True):
            gone = not client.cancel_mission(mission_id)
    except SbxError as exc:
        evidence["cancel_error"] = exc.message
        return EntryReview("failed", f"--sbx-sweep could not cancel mission {mission_id}", evidence)
    how = "swept: already gone" if gone else "swept: cancelled"
    session.ledger().mark_released(entry.id, how)
    evidence["cancel"] = how
    return EntryReview("passed", f"released by --sbx-sweep: mission {mission_id} ({how})", evidence)
