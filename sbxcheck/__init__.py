"""sbxcheck: a pytest plugin and check suites for fleets of AI coding agents in sandboxes."""

from __future__ import annotations

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

__version__ = "0.1.0"

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
