"""The target kinds are one table: each row is a fixture a test may request and the parameters it gets."""

from __future__ import annotations

from typing import Any

import pytest

from sbxcheck.plugin import fixtures, params
from sbxcheck.plugin.params import OBJECT_PARAMS, RUN_KINDS, TARGET_KINDS, parametrize


class _Metafunc:
    """What ``parametrize`` reads of pytest's Metafunc, recording each parametrization."""

    def __init__(self, *names: str) -> None:
        self.fixturenames = list(names)
        self.config: Any = object()
        self.calls: list[tuple[str, list[Any], bool]] = []

    def parametrize(self, name: str, values: list[Any], *, indirect: bool) -> None:
        self.calls.append((name, values, indirect))


def test_object_kinds_have_an_indirect_fixture_and_the_others_none() -> None:
    declared = {name for name in vars(fixtures) if name.startswith("sbx_")}
    assert set(OBJECT_PARAMS) <= set(TARGET_KINDS)
    assert {kind for kind in TARGET_KINDS if kind in declared} == set(OBJECT_PARAMS)
    assert set(RUN_KINDS) <= set(TARGET_KINDS)


def test_a_new_kind_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row added to the table is parametrized with no other edit; rows a test does not request are not read."""
    asked: list[str] = []

    def row(name: str) -> Any:
        return lambda config: asked.append(name) or [pytest.param(name, id=name)]

    monkeypatch.setattr(params, "TARGET_KINDS", {"sbx_route": row("route"), "sbx_pdu": row("pdu")})
    metafunc = _Metafunc("sbx_pdu", "sbx_verdict")
    parametrize(metafunc)  # type: ignore[arg-type]
    assert asked == ["pdu"]
    assert [(name, [p.id for p in values], indirect) for name, values, indirect in metafunc.calls] == [
        ("sbx_pdu", ["pdu"], False)
    ]


def test_one_run_kind_per_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """An item asking for two run kinds is parametrized by the first of ``RUN_KINDS`` only (one VM per item)."""
    table = {kind: (lambda config, kind=kind: [pytest.param(kind, id=kind)]) for kind in RUN_KINDS}
    monkeypatch.setattr(params, "TARGET_KINDS", table)
    metafunc = _Metafunc("sbx_gate_model", "sbx_gate_run")
    parametrize(metafunc)  # type: ignore[arg-type]
    assert [(name, indirect) for name, _, indirect in metafunc.calls] == [("sbx_gate_run", True)]
