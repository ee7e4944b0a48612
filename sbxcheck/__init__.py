"""sbxcheck: a pytest plugin and check suites for fleets of AI coding agents in sandboxes.

The public names are imported on first use (PEP 562): pytest loads ``sbxcheck.plugin`` in every run
where sbxcheck is installed, and that must not pay for pydantic models it does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE = {
    **dict.fromkeys(
        (
            "AuthFailed",
            "BadResponseError",
            "CommandTimeout",
            "HostKeyMismatch",
            "HostKeyUnknown",
            "HostUnreachable",
            "InventoryError",
            "RunRecordError",
            "SbxError",
            "SimError",
            "TransportError",
        ),
        "sbxcheck.errors",
    ),
    "Inventory": "sbxcheck.inventory",
    "load_inventory": "sbxcheck.inventory",
    "Redactor": "sbxcheck.redact",
    "default_redactor": "sbxcheck.redact",
    **dict.fromkeys(
        ("CheckRecord", "CheckResult", "Classification", "Incident", "Outcome", "RunReport"),
        "sbxcheck.results",
    ),
}

if TYPE_CHECKING:
    from sbxcheck.errors import (
        AuthFailed,
        BadResponseError,
        CommandTimeout,
        HostKeyMismatch,
        HostKeyUnknown,
        HostUnreachable,
        InventoryError,
        RunRecordError,
        SbxError,
        SimError,
        TransportError,
    )
    from sbxcheck.inventory import Inventory, load_inventory
    from sbxcheck.redact import Redactor, default_redactor
    from sbxcheck.results import CheckRecord, CheckResult, Classification, Incident, Outcome, RunReport


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sbxcheck' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AuthFailed",
    "BadResponseError",
    "CheckRecord",
    "CheckResult",
    "Classification",
    "CommandTimeout",
    "HostKeyMismatch",
    "HostKeyUnknown",
    "HostUnreachable",
    "Incident",
    "Inventory",
    "InventoryError",
    "Outcome",
    "Redactor",
    "RunRecordError",
    "RunReport",
    "SbxError",
    "SimError",
    "TransportError",
    "__version__",
    "default_redactor",
    "load_inventory",
]
