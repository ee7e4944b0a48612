"""The inventory: which fleet to check and how to reach it (a TOML file).

Secrets never appear here, only the names of the env vars that hold them. Relative paths are
resolved against the inventory file's directory. A bad file raises one ``InventoryError``
naming the file, the field and what was expected.

This module is the inventory's public API: the root model, the sections without a module of
their own, and reading and writing the file. It re-exports the models kept elsewhere (the
``[sandboxed]`` tables of ``inventory_sandboxed``, the ``[sssf.recipes]`` templates of
``inventory_recipes``), so ``from sbxcheck.inventory import X`` reaches every section; ``__all__``
lists what it offers.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from sbxcheck.errors import InventoryError, describe_validation_error
from sbxcheck.inventory_base import StrictSection, no_userinfo
from sbxcheck.inventory_recipes import NEEDS_RUN_ID, RECIPES, RecipeName, RecipeTemplates, RecipeTimeouts
from sbxcheck.inventory_sandboxed import (
    GIT_REMOTE_RE,
    GITHUB_HOST_RE,
    GithubProbeSpec,
    HygieneSection,
    McpSection,
    RouteSpec,
    SandboxedSection,
    WorkspaceCanarySpec,
    WorkspaceExpectation,
    credential_free_remote,
)
from sbxcheck.redact import default_redactor
from sbxcheck.safeio import UnsafeInput, read_regular_file
from sbxcheck.waivers import Waiver, read_waivers

_HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
INVENTORY_FILENAME = "sbxcheck.toml"
MAX_INVENTORY_BYTES = 1024 * 1024
INVENTORY_ENV = "SBXCHECK_INVENTORY"
DEFAULT_ROSTER_CONFIG = "adws/adw_sssf_config/sssf.config.yaml"
DEFAULT_COST_PROBE_MODEL = "deepseek/deepseek-v4-flash-0731"

__all__ = [
    "DEFAULT_COST_PROBE_MODEL",
    "DEFAULT_ROSTER_CONFIG",
    "GITHUB_HOST_RE",
    "GIT_REMOTE_RE",
    "INVENTORY_ENV",
    "INVENTORY_FILENAME",
    "MAX_INVENTORY_BYTES",
    "NEEDS_RUN_ID",
    "RECIPES",
    "DgxSection",
    "GithubProbeSpec",
    "HygieneSection",
    "Inventory",
    "McpSection",
    "RecipeName",
    "RecipeTemplates",
    "RecipeTimeouts",
    "RouteSpec",
    "SandboxedSection",
    "SimSection",
    "SshSection",
    "SssfSection",
    "StateSection",
    "Waiver",
    "WorkspaceCanarySpec",
    "WorkspaceExpectation",
    "credential_free_remote",
    "dump_inventory",
    "load_inventory",
    "path_problems",
]


class SshSection(StrictSection):
    """How to reach hosts over SSH."""

    config: Path | None = Field(
        default=None,
        description="an ssh_config file: Host aliases, HostName, Port, User, IdentityFile, ProxyJump",
    )
    known_hosts: list[Path] = Field(
        default_factory=list,
        description="known_hosts files (one path is a list of one); strict: an unknown or changed host key "
        "is refused, never accepted for you; empty = ~/.ssh/known_hosts",
    )
    identity: Path | None = Field(
        default=None,
        description="private key used when ssh_config names none (the file stays where it is; mode 0600)",
        json_schema_extra={"secret": "file"},
    )
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300, description="seconds one SSH connect may take")
    command_timeout_s: float = Field(
        default=240.0, gt=0, le=3600, description="seconds one remote command may run"
    )
    max_parallel: int = Field(
        default=32,
        ge=0,
        le=1024,
        description="VMs whose gate checks are in flight at once (0 = no fan-out: items run one by one)",
    )
    max_sessions: int = Field(
        default=8,
        ge=1,
        le=64,
        description="commands in flight per SSH connection (OpenSSH MaxSessions is 10)",
    )
    machines: list[str] = Field(
        default_factory=list,
        description="SSH aliases listed in the machine inventory (test_fleet_machine_inventory: SSH "
        "reachability against the control plane's registered compute)",
    )


class SssfSection(StrictSection):
    """An SSSF checkout whose ``.sandbox/runs/`` holds the run records of its fleet."""

    checkout: Path = Field(description="the SSSF checkout: its .sandbox/runs/<id>.json are the run records")
    runs_dir: Path | None = Field(default=None, description="the run records; default: <checkout>/.sandbox/runs")
    roster_config: str = Field(
        default=DEFAULT_ROSTER_CONFIG,
        description="the roster config, relative to the checkout: the models gate B expects and C pings",
    )
    vm_host_suffix: str = Field(
        default=".exe.xyz",
        description="appended to a run record's vm_name to make the VM's SSH host; empty, or '.' and host labels",
    )
    openrouter_base_url: str = Field(
        default="https://openrouter.ai/api/v1",
        description="OpenRouter's API, for the gate's pings and key reads and the provisioning key's calls "
        "(http:// or https://, no user:password@)",
    )
    credit_floor_usd: float = Field(
        default=1.0, ge=0, allow_inf_nan=False, description="gate E fails when a run key's remaining credit "
        "(limit − usage) is below this"
    )
    account_credit_floor_usd: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="test_credits fails when the OpenRouter account's credits − usage are below this (USD); "
        "unset: test_credits is skipped",
    )
    cost_probe_model: str = Field(
        default=DEFAULT_COST_PROBE_MODEL, description="the model gate D asks pi to answer, to see a cost reported"
    )
    ping_timeout_s: float = Field(default=60.0, gt=0, le=600, description="gate C: seconds one model ping may take")
    pi_timeout_s: float = Field(default=180.0, gt=0, le=1800, description="gate D: seconds pi's cost probe may take")
    exedev_alias: str = Field(
        default="exe.dev", description="ssh alias of exe.dev's control plane (ls --json)"
    )
    provisioning_key_env: str | None = Field(
        default="OPENROUTER_PROVISIONING_KEY",
        description="the env var holding the OpenRouter provisioning key (key audit, VM hygiene, the revoke "
        "check, test_credits); used when set, else provisioning_key_file",
        json_schema_extra={"secret": "env"},
    )
    provisioning_key_file: Path | None = Field(
        default=None,
        description="a file holding the provisioning key, bare or as an OPENROUTER_PROVISIONING_KEY= dotenv "
        "line (e.g. the checkout's .env)",
        json_schema_extra={"secret": "file"},
    )
    recipes: RecipeTemplates | None = Field(default=None, description="the just sbx command templates")
    mounts: list[str] = Field(
        default_factory=list, description="sandboxes to mount before the gate when no --sbx-mount is given"
    )
    observe_probe: Literal["https", "vm"] = Field(
        default="https",
        description="how the run items reach app and trace UI: 'https' from this host as a user would "
        "(https://<vm>/ and :<obs port>), 'vm' the VM's local ports (curl inside the VM, over SSH)",
    )
    observe_timeout_s: float = Field(default=20.0, gt=0, le=120, description="per probe (curl --max-time)")

    def recipe_templates(self) -> RecipeTemplates:
        """The recipe templates, run from the checkout unless they say otherwise."""
        templates = self.recipes or RecipeTemplates()
        return templates if templates.cwd is not None else templates.model_copy(update={"cwd": self.checkout})

    @field_validator("openrouter_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        no_userinfo(value, "put the key in the env var provisioning_key_env names")
        return value.rstrip("/")

    @field_validator("vm_host_suffix")
    @classmethod
    def _host_suffix(cls, value: str) -> str:
        labels = value.split(".")
        if value and (labels[0] != "" or not all(_HOST_LABEL_RE.match(label) for label in labels[1:])):
            raise ValueError("must be empty or '.' followed by dot-separated host labels, e.g. '.exe.xyz'")
        return value

    @property
    def runs_path(self) -> Path:
        return self.runs_dir if self.runs_dir is not None else self.checkout / ".sandbox" / "runs"


class DgxSection(StrictSection):
    """The DGX routing runbook: agent-core reaches the DGX over tailscale."""

    agent_core: str | list[str] = Field(
        default="agent-core",
        description="ssh alias of the control-plane host, or a list of them (each is checked)",
    )
    dgx_host: str = Field(default="dgx-spark", description="ssh alias of the DGX")
    tailscale_ip: str = Field(default="100.77.4.93", description="the DGX's tailscale IP: a pong must come from it")
    ping_count: int = Field(default=2, ge=1, le=10, description="pings of `tailscale ping` from agent-core")
    command_timeout_s: float = Field(default=20.0, gt=0, le=300, description="seconds one DGX probe may take")
    remediation_sudo: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="--sbx-remediate runs its command with `sudo -n`: auto = when the SSH user is not root",
    )
    sentinel_command: str | None = Field(
        default=None,
        description="the fleet sentinel, run over SSH (e.g. `disk-sentinel --once`; a POSIX sh command line: "
        "/bin/sh runs it, whatever the login shell): one line per unreachable node, silent when all answer; "
        "without it the fleet view is GET /api/remote-nodes",
    )
    sentinel_host: str | None = Field(
        default=None, description="ssh alias the sentinel runs on (default: agent-core)"
    )

    @field_validator("agent_core")
    @classmethod
    def _aliases(cls, value: str | list[str]) -> str | list[str]:
        names = [value] if isinstance(value, str) else value
        if not names or any(not n.strip() for n in names):
            raise ValueError("expected an ssh alias or a non-empty list of ssh aliases")
        if len(set(names)) != len(names):
            raise ValueError("lists an agent-core twice")
        return value

    @property
    def agent_cores(self) -> list[str]:
        """Every agent-core to check from (the single form is a list of one)."""
        return [self.agent_core] if isinstance(self.agent_core, str) else list(self.agent_core)

    @property
    def core(self) -> str:
        """The agent-core of a per-core section (see :meth:`per_agent_core`); the first one otherwise."""
        return self.agent_cores[0]

    def per_agent_core(self) -> list[DgxSection]:
        """One section per agent-core, each with a single ``agent_core``."""
        return [self.model_copy(update={"agent_core": core}) for core in self.agent_cores]


class StateSection(StrictSection):
    """Where sbxcheck keeps its ledger of what sessions created (default: .sbxcheck/state beside this file)."""

    dir: Path | None = Field(
        default=None, description="the ledger's directory (--sbx-state wins); default: .sbxcheck/state beside this file"
    )


class SimSection(StrictSection):
    """Present when the simulator wrote this inventory: what it is, for the report header."""

    embedded: bool = Field(default=False, description="the embedded fleet (started by this pytest run)")
    pi: str = Field(default="", description="the pi CLI the simulated VMs run")
    faults: list[str] = Field(default_factory=list, description="the faults injected")
    pid: int | None = Field(default=None, description="the simulator's process")
    recipes: str = Field(default="stand-in", description="which SSSF recipes: 'stand-in' or 'real (<checkout>)'")


class Inventory(StrictSection):
    """A whole inventory file, validated."""

    ssh: SshSection = Field(default_factory=SshSection, description="how every host is reached")
    sssf: SssfSection | None = Field(
        default=None, description="the SSSF fleet, for the gate and run items, test_credits and the orphan audit"
    )
    sandboxed: SandboxedSection | None = Field(
        default=None, description="the control plane, for the canary and triage items"
    )
    dgx: DgxSection | None = Field(default=None, description="the DGX items and their triage")
    state: StateSection = Field(default_factory=StateSection, description="the ledger")
    sim: SimSection | None = Field(default=None, description="written by `sbxcheck sim up`; never write it")
    waivers: list[Waiver] = Field(
        default_factory=list,
        description="known failures that expire: matching items still run, and failing for the waived cause "
        "they are left out of the verdict until the waiver's date",
    )

    source: str = Field(default="", exclude=True)

    @property
    def is_sim(self) -> bool:
        return self.sim is not None


def _resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Make the path fields of the raw TOML absolute against ``base``."""

    def fix(value: Any) -> Any:
        if isinstance(value, str) and value:
            p = Path(value).expanduser()
            return str(p if p.is_absolute() else base / p)
        return value

    ssh = data.get("ssh")
    if isinstance(ssh, dict):
        for key in ("config", "identity"):
            if key in ssh:
                ssh[key] = fix(ssh[key])
        if isinstance(ssh.get("known_hosts"), str):
            ssh["known_hosts"] = [ssh["known_hosts"]]
        if isinstance(ssh.get("known_hosts"), list):
            ssh["known_hosts"] = [fix(v) for v in ssh["known_hosts"]]
    state = data.get("state")
    if isinstance(state, dict) and "dir" in state:
        state["dir"] = fix(state["dir"])
    sandboxed = data.get("sandboxed")
    if isinstance(sandboxed, dict) and "password_file" in sandboxed:
        sandboxed["password_file"] = fix(sandboxed["password_file"])
    sssf = data.get("sssf")
    if isinstance(sssf, dict):
        for key in ("checkout", "runs_dir", "provisioning_key_file"):
            if key in sssf:
                sssf[key] = fix(sssf[key])
    return data


def load_inventory(path: Path) -> Inventory:
    """Read and validate an inventory file."""
    source = str(path)
    try:
        raw = read_regular_file(path, MAX_INVENTORY_BYTES)
    except UnsafeInput as exc:
        raise InventoryError(f"{exc}; expected a TOML inventory") from None
    except OSError as exc:
        raise InventoryError(f"{source}: cannot read inventory ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InventoryError(f"{source}: not UTF-8 text; expected a TOML inventory") from None
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(
            f"{source}: not valid TOML ({default_redactor().redact_text(str(exc))})"
        ) from None
    except RecursionError:
        raise InventoryError(f"{source}: TOML nested too deeply; expected a TOML inventory") from None
    data = _resolve_paths(data, path.resolve().parent)
    if "waivers" in data:  # validated on their own: one line names the file and each bad waiver
        import datetime as dt

        data["waivers"] = [p.waiver for p in read_waivers(data["waivers"], source, now=dt.datetime.now(dt.UTC))]
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as exc:
        raise InventoryError(describe_validation_error(exc, source)) from None
    problems = path_problems(inv)
    if problems:
        raise InventoryError(f"{source}: " + "; ".join(problems))
    return inv.model_copy(update={"source": source})


def path_problems(inv: Inventory) -> list[str]:
    """Each path the inventory names that is not there, as "field 'x': no file at PATH" (one per field).

    Checked when the inventory loads, so a wrong path is one config_defect, not one error per item.
    """
    problems: list[str] = []

    def need(field: str, path: Path | None, kind: str) -> None:
        if path is None:
            return
        ok = path.is_dir() if kind == "directory" else path.is_file()
        if not ok:
            what = "something else" if path.exists() else "nothing"
            problems.append(f"field '{field}': expected a {kind} at {path}, found {what}")

    need("ssh.config", inv.ssh.config, "file")
    for i, known in enumerate(inv.ssh.known_hosts):
        need(f"ssh.known_hosts[{i}]", known, "file")
    need("ssh.identity", inv.ssh.identity, "file")
    if inv.sssf is not None:
        need("sssf.checkout", inv.sssf.checkout, "directory")
        need("sssf.runs_dir", inv.sssf.runs_dir, "directory")
        if inv.sssf.checkout.is_dir():
            need("sssf.roster_config", inv.sssf.checkout / inv.sssf.roster_config, "file")
        need("sssf.provisioning_key_file", inv.sssf.provisioning_key_file, "file")
    if inv.sandboxed is not None:
        need("sandboxed.password_file", inv.sandboxed.password_file, "file")
    return problems


def dump_inventory(inv: Inventory) -> str:
    """Serialise an inventory back to TOML (used by the simulator to write its own).

    Written by tomli-w, so any string (newlines, quotes, backslashes) round-trips through tomllib.
    """
    import tomli_w

    document: dict[str, Any] = {}
    sections: dict[str, BaseModel | None] = {
        "ssh": inv.ssh,
        "sssf": inv.sssf,
        "sandboxed": inv.sandboxed,
        "dgx": inv.dgx,
        "state": inv.state if inv.state.dir is not None else None,
        "sim": inv.sim,
    }
    for name, model in sections.items():
        if model is not None:
            document[name] = model.model_dump(mode="json", exclude_none=True)
    return tomli_w.dumps(document)
