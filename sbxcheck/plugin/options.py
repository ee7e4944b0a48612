"""Where each sbxcheck setting comes from: command line > environment > ini (pyproject.toml) > default.

One small resolver for the plugin. A value that is wrong names its source (``--sbx-teardown``,
``$SBXCHECK_TEARDOWN`` or ``sbx_teardown in pyproject.toml``), so the person knows what to edit.
Relative paths are taken from where they were written: command line and environment from the
invocation directory, the ini option from the ini file's directory. New settings (report history,
metrics, ...) are one more row in :data:`SETTINGS`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TEARDOWN_CHOICES = ("never", "on-pass", "always")


@dataclass(frozen=True)
class Setting:
    """One setting: its command-line option (dest), environment variable and ini name."""

    dest: str
    flag: str
    env: str
    ini: str
    default: str | None
    help: str
    is_path: bool = False
    choices: tuple[str, ...] = ()


SETTINGS: dict[str, Setting] = {
    s.dest: s
    for s in (
        Setting(
            "sbx_inventory",
            "--sbx-inventory",
            "SBXCHECK_INVENTORY",
            "sbx_inventory",
            None,
            "inventory TOML (default: <rootdir>/sbxcheck.toml, else the embedded simulated fleet)",
            is_path=True,
        ),
        Setting(
            "sbx_report",
            "--sbx-report",
            "SBXCHECK_REPORT_DIR",
            "sbx_report_dir",
            "sbxcheck-report",
            "directory for results.json, junit.xml and report.html (default: sbxcheck-report)",
            is_path=True,
        ),
        Setting(
            "sbx_teardown",
            "--sbx-teardown",
            "SBXCHECK_TEARDOWN",
            "sbx_teardown",
            "never",
            "what to do with mounted runs afterwards: never, on-pass or always (default never)",
            choices=TEARDOWN_CHOICES,
        ),
        Setting(
            "sbx_state",
            "--sbx-state",
            "SBXCHECK_STATE_DIR",
            "sbx_state_dir",
            None,
            "ledger directory (default: <rootdir>/.sbxcheck/state)",
            is_path=True,
        ),
    )
}


@dataclass(frozen=True)
class Resolved:
    """A setting's value and where it came from (``default`` when nothing set it)."""

    value: str | None
    source: str


def add_ini_options(parser: pytest.Parser) -> None:
    """Register the ini names of :data:`SETTINGS` (``[tool.pytest.ini_options]`` in pyproject.toml)."""
    for setting in SETTINGS.values():
        parser.addini(setting.ini, f"sbxcheck: {setting.help} (overridden by {setting.flag}, ${setting.env})")


def resolve(config: pytest.Config, dest: str) -> Resolved:
    """The value of one setting, CLI > env > ini > default; raises pytest.UsageError naming the source."""
    setting = SETTINGS[dest]
    invocation_dir = Path(str(config.invocation_params.dir))
    found: Resolved
    base = invocation_dir
    cli = config.getoption(dest, None)
    env = os.environ.get(setting.env, "")
    ini = str(config.getini(setting.ini) or "")
    if cli not in (None, ""):
        found = Resolved(str(cli), setting.flag)
    elif env:
        found = Resolved(env, f"${setting.env}")
    elif ini:
        where = config.inipath.name if config.inipath is not None else "the ini file"
        found = Resolved(ini, f"{setting.ini} in {where}")
        if config.inipath is not None:
            base = config.inipath.parent
    else:
        return Resolved(setting.default, "default")
    value = found.value or ""
    if setting.choices and value not in setting.choices:
        raise _usage_error(f"{found.source}: expected one of {', '.join(setting.choices)}, got {value!r}")
    if setting.is_path:
        path = Path(value).expanduser()
        value = str(path if path.is_absolute() else base / path)
    return Resolved(value, found.source)


def max_spend_usd(config: pytest.Config) -> float | None:
    """Issue 21: ``--sbx-max-spend=USD``, else ini ``sbx_max_spend``; None when unset. A bad value is a usage error."""
    raw, source = config.getoption("sbx_max_spend", None), "--sbx-max-spend"
    if raw in (None, ""):
        raw, source = str(config.getini("sbx_max_spend") or "").strip() or None, "ini sbx_max_spend"
    if raw is None:
        return None
    try:
        value = float(str(raw).strip().removeprefix("$"))
    except ValueError:
        value = -1.0
    if not (value >= 0 and value != float("inf")):
        raise _usage_error(f"{source}: expected a spend cap in USD (a number >= 0, e.g. 0.50); got {raw!r}")
    return value


def _usage_error(message: str) -> Exception:
    import pytest

    return pytest.UsageError(f"sbxcheck: {message}")


def add_first_contact_options(parser: pytest.Parser, group: Any) -> None:
    """Issue 18: a lost inventory is a usage error on request; the doctor checks before anything runs."""
    group.addoption(
        "--sbx-require-inventory",
        action="store_true",
        default=False,
        help="no inventory found is a usage error (exit 4) instead of a run on the embedded simulated fleet "
        "(what CI sets); also $SBXCHECK_REQUIRE_INVENTORY=1, ini sbx_require_inventory = true",
    )
    group.addoption(
        "--sbx-doctor",
        action="store_true",
        default=False,
        help="check every precondition (inventory, files, known_hosts, env vars, control plane, OpenRouter "
        "key, tools), one line each, and collect nothing: the same as `sbxcheck doctor`",
    )
    parser.addini(
        "sbx_require_inventory", "no inventory found is a usage error (as --sbx-require-inventory)", type="bool"
    )


# History and metrics (issue 9): CLI, then ini, then default.
HISTORY_KEEP_DEFAULT = 30


def add_history_options(parser: pytest.Parser, group: Any) -> None:
    group.addoption(
        "--sbx-history",
        metavar="DIR",
        default=None,
        help="keep this run's results.json in DIR (the last --sbx-history-keep runs) and show flaky items, "
        "since-when failing and new/ongoing/resolved incidents on the page (ini: sbx_history)",
    )
    group.addoption(
        "--sbx-history-keep",
        metavar="N",
        default=None,
        help=f"how many runs the history keeps (default {HISTORY_KEEP_DEFAULT}; ini: sbx_history_keep)",
    )
    group.addoption(
        "--sbx-metrics",
        metavar="FILE",
        default=None,
        help="write Prometheus text exposition here (node_exporter textfile collector; ini: sbx_metrics)",
    )
    group.addoption(  # issue 21
        "--sbx-max-spend",
        metavar="USD",
        default=None,
        help="stop dispatching new missions once this run has spent USD (missions then run one at a time, "
        "each to its end, so its cost is known); what was not run is reported (ini: sbx_max_spend)",
    )
    parser.addini("sbx_max_spend", "spend cap in USD (as --sbx-max-spend)", default="")
    parser.addini("sbx_history", "history directory (as --sbx-history), relative to the ini file", default="")
    parser.addini("sbx_history_keep", "runs the history keeps (as --sbx-history-keep)", default="")
    parser.addini(
        "sbx_metrics", "Prometheus textfile (as --sbx-metrics), relative to the ini file", default=""
    )


def resolved_path(config: pytest.Config, option: str, ini: str) -> Path | None:
    """A path option: the CLI value (relative to where pytest was invoked), else the ini value (relative
    to the ini file), else None."""
    value = config.getoption(option)
    if value:
        path = Path(str(value)).expanduser()
        return path if path.is_absolute() else Path(str(config.invocation_params.dir)) / path
    text = str(config.getini(ini) or "").strip()
    if not text:
        return None
    path = Path(text).expanduser()
    base = config.inipath.parent if config.inipath else config.rootpath
    return path if path.is_absolute() else Path(str(base)) / path


def history_keep(config: pytest.Config) -> int:
    """--sbx-history-keep, else ini sbx_history_keep, else the default; a bad value is a usage error (exit 4)."""
    raw, source = config.getoption("sbx_history_keep"), "--sbx-history-keep"
    if raw is None:
        raw, source = str(config.getini("sbx_history_keep") or "").strip() or None, "ini sbx_history_keep"
    if raw is None:
        return HISTORY_KEEP_DEFAULT
    try:
        keep = int(str(raw))
    except ValueError:
        keep = 0
    if keep < 1:
        raise pytest.UsageError(f"{source}: expected a whole number of runs, at least 1; got {raw!r}")
    return keep


def report_dir(config: pytest.Config) -> Path:
    """--sbx-report (or its env/ini forms, or the default), relative to where pytest was started."""
    out_dir = Path(resolve(config, "sbx_report").value or "sbxcheck-report").expanduser()
    return out_dir if out_dir.is_absolute() else Path(str(config.invocation_params.dir)) / out_dir
