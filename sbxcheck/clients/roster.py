"""The SSSF roster: which models a run's config pins (specs/sssf-sandbox.md, 3 C and 4).

Upstream's gate reads the second whitespace field of every ``model:`` line and strips a leading
``openrouter/`` (pi's provider name). sbxcheck parses the same lines but is stricter where
upstream is wrong: a YAML list item (``- model: x``) counts, and one layer of quotes is removed,
since both are valid YAML for the same model.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

MODEL_LINE_RE = re.compile(r"^\s*(?:-\s+)?model:\s+(\S+)")
PROVIDER_PREFIX = "openrouter/"


def parse_roster(text: str) -> list[str]:
    """The sorted, de-duplicated OpenRouter model ids a config pins."""
    models = set()
    for line in text.splitlines():
        match = MODEL_LINE_RE.match(line)
        if not match:
            continue
        value = match.group(1).split("#", 1)[0].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if value.startswith(PROVIDER_PREFIX):
            value = value[len(PROVIDER_PREFIX) :]
        if value:
            models.add(value)
    return sorted(models)


@dataclass(frozen=True)
class RosterSource:
    """A roster and where it was read from (for evidence)."""

    models: tuple[str, ...]
    source: str
    problem: str | None = None


def roster_from_checkout(
    checkout: Path, config: str, commit_sha: str, timeout_s: float = 10.0
) -> RosterSource:
    """Read the roster the VM was filled with: ``git show <sha>:<config>`` in the host checkout.

    The VM is a clone of the same repository at ``commit_sha``, so this is the VM's config without
    opening a connection (collection must stay offline). Falls back to the working-tree file.
    """
    try:
        proc = subprocess.run(
            ["git", "-C", str(checkout), "show", f"{commit_sha}:{config}"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if proc.returncode == 0:
            return _roster(proc.stdout, f"git show {commit_sha}:{config} in {checkout}")
    except (OSError, subprocess.TimeoutExpired):
        pass
    path = checkout / config
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problem = f"cannot read roster config {config}: not at {commit_sha} in {checkout} and {path}: {exc}"
        return RosterSource((), str(path), problem)
    return _roster(text, f"{path} (working tree; {commit_sha} not in the checkout)")


def _roster(text: str, source: str) -> RosterSource:
    models = tuple(parse_roster(text))
    problem = None if models else f"parsed zero models out of {source}"
    return RosterSource(models, source, problem)
