"""The SSSF roster: which models a run's config pins (specs/sssf-sandbox.md, 3 C and 4).

The config is YAML and is read as the factory reads it, with a YAML parser, never as lines: block or
flow style (``agents: [{name: a, model: x}]``), plain or quoted values, anchors, aliases and merge keys
(``<<: *defaults``), comments. The roster is every string value of a ``model`` key anywhere in the
document (``defaults.model`` and each agent's ``model``, as upstream's C reads every ``model:`` line),
with a leading ``openrouter/`` (pi's provider name) stripped, sorted and de-duplicated. On a plain
block-style roster that is upstream's set; on any other spelling upstream's line reading is wrong,
and the factory is what runs.

The text comes from a VM (or a checkout), so the reading is bounded: at most :data:`MAX_CONFIG_BYTES`,
nested at most :data:`MAX_DEPTH` deep and at most :data:`MAX_NODES` nodes (counted on the parser's
events, before anything is built), every alias walked once. Whatever is wrong is a :class:`RosterError`,
one readable sentence.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from sbxcheck.safeio import read_text_file

PROVIDER_PREFIX: Final = "openrouter/"
MAX_CONFIG_BYTES: Final = 256 * 1024
MAX_DEPTH: Final = 64
MAX_NODES: Final = 100_000


class RosterError(ValueError):
    """A roster config that cannot be read: not YAML, too large or too deep, or a model that is not a string."""


def parse_roster(text: str) -> list[str]:
    """The sorted, de-duplicated OpenRouter model ids a config pins (RosterError when it cannot be read)."""
    models = set()
    for where, value in _model_values(load_config(text)):
        if value is None:  # `model:` with no value: the agent takes the default
            continue
        if not isinstance(value, str):
            raise RosterError(f"{where} is {type(value).__name__} {str(value)[:40]!r}, not a model id")
        value = value.strip()
        if value.startswith(PROVIDER_PREFIX):
            value = value[len(PROVIDER_PREFIX) :]
        if value:
            models.add(value)
    return sorted(models)


def load_config(text: str) -> Any:
    """The YAML document in ``text``, read with a safe loader after its size, depth and nodes are checked."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_CONFIG_BYTES:
        raise RosterError(f"{size} bytes, above the {MAX_CONFIG_BYTES // 1024} KiB a roster config may have")
    try:
        depth = nodes = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.NodeEvent):
                nodes += 1
                if nodes > MAX_NODES:
                    raise RosterError(f"more than {MAX_NODES} YAML nodes: not a roster config")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise RosterError(f"YAML nested more than {MAX_DEPTH} deep: not a roster config")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.safe_load(text)  # plain data only: no tags that build objects
    except yaml.YAMLError as exc:
        said = " ".join(str(exc).replace('in "<unicode string>", ', "").split())
        raise RosterError(f"not valid YAML: {said[:240]}") from None


def _model_values(doc: Any) -> Iterator[tuple[str, Any]]:
    """(where, value) of every ``model`` key, in document order; a node reached twice (an alias) once."""
    stack: list[tuple[str, Any]] = [("", doc)]
    seen: set[int] = set()
    while stack:
        where, node = stack.pop()
        if isinstance(node, (dict, list)):
            if id(node) in seen:
                continue
            seen.add(id(node))
        if isinstance(node, dict):
            children = [(f"{where}.{key}" if where else str(key), key, value) for key, value in node.items()]
            for path, key, value in children:
                if key == "model":
                    yield path, value
            stack.extend((path, value) for path, _, value in reversed(children))
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", value) for i, value in reversed(list(enumerate(node))))


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
        text = read_text_file(path, MAX_CONFIG_BYTES)
    except (OSError, ValueError) as exc:
        problem = f"cannot read roster config {config}: not at {commit_sha} in {checkout} and {path}: {exc}"
        return RosterSource((), str(path), problem)
    return _roster(text, f"{path} (working tree; {commit_sha} not in the checkout)")


def _roster(text: str, source: str) -> RosterSource:
    try:
        models = tuple(parse_roster(text))
    except RosterError as exc:
        return RosterSource((), source, f"cannot read the roster out of {source}: {exc}")
    problem = None if models else f"parsed zero models out of {source}"
    return RosterSource(models, source, problem)
