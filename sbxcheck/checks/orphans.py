"""Orphaned ``sbx-*`` OpenRouter keys (upstream's reap, specs/sssf-sandbox.md 8): an audit that reports, never deletes.

The join is upstream reap's: ``GET /keys`` (every page), ``ssh exe.dev ls --json`` and the local
run records. Only keys named ``sbx-…`` are considered; other keys are never listed (only counted).
For ``sbx-<run-id>`` the VM is the record's ``vm_name``, else the run id. An **orphan** is a key
whose record is closed, whose VM no longer exists, or that no record on this host names. Each
orphan is one failed result with the run id, the key's *hash* (never the key), why, and the
advice to run ``just sbx manage reap`` (a dry run) — sbxcheck deletes nothing.

sbxcheck is **stricter than upstream** here: upstream reap counts a failed ``ls --json`` as
``{"vms": []}``, so an unreachable exe.dev makes every open key look orphaned. This audit reports
an ``error`` for the keys it could not judge instead (and an unreachable OpenRouter is an error
for the whole audit), because "unknown" must never show as "gone". It also flags a key that an
open record does not name (another hash) and a key named exactly ``sbx-``, which is not a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from sbxcheck.checks.fleet import utc_now_iso
from sbxcheck.clients.exedev import ExeVm
from sbxcheck.clients.openrouter import OpenRouterKey
from sbxcheck.clients.runrecords import RunEntry, discover_runs
from sbxcheck.commands import commands, shell_command
from sbxcheck.errors import SbxError
from sbxcheck.results import CheckResult, Classification, Outcome

SBX_PREFIX: Final = "sbx-"
CHECK: Final = "orphan_keys"
CAUSE: Final = "orphaned-sbx-keys"
REAP_ADVICE: Final = (
    "just sbx manage reap — a dry run first (it only lists); revoking with --yes stays your decision. "
    "sbxcheck deleted nothing"
)
REAP_COMMANDS: Final = commands(shell_command("just", "sbx", "manage", "reap"))  # a dry run: it only lists
UNREADABLE: Final = "unreadable-record"
_INSPECT: Final = (
    "inspect the key by its hash in the OpenRouter dashboard and decide by hand; sbxcheck deleted nothing"
)


def audit_orphans(
    list_keys: Callable[[], Sequence[OpenRouterKey]],
    list_vms: Callable[[], Sequence[ExeVm]],
    runs_dir: Path,
) -> list[CheckResult]:
    """One failed result per orphaned ``sbx-*`` key, errors for what could not be judged, else one pass.

    ``list_keys`` is e.g. ``OpenRouterAdmin.list_keys`` and ``list_vms`` e.g.
    ``lambda: list_vms(pool.host("exe.dev"))``; their failures become ``error`` results, never orphans.
    A run record that cannot be read is named in the result and left out; it never turns the
    audit into an ``error``.
    """
    checked_at = utc_now_iso()
    if not runs_dir.is_dir():
        return [
            CheckResult.errored(
                CHECK,
                "openrouter",
                f"run-record directory {runs_dir} does not exist: keys cannot be joined with records",
                Classification.CONFIG_DEFECT,
                {"runs_dir": str(runs_dir), "checked_at": checked_at},
            )
        ]
    entries = {e.run_id: e for e in discover_runs(runs_dir)}
    try:
        keys = list(list_keys())
    except SbxError as exc:
        return [
            CheckResult.errored(
                CHECK,
                "openrouter",
                f"the OpenRouter key list is unavailable ({exc.message}); no key was judged — an unreachable "
                "OpenRouter never makes keys look orphaned",
                exc.classification,
                {**exc.evidence, "checked_at": checked_at},
            )
        ]
    vm_names: set[str] | None
    vm_error: SbxError | None = None
    try:
        vm_names = {vm.vm_name for vm in list_vms()}
    except SbxError as exc:
        vm_names, vm_error = None, exc

    sbx = sorted((k for k in keys if k.name.startswith(SBX_PREFIX)), key=lambda k: (k.name, k.hash))
    results: list[CheckResult] = []
    kept: list[str] = []
    unjudged: list[str] = []
    not_judged: list[str] = []  # sbx-* keys whose run record cannot be read
    for key in sbx:
        verdict = _judge_key(key, entries, vm_names, checked_at)
        if verdict is None:
            kept.append(key.name[len(SBX_PREFIX) :])
        elif verdict == UNREADABLE:
            not_judged.append(key.name[len(SBX_PREFIX) :])
        elif isinstance(verdict, str):  # "unknown": needs the VM list
            unjudged.append(key.name[len(SBX_PREFIX) :])
        else:
            results.append(verdict)
    unreadable = {e.run_id: e.problem or "unreadable" for e in entries.values() if e.record is None}
    scope: dict[str, Any] = {
        "keys_listed": len(keys),
        "sbx_keys": len(sbx),
        "other_keys_ignored": len(keys) - len(sbx),
        "run_records": len(entries),
        "exe_dev_vms": None if vm_names is None else len(vm_names),
        "checked_at": checked_at,
    }
    unreadable_note = ""
    if unreadable:
        scope["unreadable_records"] = unreadable
        scope["keys_not_judged_unreadable_record"] = not_judged
        unreadable_note = (
            f"; {len(unreadable)} run record(s) could not be read and were left out "
            f"({'; '.join(unreadable.values())})"
            + (f" — key(s) of {', '.join(not_judged)} not judged" if not_judged else "")
        )
    if unjudged and vm_error is not None:
        results.append(
            CheckResult.errored(
                CHECK,
                "exe.dev",
                f"exe.dev's VM list is unavailable ({vm_error.message}): {len(unjudged)} sbx-* key(s) with an "
                "open record or none were not judged. Not reported as orphans: upstream reap would count "
                "every VM as gone here; sbxcheck does not",
                vm_error.classification,
                {**scope, "unjudged_runs": unjudged, **vm_error.evidence},
            )
        )
    if results:
        if unreadable_note:
            results = [
                r.model_copy(
                    update={"message": r.message + unreadable_note, "evidence": {**r.evidence, **scope}}
                )
                for r in results
            ]
        return results
    note = "" if vm_error is None else " (exe.dev unavailable, but every sbx-* key had a closed record)"
    return [
        CheckResult.passed(
            CHECK,
            "openrouter",
            f"no orphaned sbx-* keys: {len(sbx)} sbx-* key(s) of {len(keys)} listed, joined with "
            f"{len(entries)} run record(s) and {scope['exe_dev_vms']} exe.dev VM(s){note}{unreadable_note}",
            {**scope, "kept_runs": kept},
        )
    ]


def _judge_key(
    key: OpenRouterKey, entries: dict[str, RunEntry], vm_names: set[str] | None, checked_at: str
) -> CheckResult | str | None:
    """A failed/errored result, ``"unknown"`` (needs the VM list, which is unavailable), or None (kept)."""
    run_id = key.name[len(SBX_PREFIX) :]
    ev: dict[str, Any] = {
        "run_id": run_id or None,
        "key_name": key.name,
        "key_hash": key.hash,
        "disabled": key.disabled,
        "usage": key.usage,
        "limit": key.limit,
        "checked_at": checked_at,
    }
    if not run_id:
        return CheckResult.failed(
            CHECK,
            key.name,
            f"a key is named exactly 'sbx-' (hash {key.short_hash}): it names no run, and reap refuses it",
            {**ev, "why": "key named exactly 'sbx-'"},
            recommendation=_INSPECT,
        )
    entry = entries.get(run_id)
    if entry is not None and entry.record is None:
        return UNREADABLE
    record = entry.record if entry is not None else None
    vm = (record.vm_name if record is not None else None) or run_id
    ev.update(vm=vm, record="none" if record is None else "open" if record.is_open else "closed")
    why: str | None = None
    advice = REAP_ADVICE
    if record is not None and not record.is_open and key.disabled:
        return None  # listed disabled = revoked (as teardown's proof counts it), not an orphan
    if record is not None and not record.is_open:
        why = f"record closed {record.closed_at}"
        ev["record_closed_at"] = record.closed_at
    elif record is not None and record.key_hash and record.key_hash != key.hash:
        why = f"the open record names another key (hash {record.key_hash[:12]})"
        advice = _INSPECT
    elif vm_names is None:
        return "unknown"
    else:
        live = vm in vm_names
        ev["vm_live"] = live
        if record is None:
            why = "no run record" + ("" if live else f"; vm {vm} no longer exists")
            if live:
                why += f" on this host (vm {vm} is up: the run may belong to another checkout)"
                advice = f"find the checkout that created run {run_id}; {_INSPECT}"
        elif not live:
            why = f"vm {vm} no longer exists"
    if why is None:
        return None
    ev["why"] = why
    return CheckResult.failed(
        CHECK,
        run_id,
        f"orphaned key {key.name} (hash {key.short_hash}): {why}",
        ev,
        cause=CAUSE,
        recommendation=advice,
        commands=REAP_COMMANDS if advice == REAP_ADVICE else [],
    )


def orphan_summary(results: Sequence[CheckResult]) -> CheckResult:
    """Fold an audit into one result (for a single report item): the worst outcome, every item in evidence."""
    if not results:
        raise ValueError("an audit always yields at least one result")
    if len(results) == 1:
        return results[0]
    errors = [r for r in results if r.outcome is Outcome.ERROR]
    failed = [r for r in results if r.outcome is Outcome.FAILED]
    worst = errors[0] if errors else failed[0]
    parts = [f"{len(failed)} orphaned/flagged key(s)"] + ([f"{len(errors)} not judged"] if errors else [])
    return worst.model_copy(
        update={
            "target": "openrouter",
            "message": "; ".join(parts) + ": " + "; ".join(r.message for r in [*failed, *errors]),
            "evidence": {"items": [r.model_dump(mode="json") for r in results]},
            "recommendation": REAP_ADVICE if failed else worst.recommendation,
            "commands": REAP_COMMANDS if failed else worst.commands,
        }
    )
