"""Every next step a report offers is a command that works as printed (issue 19, item 3).

Read from a child session's results.json: each incident's recommendation and each failed or
errored item's next step, and the commands report.html offers to copy for them. None holds a
``<…>`` placeholder or an empty argument; every ``ssh`` names a host the fleet's ssh_config knows
(with ``-F`` that config when the inventory names one); every ``curl`` an http(s) URL; every
``pytest`` re-run the inventory flag the run used.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sbxcheck.report.nextsteps import inventory_flag, next_step_commands, record_commands
from sbxcheck.results import CheckRecord

PLACEHOLDER = re.compile(r"<[A-Za-z][\w .:/-]*>")
_SSH_VALUE_OPTIONS = set("bcDEeFIiJLlmOopQRSWw")


def ssh_config_of(inventory: Path) -> Path | None:
    data = tomllib.loads(inventory.read_text(encoding="utf-8"))
    config = (data.get("ssh") or {}).get("config")
    return (inventory.parent / config).resolve() if config else None


def host_patterns(config: Path) -> list[str]:
    patterns: list[str] = []
    for line in config.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words and words[0].lower() == "host":
            patterns.extend(words[1:])
    return patterns


def _ssh_host(argv: list[str]) -> tuple[str | None, str | None]:
    """(host, -F config) of an ssh command line."""
    config, i = None, 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and len(arg) == 2 and arg[1] in _SSH_VALUE_OPTIONS:
            if arg == "-F":
                config = argv[i + 1] if i + 1 < len(argv) else None
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg, config
    return None, config


def _texts(report: dict[str, Any]) -> Iterator[tuple[str, str, list[CheckRecord], list[str]]]:
    """(where, next step, its records, the commands report.html offers with it)."""
    by_nodeid = {c["nodeid"]: c for c in report["checks"]}
    for incident in report["incidents"]:
        members = [CheckRecord.model_validate(by_nodeid[n]) for n in incident["checks"] if n in by_nodeid]
        yield f"incident {incident['id']}", incident["recommendation"], members, incident.get("commands", [])
    for check in report["checks"]:
        if check["outcome"] in ("failed", "error"):
            record = CheckRecord.model_validate(check)
            text = check.get("next_step") or ""
            yield check["nodeid"], text, [record], record_commands(record, text)


def next_step_problems(report: dict[str, Any], inventory: Path) -> list[str]:
    """Every way a next step of ``report`` would not work as printed (empty: all work)."""
    config = ssh_config_of(inventory)
    patterns = host_patterns(config) if config else []
    flag = f"--sbx-inventory={inventory}"
    problems: list[str] = []
    source = report.get("inventory") or {}
    offered = inventory_flag(str(source.get("source", "")))  # what report.html uses
    if offered != flag:
        problems.append(f"the report's re-runs would use {offered!r}, not {flag!r}")
    for where, text, records, commands in _texts(report):
        if not text.strip():
            problems.append(f"{where}: no next step")
            continue
        if PLACEHOLDER.search(text):
            problems.append(f"{where}: placeholder in {text!r}")
        for command in next_step_commands(records, commands, offered):
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                problems.append(f"{where}: {command!r} does not parse ({exc})")
                continue
            if any(not a.strip() for a in argv):
                problems.append(f"{where}: empty argument in {command!r}")
            if PLACEHOLDER.search(command):
                problems.append(f"{where}: placeholder in {command!r}")
            if not argv:
                continue
            if argv[0] == "ssh":
                host, given = _ssh_host(argv)
                if host is None or not any(fnmatch.fnmatch(host, p) for p in patterns):
                    problems.append(f"{where}: {command!r}: host {host!r} is not in {config}")
                elif config is not None and given != str(config):
                    problems.append(f"{where}: {command!r} does not name the fleet's ssh_config ({config})")
            elif argv[0] == "curl" and not any(a.startswith(("http://", "https://")) for a in argv):
                problems.append(f"{where}: {command!r}: no URL")
            elif argv[0] == "pytest" and flag not in argv:
                problems.append(f"{where}: {command!r} lacks {flag}")
    return problems
