"""Ids that come from outside (a server's answer, the ledger, a run record) are data, never paths.

Every such id is checked against its documented shape before it is used, and goes into a URL
only as one percent-encoded path segment (:func:`path_segment`). An id that fails is a
:class:`~sbxcheck.errors.BadResponseError` naming where it came from and the field: it is never
requested and never written to the ledger.
"""

from __future__ import annotations

import re
from typing import Final, Literal
from urllib.parse import quote

from sbxcheck.errors import BadResponseError

IdShape = Literal["uuid", "key_hash", "name"]

_SHAPES: Final[dict[str, tuple[re.Pattern[str], str]]] = {
    "uuid": (
        re.compile(r"\A[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"),
        "a canonical hyphenated UUID",
    ),
    "key_hash": (re.compile(r"\A[0-9a-f]{64}\Z"), "64 lowercase hex digits"),
    # node and host names: letters, digits and . _ : - (never '/', never only dots)
    "name": (re.compile(r"\A(?!\.+\Z)[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}\Z"), "a name of [A-Za-z0-9_.:-]"),
}
_SHOWN_CHARS: Final = 60


def is_valid_id(value: object, shape: IdShape = "uuid") -> bool:
    """True when ``value`` is a string of the documented ``shape``."""
    return isinstance(value, str) and _SHAPES[shape][0].match(value) is not None


def check_id(value: object, *, shape: IdShape = "uuid", field: str, source: str) -> str:
    """``value`` when it has the documented ``shape``; otherwise :class:`BadResponseError`.

    ``source`` says where the id came from (``POST /api/control/missions``, a ledger path, …),
    ``field`` which field held it. The message shows a short ``repr`` of the value (control
    characters escaped); it is never used.
    """
    if is_valid_id(value, shape):
        assert isinstance(value, str)
        return value
    shown = repr(value)
    if len(shown) > _SHOWN_CHARS:
        shown = shown[: _SHOWN_CHARS - 1] + "…"
    raise BadResponseError(
        f"{source}: field {field!r} is not {_SHAPES[shape][1]} ({shown}); the id was not used",
        evidence={"source": source, "field": field, "expected": _SHAPES[shape][1]},
    )


def path_segment(value: str, *, shape: IdShape = "uuid", field: str = "id", source: str = "id") -> str:
    """``value`` checked (:func:`check_id`) and percent-encoded as exactly one URL path segment."""
    return quote(check_id(value, shape=shape, field=field, source=source), safe="")
