"""What a session creates and must account for: missions, mounts (``just sbx`` recipes), the ledger.

``from sbxcheck.lifecycle import MissionDispatcher`` is the public way to the mission dispatcher
(shipped suites and users' tests use it); the rest is imported from its module. It is imported on
first use (PEP 562), so ``sbxcheck.lifecycle.ledger`` alone (``sbxcheck ledger``) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbxcheck.lifecycle.missions import MissionDispatcher


def __getattr__(name: str) -> Any:
    if name != "MissionDispatcher":
        raise AttributeError(f"module 'sbxcheck.lifecycle' has no attribute {name!r}")
    value = importlib.import_module("sbxcheck.lifecycle.missions").MissionDispatcher
    globals()[name] = value
    return value


__all__ = ["MissionDispatcher"]
