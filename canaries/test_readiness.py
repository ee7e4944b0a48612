"""Workspace and catalog readiness, before any mission is spent (specs/sandboxed-sh.md, 4, 5 and 8.15).

``test_workspace_ready[<workspace>]``: status ready and what the inventory expects of it (names
only). ``test_catalog[<route>]``: backend and agent registered, its provider not removed; a model
that is not an exact catalog id its backend can reach is a warning (backends expand aliases: the
server's answer to the create decides). A route or canary that fails either is not dispatched.
"""

from __future__ import annotations

import pytest

from sbxcheck.suite import Inventory, Session, Verdict, check_catalog, check_workspace_ready

pytestmark = pytest.mark.canary


def test_workspace_ready(
    sbx_workspace: str, sbx_session: Session, sbx_inventory: Inventory, sbx_verdict: Verdict
) -> None:
    """The workspace is ready and carries the init scripts, MCPs, skills and env names expected of it."""
    assert sbx_inventory.sandboxed is not None
    expected = next((w for w in sbx_inventory.sandboxed.workspaces if w.name == sbx_workspace), None)
    sbx_verdict(check_workspace_ready(sbx_session.catalog_snapshot(), sbx_workspace, expected))


def test_catalog(
    sbx_catalog: str, sbx_session: Session, sbx_inventory: Inventory, sbx_verdict: Verdict
) -> None:
    """The route's backend and agent are registered (its model's catalog id: a warning when missing)."""
    assert sbx_inventory.sandboxed is not None
    route = next(r for r in sbx_inventory.sandboxed.routes if r.label == sbx_catalog)
    sbx_verdict(
        check_catalog(
            sbx_session.catalog_snapshot(), route, removed_providers=sbx_inventory.sandboxed.removed_providers
        )
    )
