"""Revocation proven over every page of GET /keys, and spend compared with the usage read before teardown."""

from __future__ import annotations

import json
from pathlib import Path

from sbxcheck.checks.revocation import RevocationVerifier, prove_revocation
from sbxcheck.clients.openrouter import PAGE_SIZE, OpenRouterKey
from sbxcheck.errors import TransportError

HASH = "f" * 64


def _keys(target: OpenRouterKey | None, before: int) -> list[OpenRouterKey]:
    keys = [OpenRouterKey(hash=f"{i:064x}", name=f"personal-{i}") for i in range(before)]
    return keys + ([target] if target is not None else [])


def test_absent_from_every_page_is_revoked() -> None:
    proof = prove_revocation("r1", HASH, lambda: _keys(None, PAGE_SIZE + 5))
    assert proof.revoked and proof.status == "revoked" and proof.pages_read == 2


def test_listed_disabled_is_revoked() -> None:
    proof = prove_revocation("r1", HASH, lambda: _keys(OpenRouterKey(hash=HASH, disabled=True), 3))
    assert proof.revoked and proof.status == "disabled" and proof.page == 1


def test_still_enabled_on_page_two_is_live_and_names_hash_and_line() -> None:
    key = OpenRouterKey(hash=HASH, name="sbx-r1", usage=0.42)
    proof = prove_revocation("r1", HASH, lambda: _keys(key, PAGE_SIZE))
    assert not proof.revoked and proof.status == "live" and proof.page == 2
    assert HASH in proof.message and "`just sbx lifecycle teardown r1`" in proof.message


def test_an_unreadable_list_is_unverified_never_revoked() -> None:
    def broken() -> list[OpenRouterKey]:
        raise TransportError("OpenRouter GET /keys -> 503")

    proof = prove_revocation("r1", HASH, broken)
    assert proof.status == "unknown" and not proof.revoked and "UNVERIFIED" in proof.message


def test_spend_is_compared_with_the_usage_before_teardown(tmp_path: Path) -> None:
    record = {"run_id": "r1", "key_hash": HASH, "spend": 0.10}
    (tmp_path / "r1.json").write_text(json.dumps(record))
    listing = [_keys(OpenRouterKey(hash=HASH, usage=0.25), 0)]
    verifier = RevocationVerifier(tmp_path, lambda: listing[0])
    verifier.snapshot("r1")
    listing[0] = []  # revoked by the teardown
    proof = verifier.prove("r1")
    assert proof.status == "revoked" and proof.spend_matches is False
    assert "spend recorded $0.1 differs from the key's usage $0.25" in proof.message
    assert proof.evidence()["spend"] == {"recorded": 0.10, "usage_before_teardown": 0.25, "matches": False}
