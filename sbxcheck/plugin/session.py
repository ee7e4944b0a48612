"""Per-process session state: where the inventory comes from, the embedded fleet, the gate targets.

The plugin keeps one ``SbxSession`` in ``config.stash``. Nothing here knows about checks; checks
never learn whether the inventory was written by the simulator.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sbxcheck.checks.gate import GateTarget
from sbxcheck.clients.roster import RosterSource, roster_from_checkout
from sbxcheck.clients.runrecords import RunEntry, gate_problem, select_runs
from sbxcheck.errors import InventoryError, SbxError
from sbxcheck.fleetsource import FORCED
from sbxcheck.inventory import Inventory, load_inventory
from sbxcheck.lifecycle.ledger import Ledger, LedgerEntry, default_owner
from sbxcheck.lifecycle.mounts import Mounted, MountManager
from sbxcheck.plugin.interrupts import finish_before_interrupt
from sbxcheck.plugin.review import EntryReview, review_entry
from sbxcheck.safeio import read_text_file
from sbxcheck.transports.ssh import SshPool
from sbxcheck.transports.ssh_connect import SshSettings

_T = TypeVar("_T")


if TYPE_CHECKING:  # production runs never import the simulator
    from sbxcheck.checks.catalog import CatalogSnapshot
    from sbxcheck.clients.channels import MissionChannel
    from sbxcheck.clients.mcp import AssistantMcpClient
    from sbxcheck.clients.openrouter import OpenRouterAdmin, OpenRouterKey
    from sbxcheck.clients.sandboxed import SandboxedClient
    from sbxcheck.fleetsource import EmbeddedFleet, FleetSource
    from sbxcheck.inventory import RouteSpec
    from sbxcheck.lifecycle import MissionDispatcher
    from sbxcheck.plugin.fanout import GateFanout
    from sbxcheck.plugin.settings import Settings
    from sbxcheck.results import CheckResult


@dataclass(frozen=True)
class GateRun:
    """One run as the gate suite sees it: its record entry, and its target when it can be gated."""

    entry: RunEntry
    target: GateTarget | None
    problem: str | None

    @property
    def run_id(self) -> str:
        return self.entry.run_id


class SbxSession:
    """Lazily resolves the inventory (a file, or the embedded fleet) and owns the SSH pool."""

    def __init__(
        self,
        settings: Settings,
        source: FleetSource,
        *,
        session_tag: str | None = None,
        mounted_run_ids: Sequence[str] = (),
        ledger_ids: Iterable[str] | None = None,
    ) -> None:
        """``mounted_run_ids`` and ``ledger_ids``: what an xdist worker shares with its controller."""
        self.settings = settings
        self.source = source
        self.rootdir = settings.rootdir
        self.invocation_dir = settings.invocation_dir.resolve()
        self.force_sim = source.source == FORCED
        self.faults = list(settings.sim_faults)
        self.run_ids = [*settings.run_ids, *(r for r in mounted_run_ids if r not in settings.run_ids)]
        self.sim_seed = settings.sim_seed
        self.inventory_path: Path | None = source.path
        self._inventory: Inventory | None = None
        self._inventory_error: InventoryError | None = None
        self._sim: EmbeddedFleet | None = None
        self._sim_dir: Path | None = None
        self._pool: SshPool | None = None
        self._fanout: GateFanout | None = None
        self._gate_runs: list[GateRun] | None = None
        self.session_tag = session_tag or uuid.uuid4().hex
        self._client: SandboxedClient | None = None
        self._mcp: AssistantMcpClient | None = None
        self._dispatcher: MissionDispatcher | None = None
        self._catalog: CatalogSnapshot | None = None  # workspace and catalog readiness, read once
        self.max_spend_usd = settings.max_spend_usd
        self.probe_route = settings.probe  # one narrow no-push probe of this route, nothing else
        self.on_wait: Any = None  # the progress line's callback, handed to the dispatcher (plugin sets it)
        self.cancel_report: dict[str, str] = {}
        self.cleanup: list[dict[str, Any]] = []  # what the end of the session released or failed to
        self.ledger_ids = None if ledger_ids is None else set(ledger_ids)  # a worker: the controller's entries
        self.ledger_problem: SbxError | None = None  # why the ledger could not be read (one error item says it)
        self.remediate = settings.remediate  # the DGX triage may run its one recovery command
        self.state_option = str(settings.state) if settings.state else None
        self.mount_names = list(settings.mounts)
        self.mounts: list[Mounted] = []
        self.mounts_finished = False
        self.mount_error: str | None = None
        self.sweep = settings.sweep
        self.max_parallel = settings.max_parallel  # else the inventory's [ssh] max_parallel
        self.interrupted_during: list[str] = []  # teardown steps an interrupt arrived in, and how they ended
        self._ledger: Ledger | None = None
        self._mount_manager: MountManager | None = None
        self.wanted_routes: set[str] | None = None  # None: every route of the inventory
        self.wanted_canaries: set[str] | None = None

    # --------------------------------------------------------------- inventory

    @property
    def uses_sim(self) -> bool:
        return self.inventory_path is None

    def describe_source(self) -> str:
        if self.uses_sim:
            why = "--sbx-sim" if self.force_sim else "no inventory given"
            faults = f"; faults: {', '.join(self.faults)}" if self.faults else ""
            return f"embedded simulated fleet ({why}{faults})"
        return str(self.inventory_path)

    def describe_details(self) -> dict[str, object]:
        """Facts about the fleet for the report header (never secrets)."""
        if not self.uses_sim:
            return {}
        from sbxcheck.fleetsource import pi_status

        details: dict[str, object] = {"pi": pi_status(self.session_tag), "faults": list(self.faults)}
        if self._sim is not None and self._sim.pi is not None:
            pi = self._sim.pi
            details["pi"] = pi.describe()
        return details

    def inventory(self) -> Inventory:
        """The validated inventory; raises InventoryError (cached) when it cannot be had."""
        if self._inventory is not None:
            return self._inventory
        if self._inventory_error is not None:
            raise self._inventory_error
        try:
            if self.inventory_path is not None:
                self._inventory = load_inventory(self.inventory_path)
            else:
                self._inventory = load_inventory(self._sim_fleet().materialize())
        except InventoryError as exc:
            self._inventory_error = exc
            raise
        except SbxError as exc:
            self._inventory_error = InventoryError(f"embedded fleet: {exc.message}")
            raise self._inventory_error from None
        return self._inventory

    def _sim_fleet(self) -> EmbeddedFleet:
        if self._sim is None:
            from sbxcheck.fleetsource import open_embedded

            root = Path(tempfile.mkdtemp(prefix="sbxcheck-sim-"))
            fleet = open_embedded(
                root, self.faults, seed=self.sim_seed, sssf_checkout=self.settings.sim_sssf,
                install_attempt=self.session_tag,  # the session's xdist workers try npm once between them
            )  # fmt: skip
            self._sim_dir, self._sim = fleet.root, fleet
        return self._sim

    def ensure_live(self) -> None:
        """Make the fleet reachable: a no-op for a real inventory; starts the embedded fleet's servers."""
        self.inventory()
        if self._sim is not None:
            self._sim.serve()

    @property
    def sim(self) -> EmbeddedFleet | None:
        return self._sim

    # --------------------------------------------------------------- gate targets

    def gate_runs(self) -> list[GateRun]:
        """Every run the gate covers, in run-id order; resolved once per process, offline."""
        if self._gate_runs is not None:
            return self._gate_runs
        inv = self.inventory()
        sssf = inv.sssf
        if sssf is None:
            self._gate_runs = []
            return self._gate_runs
        runs = []
        if self.mount_error:  # the mounts could not even start: one item says why
            entry = RunEntry("mount", sssf.runs_path, None, f"--sbx-mount failed: {self.mount_error}")
            runs.append(GateRun(entry, None, entry.problem))
        for mounted in self.mounts:
            if not mounted.ok and mounted.run_id is None:
                path = sssf.runs_path / f"{mounted.name}.json"
                entry = RunEntry(
                    f"mount-{mounted.name}", path, None, f"mount {mounted.name!r} failed: {mounted.reason}"
                )
                runs.append(GateRun(entry, None, entry.problem))
        failed_mounts = {m.run_id: m for m in self.mounts if m.run_id and not m.ok}
        rosters: dict[str, RosterSource] = {}
        for entry in select_runs(sssf.runs_path, self.run_ids):
            if entry.run_id in failed_mounts:
                reason = failed_mounts[entry.run_id].reason
                entry = RunEntry(entry.run_id, entry.path, entry.record, f"mount failed: {reason}")
            record = entry.record
            problem = entry.problem or (gate_problem(record, entry.path) if record is not None else None)
            if record is None or problem is not None:
                runs.append(GateRun(entry, None, problem or f"{entry.path}: unreadable run record"))
                continue
            assert record.vm_name is not None and record.commit_sha is not None
            if record.commit_sha not in rosters:  # one `git show` per commit, not per run
                rosters[record.commit_sha] = roster_from_checkout(
                    sssf.checkout, sssf.roster_config, record.commit_sha
                )
            roster = rosters[record.commit_sha]
            target = GateTarget(
                run_id=record.run_id,
                host=f"{record.vm_name}{sssf.vm_host_suffix}",
                commit_sha=record.commit_sha,
                roster=roster.models,
                roster_config=sssf.roster_config,
                openrouter_base_url=sssf.openrouter_base_url,
                credit_floor_usd=sssf.credit_floor_usd,
                cost_probe_model=sssf.cost_probe_model,
                ping_timeout_s=sssf.ping_timeout_s,
                pi_timeout_s=sssf.pi_timeout_s,
                command_timeout_s=inv.ssh.command_timeout_s,
                ssh_config=str(inv.ssh.config) if inv.ssh.config else None,
                pid=record.pid,
                ports=record.ports,
                https_url=record.https_url or "",
                observe_probe=sssf.observe_probe,
                observe_timeout_s=sssf.observe_timeout_s,
            )
            runs.append(GateRun(entry, target, roster.problem))
        self._gate_runs = runs
        return runs

    # --------------------------------------------------------------- transport

    def ssh_pool(self) -> SshPool:
        if self._pool is None:
            inv = self.inventory()
            self.ensure_live()
            self._pool = SshPool(
                SshSettings(
                    config_file=inv.ssh.config,
                    known_hosts=tuple(inv.ssh.known_hosts),
                    identity_file=inv.ssh.identity,
                    connect_timeout_s=inv.ssh.connect_timeout_s,
                    command_timeout_s=inv.ssh.command_timeout_s,
                    max_sessions=inv.ssh.max_sessions,
                )
            )
        return self._pool

    def gate_fanout(self) -> GateFanout | None:
        """The gate fan-out (created on the first gate item), or None when ``[ssh] max_parallel = 0``."""
        if self._fanout is None:
            ssh = self.inventory().ssh
            max_parallel = ssh.max_parallel if self.max_parallel is None else self.max_parallel
            if max_parallel <= 0:
                return None
            from sbxcheck.plugin.fanout import GateFanout

            self._fanout = GateFanout(self.ssh_pool(), max_parallel, ssh.max_sessions)
        return self._fanout

    def cancel_fanout(self) -> None:
        """Interrupted: cancel the gate checks still queued or in flight (the report names them)."""
        if self._fanout is not None:
            self._fanout.cancel()

    @property
    def fanout(self) -> GateFanout | None:
        """The fan-out if one was started in this process."""
        return self._fanout

    # --------------------------------------------------------------- ledger and mounts

    def state_dir(self) -> Path:
        """Where the ledger lives; never depends on pytest's rootdir or on how a path was spelled.

        In order: ``--sbx-state DIR`` (relative to the directory pytest was started in); the
        inventory's ``[state] dir`` (relative to the inventory file); ``.sbxcheck/state`` beside a
        real inventory file (its resolved location); the embedded fleet's own directory; else
        ``.sbxcheck/state`` in the directory pytest was started in.
        """
        if self.state_option:
            option = Path(self.state_option).expanduser()
            return option if option.is_absolute() else self.invocation_dir / option
        inv = self.inventory()
        if inv.state.dir is not None:
            return inv.state.dir
        if self.inventory_path is not None:
            return self.inventory_path.resolve().parent / ".sbxcheck" / "state"
        if self._sim_dir is not None:
            return self._sim_dir / "state"
        return self.invocation_dir / ".sbxcheck" / "state"

    @property
    def ledger_in_use(self) -> bool:
        return self._ledger is not None

    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger(self.state_dir(), session=self.session_tag)
        return self._ledger

    def ledger_entries(self) -> list[LedgerEntry]:
        """Open entries of other sessions (kept ones too: they are shown, never swept)."""
        try:
            entries = self.ledger().open_entries()
        except SbxError as exc:
            self.ledger_problem = exc  # a FIFO, a symlink, ...: one error item says it
            return []
        mine = default_owner()
        others = [
            e
            for e in entries
            if (e.session != self.session_tag if e.session is not None else e.owner != mine)
        ]
        if self.ledger_ids is not None:  # a worker collects what the controller saw, nothing more
            others = [e for e in others if e.id in self.ledger_ids]
        return others

    def leaked_entries(self) -> list[LedgerEntry]:
        """Entries other sessions left open and did not keep on purpose."""
        return [e for e in self.ledger_entries() if e.state != "kept"]

    def review_entry(self, entry: LedgerEntry) -> EntryReview:
        """Decide about one entry another session left (:func:`sbxcheck.plugin.review.review_entry`)."""
        return review_entry(self, entry)

    def mount_manager(self) -> MountManager:
        if self._mount_manager is None:
            sssf = self.inventory().sssf
            if sssf is None:
                raise InventoryError("--sbx-mount needs an [sssf] section (the checkout the recipes run in)")
            self._mount_manager = MountManager(
                sssf.recipe_templates(), self.ledger(), vm_suffix=sssf.vm_host_suffix
            )
            from sbxcheck.checks.revocation import RevocationVerifier

            self._mount_manager.revocation = RevocationVerifier(sssf.runs_path, self._list_keys)  # proves revokes
        return self._mount_manager

    def _list_keys(self) -> list[OpenRouterKey]:
        """Every key on the account, all pages (the proof of a teardown's revoke)."""
        with self.openrouter_admin() as admin:
            return admin.list_keys()

    def mount_all(self) -> None:
        """Mount every --sbx-mount name (else the inventory's [sssf] mounts), once; their runs are gated."""
        if not self.mount_names:
            sssf = self.inventory().sssf
            self.mount_names = list(sssf.mounts) if sssf is not None else []
        if not self.mount_names or self.mounts:
            return
        self.ensure_live()
        manager = self.mount_manager()
        for name in self.mount_names:
            with finish_before_interrupt(f"the mount of {name}", reraise=True):
                mounted = manager.mount(name)
            self.mounts.append(mounted)
            if mounted.run_id and mounted.run_id not in self.run_ids:
                self.run_ids.append(mounted.run_id)
        self._gate_runs = None

    def finish_mounts(self, policy: str, gate_outcomes: dict[str, list[str]]) -> list[Mounted]:
        """Apply the teardown policy once (sessionfinish, or unconfigure after an interrupt).

        Returns every mount the manager started, an interrupted one included.
        """
        manager = self._mount_manager
        if self.mounts_finished or manager is None:
            return self.mounts
        self.mounts_finished = True
        finished = self._finish_step(
            "teardown",
            lambda: manager.finish(policy, gate_outcomes),  # type: ignore[arg-type]
        )
        return finished if finished is not None else list(manager.mounts)

    def _finish_step(self, step: str, action: Callable[[], _T]) -> _T | None:
        """Run a teardown step so a first interrupt lets it finish; None when a second one abandoned it."""
        with finish_before_interrupt(step, reraise=False) as guard:
            try:
                result = action()
            except KeyboardInterrupt:
                self.interrupted_during.append(f"{step}: abandoned at the second interrupt (see the ledger)")
                return None
        if guard.noted is not None:
            self.interrupted_during.append(f"{step}: it finished after the interrupt")
        return result

    # --------------------------------------------------------------- control plane

    def sandboxed_client(self) -> SandboxedClient:
        """The REST client for the inventory's control plane (secrets read from env/file, never stored)."""
        if self._client is None:
            from sbxcheck.clients.sandboxed import SandboxedClient

            section = self.inventory().sandboxed
            if section is None:
                raise InventoryError("the inventory has no [sandboxed] section")
            self.ensure_live()
            token = _secret_from_env(section.token_env, "sandboxed.token_env")
            password = _secret_from_env(section.password_env, "sandboxed.password_env")
            if password is None and section.password_file is not None:
                try:
                    password = read_text_file(section.password_file, 64 * 1024).strip()
                except (OSError, ValueError) as exc:
                    raise InventoryError(
                        f"sandboxed.password_file: cannot read {section.password_file} "
                        f"({getattr(exc, 'strerror', None) or exc})"
                    ) from None
            if token is None and password is None:
                raise InventoryError(
                    "[sandboxed] needs token_env, password_env or password_file to authenticate"
                )
            self._client = SandboxedClient(
                section.url,
                token=token,
                password=password,
                username=section.username,
                timeout_s=section.request_timeout_s,
            )
        return self._client

    def mcp_client(self) -> AssistantMcpClient:
        """The assistant MCP server (stdio), started once for the session."""
        if self._mcp is None:
            from sbxcheck.clients.mcp import AssistantMcpClient

            section = self.inventory().sandboxed
            if section is None or section.mcp is None:
                raise InventoryError(
                    'a route has via = "mcp" but the inventory has no [sandboxed.mcp] section'
                )
            env = dict(section.mcp.env)
            for name, local in section.mcp.env_from.items():
                value = _secret_from_env(local, f"sandboxed.mcp.env_from.{name}")
                if value is not None:
                    env[name] = value
            if section.mcp.pass_session_token and not any(k.endswith("API_TOKEN") for k in env):
                client = self.sandboxed_client()
                if not client.authenticated:
                    client.login()
                token = client.bearer_token()
                if token:
                    env["SANDBOXED_API_TOKEN"] = token
            env.setdefault("SANDBOXED_API_URL", section.url)
            client_mcp = AssistantMcpClient(section.mcp.command, env=env, timeout_s=section.mcp.timeout_s)
            try:
                client_mcp.start()
            except SbxError:  # one more start (a count of one): a server that fails twice is reported
                client_mcp = AssistantMcpClient(section.mcp.command, env=env, timeout_s=section.mcp.timeout_s)
                client_mcp.start()
            self._mcp = client_mcp
        return self._mcp

    def openrouter_admin(self) -> OpenRouterAdmin:
        """Provisioning-side OpenRouter client (list keys); the key comes from an env var or a file."""
        from sbxcheck.clients.openrouter import OpenRouterAdmin

        sssf = self.inventory().sssf
        if sssf is None:
            raise InventoryError("the inventory has no [sssf] section")
        self.ensure_live()
        key = None
        if sssf.provisioning_key_env and os.environ.get(sssf.provisioning_key_env, "").strip():
            key = os.environ[sssf.provisioning_key_env].strip()
        elif sssf.provisioning_key_file is not None:
            key = _read_secret_file(
                sssf.provisioning_key_file, "OPENROUTER_PROVISIONING_KEY", "sssf.provisioning_key_file"
            )
        if not key:
            raise InventoryError(
                f"no provisioning key: set {sssf.provisioning_key_env or 'sssf.provisioning_key_env'} "
                "or sssf.provisioning_key_file"
            )
        return OpenRouterAdmin(sssf.openrouter_base_url, key)

    def channel(self, via: str) -> MissionChannel:
        from sbxcheck.clients.channels import McpChannel, RestChannel

        return McpChannel(self.mcp_client()) if via == "mcp" else RestChannel(self.sandboxed_client())

    def dispatcher(self) -> MissionDispatcher:
        """The session's mission dispatcher (created once; dispatches on first use)."""
        if self._dispatcher is None:
            from sbxcheck.lifecycle import MissionDispatcher

            section = self.inventory().sandboxed
            if section is None:
                raise InventoryError("the inventory has no [sandboxed] section")
            client = self.sandboxed_client()

            def workspace_ids() -> dict[str, str]:
                return {w.name: w.id for w in client.list_workspaces()}

            def exec_sha256(workspace_id: str, path: str) -> str:
                result = client.workspace_exec(workspace_id, f"sha256sum {shlex.quote(path)}", timeout_s=30)
                digest = result.stdout.split()[0] if result.exit_code == 0 and result.stdout.split() else ""
                if len(digest) != 64:
                    from sbxcheck.errors import BadResponseError

                    raise BadResponseError(f"workspace exec sha256sum {path}: exit {result.exit_code}")
                return digest

            if self.wanted_routes is not None or self.wanted_canaries is not None:
                wanted_r, wanted_c = self.wanted_routes or set(), self.wanted_canaries or set()
                section = section.model_copy(
                    update={
                        "routes": [r for r in section.routes if r.label in wanted_r],
                        "canaries": [c for c in section.canaries if c.label in wanted_c],
                    }
                )
            if self.probe_route is not None:  # one narrow no-push probe of one route
                from sbxcheck.lifecycle.prompts import PROBE_PROMPT

                section = section.model_copy(
                    update={
                        "routes": [
                            r.model_copy(update={"prompt": PROBE_PROMPT})
                            for r in section.routes
                            if r.label == self.probe_route
                        ],
                        "canaries": [],
                    }
                )
            from sbxcheck.clients.stream import ControlStream

            self._dispatcher = MissionDispatcher(
                section,
                self.channel,
                self.session_tag,
                workspace_ids=workspace_ids,
                exec_sha256=exec_sha256,
                ledger=self.ledger(),
                list_missions=lambda limit, offset: [  # paged back to the oldest unanswered create
                    m.model_dump(mode="json") for m in client.list_missions(all=True, limit=limit, offset=offset)
                ],
                preflight=self.route_preflight,  # a route that would fail readiness is not dispatched
                max_spend_usd=self.max_spend_usd,
                single_create=self.probe_route is not None,  # a probe: no idempotency retry
                # one live-stream subscription per session and control plane
                stream=ControlStream(section.url, client.auth_headers, connect_timeout_s=section.request_timeout_s),
            )
            self._dispatcher.on_wait = self.on_wait
        return self._dispatcher

    # workspace and catalog readiness, read once; a route that would fail it is not dispatched
    def catalog_snapshot(self) -> CatalogSnapshot:
        """What the control plane says of workspaces, agents, backends and models (read once a session)."""
        if self._catalog is None:
            from sbxcheck.checks.catalog import read_catalog

            self._catalog = read_catalog(self.sandboxed_client())
        return self._catalog

    def route_preflight(self, route: RouteSpec) -> CheckResult | None:
        """The readiness failure that dooms ``route`` (see :func:`sbxcheck.checks.catalog.route_preflight`)."""
        from sbxcheck.checks.catalog import route_preflight

        section = self.inventory().sandboxed
        removed = section.removed_providers if section is not None else []
        return route_preflight(self.catalog_snapshot(), route, removed_providers=removed)

    def close_missions(self) -> dict[str, str]:
        """Cancel this session's missions now (before the report is written); the results join ``cleanup``."""
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is None:
            return {}
        report = self._finish_step("cancelling this session's missions", dispatcher.close)
        if report is None:  # abandoned by a second interrupt: the ledger says which are still open
            report = {"(the rest)": "cancel failed: abandoned at the second interrupt (see the ledger)"}
        self.cancel_report.update(report)
        for mission_id, how in report.items():
            self.cleanup.append(
                {
                    "kind": "foreign mission" if mission_id in dispatcher.foreign else "mission",
                    "ident": mission_id,
                    "action": how,
                    "ok": not how.startswith("cancel failed"),
                    "cost_usd": dispatcher.costs.get(mission_id),  # the run's spend
                }
            )
        return report

    def close(self) -> None:
        """Cancel what this session started, close connections, stop the embedded fleet (each step runs)."""
        try:
            self.close_missions()
        finally:
            for closer in (self._mcp, self._client):
                if closer is not None:
                    with contextlib.suppress(Exception):  # one failing close must not stop the rest
                        closer.close()
            self._mcp = None
            self._client = None
            if self._ledger is not None:  # owner lock files do not pile up one per session
                from sbxcheck.lifecycle.ledger import release_owner_locks

                with contextlib.suppress(OSError):
                    release_owner_locks(self._ledger.state_dir)
            self._close_transport_and_sim()

    def _close_transport_and_sim(self) -> None:
        if self._fanout is not None:
            self._fanout.close()
            self._fanout = None
        if self._pool is not None:
            try:
                self._pool.close()
            finally:
                self._pool = None
        if self._sim is not None:
            try:
                self._sim.stop()
            finally:
                self._sim = None
                if self._sim_dir is not None:
                    shutil.rmtree(self._sim_dir, ignore_errors=True)


def _secret_from_env(name: str | None, field: str) -> str | None:
    """The value of the env var an inventory field names; a named but unset var is a clear error."""
    if not name:
        return None
    value = os.environ.get(name)
    if value is None or not value.strip():
        raise InventoryError(f"{field}: the environment variable {name} is not set in this shell")
    return value.strip()


def _read_secret_file(path: Path, dotenv_name: str, field: str) -> str | None:
    """A secret from a file: the whole (stripped) content, or the value of a ``NAME=value`` dotenv line."""
    try:
        text = read_text_file(path, 1024 * 1024)  # regular files only: a FIFO would block
    except (OSError, ValueError) as exc:
        raise InventoryError(
            f"{field}: cannot read {path} ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    value: str | None = None
    for line in text.splitlines():
        stripped = line.strip().removeprefix("export ").strip()
        if stripped.startswith(f"{dotenv_name}="):
            value = stripped.split("=", 1)[1].strip().strip("'\"")
    if value is None and "=" not in text:
        value = text.strip()
    return value or None
