"""sbxcheck's settings: one table, read once, into one frozen :class:`Settings`.

Each row of :data:`OPTIONS` names a setting's command-line option, environment variable and ini name
(``[tool.pytest.ini_options]``), its default and how its text is parsed. :func:`declare` registers the
options and ini names from the table; :func:`build` reads them once in ``pytest_configure`` (command
line > environment > ini > default) and nothing else in sbxcheck calls ``getoption``/``getini`` or
reads the environment for its own settings: every later reader takes the ``Settings``.

A wrong value is one usage error naming where it came from (``--sbx-teardown``, ``$SBXCHECK_TEARDOWN``
or ``ini sbx_teardown in pyproject.toml``), so the person knows what to edit. A relative path is taken
from where it was written: the command line and the environment from the invocation directory, the
ini value from the ini file's directory. Adding a setting is one row (and one field of ``Settings``).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TEARDOWN_CHOICES = ("never", "on-pass", "always")
# the embedded control plane's release profiles (sim/controlplane/releases.py)
CP_VERSIONS = ("current", "v0.7", "1.3", "cba9502")
HISTORY_KEEP_DEFAULT = 30
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

#: A parser: the raw value (text from env/ini, what argparse stored for the command line) and the
#: directory a relative path is taken from -> the value; raises ValueError with what was expected.
Parse = Callable[[Any, Path], Any]


def text(raw: Any, base: Path) -> str | None:
    return str(raw).strip() or None


def path(raw: Any, base: Path) -> Path | None:
    value = str(raw).strip()
    if not value:
        return None
    found = Path(value).expanduser()
    return found if found.is_absolute() else base / found


def flag(raw: Any, base: Path) -> bool:
    if isinstance(raw, bool):
        return raw
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected 1/true/yes or 0/false/no, got {raw!r}")


def listed(raw: Any, base: Path) -> tuple[str, ...]:
    return tuple(str(v) for v in raw)


def web_url(raw: Any, base: Path) -> str | None:
    """An http(s) URL a person can open (the run's report page); never one holding a password."""
    value = str(raw).strip()
    if not value:
        return None
    scheme, sep, rest = value.partition("://")
    host = rest.split("/", 1)[0]
    if not sep or scheme.lower() not in ("http", "https") or not host.strip("@:"):
        raise ValueError(f"expected an http:// or https:// URL (e.g. https://ci.example.com/job/42); got {raw!r}")
    if "@" in host or any(ch.isspace() for ch in value):
        raise ValueError("expected a URL without user:password@ or spaces (it is printed and exported)")
    return value


def choice(*choices: str) -> Parse:
    def parse(raw: Any, base: Path) -> str:
        value = str(raw).strip()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return parse


def pi_version(raw: Any, base: Path) -> str:
    """A pi release, ``MAJOR.MINOR.PATCH`` (a leading ``v`` is dropped)."""
    value = str(raw).strip().removeprefix("v")
    if not re.fullmatch(r"\d{1,4}\.\d{1,4}\.\d{1,4}", value):
        raise ValueError(f"expected a pi release such as 0.83.0 (MAJOR.MINOR.PATCH), got {str(raw)!r}")
    return value


def spend_cap(raw: Any, base: Path) -> float:
    try:
        value = float(str(raw).strip().removeprefix("$"))
    except ValueError:
        value = -1.0
    if not (value >= 0 and value != float("inf")):
        raise ValueError(f"expected a spend cap in USD (a number >= 0, e.g. 0.50); got {raw!r}")
    return value


def history_keep(raw: Any, base: Path) -> int:
    try:
        keep = int(str(raw).strip())
    except ValueError:
        keep = 0
    if keep < 1:
        raise ValueError(f"expected a whole number of runs, at least 1; got {raw!r}")
    return keep


def max_parallel(raw: Any, base: Path) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"expected 0 (no fan-out) or a number of VMs at once, got {raw}")
    return value


def seed(raw: Any, base: Path) -> int:
    value = str(raw).strip()
    if not value.isdigit():
        raise ValueError(f"expected a whole number (a fleet layout), got {raw!r}")
    return int(value)


@dataclass(frozen=True)
class Option:
    """One setting: where it may be written, its default, how it is parsed and how ``--help`` shows it.

    ``flag``/``env``/``ini`` None: it cannot be written there. ``action`` is argparse's (``store``,
    ``store_true``, ``append``); ``ini_type`` is pytest's addini type.
    """

    name: str
    flag: str | None
    env: str | None
    ini: str | None
    default: Any
    parse: Parse
    help: str
    action: str = "store"
    metavar: str | None = None
    ini_type: str | None = None
    ini_help: str = ""

    @property
    def dest(self) -> str:
        return (self.flag or "").removeprefix("--").replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option(
        "inventory", "--sbx-inventory", "SBXCHECK_INVENTORY", "sbx_inventory", None, path,
        "inventory TOML (default: <rootdir>/sbxcheck.toml, else the embedded simulated fleet); write "
        "--sbx-inventory=PATH (the space form lets pytest take PATH for a test path when it picks the rootdir)",
        metavar="PATH",
    ),
    Option(
        "sim", "--sbx-sim", None, None, False, flag,
        "use the embedded simulated fleet even if an inventory exists", action="store_true",
    ),
    Option(
        "sim_faults", "--sbx-sim-fault", None, None, (), listed,
        "inject a named fault into the embedded fleet (repeatable; sbxcheck sim faults lists them)",
        action="append", metavar="NAME[@RUN]",
    ),
    Option(
        "sim_seed", None, "SBXCHECK_SIM_SEED", None, None, seed,
        "a different layout of the embedded fleet (default: the simulator's fixed one)",
    ),
    Option(
        "sim_sssf", "--sbx-sim-sssf", "SBXCHECK_SIM_SSSF", "sbx_sim_sssf", None, path,
        "the embedded fleet runs this SSSF checkout's real `just sbx` recipes (copied, never written) "
        "instead of its stand-ins",
        metavar="DIR",
    ),
    Option(
        "sim_cp_version", "--sbx-sim-cp-version", "SBXCHECK_SIM_CP_VERSION", "sbx_sim_cp_version", None,
        choice(*CP_VERSIONS),
        "the embedded control plane serves this release's API, as its source has it: current (default), "
        "v0.7 (Feb 2026), 1.3 (Jun 2026) or cba9502 (the newest the index shows); see docs/embedded-fleet.md",
        metavar="PROFILE",
    ),
    Option(
        "sim_pi_version", "--sbx-sim-pi-version", "SBXCHECK_SIM_PI_VERSION", "sbx_sim_pi_version", None,
        pi_version,
        "the pi release the embedded fleet's VMs run, installed from npm into ~/.cache/sbxcheck: 0.83.0 (the "
        "exe.dev image's) by default; up to 0.73.1 it is @mariozechner/pi-coding-agent (no --session-id), "
        "from 0.74.0 @earendil-works/pi-coding-agent (node >= 22.19); tested: 0.73.1, 0.83.0, 1.6.0",
        metavar="VERSION",
    ),
    Option(
        "run_ids", "--sbx-run-id", None, None, (), listed,
        "gate only this run (repeatable; default: every open run)", action="append", metavar="ID",
    ),
    Option(
        "remediate", "--sbx-remediate", None, None, False, flag,
        "let the DGX triage run its one recovery command (systemctl enable --now tailscaled); "
        "off by default: triage only classifies and recommends",
        action="store_true",
    ),
    Option(
        "mounts", "--sbx-mount", None, None, (), listed,
        "mount a sandbox with the inventory's mount recipe (just sbx mount NAME) before the gate (repeatable)",
        action="append", metavar="NAME",
    ),
    Option(
        "teardown", "--sbx-teardown", "SBXCHECK_TEARDOWN", "sbx_teardown", "never", choice(*TEARDOWN_CHOICES),
        "what to do with mounted runs afterwards: never, on-pass or always (default never); "
        "a failed gate always keeps its VM",
        metavar="{never,on-pass,always}",
    ),
    Option(
        "sweep", "--sbx-sweep", None, None, False, flag,
        "release what earlier sessions left open in the ledger, through the same recipes / cancel calls",
        action="store_true",
    ),
    Option(
        "state", "--sbx-state", "SBXCHECK_STATE_DIR", "sbx_state_dir", None, path,
        "ledger directory (default: the inventory's [state] dir, else .sbxcheck/state beside the "
        "inventory file; relative to where pytest was started)",
        metavar="DIR",
    ),
    Option(
        "probe", "--sbx-probe", None, None, None, text,
        "validate a repair: run exactly one narrow no-push probe mission of ROUTE (its dispatched, "
        "echo and execution items) and nothing else",
        metavar="ROUTE",
    ),
    Option(
        "max_parallel", "--sbx-max-parallel", None, None, None, max_parallel,
        "VMs gated at once (default: the inventory's [ssh] max_parallel, 32); 0 = no fan-out",
        metavar="N",
    ),
    Option(
        "max_spend_usd", "--sbx-max-spend", None, "sbx_max_spend", None, spend_cap,
        "stop dispatching new missions once this run has spent USD (missions then run one at a time, "
        "each to its end, so its cost is known); what was not run is reported",
        metavar="USD",
    ),
    Option(
        "report_dir", "--sbx-report", "SBXCHECK_REPORT_DIR", "sbx_report_dir", "sbxcheck-report", path,
        "directory for results.json, junit.xml and report.html (default: sbxcheck-report)",
        metavar="DIR",
    ),
    Option(
        "history", "--sbx-history", None, "sbx_history", None, path,
        "keep this run's results.json in DIR (the last --sbx-history-keep runs) and show flaky items, "
        "since-when failing and new/ongoing/resolved incidents on the page",
        metavar="DIR",
    ),
    Option(
        "history_keep", "--sbx-history-keep", None, "sbx_history_keep", HISTORY_KEEP_DEFAULT, history_keep,
        f"how many runs the history keeps (default {HISTORY_KEEP_DEFAULT})",
        metavar="N",
    ),
    Option(
        "metrics", "--sbx-metrics", None, "sbx_metrics", None, path,
        "write Prometheus text exposition here (node_exporter textfile collector)",
        metavar="FILE",
    ),
    Option(
        "waivers", "--sbx-waivers", "SBXCHECK_WAIVERS", "sbx_waivers", None, path,
        "a file of [[waivers]] tables (known failures that expire), added to the inventory's own (default: "
        "sbxcheck-waivers.toml in the rootdir when it exists)",
        metavar="PATH",
    ),
    Option(
        "report_url", "--sbx-report-url", "SBXCHECK_REPORT_URL", "sbx_report_url", None, web_url,
        "where this run's report.html will be published (e.g. the CI job's artifact URL): printed in the "
        "terminal summary and written to junit.xml, results.json and the metrics, so an alert links to the page",
        metavar="URL",
    ),
    Option(
        "require_inventory", "--sbx-require-inventory", "SBXCHECK_REQUIRE_INVENTORY", "sbx_require_inventory",
        False, flag,
        "no inventory found is a usage error (exit 4) instead of a run on the embedded simulated fleet "
        "(what CI sets)",
        action="store_true", ini_type="bool",
    ),
    Option(
        "shipped_suites", "--sbx-shipped-suites", "SBXCHECK_SHIPPED_SUITES", "sbx_shipped_suites", "auto",
        choice("auto", "yes", "no"),
        "collect the shipped suites (sbxcheck.suites) too: auto (default) when -m asks for a suite, no test "
        "path is given and this directory has no copy of them; yes in any run; no never",
        metavar="{auto,yes,no}",
    ),
    Option(
        "doctor", "--sbx-doctor", None, None, False, flag,
        "check every precondition (inventory, files, known_hosts, env vars, control plane, OpenRouter "
        "key, tools), one line each, and collect nothing: the same as `sbxcheck doctor`",
        action="store_true",
    ),
)


@dataclass(frozen=True)
class Settings:
    """Every sbxcheck setting of this run, parsed; ``sources`` says where each came from."""

    rootdir: Path
    invocation_dir: Path
    inventory: Path | None = None
    sim: bool = False
    sim_faults: tuple[str, ...] = ()
    sim_seed: int | None = None
    sim_sssf: Path | None = None
    sim_cp_version: str | None = None
    sim_pi_version: str | None = None
    run_ids: tuple[str, ...] = ()
    remediate: bool = False
    mounts: tuple[str, ...] = ()
    teardown: str = "never"
    sweep: bool = False
    state: Path | None = None
    probe: str | None = None
    max_parallel: int | None = None
    max_spend_usd: float | None = None
    report_dir: Path = Path("sbxcheck-report")
    history: Path | None = None
    history_keep: int = HISTORY_KEEP_DEFAULT
    metrics: Path | None = None
    waivers: Path | None = None
    report_url: str | None = None
    require_inventory: bool = False
    shipped_suites: str = "auto"
    doctor: bool = False
    #: setting name -> "--sbx-x", "$SBXCHECK_X", "ini sbx_x in pyproject.toml" or "default"
    sources: Mapping[str, str] = field(default_factory=dict)

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")

    @classmethod
    def defaults(cls, rootdir: Path, invocation_dir: Path | None = None, **values: Any) -> Settings:
        """Settings as no option set them (``values`` override): for callers outside a pytest run."""
        where = invocation_dir or rootdir
        report = path(values.pop("report_dir", "sbxcheck-report"), where)
        return cls(rootdir=rootdir, invocation_dir=where, report_dir=report or where, **values)

    def to_wire(self) -> dict[str, Any]:
        """Plain values (str, int, float, bool, None, lists, dicts) for xdist's workerinput."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Settings:
        """The controller's Settings on a worker (the inverse of :meth:`to_wire`)."""
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for name, value in data.items():
            kind = str(kinds.get(name, ""))
            if name not in kinds:
                continue
            if value is not None and "Path" in kind:
                value = Path(value)
            elif isinstance(value, list):
                value = tuple(value)
            values[name] = value
        return cls(**values)


def declare(parser: pytest.Parser) -> None:
    """Register every row's command-line option and ini name (the only addoption/addini of sbxcheck)."""
    group = parser.getgroup("sbxcheck", "sbxcheck: sandbox fleet checks")
    for option in OPTIONS:
        also = [f"${option.env}" if option.env else "", f"ini {option.ini}" if option.ini else ""]
        written = "; also " + ", ".join(a for a in also if a) if any(also) else ""
        if option.flag is not None:
            kwargs: dict[str, Any] = {"action": option.action, "dest": option.dest}
            kwargs["default"] = [] if option.action == "append" else False if option.action == "store_true" else None
            if option.metavar and option.action != "store_true":
                kwargs["metavar"] = option.metavar
            group.addoption(option.flag, help=option.help + written, **kwargs)
        if option.ini is not None:
            as_flag = f" (as {option.flag})" if option.flag else ""
            relative = "; relative to the ini file" if option.parse is path else ""
            parser.addini(
                option.ini,
                f"sbxcheck: {option.help}{as_flag}{relative}",
                type=option.ini_type,  # type: ignore[arg-type]
                default=False if option.ini_type == "bool" else "",
            )


def build(config: pytest.Config, environ: Mapping[str, str] | None = None) -> Settings:
    """Read every row once (command line > environment > ini > default); a bad value is a UsageError."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in OPTIONS:
        found = _read(config, option, environ)
        if found is not None:
            values[option.name], source = found
            if source:
                sources[option.name] = source
    invocation = Path(str(config.invocation_params.dir))
    return Settings(rootdir=Path(str(config.rootpath)), invocation_dir=invocation, sources=sources, **values)


def read_one(config: pytest.Config, name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The one setting ``name`` as :func:`build` reads it (for when another setting is bad); None when unset."""
    option = next(o for o in OPTIONS if o.name == name)
    found = _read(config, option, environ)
    return found[0] if found is not None else None


def _read(config: pytest.Config, option: Option, environ: Mapping[str, str] | None) -> tuple[Any, str] | None:
    """``option``'s parsed value and where it was written ("" for a default); None when unset, no default."""
    env = os.environ if environ is None else environ
    invocation = Path(str(config.invocation_params.dir))
    ini_base = config.inipath.parent if config.inipath is not None else Path(str(config.rootpath))
    ini_file = config.inipath.name if config.inipath is not None else "the ini file"
    found = _raw(config, env, option, invocation, ini_base, ini_file)
    if found is None:
        if isinstance(option.default, str):  # a default path is taken from the invocation directory
            return option.parse(option.default, invocation), ""
        return None
    raw, source, base = found
    try:
        return option.parse(raw, base), source
    except ValueError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None


def _raw(
    config: pytest.Config, env: Mapping[str, str], option: Option, invocation: Path, ini_base: Path, ini_file: str
) -> tuple[Any, str, Path] | None:
    """The first place that sets ``option``: (raw value, its name for messages, base of a relative path)."""
    if option.flag is not None:
        cli = config.getoption(option.dest, None)
        if cli not in (None, "", False, []):
            return cli, option.flag, invocation
    if option.env is not None and env.get(option.env, "").strip():
        return env[option.env], f"${option.env}", invocation
    if option.ini is not None:
        ini = config.getini(option.ini)
        if ini not in (None, "", False, []):
            return ini, f"ini {option.ini} in {ini_file}", ini_base
    return None


SETTINGS_KEY = pytest.StashKey[Settings]()


def settings_of(config: pytest.Config) -> Settings:
    """This run's Settings (built in ``pytest_configure``, or handed to a worker by the controller)."""
    return config.stash[SETTINGS_KEY]
