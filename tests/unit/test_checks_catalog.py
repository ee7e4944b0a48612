"""Workspace and catalog readiness (issue 21 item 2), and the dispatcher keeping doomed routes back."""

from __future__ import annotations

from typing import Any

import pytest

from sbxcheck.checks.catalog import (
    CatalogSnapshot,
    check_catalog,
    check_workspace_ready,
    near_misses,
    read_catalog,
    route_preflight,
)
from sbxcheck.checks.missions import check_dispatched, check_record_echoes_request
from sbxcheck.clients.channels import Created
from sbxcheck.clients.sandboxed_models import AiProvider, BackendInfo, CatalogProvider, MissionSpec, Workspace
from sbxcheck.errors import HostUnreachable
from sbxcheck.inventory import RouteSpec, SandboxedSection, WorkspaceExpectation
from sbxcheck.lifecycle import MissionDispatcher
from sbxcheck.results import Classification, Outcome

PROVIDERS = [
    {"id": "p1", "provider_type": "anthropic", "use_for_backends": ["claudecode"]},
    {"id": "p2", "provider_type": "openai", "use_for_backends": ["codex"]},
    {"id": "p3", "provider_type": "zai", "use_for_backends": ["opencode"]},
]
CATALOG = [
    {"id": "anthropic", "models": [{"id": "claude-opus-4-8"}, {"id": "claude-fable-5-1"}]},
    {"id": "openai", "models": [{"id": "gpt-5.6-terra"}, {"id": "gpt-5.6-sol"}]},
    {"id": "zai", "models": [{"id": "glm-5.2"}, {"id": "glm-5.1"}]},
]


def _ws(name: str, status: str = "ready", **extra: Any) -> Workspace:
    return Workspace.model_validate(
        {
            "id": f"id-{name}",
            "name": name,
            "status": status,
            "init_scripts": ["base", "uv-python"],
            "mcps": ["workspace"],
            "env_vars": {"GH_TOKEN": "ghp_" + "x" * 36},
        }
        | extra
    )


def _snapshot(**over: Any) -> CatalogSnapshot:
    parts: dict[str, Any] = {
        "workspaces": [_ws("verity"), _ws("lab", "pending")],
        "library_agents": ["build", "plan"],
        "backends": ["claudecode", "codex", "opencode"],
        "providers": [AiProvider.model_validate(p) for p in PROVIDERS],
        "catalog": [CatalogProvider.model_validate(c) for c in CATALOG],
    }
    parts.update(over)
    return CatalogSnapshot(**parts, backend_agents=lambda b: ["default"] if b == "codex" else [])


def route(**kw: Any) -> RouteSpec:
    return RouteSpec.model_validate({"name": "r", "agent": "build", "backend": "claudecode"} | kw)


def test_ready_workspace_with_everything_expected_passes_and_keeps_names_only() -> None:
    want = WorkspaceExpectation(
        name="verity", init_scripts=["base"], mcps=["workspace"], env_names=["GH_TOKEN"]
    )
    result = check_workspace_ready(_snapshot(), "verity", want)
    assert result.outcome is Outcome.PASSED
    assert result.evidence["env_var_names"] == ["GH_TOKEN"] and "ghp_" not in str(result.model_dump())


def test_pending_workspace_fails_as_infrastructure() -> None:
    result = check_workspace_ready(_snapshot(), "lab")
    assert result.outcome is Outcome.FAILED and result.classification is Classification.INFRASTRUCTURE
    assert "pending" in result.message and "may take minutes" in result.message


def test_missing_init_script_mcp_and_env_name_are_named() -> None:
    want = WorkspaceExpectation(
        name="verity",
        init_scripts=["base", "github-cli"],
        mcps=["orchestrator"],
        env_names=["LEAN_CACHE_URL"],
    )
    result = check_workspace_ready(_snapshot(), "verity", want)
    assert result.outcome is Outcome.FAILED
    assert result.evidence["missing"] == {
        "init_scripts": ["github-cli"],
        "mcps": ["orchestrator"],
        "env_names": ["LEAN_CACHE_URL"],
    }


def test_unlisted_workspace_and_unreadable_list() -> None:
    assert check_workspace_ready(_snapshot(), "nope").outcome is Outcome.FAILED
    down = check_workspace_ready(_snapshot(workspaces=HostUnreachable("refused")), "verity")
    assert down.outcome is Outcome.ERROR and down.classification is Classification.INFRA_UNREACHABLE


def test_expectation_refuses_a_value_for_a_name() -> None:
    with pytest.raises(ValueError):
        WorkspaceExpectation(name="verity", env_names=["ghp_" + "a" * 36])


@pytest.mark.parametrize(
    "spec",
    [
        {"backend": "claudecode", "model_override": "claude-opus-4-8"},
        {"backend": "codex", "model_override": "gpt-5.6-terra", "agent": "default"},
        {"backend": "opencode", "model_override": "zai/glm-5.2"},
        {"backend": "opencode", "model_override": "glm-5.2"},
        {"backend": "claudecode"},
        {"backend": "codex", "agent": "codex"},
    ],
)
def test_good_routes_pass(spec: dict[str, Any]) -> None:
    result = check_catalog(_snapshot(), route(**spec))
    assert result.outcome is Outcome.PASSED, result.message


def test_a_near_miss_is_a_warning_naming_the_valid_id_never_a_failure() -> None:
    result = check_catalog(_snapshot(), route(model_override="opus-4.8"))
    assert result.outcome is Outcome.PASSED and result.classification is None
    assert "WARNING" in result.message and "'claude-opus-4-8'" in result.message
    assert result.evidence["near_misses"] == ["claude-opus-4-8"] and "dispatched anyway" in result.message
    assert route_preflight(_snapshot(), route(model_override="opus-4.8")) is None
    assert near_misses("kimi-k2.7", ["moonshotai-kimi-k2-7-code", "glm-5.2"]) == ["moonshotai-kimi-k2-7-code"]


def test_a_provider_only_for_codex_through_opencode_is_a_warning() -> None:
    result = check_catalog(_snapshot(), route(backend="opencode", model_override="gpt-5.6-terra"))
    assert result.outcome is Outcome.PASSED and "WARNING" in result.message
    assert "lists only codex" in result.message and "use backend codex" in (result.recommendation or "")


def test_a_codex_alias_is_dispatched_though_the_catalog_lists_only_what_it_expands_to() -> None:
    alias = route(backend="codex", model_override="gpt-5.6")
    assert check_catalog(_snapshot(), alias).outcome is Outcome.PASSED
    assert route_preflight(_snapshot(), alias) is None


def test_removed_provider_is_flagged_before_dispatch() -> None:
    virtuals = route(backend="opencode", model_override="virtuals/claude-fable-5-1")
    result = check_catalog(_snapshot(), virtuals, removed_providers=["virtuals"])
    assert result.outcome is Outcome.FAILED and "removed" in result.message
    # a prefix the catalog does not list is only sbxcheck's reading: a warning, the server decides
    gone = check_catalog(_snapshot(), route(backend="opencode", model_override="minimax/MiniMax-M3"))
    assert gone.outcome is Outcome.PASSED and "not in the catalog" in gone.message


def test_unregistered_agent_and_backend_fail() -> None:
    agent = check_catalog(_snapshot(), route(agent="ana", backend="opencode"))
    assert agent.outcome is Outcome.FAILED and "'ana' is not registered" in agent.message
    backend = check_catalog(_snapshot(), route(backend="grok"))
    assert backend.outcome is Outcome.FAILED and "not registered" in backend.message


@pytest.mark.parametrize("backend", ["claudecode", "codex"])
def test_an_agent_the_library_lacks_does_not_keep_back_a_backend_whose_create_skips_validation(backend: str) -> None:
    """Upstream's create skips agent validation for claudecode, codex, gemini and grok (1.3.0
    control/mod.rs:4652-4657): the route is dispatched with a warning and the server decides."""
    result = check_catalog(_snapshot(), route(agent="ana", backend=backend))
    assert result.outcome is Outcome.PASSED, result.message
    assert f"skips agent validation for {backend}" in result.message and result.cause is None


def test_an_unreadable_catalog_is_could_not_tell_and_dooms_nothing() -> None:
    snap = _snapshot(catalog=HostUnreachable("refused"))
    result = check_catalog(snap, route(model_override="claude-opus-4-8"))
    assert result.outcome is Outcome.ERROR
    assert route_preflight(snap, route(model_override="claude-opus-4-8")) is None


def test_preflight_dooms_a_route_to_a_pending_workspace() -> None:
    doomed = route_preflight(_snapshot(), route(workspace="lab"))
    assert doomed is not None and doomed.check == "workspace_ready"
    assert route_preflight(_snapshot(), route(workspace="verity")) is None


class _Client:
    def list_workspaces(self) -> list[Workspace]:
        return [_ws("verity")]

    def library_agents(self) -> list[str]:
        return ["build"]

    def backends(self) -> list[BackendInfo]:
        return [BackendInfo(id="claudecode")]

    def backend_agents(self, backend: str) -> list[str]:
        self.asked = getattr(self, "asked", 0) + 1
        return []

    def ai_providers(self) -> list[AiProvider]:
        raise HostUnreachable("refused")

    def provider_catalog(self) -> list[CatalogProvider]:
        return []


def test_read_catalog_keeps_each_parts_error_and_asks_backend_agents_once() -> None:
    client = _Client()
    snap = read_catalog(client)
    assert isinstance(snap.providers, HostUnreachable) and snap.backends == ["claudecode"]
    snap.backend_agents("claudecode")
    snap.backend_agents("claudecode")
    assert client.asked == 1


class _Channel:
    via = "rest"

    def __init__(self) -> None:
        self.created: list[MissionSpec] = []

    def create(self, spec: MissionSpec) -> Created:
        self.created.append(spec)
        return Created({"id": f"m{len(self.created)}", "status": "pending"}, None)

    def get(self, mission_id: str) -> dict[str, Any]:
        return {"id": mission_id, "status": "completed"}

    def events(self, mission_id: str, since_seq: int) -> list[dict[str, Any]]:
        return [{"event_type": "tool_call", "sequence": 1}]

    def cancel(self, mission_id: str) -> bool:
        return True


def test_the_dispatcher_never_creates_a_doomed_route() -> None:
    section = SandboxedSection(
        url="http://127.0.0.1:1",
        routes=[
            route(name="good", model_override="claude-opus-4-8"),
            route(name="typo", model_override="opus-4.8"),  # only the catalog's reading: dispatched
            route(name="ana", agent="ana", backend="opencode"),  # no agent ana, and opencode validates agents
        ],
        execution_deadline_s=5,
        poll_interval_s=0.05,
    )
    channel = _Channel()
    snap = _snapshot()
    dispatcher = MissionDispatcher(
        section,
        lambda via: channel,  # type: ignore[arg-type, return-value]
        "tag" * 8,
        workspace_ids=dict,
        exec_sha256=lambda ws, path: "",
        preflight=lambda r: route_preflight(snap, r),
    )
    try:
        typo = dispatcher.route("typo", 10)
        good = dispatcher.route("good", 10)
        ana = dispatcher.route("ana", 10)
    finally:
        dispatcher.close()
    assert [s.agent for s in channel.created].count("ana") == 0
    assert good.created is not None and typo.created is not None and ana.created is None
    result = check_dispatched(ana)
    assert result.outcome is Outcome.FAILED and result.classification is Classification.CONFIG_DEFECT
    assert result.message.startswith("not dispatched: catalog[ana] failed")
    assert result.cause == "catalog:agent:ana"
    assert check_record_echoes_request(ana).outcome is Outcome.SKIPPED
