"""Revocation proven, not believed (sssf-sandbox.md teardown): a run's key looked up in every page of GET /keys.

Teardown's record says "revoked" because the recipe printed it. The only proof is the account's
own list, read with the provisioning key over every page (``OpenRouterAdmin.list_keys``, disabled
keys included): absent or disabled = revoked; still enabled = an incident naming the key hash and
the exact ``just sbx`` line. The key's usage read *before* the teardown is compared with the
``spend`` the recipe recorded. Nothing here revokes anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sbxcheck.clients.openrouter import PAGE_SIZE, OpenRouterKey
from sbxcheck.errors import SbxError
from sbxcheck.safeio import loads_bounded, read_text_file

__all__ = ["RevocationProof", "RevocationVerifier", "prove_revocation", "recorded_key"]

Status = Literal["revoked", "disabled", "live", "unknown", "no_key"]
SPEND_TOLERANCE_USD = 0.01


@dataclass(frozen=True)
class RevocationProof:
    """What ``GET /keys`` says about one run's key after its teardown."""

    run_id: str
    key_hash: str | None
    status: Status
    message: str
    page: int | None = None  # 1-based page of GET /keys the key is listed on (when listed)
    pages_read: int | None = None
    usage_before: float | None = None
    recorded_spend: float | None = None
    spend_matches: bool | None = None

    @property
    def revoked(self) -> bool:
        return self.status in ("revoked", "disabled", "no_key")

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "key_hash": self.key_hash,
            "message": self.message,
            "pages_read": self.pages_read,
        }
        if self.page is not None:
            out["page"] = self.page
        if self.recorded_spend is not None or self.usage_before is not None:
            out["spend"] = {
                "recorded": self.recorded_spend,
                "usage_before_teardown": self.usage_before,
                "matches": self.spend_matches,
            }
        return out


def recorded_key(runs_dir: Path, run_id: str) -> tuple[str | None, float | None]:
    """``(key_hash, spend)`` from ``<runs_dir>/<run_id>.json`` (None for what it does not hold)."""
    try:
        doc = loads_bounded(read_text_file(runs_dir / f"{run_id}.json"))
    except (OSError, ValueError):  # unreadable, not a regular file, not JSON, too large or deep
        return None, None
    if not isinstance(doc, dict):
        return None, None
    key_hash = doc.get("key_hash") if isinstance(doc.get("key_hash"), str) and doc.get("key_hash") else None
    spend = doc.get("spend")
    number = float(spend) if isinstance(spend, int | float) and not isinstance(spend, bool) else None
    return key_hash, number if number is not None and math.isfinite(number) else None


def _find(keys: Sequence[OpenRouterKey], key_hash: str) -> tuple[OpenRouterKey, int] | None:
    for index, key in enumerate(keys):
        if key.hash == key_hash:
            return key, index // PAGE_SIZE + 1
    return None


def prove_revocation(
    run_id: str,
    key_hash: str | None,
    list_keys: Callable[[], Sequence[OpenRouterKey]],
    *,
    recorded_spend: float | None = None,
    usage_before: float | None = None,
) -> RevocationProof:
    """Look ``key_hash`` up in every page of ``GET /keys`` (``list_keys`` pages; a partial list raises)."""
    if not key_hash:
        return RevocationProof(run_id, None, "no_key", f"{run_id} has no key_hash recorded: nothing to prove")
    try:
        keys = list(list_keys())
    except SbxError as exc:
        return RevocationProof(
            run_id,
            key_hash,
            "unknown",
            f"revocation of {key_hash[:12]}… UNVERIFIED: GET /keys could not be read ({exc.message})",
        )
    pages = max(1, -(-len(keys) // PAGE_SIZE))
    matches: bool | None = None
    if recorded_spend is not None and usage_before is not None:
        matches = abs(recorded_spend - usage_before) <= SPEND_TOLERANCE_USD
    note = (
        f"; WARNING: spend recorded ${recorded_spend:g} differs from the key's usage ${usage_before:g} "
        "read before the teardown"
        if matches is False and recorded_spend is not None and usage_before is not None
        else ""
    )
    found = _find(keys, key_hash)
    if found is None:
        return RevocationProof(
            run_id,
            key_hash,
            "revoked",
            f"{key_hash[:12]}… is absent from all {pages} page(s) of GET /keys{note}",
            pages_read=pages,
            usage_before=usage_before,
            recorded_spend=recorded_spend,
            spend_matches=matches,
        )
    key, page = found
    if key.disabled:
        return RevocationProof(
            run_id,
            key_hash,
            "disabled",
            f"{key_hash[:12]}… is listed disabled (page {page} of GET /keys){note}",
            page=page,
            pages_read=pages,
            usage_before=usage_before,
            recorded_spend=recorded_spend,
            spend_matches=matches,
        )
    return RevocationProof(
        run_id,
        key_hash,
        "live",
        f"the revoke did not take: key {key.name or 'sbx-' + run_id} ({key_hash}) is still ENABLED on page "
        f"{page} of GET /keys (usage ${key.usage if key.usage is not None else '?'}). Revoke it: "
        f"`just sbx lifecycle teardown {run_id}` again (or `just sbx manage reap` to see it listed)",
        page=page,
        pages_read=pages,
        usage_before=usage_before,
        recorded_spend=recorded_spend,
        spend_matches=matches,
    )


@dataclass
class RevocationVerifier:
    """Bound to a session: the runs directory and a lazily made provisioning-key ``list_keys``."""

    runs_dir: Path
    list_keys: Callable[[], Sequence[OpenRouterKey]]
    _usage_before: dict[str, float | None] = field(default_factory=dict)

    def snapshot(self, run_id: str) -> None:
        """Read the key's usage before the teardown revokes it (best effort: None when unreadable)."""
        key_hash, _ = recorded_key(self.runs_dir, run_id)
        usage: float | None = None
        if key_hash:
            try:
                found = _find(list(self.list_keys()), key_hash)
            except SbxError:
                found = None
            if found is not None and found[0].usage is not None:
                usage = float(found[0].usage)
        self._usage_before[run_id] = usage

    def prove(self, run_id: str) -> RevocationProof:
        key_hash, spend = recorded_key(self.runs_dir, run_id)
        return prove_revocation(
            run_id,
            key_hash,
            self.list_keys,
            recorded_spend=spend,
            usage_before=self._usage_before.get(run_id),
        )
