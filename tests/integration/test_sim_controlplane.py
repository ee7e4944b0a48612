"""The control-plane double under BackgroundServer, driven by the real SandboxedClient."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from sbxcheck.clients.sandboxed import MissionRejected, NotFound, SandboxedClient, ServerError
from sbxcheck.clients.sandboxed_models import Mission, MissionSpec, StoredEvent
from sbxcheck.errors import AuthFailed, SbxError, SimError
from sbxcheck.redact import Redactor
from sbxcheck.sim.controlplane import CONTROLPLANE_FAULTS, NIL_UUID, ControlPlaneDouble
from sbxcheck.sim.httpserver import BackgroundServer

# its module-scoped servers start once, on one xdist worker (sbxcheck makes -n use loadgroup)
pytestmark = pytest.mark.xdist_group("controlplane-double")

TERMINAL_OR_PARKED = {"completed", "failed", "interrupted", "awaiting_user"}


@pytest.fixture(scope="module")
def double(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneDouble]:
    d = ControlPlaneDouble(tmp_path_factory.mktemp("cp"), latency_scale=0.02, seed=7)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def server(double: ControlPlaneDouble) -> Iterator[BackgroundServer]:
    with BackgroundServer(double.app, name="controlplane") as srv:
        yield srv


@pytest.fixture
def client(double: ControlPlaneDouble, server: BackgroundServer) -> Iterator[SandboxedClient]:
    with SandboxedClient(server.url, password=double.password, timeout_s=10.0) as c:
        yield c
    # Leave no live mission and no fault behind for the next test.
    double.clear_faults()
    with SandboxedClient(server.url, password=double.password, timeout_s=10.0) as cleanup:
        for mid in double.missions_nonterminal():
            cleanup.cancel_mission(mid)
    assert double.missions_nonterminal() == []


def settle(client: SandboxedClient, mission_id: str, until: set[str] | None = None) -> Mission:
    return client.wait_for_mission(mission_id, until or TERMINAL_OR_PARKED, timeout_s=10.0, interval_s=0.03)


def by_type(events: list[StoredEvent], event_type: str) -> list[StoredEvent]:
    return [e for e in events if e.event_type == event_type]


def canary_prompt(double: ControlPlaneDouble, workspace: str) -> str:
    ws = double.workspace_path(workspace)
    repo = double.checkout_path(workspace).name
    return (
        "Workspace-visibility canary. Read only.\n"
        f"STEP: test -d {repo}\n"
        f"STEP: git -C {ws}/{repo} rev-parse HEAD\n"
        f"STEP: cat {repo}/lean-toolchain\n"
        f"STEP: mcp read_file {repo}/lean-toolchain\n"
    )


# ---- auth and health ----------------------------------------------------------------------------


def test_health_is_public_and_consistent(server: BackgroundServer) -> None:
    with SandboxedClient(server.url) as anon:
        health = anon.health()
        assert (health.status, health.auth_required, health.auth_mode) == ("ok", True, "single_tenant")
        assert anon.auth_status().auth_mode == "single_tenant"
        with pytest.raises(AuthFailed, match="Missing Authorization header"):
            anon.fleet_health()
    raw = httpx.get(f"{server.url}/api/health", timeout=5)
    assert raw.headers["cache-control"] == "private, max-age=5"


def test_login_and_401_texts(double: ControlPlaneDouble, server: BackgroundServer) -> None:
    with SandboxedClient(server.url, password="wrong-password-123") as bad:
        with pytest.raises(AuthFailed, match="Invalid password") as info:
            bad.list_missions()
        assert "wrong-password-123" not in str(info.value)
    with (
        SandboxedClient(server.url, token="not-a-jwt") as forged,
        pytest.raises(AuthFailed, match="Invalid or expired token"),
    ):
        forged.list_workspaces()
    with SandboxedClient(server.url, password=f"  {double.password} ") as ok:  # the password is trimmed
        assert isinstance(ok.list_missions(), list)
        assert ok.authenticated and ok.token_exp is not None and ok.token_exp > time.time() + 86400
    resp = httpx.get(f"{server.url}/api/control/missions", headers={"Authorization": "Token x"}, timeout=5)
    assert (resp.status_code, resp.text) == (401, "Invalid or expired token")
    assert resp.headers["content-type"].startswith("text/plain")


def test_multi_user_login(tmp_path: Path) -> None:
    d = ControlPlaneDouble(tmp_path, users={"ops": "ops-pass-1"}, workspaces=(), latency_scale=0.02)
    with BackgroundServer(d.app) as srv:
        with (
            SandboxedClient(srv.url, password="ops-pass-1") as no_user,
            pytest.raises(AuthFailed, match="Username"),
        ):
            no_user.login()
        with (
            SandboxedClient(srv.url, password="nope", username="ops") as wrong,
            pytest.raises(AuthFailed, match="Invalid username or password"),
        ):
            wrong.login()
        with SandboxedClient(srv.url, password="ops-pass-1", username="ops") as ok:
            assert ok.health().auth_mode == "multi_user" and ok.list_missions() == []


def test_dev_mode_and_missing_jwt_secret(tmp_path: Path) -> None:
    dev = ControlPlaneDouble(tmp_path / "dev", dev_mode=True, workspaces=(), latency_scale=0.02)
    with BackgroundServer(dev.app) as srv, SandboxedClient(srv.url) as anon:
        assert anon.health().auth_required is False
        assert anon.fleet_health().status == "ok"  # no token needed: every request runs as ``dev``
    broken = ControlPlaneDouble(tmp_path / "nojwt", jwt_secret_configured=False, workspaces=())
    with BackgroundServer(broken.app) as srv, SandboxedClient(srv.url, password=broken.password) as c:
        with pytest.raises(ServerError, match="JWT_SECRET not configured") as info:
            c.login()
        assert info.value.status == 500


# ---- mission lifecycle --------------------------------------------------------------------------


def test_create_runs_to_completed_with_events(client: SandboxedClient) -> None:
    created = client.create_mission(
        title="lifecycle", prompt="Say ok", backend="claudecode", agent="build", model_effort="high"
    )
    assert created.status == "pending" and created.health_verdict == "queued"
    assert (created.agent, created.backend, created.model_effort) == ("build", "claudecode", "high")
    assert created.model_override == "claude-opus-4-8"  # claudecode fills the profile default
    assert created.workspace_id == NIL_UUID and created.workspace_name == "host"
    done = settle(client, created.id)
    assert done.status == "completed" and done.health_verdict is None and done.terminal_reason
    assert done.execution is not None and done.execution.execution_state == "terminal"
    assert done.last_agent_event_at and done.last_output_at
    events = client.mission_events(done.id)
    statuses = [e.metadata["status"] for e in by_type(events, "mission_status_changed")]
    assert statuses == ["active", "completed"]
    call, result = by_type(events, "tool_call")[0], by_type(events, "tool_result")[0]
    assert call.tool_name == "bash" and call.tool_call_id == result.tool_call_id
    assert result.content.strip() == "ok" and result.metadata["exit_code"] == 0
    assert by_type(events, "assistant_message")[0].content == "ok"
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert done.history[0].content == "Say ok"


def test_default_list_hides_completed(client: SandboxedClient) -> None:
    m = settle(client, client.create_mission(title="listing", prompt="hi").id)
    assert m.id not in {x.id for x in client.list_missions()}
    listed = {x.id: x for x in client.list_missions(status="completed")}
    assert m.id in listed and listed[m.id].agent is None  # only GET carries agent
    assert m.id in {x.id for x in client.list_missions(all=True)}


def test_idempotency_key_returns_the_original(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    double.inject("cp.stuck-pending")  # keep the original pending so title coalescing applies too
    first = client.create_mission(title="idem-1", prompt="hi", idempotency_key="canary-key-1")
    again = client.submit_mission(
        MissionSpec(title="idem-1 retry", prompt="hi", idempotency_key="canary-key-1", extra={"bogus": 1})
    )
    assert again.mission.id == first.id and again.coalesced_with == first.id
    assert again.ignored_fields == ("bogus",)
    twin = client.submit_mission(MissionSpec(title="idem-1", prompt="hi"))  # retry-shaped: same title
    assert twin.mission.id == first.id and twin.coalesced_with == first.id
    other_session = client.create_mission(title="idem-1", prompt="hi", origin_session_id="chat-2")
    assert other_session.id != first.id
    assert len(double.missions_nonterminal()) == 2

    double.inject("cp.idempotency-ignored")
    a = client.create_mission(title="idem-2", prompt="hi", idempotency_key="canary-key-2")
    b = client.create_mission(title="idem-2", prompt="hi", idempotency_key="canary-key-2")
    assert a.id == b.id  # title coalescing stays on, as upstream: it masks the ignored key
    c = client.create_mission(title="idem-2 retry", prompt="hi", idempotency_key="canary-key-2")
    assert c.id != a.id  # the duplicate the fault lets through once only the key could match


def test_events_cursor(client: SandboxedClient) -> None:
    m = settle(client, client.create_mission(title="cursor", prompt="hi").id)
    page = client.mission_events_page(m.id, counts=True)
    total = len(page.events)
    assert total >= 6 and page.max_sequence == total and page.total_events == total
    after = client.mission_events(m.id, since_seq=3)
    assert [e.sequence for e in after] == list(range(4, total + 1))
    assert [e.sequence for e in client.mission_events(m.id, since_seq=1, limit=2)] == [2, 3]
    newest = client.mission_events(m.id, before_seq=2**63 - 1, limit=2)
    assert [e.sequence for e in newest] == [total - 1, total]
    both = client.mission_events(m.id, since_seq=0, before_seq=3)  # before_seq wins
    assert [e.sequence for e in both] == [1, 2]
    trace = client.mission_events(m.id, view="trace")
    assert {e.event_type for e in trace} <= {"tool_call", "tool_result", "error"}
    with pytest.raises(NotFound, match="Mission not found"):
        client.mission_events("00000000-0000-0000-0000-00000000beef")


def test_cancel_and_gone(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    double.inject("cp.stuck-pending")
    m = client.create_mission(title="cancel-me", prompt="hi")
    assert m.id in double.missions_nonterminal()
    assert client.cancel_mission(m.id) is True
    after = client.get_mission(m.id)
    assert after.status == "interrupted" and after.interrupted_at and after.resumable
    assert m.id not in double.missions_nonterminal()
    assert client.cancel_mission("00000000-0000-0000-0000-00000000dead") is False
    with pytest.raises(NotFound, match="not found"):
        client.get_mission("00000000-0000-0000-0000-00000000dead")


# ---- create validation --------------------------------------------------------------------------


def test_create_validation(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    with pytest.raises(MissionRejected, match="Unknown backend: amp"):
        client.create_mission(title="v1", backend="amp")
    with pytest.raises(MissionRejected) as info:
        client.create_mission(title="v2", backend="codex", model_override="gpt-5.5-sol")
    assert info.value.status == 400 and "not found in openai catalog" in info.value.reason
    assert info.value.valid_models == ["gpt-5.6-terra", "gpt-5.6-sol", "gpt-6-astra"]
    with pytest.raises(MissionRejected, match="selects backend 'codex'"):
        client.create_mission(title="v3", backend="claudecode", model_override="codex/gpt-5.6-terra")
    with pytest.raises(MissionRejected, match="not found in library"):
        client.create_mission(title="v4", backend="opencode", agent="nonexistent")
    gemini = client.create_mission(
        title="v5", prompt="hi", backend="gemini", model_effort="max", agent="anything"
    )
    assert gemini.model_effort is None and gemini.agent == "anything"  # effort silently dropped
    native = client.create_mission(title="v6", prompt="hi", agent="codex", model_override="gpt-6")
    assert (native.backend, native.model_override) == ("codex", "gpt-6-astra")  # alias expansion
    oc = client.create_mission(title="v7", prompt="hi", backend="opencode", model_override="glm-5.2")
    assert oc.model_override == "zai/glm-5.2"  # provider/model normalisation
    with pytest.raises(MissionRejected, match="estimated_disk_gib"):
        client.create_mission(title="v8", estimated_disk_gib=600)
    verity = double.workspace_id("verity")
    double.inject("cp.stuck-pending", "*")  # the first mission must still be live when the second arrives
    try:
        first = client.create_mission(title="occupy", prompt="hi", workspace_id=verity)
        with pytest.raises(MissionRejected) as busy:
            client.create_mission(title="occupy-2", prompt="hi", workspace_id=verity)
    finally:
        double.clear_faults("cp.stuck-pending")
    assert (busy.value.status, busy.value.error_code) == (409, "workspace_occupied")
    client.cancel_mission(first.id)


def test_effort_reject_max_fault(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    ok = client.create_mission(title="effort-max", prompt="hi", backend="codex", model_effort="max")
    assert ok.model_effort == "max"
    double.inject("cp.effort-reject-max")
    with pytest.raises(MissionRejected) as info:
        client.create_mission(title="effort-max-2", prompt="hi", backend="codex", model_effort="max")
    assert "Invalid model_effort for backend 'codex'" in info.value.reason
    assert info.value.supported_efforts == ["low", "medium", "high", "xhigh"]
    stepped = client.create_mission(title="effort-xhigh", prompt="hi", backend="codex", model_effort="xhigh")
    assert stepped.model_effort == "xhigh"


def test_record_drops_model_fault(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    double.inject("cp.record-drops-model", "codex")
    m = client.create_mission(title="drop", prompt="hi", backend="codex", model_override="gpt-5.6-terra")
    assert m.model_override is None and client.get_mission(m.id).model_override is None
    other = client.create_mission(
        title="keep", prompt="hi", backend="gemini", model_override="gemini-3.6-pro"
    )
    assert other.model_override == "gemini-3.6-pro"


# ---- lifecycle faults ---------------------------------------------------------------------------


def test_backend_crash_fault(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    double.inject("cp.backend-crash")
    crashed = [
        settle(
            client,
            client.create_mission(title=f"crash-{m}", prompt="hi", backend="opencode", model_override=m).id,
        )
        for m in ("glm-5.2", "MiniMax-M3")
    ]
    for m in crashed:
        assert m.status == "failed" and m.terminal_evidence == "fn3 is not a function"
        events = client.mission_events(m.id)
        assert [e.content for e in by_type(events, "error")] == ["fn3 is not a function"]
        assert by_type(events, "tool_call") == [] and by_type(events, "assistant_message") == []
        assert by_type(events, "agent_phase")[0].metadata["phase"] == "migration"
    healthy = settle(client, client.create_mission(title="crash-codex", prompt="hi", backend="codex").id)
    assert healthy.status == "completed"


def test_model_not_found_fault(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    double.inject("cp.model-not-found")
    m = settle(
        client,
        client.create_mission(title="mnf", prompt="hi", backend="opencode", model_override="glm-5.2").id,
    )
    assert (m.status, m.awaiting_kind, m.health_verdict) == ("awaiting_user", "decision", "parked")
    events = client.mission_events(m.id)
    assert "ProviderModelNotFoundError" in by_type(events, "error")[0].content
    assert by_type(events, "tool_call") == []


def test_codex_goal_over_the_limit_fails_at_once(client: SandboxedClient) -> None:
    m = client.create_mission(title="goal", prompt="  /goal " + "x" * 4100, backend="codex")
    assert m.goal_mode and m.goal_objective is not None and len(m.goal_objective) == 4100
    done = settle(client, m.id)
    assert done.status == "failed"
    assert (
        done.terminal_evidence
        == "codex thread/goal/set failed: goal objective must be at most 4000 characters"
    )
    assert by_type(client.mission_events(m.id), "tool_call") == []


def test_stuck_pending_fault(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    double.inject("cp.stuck-pending")
    m = client.create_mission(title="stuck", prompt="hi", backend="codex")
    time.sleep(0.3)  # about 10x the scaled dispatch latency
    again = client.get_mission(m.id)
    assert again.status == "pending" and again.execution is None and again.health_verdict == "queued"
    assert client.mission_events(m.id) == []
    assert client.fleet_health().queue_depth == 1


@pytest.fixture
def slower(double: ControlPlaneDouble) -> Iterator[None]:
    """Ten times the usual latency, so that the short ``active`` window can be observed."""
    before = double.latency_scale
    double.latency_scale = 0.2
    yield
    double.latency_scale = before


@pytest.mark.usefixtures("slower")
def test_no_evidence_fault(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    double.inject("cp.no-evidence")
    created = client.create_mission(title="silent", prompt="hi", backend="codex")
    active = settle(client, created.id, {"active", "completed"})
    assert active.status == "active" and active.health_verdict == "working"
    assert active.execution is None and active.last_agent_event_at is None  # active without evidence
    assert created.id not in {r.mission_id for r in client.running()}
    done = settle(client, created.id)
    assert done.status == "completed"
    assert {e.event_type for e in client.mission_events(done.id)} == {"mission_status_changed"}


@pytest.mark.usefixtures("slower")
def test_running_lists_live_missions(client: SandboxedClient) -> None:
    m = client.create_mission(title="running", prompt="\n".join(["STEP: pwd"] * 4), backend="codex")
    active = settle(client, m.id, {"active", "completed"})
    assert active.status == "active"
    assert active.execution is not None and active.execution.execution_state in ("running", "waiting_tool")
    row = next(r for r in client.running() if r.mission_id == m.id)
    assert row.state in ("running", "waiting_for_tool") and row.health == {"status": "healthy"}
    assert settle(client, m.id).status == "completed"


# ---- workspaces ---------------------------------------------------------------------------------


def test_workspace_canary_sees_the_checkout(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    verity = double.workspace_id("verity")
    prompt = canary_prompt(double, "verity") + "STEP: rm -rf verity\n"
    m = client.create_mission(title="canary-codex", prompt=prompt, workspace_id=verity, backend="codex")
    done = settle(client, m.id)
    assert done.status == "completed"
    results = by_type(client.mission_events(m.id), "tool_result")
    assert [r.metadata["is_error"] for r in results] == [False, False, False, False, True]
    assert results[1].content.strip() == double.head_sha("verity")
    assert results[2].content.strip() == "leanprover/lean4:v4.21.0"
    assert results[3].tool_name == "mcp__workspace__read_file" and "lean4:v4.21.0" in results[3].content
    assert "not allowed" in results[4].content  # the simulated agent is read-only
    assert (double.checkout_path("verity") / "lean-toolchain").exists()


def test_mount_missing_fault(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    double.inject("cp.mount-missing", "opencode")
    verity = double.workspace_id("verity")
    m = client.create_mission(
        title="canary-opencode",
        prompt=canary_prompt(double, "verity"),
        workspace_id=verity,
        backend="opencode",
    )
    done = settle(client, m.id)
    assert done.workspace_id == verity and done.workspace_name == "verity"  # the record looks right
    results = by_type(client.mission_events(m.id), "tool_result")
    assert all(r.metadata["is_error"] for r in results)
    assert results[3].content == "project not found: verity"
    ok = client.create_mission(
        title="canary-codex-2", prompt=canary_prompt(double, "verity"), workspace_id=verity, backend="codex"
    )
    good = by_type(client.mission_events(settle(client, ok.id).id), "tool_result")
    assert not any(r.metadata["is_error"] for r in good)
    assert client.workspace_exec(
        verity, "test -f verity/lean-toolchain", 10
    ).ok  # the workspace itself is fine


def test_workspaces_listing_and_env_exposure(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    listed = {w.name: w for w in client.list_workspaces()}
    assert set(listed) == {"host", "verity", "lean-lab"}
    verity = listed["verity"]
    assert (verity.status, verity.workspace_type) == ("ready", "container")
    assert verity.env_var_names == ["DEPLOY_PASSWORD", "LEAN_CACHE_URL", "VERITY_API_TOKEN"]
    assert verity.env_values_present  # REST sends values (§8.11)
    # only generated-looking values under secret-sounding names: named by class, never a recognised key format
    assert set(verity.credential_classes.values()) <= {"generic-secret"}
    raw = httpx.get(
        f"{client.base_url}/api/workspaces",
        headers={"Authorization": f"Bearer {client.bearer_token()}"},
        timeout=5,
    ).json()
    assert all(v.startswith("sim-secret-") for w in raw for v in w["env_vars"].values())
    double.inject("cp.env-values-exposed")
    exposed = client.get_workspace(verity.id)
    recognised = sorted(n for n, c in exposed.credential_classes.items() if c != "generic-secret")
    assert recognised == ["ANTHROPIC_API_KEY", "GH_TOKEN"]
    lean = client.get_workspace(listed["lean-lab"].id)
    assert set(lean.credential_classes.values()) <= {"generic-secret"}
    text = "".join(repr(w) + w.model_dump_json() for w in [*listed.values(), exposed])
    assert not any(secret in text for secret in double.secret_values())
    with pytest.raises(NotFound):
        client.get_workspace("00000000-0000-0000-0000-00000000dead")


def test_workspace_exec(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    verity = double.workspace_id("verity")
    head = client.workspace_exec(verity, "git -C verity rev-parse HEAD", 10)
    assert head.ok and head.stdout.strip() == double.head_sha("verity")
    failing = client.workspace_exec(verity, "echo oops >&2; exit 3", 10)
    assert (failing.exit_code, failing.stderr.strip(), failing.timed_out) == (3, "oops", False)
    in_cwd = client.workspace_exec(verity, "cat lean-toolchain", 10, cwd="verity")
    assert in_cwd.stdout.strip() == "leanprover/lean4:v4.21.0"
    env = client.workspace_exec(verity, 'test -n "$VERITY_API_TOKEN"', 10)
    assert env.ok  # env_vars are merged into the command's environment
    started = time.monotonic()
    slow = client.workspace_exec(verity, "sleep 5", timeout_s=1)
    assert slow.timed_out and not slow.ok and time.monotonic() - started < 4


# ---- fleet --------------------------------------------------------------------------------------


def test_fleet_endpoints_and_faults(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    fleet = client.remote_nodes()
    nodes = {n.id: n for n in fleet.nodes}
    assert fleet.enabled and set(nodes) == {"babylon", "nippur", "ashur", "dgx-spark"}
    assert all(n.status == "online" and not n.cordoned for n in nodes.values())
    assert "lean" in nodes["dgx-spark"].labels and nodes["dgx-spark"].lean_runtime_ready
    # a mission of its own: under xdist the module's other tests may run on another worker
    client.create_mission(title="fleet-health-count", prompt="hi")
    health = client.fleet_health()
    assert (health.status, health.control_responsive, health.disk_level) == ("ok", True, "ok")
    assert health.missions is not None and health.missions.total >= 1

    for fault in ("fleet.node-offline", "fleet.node-cordoned", "fleet.degraded-disk"):
        double.inject(fault)
    nodes = {n.id: n for n in client.remote_nodes().nodes}
    offline = nodes["dgx-spark"]
    assert offline.status == "offline" and offline.error and offline.capacity_available == 0
    assert offline.last_seen is not None and nodes["ashur"].last_seen is not None
    assert offline.last_seen < nodes["ashur"].last_seen  # RFC3339 UTC strings sort by time
    assert nodes["babylon"].cordoned and nodes["babylon"].status == "online"
    disk = client.fleet_health()
    assert disk.disk_level == "critical" and disk.disk_percent is not None and disk.disk_percent >= 95
    assert disk.disk_free_gib is not None and disk.disk_required_gib is not None
    assert disk.disk_free_gib < disk.disk_required_gib
    double.inject("fleet.control-unresponsive")
    degraded = client.fleet_health()  # still HTTP 200
    assert (degraded.status, degraded.control_responsive) == ("degraded", False)


def test_cordon_endpoint(client: SandboxedClient) -> None:
    first = client.cordon_node("nippur")
    assert (first.node, first.cordoned, first.changed) == ("nippur", True, True)
    assert client.cordon_node("nippur").changed is False
    assert client.cordon_node("nippur", cordoned=False).changed is True
    with pytest.raises(NotFound, match="unknown remote node"):
        client.cordon_node("old-agent")


def test_auth_expired_fault(client: SandboxedClient, double: ControlPlaneDouble) -> None:
    client.login()
    double.inject("cp.auth-expired")
    with pytest.raises(AuthFailed, match="Invalid or expired token"):
        client.list_missions()
    assert client.health().status == "ok"  # public routes still answer


def test_fault_registry(double: ControlPlaneDouble) -> None:
    assert {
        "cp.backend-crash", "cp.model-not-found", "cp.effort-reject-max", "cp.record-drops-model",
        "cp.stuck-pending", "cp.no-evidence", "cp.mount-missing", "cp.idempotency-ignored",
        "cp.auth-expired", "cp.env-values-exposed", "fleet.node-offline", "fleet.node-cordoned",
        "fleet.degraded-disk",
    } <= set(CONTROLPLANE_FAULTS)  # fmt: skip
    with pytest.raises(SimError, match="unknown control-plane fault"):
        double.inject("cp.nope")


def test_no_secret_reaches_errors_or_reprs(double: ControlPlaneDouble, server: BackgroundServer) -> None:
    seen: list[str] = [repr(double)]
    with SandboxedClient(server.url, password=double.password) as c:
        c.login()
        seen.append(repr(c))
        calls: list[Callable[[], object]] = [
            lambda: c.create_mission(title="s1", backend="codex", model_override="nope"),
            lambda: c.get_mission("00000000-0000-0000-0000-00000000dead"),
        ]
        for call in calls:
            with pytest.raises(SbxError) as info:
                call()
            seen += [str(info.value), repr(info.value.args), repr(getattr(info.value, "evidence", {}))]
        seen += [repr(w) for w in c.list_workspaces()]
        token = c.bearer_token()
    assert token is not None
    text = "\n".join(seen)
    for secret in [*double.secret_values(), token]:
        assert secret not in text
    assert Redactor(double.secret_values()).redact_text(text) == text
