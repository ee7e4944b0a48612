"""The ledger's lines and the entries they fold into: what :mod:`sbxcheck.lifecycle.ledger` appends
and reads back (the format is described there).

:class:`Fold` reads a ledger file incrementally (:func:`read_lines`, bounded chunks) into
:class:`LedgerEntry` objects, keeping every open entry and the last :data:`KEEP_CLOSED` closed ones;
:func:`entry_lines` writes the lines that fold back into one entry (what a compaction keeps).
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from sbxcheck.safeio import loads_bounded

__all__ = [
    "CLOSED_STATES",
    "FORMAT_VERSION",
    "KEEP_CLOSED",
    "EntryKind",
    "EntryState",
    "Fold",
    "LedgerEntry",
    "entry_lines",
    "read_lines",
]

FORMAT_VERSION = 1
KEEP_CLOSED = 1000  # closed entries a fold (and a compaction) keeps: the most recent ones
_READ_CHUNK = 1 << 20
_MAX_WARNINGS = 50
_SHORT_LINE = 2048

EntryKind = Literal["mount", "mission"]
EntryState = Literal["open", "created", "released", "kept", "abandoned", "left", "unmatched"]
_STATUS_OPS: dict[str, EntryState] = {
    "created": "created",
    "released": "released",
    "kept": "kept",
    "abandoned": "abandoned",
    "left": "left",
    "unmatched": "unmatched",
}
CLOSED_STATES: frozenset[str] = frozenset({"released", "unmatched"})


@dataclass
class LedgerEntry:
    """One created (or about-to-be-created) thing, folded from its ledger lines."""

    id: str
    kind: str
    ident: str
    run_id: str | None
    owner: str
    state: EntryState = "open"
    intended_ident: str = ""
    owner_start: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    opened_at: str = ""
    updated_at: str = ""
    how: str | None = None  # set by "released"
    why: str | None = None  # set by "kept", "abandoned", "left" and "unmatched"
    session: str | None = None

    @property
    def released(self) -> bool:
        return self.state == "released"

    @property
    def is_open(self) -> bool:
        """Whatever it stands for may still exist (not released, not found to be nothing)."""
        return self.state not in CLOSED_STATES


def read_lines(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes, bool]]:
    """``(offset after the line, line, ended by a newline)`` for each line in ``[start, end)``.

    Read in bounded chunks; the last piece is yielded even without a final newline (a torn line).
    """
    offset, rest, rest_at = start, b"", start  # ``rest`` (not yet a whole line) begins at ``rest_at``
    while offset < end:
        chunk = os.pread(fd, min(_READ_CHUNK, end - offset), offset)
        if not chunk:
            break
        offset += len(chunk)
        rest += chunk
        pos = 0
        while (newline := rest.find(b"\n", pos)) >= 0:
            yield rest_at + newline + 1, rest[pos:newline], True
            pos = newline + 1
        rest_at += pos
        rest = rest[pos:]
    if rest:
        yield rest_at + len(rest), rest, False


# an intent line as Ledger._append writes it: its id is read without parsing the (long) line
_INTENT_HEAD = re.compile(rb'\{"v":1,"ts":"[^"\\]*","op":"intent","id":"([0-9a-f]{32})",')


@dataclass
class _Unparsed:
    """An intent line not parsed yet, with the status lines folded onto it (most are closed, then forgotten)."""

    line: int
    raw: bytes
    statuses: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    state: str = "open"


class Fold:
    """The ledger folded so far: entries (open ones and the last :data:`KEEP_CLOSED` closed ones).

    Intent lines are parsed only when their entry is wanted (an old closed entry never is), so a
    fold costs about one regular-expression match per intent and one small parse per status line.
    """

    def __init__(self, dev: int, ino: int, *, source: str) -> None:
        self.dev, self.ino, self.source = dev, ino, source
        self.offset = 0  # bytes folded so far
        self.line = 0
        self.entries: dict[str, LedgerEntry | _Unparsed] = {}  # in intent order
        self.closed: OrderedDict[str, None] = OrderedDict()  # closed ids, oldest first
        self.dropped = 0  # closed entries forgotten beyond KEEP_CLOSED
        self.warnings: list[str] = []
        self.more_warnings = 0
        self.torn_warning: int | None = None  # index of the warning about a torn last line

    def read(self, fd: int, end: int) -> None:
        """Fold the bytes from :attr:`offset` to ``end``."""
        if self.torn_warning is not None and end > self.offset:  # the torn line is no longer the last
            i = self.torn_warning
            self.warnings[i] = self.warnings[i].replace("torn last line", "unparseable line")
            self.torn_warning = None
        for after, raw, whole in read_lines(fd, self.offset, end):
            self.line += 1
            self.offset = after
            if raw.strip():
                self._fold_line(raw, torn=not whole)

    def materialized(self) -> list[LedgerEntry]:
        """Every kept entry, parsed (in intent order)."""
        out = []
        for entry_id, value in list(self.entries.items()):
            entry = self._parse(entry_id, value) if isinstance(value, _Unparsed) else value
            if entry is not None:
                out.append(entry)
        return out

    def _parse(self, entry_id: str, pending: _Unparsed) -> LedgerEntry | None:
        try:
            obj = loads_bounded(pending.raw)
        except ValueError:
            self._warn(f"{self.source}:{pending.line}: unparseable line skipped ({len(pending.raw)} bytes)")
            del self.entries[entry_id]
            self.closed.pop(entry_id, None)
            return None
        entry = _intent_entry(entry_id, obj)
        for _, status in pending.statuses:
            _apply_status(entry, status)
        self.entries[entry_id] = entry
        return entry

    def _warn(self, message: str) -> None:
        if len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(message)
        else:
            self.more_warnings += 1
            if self.more_warnings == 1:
                self.warnings.append(f"{self.source}: further problems are not listed")

    def _fold_line(self, raw: bytes, *, torn: bool) -> None:
        where = f"{self.source}:{self.line}"
        head = None if torn else _INTENT_HEAD.match(raw)
        if head is not None and raw.endswith(b"}"):
            entry_id = head.group(1).decode()
            if entry_id in self.entries:
                self._warn(f"{where}: duplicate intent for {entry_id} skipped")
            else:
                self.entries[entry_id] = _Unparsed(self.line, raw)
            return
        try:
            # a short line (a status line) cannot hold much nesting: the plain parser is enough
            obj = _loads_short(raw) if len(raw) <= _SHORT_LINE else loads_bounded(raw)
        except ValueError:
            self._warn(f"{where}: {'torn last line' if torn else 'unparseable line'} skipped ({len(raw)} bytes)")
            if torn and self.warnings[-1].startswith(where):
                self.torn_warning = len(self.warnings) - 1
            return
        op = obj.get("op") if isinstance(obj, dict) else None
        entry_id = obj.get("id") if isinstance(obj, dict) else None
        if not isinstance(entry_id, str) or not isinstance(op, str):
            self._warn(f"{where}: line without 'op' and 'id' skipped")
            return
        if op == "intent":
            if entry_id in self.entries:
                self._warn(f"{where}: duplicate intent for {entry_id} skipped")
            else:
                self.entries[entry_id] = _intent_entry(entry_id, obj)
            return
        state = _STATUS_OPS.get(op)
        if state is None:
            self._warn(f"{where}: unknown op {op!r} skipped")
            return
        target = self.entries.get(entry_id)
        if target is None:
            if self.dropped == 0:  # with closed entries forgotten, a late line for one is not news
                self._warn(f"{where}: {op!r} for unknown entry {entry_id} skipped")
            return
        if isinstance(target, _Unparsed):
            target.statuses.append((self.line, obj))
            target.state = state
        else:
            _apply_status(target, obj)
        if state not in CLOSED_STATES:
            self.closed.pop(entry_id, None)
            return
        self.closed[entry_id] = None
        self.closed.move_to_end(entry_id)
        while len(self.closed) > KEEP_CLOSED:
            oldest, _ = self.closed.popitem(last=False)
            del self.entries[oldest]
            self.dropped += 1


def _loads_short(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _intent_entry(entry_id: str, obj: dict[str, Any]) -> LedgerEntry:
    ts = _opt_str(obj.get("ts")) or ""
    ident = _opt_str(obj.get("ident")) or ""
    detail = obj.get("detail")
    return LedgerEntry(
        id=entry_id,
        kind=_opt_str(obj.get("kind")) or "?",
        ident=ident,
        intended_ident=ident,
        run_id=_opt_str(obj.get("run_id")),
        owner=_opt_str(obj.get("owner")) or "?",
        owner_start=_opt_str(obj.get("owner_start")),
        session=_opt_str(obj.get("session")),
        detail=detail if isinstance(detail, dict) else {},
        opened_at=ts,
        updated_at=ts,
    )


def _apply_status(entry: LedgerEntry, obj: dict[str, Any]) -> None:
    op = str(obj.get("op"))
    entry.state = _STATUS_OPS[op]
    entry.updated_at = _opt_str(obj.get("ts")) or ""
    if op == "created":
        entry.ident = _opt_str(obj.get("ident")) or entry.ident
    elif op == "released":
        entry.how = _opt_str(obj.get("how"))
    else:  # kept, abandoned, left, unmatched
        entry.why = _opt_str(obj.get("why"))


def entry_lines(entry: LedgerEntry) -> str:
    """The lines that fold back into ``entry`` (its intent, its resolved ident, its last state)."""
    records: list[dict[str, Any]] = [
        {
            "v": FORMAT_VERSION,
            "ts": entry.opened_at,
            "op": "intent",
            "id": entry.id,
            "kind": entry.kind,
            "ident": entry.intended_ident,
            "run_id": entry.run_id,
            "owner": entry.owner,
            "owner_start": entry.owner_start,
            "session": entry.session,
            "detail": entry.detail,
        }
    ]
    if entry.ident != entry.intended_ident or entry.state == "created":
        records.append(
            {"v": FORMAT_VERSION, "ts": entry.updated_at, "op": "created", "id": entry.id, "ident": entry.ident}
        )
    if entry.state not in ("open", "created"):
        extra = {"how": entry.how} if entry.state == "released" else {"why": entry.why}
        records.append({"v": FORMAT_VERSION, "ts": entry.updated_at, "op": entry.state, "id": entry.id, **extra})
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
