"""Workspace-visibility canaries: does each backend really see the workspace's checkout?

A read-only mission per (backend, workspace) runs explicit steps; the verdict comes from its tool
events and an independent ``POST /api/workspaces/:id/exec`` sha256, never from the agent's summary.
"""

from __future__ import annotations

import pytest

from sbxcheck.suite import MissionDispatcher, Verdict, check_workspace_visible

pytestmark = pytest.mark.canary


def test_workspace_visible(sbx_canary: str, sbx_missions: MissionDispatcher, sbx_verdict: Verdict) -> None:
    """The checkout path, its git ref and pin are visible, and an MCP tool read the file's exact bytes."""
    wait = sbx_missions.section.execution_deadline_s + sbx_missions.section.canary_deadline_s + 120
    sbx_verdict(check_workspace_visible(sbx_missions.canary(sbx_canary, wait)))
