"""Mount before the gate, tear down after it — through the ``just sbx`` recipes, under a ledger.

sbxcheck never mints, creates, shares or revokes anything itself: every action is a recipe a person
could type (templates in the inventory). Before a mount starts, the ledger gets an entry; after
the session, the person's teardown policy decides (``never`` by default; a failed gate always
keeps its VM), harvest runs before any teardown, teardowns run in reverse order of creation, one
failing teardown does not stop the others, and the ledger says exactly what is left.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sbxcheck.lifecycle.ledger import Ledger, LedgerEntry
from sbxcheck.lifecycle.quirks import explain_quirk
from sbxcheck.lifecycle.recipes import (
    Decision,
    RecipeResult,
    RecipeTemplates,
    TeardownPolicy,
    decide_teardown,
    parse_harvest_output,
    parse_mount_output,
    parse_teardown_output,
    run_recipe,
)
from sbxcheck.redact import clip


class RevocationFinding(Protocol):
    """What a revocation proof tells a teardown (``checks.revocation.RevocationProof``)."""

    @property
    def status(self) -> str: ...

    @property
    def message(self) -> str: ...

    def evidence(self) -> dict[str, Any]: ...


class Revocations(Protocol):
    """Proves each revoke against GET /keys (``checks.revocation.RevocationVerifier``; the session wires it)."""

    def snapshot(self, run_id: str) -> None: ...

    def prove(self, run_id: str) -> RevocationFinding: ...


@dataclass
class Mounted:
    """One ``--sbx-mount NAME``: what was asked, what the recipe printed, and what became of it."""

    name: str
    entry_id: str
    run_id: str | None = None
    vm: str | None = None
    url: str | None = None
    ok: bool = False
    reason: str | None = None
    mount: dict[str, Any] = field(default_factory=dict)
    action: str = "pending"  # kept | torn-down | teardown-failed | abandoned | pending
    why: str = ""
    harvest: dict[str, Any] = field(default_factory=dict)
    teardown: dict[str, Any] = field(default_factory=dict)

    def ssh_hint(self, suffix: str) -> str:
        return f"ssh {self.vm or self.run_id or self.name}{suffix}"

    def summary(self, suffix: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "run_id": self.run_id,
            "mounted": self.ok,
            "action": self.action,
            "why": self.why,
            "ssh": self.ssh_hint(suffix) if self.run_id else None,
            "ledger_entry": self.entry_id,
            **({"reason": self.reason} if self.reason else {}),
            **({"teardown": self.teardown_proof()} if self.teardown else {}),
        }

    def teardown_proof(self) -> dict[str, Any]:
        """What the teardown recipe said and what GET /keys proved, without the recipe's output."""
        kept = ("exit_code", "key", "gate", "duration_s")
        proof: dict[str, Any] = {k: self.teardown[k] for k in kept if k in self.teardown}
        revocation = self.teardown.get("revocation")
        proof["revocation"] = revocation if isinstance(revocation, dict) else {"status": "not checked"}
        if self.harvest:
            proof["harvest"] = self.harvest.get("status")
        return proof


class MountManager:
    """Owns the mounts of one session: mount on request, decide and tear down at the end."""

    def __init__(self, templates: RecipeTemplates, ledger: Ledger, *, vm_suffix: str = ".exe.xyz") -> None:
        self.templates = templates
        self.ledger = ledger
        self.vm_suffix = vm_suffix
        self.mounts: list[Mounted] = []
        self.revocation: Revocations | None = None  # GET /keys afterwards proves each revoke took effect

    def mount(self, name: str) -> Mounted:
        """Run the mount recipe for ``name``; the ledger entry is written before anything exists."""
        entry_id = self.ledger.record_intent("mount", name, run_id=None, detail={"recipe": "mount"})
        mounted = Mounted(name=name, entry_id=entry_id)
        self.mounts.append(mounted)
        try:
            result = run_recipe(self.templates, "mount", run_id=name)
        except KeyboardInterrupt:  # interrupted twice: its recipe is stopped; the entry stays open
            mounted.action = "abandoned"
            mounted.why = (
                f"mount of {name} abandoned by a second interrupt; its ledger entry stays open and a later "
                f"session matches it to the run record it made ({name}-…), then --sbx-sweep releases it"
            )
            self.ledger.mark_abandoned(entry_id, f"mount recipe stopped by a second interrupt ({name})")
            raise
        info = parse_mount_output(result.stdout)
        mounted.mount = result.evidence(tail_chars=2000)
        mounted.run_id, mounted.vm, mounted.url = info.run_id, info.vm, info.url
        if mounted.run_id:
            self.ledger.mark_created(entry_id, mounted.run_id)
        mounted.ok = result.ok and info.ok
        if not mounted.ok:
            mounted.reason = self._explained(result, _why(result, info.reason), mounted.mount)
        return mounted

    def _explained(self, result: RecipeResult, why: str, evidence: dict[str, Any]) -> str:
        """``why``, plus the platform quirk the recipe tripped over (its recipe line and the fix), if any."""
        quirk = explain_quirk(result.text, self.templates.cwd)
        if quirk is None:
            return why
        evidence["quirk"] = quirk.evidence()
        return f"{why} — {quirk.summary()}"

    def finish(self, policy: TeardownPolicy, gate_outcomes: Mapping[str, Sequence[str]]) -> list[Mounted]:
        """Apply the teardown policy to every mount, newest first; each decision lands in the ledger."""
        outcomes = {m.run_id: list(gate_outcomes.get(m.run_id, [])) for m in self.mounts if m.run_id}
        decisions = decide_teardown(policy, outcomes)
        try:
            self._apply(decisions)
        except KeyboardInterrupt:  # interrupted twice: what was not finished stays, and says so
            for mounted in self.mounts:
                if mounted.action == "pending":
                    mounted.action = "abandoned"
                    mounted.why = (
                        "teardown abandoned by a second interrupt; the ledger keeps it open "
                        f"(release it: just sbx lifecycle teardown {mounted.run_id or '<run-id>'}, or --sbx-sweep)"
                    )
            raise
        return list(self.mounts)

    def _apply(self, decisions: Mapping[str, Decision]) -> None:
        for mounted in reversed(self.mounts):
            if mounted.action == "abandoned":
                continue  # open in the ledger already, saying so
            if mounted.run_id is None:
                # it may still have made a run record before it failed: the entry stays open, and a
                # later session matches it against the run records (never kept: kept hides nothing)
                mounted.action = "abandoned"
                mounted.why = (
                    f"the mount printed no run id; its ledger entry stays open until a later session "
                    f"matches it to a run record {mounted.name}-… (or finds none)"
                )
                self.ledger.mark_abandoned(mounted.entry_id, "the mount printed no run id")
                continue
            decision = decisions.get(mounted.run_id, Decision("keep", "no decision"))
            if decision.action == "keep":
                mounted.action, mounted.why = "kept", decision.why
                self.ledger.mark_kept(mounted.entry_id, decision.why)
                continue
            self._teardown(mounted, decision.why)

    def release(self, entry: LedgerEntry, run_id: str) -> tuple[bool, dict[str, Any]]:
        """Tear down ``run_id``, which an earlier session's ``entry`` created (``--sbx-sweep``)."""
        harvest = run_recipe(self.templates, "harvest", run_id=run_id)
        if self.revocation is not None:
            self.revocation.snapshot(run_id)
        teardown = run_recipe(self.templates, "teardown", run_id=run_id)
        parsed = parse_teardown_output(teardown.stdout, run_id=run_id)
        ok = teardown.ok and parsed.ok
        reason = parsed.reason
        proof = self.revocation.prove(run_id) if ok and self.revocation is not None else None
        if proof is not None and proof.status == "live":
            ok, reason = False, proof.message
        if ok:
            self.ledger.mark_released(entry.id, "swept: just sbx lifecycle teardown")
        shown = teardown.evidence(2000)
        if not ok:
            reason = self._explained(teardown, reason or _why(teardown, None), shown)
        return ok, {
            "harvest": harvest.evidence(1000),
            "teardown": shown,
            "teardown_ok": ok,
            "reason": reason,
            **({"revocation": proof.evidence()} if proof is not None else {}),
        }

    def _teardown(self, mounted: Mounted, why: str) -> None:
        assert mounted.run_id is not None
        started = time.monotonic()
        harvest = run_recipe(self.templates, "harvest", run_id=mounted.run_id)
        mounted.harvest = {**harvest.evidence(1000), **_harvest_facts(harvest, mounted.run_id)}
        if self.revocation is not None:
            self.revocation.snapshot(mounted.run_id)  # the key's usage, before the revoke
        teardown = run_recipe(self.templates, "teardown", run_id=mounted.run_id)
        parsed = parse_teardown_output(teardown.stdout, run_id=mounted.run_id)
        mounted.teardown = {
            **teardown.evidence(2000),
            "key": parsed.key,
            "gate": parsed.gate,
            "duration_s": round(time.monotonic() - started, 2),
        }
        proof = None
        if teardown.ok and parsed.ok and self.revocation is not None:
            proof = self.revocation.prove(mounted.run_id)
            mounted.teardown["revocation"] = proof.evidence()
        if proof is not None and proof.status == "live":  # the recipe said revoked; GET /keys says not
            mounted.action = "teardown-failed"
            mounted.why = f"{why}; teardown failed: {proof.message}"
            mounted.reason = mounted.why  # the ledger entry stays open
        elif teardown.ok and parsed.ok:
            mounted.action, mounted.why = "torn-down", why
            self.ledger.mark_released(mounted.entry_id, "just sbx lifecycle teardown")
        else:
            mounted.action = "teardown-failed"
            failure = self._explained(teardown, _why(teardown, parsed.reason), mounted.teardown)
            mounted.why = f"{why}; teardown failed: {failure}"
            mounted.reason = mounted.why  # the ledger entry stays open: the report and next session show it


def _harvest_facts(result: RecipeResult, run_id: str) -> dict[str, Any]:
    parsed = parse_harvest_output(result.stdout, run_id=run_id)
    return {"status": parsed.status, "ok": parsed.ok}


def _why(result: RecipeResult, parsed_reason: str | None) -> str:
    if result.timed_out:
        return f"{result.name} recipe timed out"
    if result.error:
        return result.error
    if result.exit_code not in (0, None):
        last = next((ln for ln in reversed(result.text.splitlines()) if ln.strip()), "")
        return f"{result.name} recipe exited {result.exit_code}: {clip(last, 200)}"
    return parsed_reason or f"{result.name} recipe output not understood"
