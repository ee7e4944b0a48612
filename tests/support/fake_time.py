"""Replace one module's view of ``time``, never the process-wide ``time`` functions.

Patching ``time.sleep`` or ``time.monotonic`` through a module attribute path patches the shared
``time`` module: every other thread of the worker (a shared fleet's servers, pools) would see the
fake clock too, eat its ticks or spin on a no-op sleep.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest


def patch_module_time(monkeypatch: pytest.MonkeyPatch, module: str, **fakes: Any) -> None:
    """Give ``module`` (dotted path) its own ``time``: the real one, except for ``fakes``."""
    real = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    monkeypatch.setattr(f"{module}.time", SimpleNamespace(**{**real, **fakes}))
