"""Next-step commands that work as printed: the right tool for the target, its real name, no placeholder.

An SSH host is probed with ``ssh`` by the alias sbxcheck itself connected to (with ``-F`` when the
inventory names its own ssh_config, so the alias resolves as it did for the check); an HTTP service
with ``curl`` on its base URL. When the evidence names neither, no command is offered rather than
one with a ``<target>`` to fill in or an empty argument. A next step's commands are the ones its check
built (``CheckResult.commands``, :mod:`sbxcheck.commands`), never read out of its prose, which may quote
what a server or an agent wrote; every item set has its re-run command (:func:`rerun_command`;
:func:`not_run_command` for what an interrupted run did not reach).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sbxcheck.commands import filled, shell_command
from sbxcheck.results import CheckRecord, RunReport

__all__ = [
    "fill_probe",
    "inventory_flag",
    "next_step_commands",
    "not_run_command",
    "probe_command",
    "probe_of",
    "record_commands",
    "rerun_command",
]

_PLACEHOLDER_CLAUSE = re.compile(r"\s*\([^()]*<target>[^()]*\)")
_GATE_RUN = re.compile(r"^(?P<run>[a-z0-9][a-z0-9-]*?-\d{8}-[0-9a-f]{6})(?:-.+)?$")
def probe_command(evidence: Mapping[str, Any]) -> str | None:
    """``ssh [-F cfg] -o ConnectTimeout=10 ALIAS true`` or ``curl … URL`` from what the evidence names."""
    alias = evidence.get("alias")
    if isinstance(alias, str) and alias.strip():
        config = evidence.get("ssh_config")
        flag = ["-F", config] if isinstance(config, str) and config.strip() else []
        return shell_command("ssh", *flag, "-o", "ConnectTimeout=10", alias.strip(), "true")
    service = evidence.get("service")
    if isinstance(service, str) and service.startswith(("http://", "https://")):
        return filled("curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' {url}", url=service)
    return None


def probe_of(evidences: Iterable[Mapping[str, Any]]) -> str | None:
    """The one probe every evidence that names a target agrees on (None when they differ or name none)."""
    probes = {p for e in evidences if (p := probe_command(e))}
    return probes.pop() if len(probes) == 1 else None


def fill_probe(text: str, probe: str | None) -> str:
    """Put ``probe`` where the advice has ``(… <target> …)``; without one, drop that clause."""
    return _PLACEHOLDER_CLAUSE.sub(f" ({probe})" if probe else "", text).replace("<target>", "the host")


def inventory_flag(source: str) -> str:
    """``--sbx-inventory=PATH`` when the run used an inventory file (a ``sbxcheck sim up`` one too: it
    is read as any other), else nothing (the embedded fleet has no file to name)."""
    if not source.endswith(".toml"):
        return ""
    return f"--sbx-inventory={shlex.quote(source)}"


def rerun_command(records: Sequence[CheckRecord], inventory_flag: str = "", *, every: bool = False) -> str | None:
    """The command that re-runs these items: the gate per run id, anything else by node id; with the
    run's ``--sbx-inventory=PATH`` when it used one, so it checks the same fleet. ``every``: name every
    node id (for the items an interrupted run did not reach), not the first few of a suite."""
    if not records:
        return None
    pytest_cmd = f"pytest {inventory_flag}" if inventory_flag else "pytest"
    runs = [m.group("run") for r in records if r.suite == "gate" and (m := _GATE_RUN.match(r.target))]
    if len(runs) == len(records):
        return f"{pytest_cmd} -m gate " + " ".join(
            f"--sbx-run-id {shlex.quote(r)}" for r in dict.fromkeys(runs)
        )
    nodeids = [r.nodeid for r in records]
    shown = " ".join(shlex.quote(n) for n in (nodeids if every else nodeids[:6]))
    suite = shlex.quote(records[0].suite)
    return f"{pytest_cmd} {shown}" if every or len(nodeids) <= 6 else f"{pytest_cmd} -m {suite} {shown}"


def next_step_commands(
    records: Sequence[CheckRecord], commands: Sequence[str], inventory_flag: str = ""
) -> list[str]:
    """What to type: the next step's own commands (built by sbxcheck), then the re-run of the items."""
    typed = list(dict.fromkeys(commands))
    rerun = rerun_command(records, inventory_flag)
    if rerun and rerun not in typed:
        typed.append(rerun)
    return typed


def record_commands(record: CheckRecord, shown: str) -> list[str]:
    """The commands of the next step ``shown`` for ``record``: its own, or (``shown`` being the default
    advice) the probe its evidence names, where that advice offers one."""
    if record.recommendation:
        return list(record.commands)
    probe = probe_command(record.evidence)
    return [probe] if probe and probe in shown else []


def not_run_command(report: RunReport) -> str | None:
    """The command that runs what an interrupted run did not reach, against the same fleet."""
    not_run = set(report.not_run)
    records = [r for r in report.checks if r.nodeid in not_run]
    return rerun_command(records, inventory_flag(report.inventory.source), every=True)
