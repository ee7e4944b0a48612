"""The inventory: which fleet to check and how to reach it (a TOML file, design.md §5).

Secrets never appear here, only the names of the env vars that hold them. Relative paths are
resolved against the inventory file's directory. A bad file raises one ``InventoryError``
naming the file, the field and what was expected.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sbxcheck.errors import InventoryError, describe_validation_error
from sbxcheck.recipes import RecipeTemplates

INVENTORY_FILENAME = "sbxcheck.toml"
INVENTORY_ENV = "SBXCHECK_INVENTORY"
DEFAULT_ROSTER_CONFIG = "adws/adw_sssf_config/sssf.config.yaml"
DEFAULT_COST_PROBE_MODEL = "deepseek/deepseek-v4-flash-0731"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SshSection(_Strict):
    """How to reach hosts over SSH."""

    config: Path | None = Field(default=None, description="an ssh_config file")
    known_hosts: list[Path] = Field(default_factory=list, description="known_hosts files; empty = ~/.ssh")
    identity: Path | None = Field(default=None, description="private key used when ssh_config names none")
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300)
    command_timeout_s: float = Field(default=240.0, gt=0, le=3600)
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
        default_factory=list, description="SSH aliases listed in the machine inventory"
    )


class SssfSection(_Strict):
    """An SSSF checkout whose ``.sandbox/runs/`` holds the run records of its fleet."""

    checkout: Path
    runs_dir: Path | None = Field(default=None, description="default: <checkout>/.sandbox/runs")
    roster_config: str = DEFAULT_ROSTER_CONFIG
    vm_host_suffix: str = ".exe.xyz"
    openrouter_base_url: str = "https://openrouter.ai/api/v1"
    credit_floor_usd: float = Field(default=1.0, ge=0)
    cost_probe_model: str = DEFAULT_COST_PROBE_MODEL
    ping_timeout_s: float = Field(default=60.0, gt=0, le=600)
    pi_timeout_s: float = Field(default=180.0, gt=0, le=1800)
    exedev_alias: str = Field(
        default="exe.dev", description="ssh alias of exe.dev's control plane (ls --json)"
    )
    provisioning_key_env: str | None = Field(
        default="OPENROUTER_PROVISIONING_KEY", description="env var name"
    )
    provisioning_key_file: Path | None = Field(
        default=None,
        description="a file holding the key, bare or as a dotenv line (e.g. the checkout's .env)",
    )
    recipes: RecipeTemplates | None = Field(default=None, description="the just sbx command templates")
    mounts: list[str] = Field(default_factory=list, description="sandboxes to mount before the gate")

    def recipe_templates(self) -> RecipeTemplates:
        """The recipe templates, run from the checkout unless they say otherwise."""
        templates = self.recipes or RecipeTemplates()
        return templates if templates.cwd is not None else templates.model_copy(update={"cwd": self.checkout})

    @field_validator("openrouter_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @property
    def runs_path(self) -> Path:
        return self.runs_dir if self.runs_dir is not None else self.checkout / ".sandbox" / "runs"


class RouteSpec(_Strict):
    """One mission route to probe: how a mission is dispatched and what it must run on."""

    name: str = ""
    agent: str | None = None
    backend: str
    model_override: str | None = None
    model_effort: str | None = None
    workspace: str | None = Field(
        default=None, description="workspace name or id; default: the host workspace"
    )
    via: Literal["rest", "mcp"] = "rest"
    prompt: str = (
        "sbxcheck route probe: run `echo ok` once with your shell tool, then reply with the word ok."
    )

    @property
    def label(self) -> str:
        base = self.name or "-".join(p for p in (self.backend, self.model_override or "default") if p)
        return base if self.via == "rest" or self.name else f"{base}-mcp"


class WorkspaceCanarySpec(_Strict):
    """A read-only workspace-visibility canary for one (backend, workspace)."""

    backend: str
    workspace: str
    checkout: str = Field(description="the checkout path the mission must see")
    ref: str | None = Field(default=None, description="expected `git rev-parse HEAD`")
    pin_file: str | None = "lean-toolchain"
    pin: str | None = None
    mcp_file: str = Field(default="README.md", description="a file read through a registered MCP tool")
    model_override: str | None = None
    agent: str | None = None

    @property
    def label(self) -> str:
        return f"{self.backend}-{self.workspace}"


class McpSection(_Strict):
    """How to start the assistant MCP server (stdio) for routes with via = "mcp"."""

    command: list[str]
    env: dict[str, str] = Field(default_factory=dict, description="plain, non-secret values")
    env_from: dict[str, str] = Field(
        default_factory=dict, description="server env var -> name of the local env var holding its value"
    )
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    pass_session_token: bool = Field(
        default=True,
        description="hand the REST session's JWT to the server as SANDBOXED_API_TOKEN (env, never argv)",
    )


class GithubProbeSpec(_Strict):
    """A workspace that declares a GitHub repo: probe its stored gh/git credentials (booleans only)."""

    workspace: str
    repo: str
    via: Literal["rest", "mcp"] = "rest"


class DgxSection(_Strict):
    """The DGX routing runbook (§8.13): agent-core reaches the DGX over tailscale."""

    agent_core: str = Field(default="agent-core", description="ssh alias of the control-plane host")
    dgx_host: str = Field(default="dgx-spark", description="ssh alias of the DGX")
    tailscale_ip: str = "100.77.4.93"
    ping_count: int = Field(default=2, ge=1, le=10)
    command_timeout_s: float = Field(default=20.0, gt=0, le=300)


class SandboxedSection(_Strict):
    """A sandboxed.sh control plane: where it is, how to authenticate, what to probe."""

    url: str
    token_env: str | None = Field(default=None, description="env var holding a JWT")
    password_env: str | None = Field(default=None, description="env var holding the dashboard password")
    password_file: Path | None = Field(default=None, description="file holding the dashboard password")
    username: str | None = None
    request_timeout_s: float = Field(default=15.0, gt=0, le=300)
    execution_deadline_s: float = Field(default=60.0, gt=0, le=3600)
    canary_deadline_s: float = Field(default=120.0, gt=0, le=3600)
    poll_interval_s: float = Field(default=0.5, gt=0, le=60)
    max_concurrency: int = Field(default=8, ge=1, le=64)
    alternative_backends: list[str] = Field(default_factory=lambda: ["opencode"])
    routes: list[RouteSpec] = Field(default_factory=list)
    canaries: list[WorkspaceCanarySpec] = Field(default_factory=list)
    mcp: McpSection | None = None
    expected_nodes: list[str] = Field(default_factory=list, description="remote nodes that must be healthy")
    node_max_age_s: float = Field(default=120.0, gt=0, le=86400)
    github_probes: list[GithubProbeSpec] = Field(default_factory=list)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")


class StateSection(_Strict):
    """Where sbxcheck keeps its ledger of what sessions created (default: <rootdir>/.sbxcheck/state)."""

    dir: Path | None = None


class SimSection(_Strict):
    """Present when the simulator wrote this inventory: what it is, for the report header."""

    embedded: bool = False
    pi: str = ""
    faults: list[str] = Field(default_factory=list)
    pid: int | None = None


class Inventory(_Strict):
    """A whole inventory file, validated."""

    ssh: SshSection = Field(default_factory=SshSection)
    sssf: SssfSection | None = None
    sandboxed: SandboxedSection | None = None
    dgx: DgxSection | None = None
    state: StateSection = Field(default_factory=StateSection)
    sim: SimSection | None = None

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
        raw = path.read_bytes()
    except OSError as exc:
        raise InventoryError(f"{source}: cannot read inventory ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InventoryError(f"{source}: not UTF-8 text; expected a TOML inventory") from None
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{source}: not valid TOML ({exc})") from None
    data = _resolve_paths(data, path.resolve().parent)
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as exc:
        raise InventoryError(describe_validation_error(exc, source)) from None
    return inv.model_copy(update={"source": source})


def find_inventory(explicit: str | None, rootdir: Path) -> Path | None:
    """Locate the inventory: --sbx-inventory, then $SBXCHECK_INVENTORY, then <rootdir>/sbxcheck.toml."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(INVENTORY_ENV)
    if env:
        return Path(env)
    candidate = rootdir / INVENTORY_FILENAME
    return candidate if candidate.is_file() else None


def dump_inventory(inv: Inventory) -> str:
    """Serialise an inventory back to TOML (used by the simulator to write its own)."""
    lines: list[str] = []

    def emit(section: str, model: BaseModel | None) -> None:
        if model is None:
            return
        lines.append(f"[{section}]")
        for key, value in model.model_dump(exclude_none=True).items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")

    emit("ssh", inv.ssh)
    emit("sssf", inv.sssf)
    emit("sandboxed", inv.sandboxed)
    emit("dgx", inv.dgx)
    if inv.state.dir is not None:
        emit("state", inv.state)
    emit("sim", inv.sim)
    return "\n".join(lines)


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else _toml_value(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
            + "}"
        )
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
