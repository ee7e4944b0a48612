"""Configuration checked before collection: a bad configuration is one usage error, never N item errors.

The plugin calls :func:`configuration_problem` from ``pytest_configure`` and raises the message it
returns as ``pytest.UsageError`` (exit 4). What counts as configuration: a required inventory that is
not there (``--sbx-require-inventory``), an inventory that is missing, unparsable or invalid, an unknown
simulator fault, and an environment variable the inventory names (for a suite the run selects) that is
unset. Kept free of pytest and of heavy imports until an inventory or a fault is actually in play, so
an unrelated run pays nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sbxcheck.fleetsource import (
    SIMULATOR_MISSING,
    FleetSource,
    check_fault,
    check_sim_environment,
    sim_installed,
)

if TYPE_CHECKING:
    from sbxcheck.inventory import Inventory

REQUIRE_ENV = "SBXCHECK_REQUIRE_INVENTORY"
REQUIRE_INI = "sbx_require_inventory"
SUITES = ("gate", "canary", "triage")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


#: Which inventory a run uses and where that came from (``path`` None: the embedded fleet).
InventoryChoice = FleetSource


def choose_inventory(value: str | None, source: str, rootdir: Path, *, force_sim: bool) -> InventoryChoice:
    """The inventory a session would use: the resolved setting, else ``<rootdir>/sbxcheck.toml``, else none."""
    return FleetSource.choose(value, source, rootdir, force_sim=force_sim)


def require_flag(cli: bool, env: str | None, ini: object) -> tuple[bool, str]:
    """Whether the inventory is required, and who said so; a malformed env value raises ValueError."""
    if cli:
        return True, "--sbx-require-inventory"
    text = (env or "").strip().lower()
    if text in _TRUE:
        return True, f"${REQUIRE_ENV}"
    if text not in _FALSE:
        raise ValueError(f"${REQUIRE_ENV}: expected 1/true/yes or 0/false/no, got {env!r}")
    if ini is True or str(ini).strip().lower() in _TRUE:
        return True, f"ini {REQUIRE_INI}"
    return False, "default"


def names_a_suite(markexpr: str) -> bool:
    """Whether ``-m`` asks for a shipped suite by name (``-m gate``, ``-m "run and not slow"``)."""
    tokens = re.findall(r"[^\s()]+", markexpr)
    return any(t in (*SUITES, "run") and (i == 0 or tokens[i - 1] != "not") for i, t in enumerate(tokens))


def selected_suites(markexpr: str) -> set[str]:
    """The shipped suites a ``-m`` expression can select (all of them when it is empty or not understood).

    A tiny evaluator of pytest's marker grammar (``and``/``or``/``not``/parentheses/names), applied to an
    item carrying one suite marker; anything it does not understand (e.g. keyword arguments) selects
    every suite, so a check is never skipped by a misreading.
    """
    if not markexpr.strip():
        return set(SUITES)
    tokens = re.findall(r"\(|\)|[^\s()]+", markexpr)
    if any(not (t in ("(", ")") or re.fullmatch(r"[\w.\-:]+", t)) for t in tokens):
        return set(SUITES)
    chosen = set()
    for suite in SUITES:
        try:
            if _evaluate(tokens, suite):
                chosen.add(suite)
        except (IndexError, ValueError):
            return set(SUITES)
    return chosen


def _evaluate(tokens: list[str], marker: str) -> bool:
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def expr() -> bool:
        value = term()
        while peek() == "or":
            take()
            value = term() or value
        return value

    def term() -> bool:
        value = factor()
        while peek() == "and":
            take()
            value = factor() and value
        return value

    def factor() -> bool:
        token = take()
        if token == "not":
            return not factor()
        if token == "(":
            value = expr()
            if take() != ")":
                raise ValueError("unbalanced")
            return value
        if token in ("and", "or", ")"):
            raise ValueError(token)
        return token == marker

    result = expr()
    if position != len(tokens):
        raise ValueError("trailing tokens")
    return result


def named_env_vars(inv: Inventory) -> list[tuple[str, str]]:
    """(field, NAME) for every env var the inventory names for a secret.

    The provisioning key's variable counts only when the inventory names it itself (it has a default)
    and gives no ``provisioning_key_file``.
    """
    named: list[tuple[str, str]] = []
    if inv.sandboxed is not None:
        for field in ("token_env", "password_env"):
            name = getattr(inv.sandboxed, field)
            if name:
                named.append((f"sandboxed.{field}", name))
        if inv.sandboxed.mcp is not None:
            named += [(f"sandboxed.mcp.env_from.{k}", v) for k, v in inv.sandboxed.mcp.env_from.items()]
    sssf = inv.sssf
    if (
        sssf is not None
        and sssf.provisioning_key_env
        and "provisioning_key_env" in sssf.model_fields_set
        and sssf.provisioning_key_file is None
    ):
        named.append(("sssf.provisioning_key_env", sssf.provisioning_key_env))
    return named


def unset_env_vars(inv: Inventory, suites: set[str]) -> list[str]:
    """``field: NAME`` for every env var the inventory names for the selected suites that is unset.

    Only the canary and triage suites read secrets from the environment (the gate reads the runtime
    key inside each VM).
    """
    if not suites & {"canary", "triage"}:
        return []
    return [f"{field}: {name}" for field, name in named_env_vars(inv) if not os.environ.get(name, "").strip()]


def configuration_problem(
    choice: InventoryChoice,
    *,
    required: tuple[bool, str],
    faults: list[str],
    markexpr: str,
    sim_seed: int | None = None,
) -> str | None:
    """The one message that stops the session, or None when the configuration is usable.

    Imports the fault table and the inventory model only when there is a fault or an inventory to check.
    """
    if choice.simulated and required[0] and not faults and choice.source == "no inventory given":
        return (
            f"sbxcheck: no inventory found and {required[1]} requires one: give --sbx-inventory=PATH, "
            "set $SBXCHECK_INVENTORY or ini sbx_inventory, or put sbxcheck.toml in the rootdir "
            "(a run without one would check the embedded simulated fleet)"
        )
    if choice.simulated and names_a_suite(markexpr) and not sim_installed():
        return f"sbxcheck: {SIMULATOR_MISSING}"
    if choice.simulated and names_a_suite(markexpr) and sim_installed():
        from sbxcheck.errors import SbxError

        try:
            check_sim_environment()
        except SbxError as exc:
            return f"sbxcheck: embedded fleet: {exc.message}"
    if not faults and choice.path is None:
        return None
    from sbxcheck.errors import SbxError

    if faults:
        for fault in faults:
            try:
                check_fault(fault, embedded=choice.path is None, embedded_seed=sim_seed)
            except SbxError as exc:
                return f"sbxcheck: --sbx-sim-fault: {exc.message}"
    if choice.path is None:
        return None
    from sbxcheck.inventory import load_inventory

    try:
        inv = load_inventory(choice.path)
    except SbxError as exc:
        return (
            f"sbxcheck: inventory (from {choice.source}): {exc.message}; "
            "fix the file, or point --sbx-inventory=PATH at a valid one (sbxcheck doctor checks it)"
        )
    unset = unset_env_vars(inv, selected_suites(markexpr))
    if unset:
        return (
            f"sbxcheck: {choice.path}: the inventory names environment variables that are not set: "
            f"{', '.join(unset)}; export them (values never go in the inventory) or remove the fields"
        )
    return None
