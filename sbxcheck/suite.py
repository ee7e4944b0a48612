"""What a suite may import: sbxcheck's API for test modules (the shipped gates/ and canaries/, and yours).

An item asks the plugin's fixtures for what it checks (``sbx_gate_run``, ``sbx_session``,
``sbx_missions``, ``sbx_ssh_pool``, ...), calls one check or one helper named here and hands the
:class:`~sbxcheck.results.CheckResult` to ``sbx_verdict``. A suite imports from this module and
:mod:`sbxcheck.results` only (``tests/unit/test_import_graph.py`` holds the shipped ones to it), so
the modules behind it may move without breaking a suite.

- **Fixture types**: :class:`GateRun` (``sbx_gate_run``), :class:`Session` (``sbx_session``: the
  resources an item may use), :class:`MissionDispatcher` (``sbx_missions``), :class:`SshPool`,
  :class:`LedgerEntry`, the inventory's sections; :data:`Verdict` and :data:`Remote` for
  ``sbx_verdict`` and ``sbx_gate_result``.
- **Remote gate checks**: :func:`remote_check` marks an item with the check the fan-out runs on its
  VM (``@remote_check(check_git_integrity)``); the item reads the result from ``sbx_gate_result()``.
- **Checks**: the pure verdicts the shipped items call (``check_*``), and the helpers that join a
  session, the inventory and checks into one result (DGX probes and triage, machine inventory, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

from sbxcheck.checks.catalog import check_catalog, check_workspace_ready
from sbxcheck.checks.contract import check_dispatch_contract
from sbxcheck.checks.discovery import check_discovery_mcp, check_discovery_rest
from sbxcheck.checks.fleet import check_expected_node, check_fleet_health, check_health
from sbxcheck.checks.gate import check_git_integrity, check_pi_models, check_roster_matches
from sbxcheck.checks.gate_model import check_cost_reported, check_credit_remaining, check_model_answers
from sbxcheck.checks.hygiene import (
    SIGNALS,
    SignalScan,
    check_mission_signal,
    check_mission_verdicts,
    check_missions_integrity,
    check_running_health,
)
from sbxcheck.checks.missions import (
    check_dispatched,
    check_prompt_limits,
    check_reaches_execution,
    check_record_echoes_request,
)
from sbxcheck.checks.records import check_run_record
from sbxcheck.checks.run import (
    check_observe_app,
    check_observe_obs,
    check_run_alive,
    check_run_log_clean,
    run_precondition,
)
from sbxcheck.checks.spend import check_credits
from sbxcheck.checks.vm_hygiene import check_vm_hygiene
from sbxcheck.checks.workspace import check_workspace_visible
from sbxcheck.errors import SbxError
from sbxcheck.inventory import DgxSection, GithubProbeSpec, Inventory, SandboxedSection
from sbxcheck.lifecycle.ledger import LedgerEntry
from sbxcheck.lifecycle.missions import MissionDispatcher
from sbxcheck.plugin.fanout import remote_check
from sbxcheck.plugin.gateruns import GateRun
from sbxcheck.plugin.suitework import (
    github_auth,
    ledger_verdict,
    machine_inventory,
    mission_signal_scan,
    orphan_audit,
    vm_hygiene_verdict,
)
from sbxcheck.plugin.triage import (
    dgx_ssh_reachable,
    tailscale_ping,
    tailscaled_active,
    tailscaled_enabled,
    triage_dgx_routing,
)
from sbxcheck.results import CheckResult
from sbxcheck.transports.ssh import SshPool

if TYPE_CHECKING:
    from sbxcheck.checks.catalog import CatalogSnapshot
    from sbxcheck.clients.mcp import AssistantMcpClient
    from sbxcheck.clients.openrouter import OpenRouterAdmin
    from sbxcheck.clients.sandboxed import SandboxedClient
    from sbxcheck.plugin.review import EntryReview
    from sbxcheck.plugin.session import SbxSession

#: ``sbx_verdict``: record a result for the report; the item then passes, fails, errors or skips by it
Verdict = Callable[[CheckResult], None]
#: ``sbx_gate_result``: the result of the item's ``@remote_check`` on its VM (waits for the fan-out)
Remote = Callable[[], CheckResult]


class Session(Protocol):
    """The session as a suite item sees it (``sbx_session``): the resources an item may use.

    Each client is made once per session, from the inventory, and closed when the session ends.
    """

    #: the run may let the DGX triage run its one recovery command (``--sbx-remediate``)
    remediate: bool

    def inventory(self) -> Inventory: ...

    def sandboxed_client(self) -> SandboxedClient: ...

    def mcp_client(self) -> AssistantMcpClient: ...

    def openrouter_admin(self) -> OpenRouterAdmin: ...

    def catalog_snapshot(self) -> CatalogSnapshot: ...

    def review_entry(self, entry: LedgerEntry) -> EntryReview: ...


def refuse_without_plugin(config: pytest.Config, items: list[pytest.Item], suite_dir: Path) -> None:
    """A shipped suite collected without the sbxcheck plugin: one usage error saying so (pytest would
    report "fixture not found" for every item)."""
    if config.pluginmanager.hasplugin("sbxcheck.plugin.fixtures"):
        return
    if any(Path(item.path).resolve().is_relative_to(suite_dir) for item in items):
        raise pytest.UsageError(
            f"sbxcheck: the suites in {suite_dir.parent} need the sbxcheck pytest plugin (its fixtures "
            "sbx_verdict, sbx_session, ...), which is not loaded (-p no:sbxcheck, or "
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD): drop -p no:sbxcheck or add -p sbxcheck"
        )


if TYPE_CHECKING:
    _THE_SESSION_IS_A_SESSION: type[Session] = SbxSession  # mypy holds the fixture's object to the facade

__all__ = [
    "SIGNALS",
    "CheckResult",
    "DgxSection",
    "GateRun",
    "GithubProbeSpec",
    "Inventory",
    "LedgerEntry",
    "MissionDispatcher",
    "Remote",
    "SandboxedSection",
    "SbxError",
    "Session",
    "SignalScan",
    "SshPool",
    "Verdict",
    "check_catalog",
    "check_cost_reported",
    "check_credit_remaining",
    "check_credits",
    "check_discovery_mcp",
    "check_discovery_rest",
    "check_dispatch_contract",
    "check_dispatched",
    "check_expected_node",
    "check_fleet_health",
    "check_git_integrity",
    "check_health",
    "check_mission_signal",
    "check_mission_verdicts",
    "check_missions_integrity",
    "check_model_answers",
    "check_observe_app",
    "check_observe_obs",
    "check_pi_models",
    "check_prompt_limits",
    "check_reaches_execution",
    "check_record_echoes_request",
    "check_roster_matches",
    "check_run_alive",
    "check_run_log_clean",
    "check_run_record",
    "check_running_health",
    "check_vm_hygiene",
    "check_workspace_ready",
    "check_workspace_visible",
    "dgx_ssh_reachable",
    "github_auth",
    "ledger_verdict",
    "machine_inventory",
    "mission_signal_scan",
    "orphan_audit",
    "refuse_without_plugin",
    "remote_check",
    "run_precondition",
    "tailscale_ping",
    "tailscaled_active",
    "tailscaled_enabled",
    "triage_dgx_routing",
    "vm_hygiene_verdict",
]
