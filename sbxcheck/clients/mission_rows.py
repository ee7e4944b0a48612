"""Mission records read leniently: a field of another type is named, never the whole answer failing.

Releases type the same field differently (``github_pr`` is an integer in 1.3.0 and a string later)
and add or drop fields. A record whose optional field has another type is read with that field
fixed or left out, and the fix is said in words (:attr:`MissionRows.notes`); a number where text is
expected is kept as its text. Only a row without a readable ``id`` or ``status`` cannot be judged:
it is left out of a list and named, never failing the rows around it.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import ValidationError

from sbxcheck.clients.sandboxed_models import Mission
from sbxcheck.clients.validation import validation_summary

#: Fields without which a row is not a mission anyone can judge.
REQUIRED: Final = frozenset(name for name, info in Mission.model_fields.items() if info.is_required())


class MissionRows(list[Mission]):
    """Missions read from a list answer, and what was fixed or left out to read them (one line each)."""

    def __init__(self, rows: list[Mission] | None = None, notes: list[str] | None = None) -> None:
        super().__init__(rows or [])
        self.notes: list[str] = list(notes or [])


def read_mission(data: Any) -> tuple[Mission, list[str]]:
    """``data`` as a Mission, with a line per field fixed (a number read as text) or left out (another
    type). ValidationError when ``id`` or ``status`` is unreadable, or the row is no object."""
    try:
        return Mission.model_validate(data), []
    except ValidationError as exc:
        if not isinstance(data, dict):
            raise
        fixed, notes = dict(data), []
        for error in exc.errors():
            loc = error.get("loc") or ()
            name = loc[0] if loc else None
            if not isinstance(name, str) or name in REQUIRED:
                raise
            value = data.get(name)
            if error.get("type") == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
                fixed[name] = str(value)
                notes.append(f"{name} {value!r} is a {type(value).__name__}: read as text")
            elif name in fixed:
                del fixed[name]
                notes.append(f"{name} is not what the API documents ({error.get('msg', 'unreadable')}): left out")
        return Mission.model_validate(fixed), notes


def read_rows(data: list[Any]) -> MissionRows:
    """Every row that is a mission; one unreadable row is left out and named, never failing the list."""
    rows = MissionRows()
    for index, item in enumerate(data):
        ident = item.get("id") if isinstance(item, dict) else None
        shown = ident if isinstance(ident, str) else f"row {index}"
        try:
            mission, notes = read_mission(item)
        except ValidationError as exc:
            rows.notes.append(f"{shown[:40]}: not judged, {validation_summary(exc)}")
            continue
        rows.append(mission)
        rows.notes.extend(f"mission {mission.id}: {note}" for note in notes)
    return rows
