"""Next-step commands that work as printed: the right tool for the target, its real name, no placeholder.

An SSH host is probed with ``ssh`` by the alias sbxcheck itself connected to (with ``-F`` when the
inventory names its own ssh_config, so the alias resolves as it did for the check); an HTTP service
with ``curl`` on its base URL. When the evidence names neither, no command is offered rather than
one with a ``<target>`` to fill in or an empty argument.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["fill_probe", "inventory_flag", "probe_command", "probe_of"]

_PLACEHOLDER_CLAUSE = re.compile(r"\s*\([^()]*<target>[^()]*\)")


def probe_command(evidence: Mapping[str, Any]) -> str | None:
    """``ssh [-F cfg] -o ConnectTimeout=10 ALIAS true`` or ``curl … URL`` from what the evidence names."""
    alias = evidence.get("alias")
    if isinstance(alias, str) and alias.strip():
        config = evidence.get("ssh_config")
        flag = f"-F {shlex.quote(config)} " if isinstance(config, str) and config.strip() else ""
        return f"ssh {flag}-o ConnectTimeout=10 {shlex.quote(alias.strip())} true"
    service = evidence.get("service")
    if isinstance(service, str) and service.startswith(("http://", "https://")):
        return f"curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' {shlex.quote(service)}"
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
