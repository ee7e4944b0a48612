"""A gate item's run and its planned remote check: from an item's parameters to the fan-out's input."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sbxcheck.plugin.fanout import REMOTE_MARK, Planned
from sbxcheck.plugin.stash import param_object

if TYPE_CHECKING:
    from sbxcheck.plugin.gateruns import GateRun


def _params(item: pytest.Item) -> dict[str, Any]:
    """The item's parametrize values (empty when it has none)."""
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    return params


def gate_run_of(item: pytest.Item) -> tuple[GateRun, str | None] | None:
    """``(run, roster model or None)`` of a gate item, from its parameters; None for other items."""
    params = _params(item)
    # the parameters are stable keys (run id, (run id, model)); the plugin keeps the objects they name
    if params.get("sbx_gate_run") is not None:
        return param_object(item.config, "sbx_gate_run", params["sbx_gate_run"]), None
    if params.get("sbx_gate_model") is not None:
        run, model = param_object(item.config, "sbx_gate_model", params["sbx_gate_model"])
        return run, model
    return None


def plan_item(item: pytest.Item) -> Planned | None:
    """The fan-out plan of one item: None unless it is a gate item on a gateable run."""
    found = gate_run_of(item)
    if found is None:
        return None
    run, model = found
    if run is None or run.target is None:
        return None
    mark = item.get_closest_marker(REMOTE_MARK)
    check = mark.args[0] if mark is not None and mark.args else None
    if model is None and "sbx_gate_model" in _params(item):
        check = None  # no roster: the item reports that itself
    return Planned(item.nodeid, run, check, model)
