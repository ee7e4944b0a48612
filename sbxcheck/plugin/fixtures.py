"""Public fixtures of the sbxcheck plugin (``pytest --fixtures`` shows each docstring).

- ``sbx_session``: the session state (inventory source, clients, options).
- ``sbx_inventory``: the validated inventory (session).
- ``sbx_sandbox``: the runs mounted for this session (``--sbx-mount``), each with its resolved run id.
- ``sbx_ssh_pool``: one SSH connection per host per session, shared by every item on that host.
- ``sbx_vm``: the connected VM of the current gate item (connect failures error the item in setup).
- ``sbx_gate_result``: the current gate item's result, fanned out with every other VM's (call it).
- ``sbx_mission``: a factory for ad-hoc missions, cancelled at teardown and kept in the ledger.
- ``sbx_missions``: the mission dispatcher of the canary suite (routes and workspace canaries).
- ``sbx_verdict``: records a CheckResult on the item, attaches its evidence, and fails/skips as it says.
- ``sbx_run_entry``, ``sbx_gate_run``, ``sbx_gate_model``, ``sbx_ledger_entry``, ``sbx_dgx``,
  ``sbx_github_probe``: the parametrized targets; request one and the plugin makes one item per target.

Nothing heavy is imported until a fixture runs: loading the plugin must stay cheap for runs without
sbxcheck items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sbxcheck.inventory import DgxSection, Inventory
    from sbxcheck.lifecycle import MissionDispatcher
    from sbxcheck.lifecycle.ledger import LedgerEntry
    from sbxcheck.lifecycle.mounts import Mounted
    from sbxcheck.plugin.gateruns import GateRun
    from sbxcheck.plugin.session import SbxSession
    from sbxcheck.results import CheckResult
    from sbxcheck.transports.ssh import SshHost, SshPool


def _session(request: pytest.FixtureRequest) -> SbxSession:
    from sbxcheck.plugin.stash import get_session

    return get_session(request.config)


@pytest.fixture(scope="session")
def sbx_session(request: pytest.FixtureRequest) -> SbxSession:
    """The session state: inventory source, clients (REST, MCP, OpenRouter admin) and options."""
    return _session(request)


@pytest.fixture(scope="session")
def sbx_sandbox(request: pytest.FixtureRequest) -> list[Mounted]:
    """The runs this session mounted (--sbx-mount or the inventory's [sssf] mounts), with their run ids.

    Mounting happens once, before collection, on the process that owns it (the xdist controller);
    teardown follows --sbx-teardown after the session (never by default; a failed gate keeps).
    """
    from sbxcheck.plugin.stash import run_state

    return list(run_state(request.config).mounts)


@pytest.fixture(scope="session")
def sbx_inventory(request: pytest.FixtureRequest) -> Inventory:
    """The inventory this session checks (an InventoryError errors the item with one readable line)."""
    return _session(request).inventory()


@pytest.fixture(scope="session")
def sbx_ssh_pool(request: pytest.FixtureRequest) -> Iterator[SshPool]:
    """A session-wide SSH pool: each host is connected once, lazily, and closed at the end."""
    pool = _session(request).ssh_pool()
    yield pool


@pytest.fixture(scope="session")
def sbx_missions(request: pytest.FixtureRequest) -> MissionDispatcher:
    """The session's mission dispatcher: every route is dispatched at once on first use, cancelled at the end."""
    from sbxcheck.plugin.stash import run_state

    dispatcher = _session(request).control_plane.dispatcher(run_state(request.config))
    dispatcher.start()
    return dispatcher


@pytest.fixture
def sbx_mission(request: pytest.FixtureRequest) -> Iterator[Callable[..., dict[str, Any]]]:
    """Dispatch ad-hoc missions for a canary: ``sbx_mission(backend=..., prompt=...)`` → the mission record.

    Each create carries an idempotency key derived from the session and the item, is written to the
    ledger before it is sent, and is cancelled at teardown (404 = already gone) and marked released.
    """
    from sbxcheck.clients.sandboxed_models import MissionSpec

    session = _session(request)
    created: list[tuple[str, str]] = []  # (mission id, ledger entry)

    def dispatch(**fields: Any) -> dict[str, Any]:
        client = session.sandboxed_client()
        key = f"sbxcheck-{session.session_tag[:12]}-{abs(hash((request.node.nodeid, len(created)))):x}"
        title = fields.pop("title", f"sbxcheck {session.session_tag[:8]} {request.node.name}")
        entry = session.ledger().record_intent(
            "mission", key, run_id=None, detail={"item": request.node.nodeid, "title": title}
        )
        spec = MissionSpec(idempotency_key=key, title=title, **fields)
        outcome = client.submit_mission(spec)
        mission = outcome.mission
        if outcome.coalesced_with is not None and mission.id not in {m for m, _ in created}:
            # joined someone else's mission: not this item's to use or to cancel
            session.ledger().mark_released(entry, f"never created: joined {mission.id} (x-coalesced-with)")
            from sbxcheck.errors import BadResponseError

            raise BadResponseError(
                f"the create was answered with mission {mission.id} (x-coalesced-with), which this session "
                "did not create: it is left alone",
                evidence={"answered_mission_id": mission.id, "coalesced_with": outcome.coalesced_with},
            )
        session.ledger().mark_created(entry, mission.id)
        created.append((mission.id, entry))
        return mission.model_dump(mode="json")

    yield dispatch
    errors = []
    for mission_id, entry in reversed(
        created
    ):  # reverse order of creation; one failure does not stop the rest
        try:
            gone = not session.sandboxed_client().cancel_mission(mission_id)
            session.ledger().mark_released(entry, "already gone" if gone else "cancelled at teardown")
        except Exception as exc:
            errors.append(f"{mission_id}: {exc}")
    if errors:
        raise RuntimeError("could not cancel: " + "; ".join(errors))


# ------------------------------------------------------------------ parametrized targets


def _target(request: pytest.FixtureRequest) -> Any:
    """The object behind this item's stable parameter key (run id, host, ledger entry id)."""
    from sbxcheck.plugin.stash import param_object

    key = getattr(request, "param", None)
    if key is None:
        pytest.skip(f"{request.fixturename}: no target (the plugin parametrizes it from the inventory)")
    return param_object(request.config, str(request.fixturename), key)


@pytest.fixture
def sbx_run_entry(request: pytest.FixtureRequest) -> GateRun | str:
    """One run record of the inventory's SSSF checkout (one item per open run), or why none can be read."""
    value: GateRun | str = _target(request)
    return value


@pytest.fixture
def sbx_gate_run(request: pytest.FixtureRequest) -> GateRun:
    """One gateable run (one item per open run with a target VM); its items share one SSH connection."""
    run: GateRun = _target(request)
    return run


@pytest.fixture
def sbx_gate_model(request: pytest.FixtureRequest) -> tuple[GateRun, str | None]:
    """``(run, model)``: one item per roster model of each gateable run (model None: empty roster)."""
    pair: tuple[GateRun, str | None] = _target(request)
    return pair


@pytest.fixture
def sbx_ledger_entry(request: pytest.FixtureRequest) -> LedgerEntry:
    """One entry earlier sessions left open in the ledger (mounts are gate items, missions canary items)."""
    from sbxcheck.errors import SbxError

    entry: LedgerEntry | SbxError = _target(request)
    if isinstance(entry, SbxError):  # the ledger itself could not be read (a FIFO, a symlink, ...)
        raise entry
    return entry


@pytest.fixture
def sbx_dgx(request: pytest.FixtureRequest) -> DgxSection:
    """The inventory's [dgx] section (the item skips when there is none)."""
    section: DgxSection = _target(request)
    return section


@pytest.fixture
def sbx_github_probe(request: pytest.FixtureRequest) -> Any:
    """One stored-GitHub-auth probe of the inventory's [sandboxed] section (workspace, via)."""
    return _target(request)


@pytest.fixture
def sbx_vm(request: pytest.FixtureRequest, sbx_ssh_pool: SshPool) -> SshHost:
    """The SSH host of the current gate item's run, connected (strict host keys)."""
    from sbxcheck.plugin.gateitems import gate_run_of

    found = gate_run_of(request.node)
    if found is None:
        raise RuntimeError(f"{request.node.nodeid}: sbx_vm needs a gate run parameter")
    run: GateRun = found[0]
    assert run.target is not None
    return sbx_ssh_pool.host(run.target.host)


@pytest.fixture
def sbx_gate_result(request: pytest.FixtureRequest) -> Callable[[], CheckResult]:
    """Call it for this gate item's CheckResult (its test is marked ``remote_check(check_fn)``).

    The first gate item starts every VM's checks at once (sbxcheck.plugin.fanout); setup waits for this
    item's VM connection (a connect failure errors the item here, as with ``sbx_vm``), the call
    waits for the item's own check. ``[ssh] max_parallel = 0`` runs the check inline instead.
    """
    import time

    from sbxcheck.plugin.fanout import assigned_items
    from sbxcheck.plugin.gateitems import plan_item

    session = _session(request)
    item = request.node
    planned = plan_item(item)
    if planned is None:
        raise RuntimeError(f"{item.nodeid}: sbx_gate_result needs a gate run parameter")
    target = planned.run.target
    assert target is not None
    fanout = session.gate_fanout()
    if fanout is None:
        host = session.ssh_pool().host(target.host)

        def inline() -> CheckResult:
            assert planned.check is not None, f"{item.nodeid} has no remote_check mark"
            started = time.monotonic()
            args = (planned.model,) if planned.model is not None else ()
            result = planned.check(host, target, *args)
            remote_s = round(time.monotonic() - started, 3)
            evidence = {**result.evidence, "remote_s": remote_s, "wait_s": 0.0}
            return _remembered(item, result.model_copy(update={"duration_s": remote_s, "evidence": evidence}))

        return inline
    if fanout.state(item.nodeid) is None:  # the first item (of this VM, under xdist) starts them all
        fanout.start(p for p in map(plan_item, assigned_items(request.session, item)) if p is not None)
    fanout.host(planned.run)
    return lambda: _remembered(item, fanout.result(item.nodeid))


def _remembered(item: pytest.Item, result: CheckResult) -> CheckResult:
    """``result``, its remote time kept on ``item`` (sbx_verdict gives it to a verdict judged from it)."""
    from sbxcheck.plugin.stash import REMOTE_SECONDS_KEY

    item.stash[REMOTE_SECONDS_KEY] = result.duration_s
    return result


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sbx_remote(check): internal: the gate check function an item runs on its VM"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Ctrl-C: cancel the gate checks still queued or in flight before the report is written."""
    from sbxcheck.plugin.stash import SESSION_KEY

    state = session.config.stash.get(SESSION_KEY, None)
    if state is not None and exitstatus == pytest.ExitCode.INTERRUPTED:
        state.cancel_fanout()


@pytest.fixture
def sbx_verdict(request: pytest.FixtureRequest) -> Callable[[CheckResult], None]:
    """Call with a CheckResult: it is recorded for the report, then the item passes, fails or skips.

    ``sbx_verdict(CheckResult.failed(check, target, message, evidence))`` fails the item with
    ``[failed/check_failed] message``; an ``error`` result makes it a pytest error. With ``--alluredir``
    the evidence, labels and steps go to Allure too.
    """

    def verdict(result: CheckResult) -> None:
        __tracebackhide__ = True
        from sbxcheck.plugin.stash import REMOTE_SECONDS_KEY, RESULT_KEY
        from sbxcheck.redact import default_redactor
        from sbxcheck.results import CheckResult, Outcome

        redactor = default_redactor()
        result = CheckResult.model_validate(redactor.redact(result.model_dump(mode="json")))
        remote_s = request.node.stash.get(REMOTE_SECONDS_KEY, None)
        if remote_s and not result.duration_s:  # judged here from remote work done in the fan-out
            result = result.model_copy(update={"duration_s": remote_s})
        request.node.stash[RESULT_KEY] = result
        _attach_allure(request, result)
        if result.outcome is Outcome.PASSED:
            return
        if result.outcome is Outcome.SKIPPED:
            pytest.skip(result.message)
        cls = result.classification.value if result.classification else "-"
        pytest.fail(f"[{result.outcome.value}/{cls}] {result.message}", pytrace=False)

    return verdict


def _attach_allure(request: pytest.FixtureRequest, result: CheckResult) -> None:
    """With --alluredir: labels, links, steps and evidence for this item (see sbxcheck.report.allure)."""
    if not request.config.pluginmanager.hasplugin("allure_pytest") or not request.config.getoption(
        "allure_report_dir", None
    ):
        return
    import time

    from sbxcheck.plugin.stash import CALL_START_KEY, suite_of
    from sbxcheck.report.allure import annotate

    params = getattr(getattr(request.node, "callspec", None), "params", {})
    started = request.node.stash.get(CALL_START_KEY, None)
    elapsed = result.duration_s or (time.monotonic() - started if started is not None else None)
    annotate(result, suite=suite_of(request.node) or "sbxcheck", params=params, elapsed_s=elapsed)
