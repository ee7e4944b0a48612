"""Write the inventory reference (docs/inventory.md) from the pydantic model in ``sbxcheck.inventory``.

``python -m sbxcheck.docs_inventory docs/inventory.md`` writes the page; without a path it prints it.
Every section and field comes from the model: type and bounds from the annotation and its constraints,
default, whether it is required, and the ``Field(description=...)``. A field marked
``json_schema_extra={"secret": "env" | "file"}`` is shown as a secret held by reference. Nothing at run
time imports this module.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from sbxcheck.inventory import Inventory

COMMAND = "python -m sbxcheck.docs_inventory docs/inventory.md"

_SCALARS: dict[Any, str] = {
    str: "string", int: "integer", float: "number", bool: "boolean", Path: "path",
    dt.date: "date", dt.datetime: "date-time",
}  # fmt: skip
_BOUNDS: tuple[tuple[type[Any], str, str], ...] = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "≤"),
)
_SECRET_NOTE = {
    "env": "**secret, by reference** (the name of an env var, never its value)",
    "file": "**secret, by reference** (the path of a file holding it, never its content)",
}


@dataclass(frozen=True)
class Section:
    """One TOML table of the inventory: its header, the model behind it, and how it is held."""

    key: str  # dotted: "sssf.recipes"
    model: type[BaseModel]
    array: bool  # [[key]]: a list of tables
    required: bool
    description: str

    @property
    def header(self) -> str:
        return f"[[{self.key}]]" if self.array else f"[{self.key}]"

    @property
    def anchor(self) -> str:
        """GitHub's anchor for a heading that is only the header in backticks."""
        return self.key.replace(".", "").lower()


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds (directly, optionally, or as a list), and whether it is a list."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation, False
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list and args:
        model, _ = _model_of(args[0])
        return model, model is not None
    if origin in (Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:
            return _model_of(present[0])
    return None, False


def _fields(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    for name, info in model.model_fields.items():
        if info.exclude:  # kept in memory, never read from or written to the file
            continue
        yield name, info


def sections() -> list[Section]:
    """Every table of the inventory, in the model's order, sub-tables right after their parent."""
    found: list[Section] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in _fields(model):
            sub, array = _model_of(info.annotation)
            if sub is None:
                continue
            key = f"{prefix}.{name}" if prefix else name
            found.append(Section(key, sub, array, info.is_required(), info.description or ""))
            walk(sub, key)

    walk(Inventory, "")
    return found


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: ``number``, ``list of string``, ``"rest" or "mcp"``."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " or ".join(f"`{json.dumps(a)}`" for a in args)
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"table of {type_name(args[0])} → {type_name(args[1])}"
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in args if a is not type(None))
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return "table"
    raise TypeError(f"no documented name for the type {annotation!r}; add it to sbxcheck.docs_inventory")


def bounds(info: FieldInfo) -> str:
    """The field's numeric constraints as ``> 0, ≤ 300`` (empty when there are none)."""
    out = []
    for meta in info.metadata:
        for kind, attr, sign in _BOUNDS:
            if isinstance(meta, kind):
                out.append(f"{sign} {getattr(meta, attr):g}")
    return ", ".join(out)


def toml_value(value: Any) -> str:
    """A default as it would be written in the TOML file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, float):
        return f"{value:g}" if value != int(value) else f"{value:.1f}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for the default {value!r}")


def table_cell(text: str) -> str:
    """``text`` for one Markdown table cell: ``|`` escaped, and ``<x>`` kept as text outside code spans."""
    parts = text.replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):  # the even parts lie outside backticks
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def _secret(info: FieldInfo) -> str | None:
    extra = info.json_schema_extra
    kind = extra.get("secret") if isinstance(extra, dict) else None
    return kind if isinstance(kind, str) else None


def field_row(name: str, info: FieldInfo, by_key: dict[str, Section], key: str) -> str:
    """One table row: field, type, default, required, description."""
    sub_key = f"{key}.{name}" if key else name
    if sub_key in by_key:
        section = by_key[sub_key]
        kind = f"list of tables, see [`{section.header}`](#{section.anchor})" if section.array else (
            f"table, see [`{section.header}`](#{section.anchor})"
        )
        default = _default(info)
    else:
        kind = type_name(info.annotation)
        limits = bounds(info)
        kind = f"{kind} ({limits})" if limits else kind
        default = "—" if info.is_required() else _default(info)
    required = "**yes**" if info.is_required() else "no"
    description = info.description or ""
    secret = _secret(info)
    if secret is not None:
        description = f"{_SECRET_NOTE[secret]}: {description}"
    cells = (f"`{name}`", kind, default, required, description)
    return "| " + " | ".join(table_cell(c) for c in cells) + " |"


def _default(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "its defaults"
    return _code(toml_value(value))


def _code(text: str) -> str:
    """An inline code span, also for text that holds a backtick."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _doc(model: type[BaseModel]) -> str:
    """The model's docstring, its reST literals as Markdown code."""
    return inspect.cleandoc(model.__doc__ or "").replace("``", "`")


INTRO = """\
# The inventory: every section and field

<!-- Generated from sbxcheck/inventory.py by `{command}`; do not edit by hand. -->

[← README](../README.md) · commented examples: [gate.toml](../examples/inventory/gate.toml),
[canary.toml](../examples/inventory/canary.toml)

The inventory is one TOML file: `sbxcheck.toml` in pytest's rootdir, `--sbx-inventory=PATH`, or
`$SBXCHECK_INVENTORY` (`sbx_inventory` in the ini). Without one, every suite runs against the embedded
fleet, whose own inventory `sbxcheck sim up --dir DIR` writes to `DIR/sbxcheck.toml`.
`sbxcheck doctor --inventory PATH` validates a file and checks what it names.

- **Secrets are never in the file**, only references to them: a field marked *secret, by reference*
  holds the name of an environment variable (`*_env`) or the path of a file; a value pasted into an
  `*_env` field is refused without being printed, and a URL with `user:password@` is refused.
- An unknown field is an error (a typo is never ignored silently); a bad value is one message naming
  the file, the field and what was expected (exit 4).
- Relative paths are taken from the inventory file's directory; `~` is expanded. A path that does not
  exist (`ssh.config`, `ssh.known_hosts`, `ssh.identity`, `sssf.checkout`, `sssf.runs_dir`,
  `sssf.roster_config`, `sssf.provisioning_key_file`, `sandboxed.password_file`) is refused at load.
- Which suite needs which section: the gate and run items `[sssf]`; the canary and triage items
  `[sandboxed]`; the DGX items `[dgx]`; `[ssh]` serves them all.

## Sections

{toc}
"""


def render() -> str:
    """The whole page, Markdown."""
    found = sections()
    by_key = {s.key: s for s in found}
    toc = "\n".join(
        f"{'  ' * s.key.count('.')}- [`{s.header}`](#{s.anchor}) — {s.description or _doc(s.model)}"
        for s in found
    )
    parts = [INTRO.format(command=COMMAND, toc=toc)]
    for section in found:
        level = "#" * (2 + min(section.key.count("."), 1))
        held = "a list of tables, one per entry" if section.array else "a table"
        need = "required" if section.required else "optional"
        parts.append(f"{level} `{section.header}`\n")
        parts.append(f"{_doc(section.model)}\n")
        what = f": {section.description}" if section.description else ""
        parts.append(f"*{held.capitalize()}, {need}{what}.*\n")
        rows = [field_row(name, info, by_key, section.key) for name, info in _fields(section.model)]
        parts.append(
            "| field | type | default | required | description |\n| --- | --- | --- | --- | --- |\n"
            + "\n".join(rows)
            + "\n"
        )
    return "\n".join(parts)


def page_main(argv: list[str] | None, render: Callable[[], str], command: str) -> int:
    """A generated page's command line: ``[OUT.md]`` writes it there, no argument prints it."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        print(f"usage: {command.rsplit(' ', 1)[0]} [OUT.md]", file=sys.stderr)
        return 2
    text = render()
    if not args:
        sys.stdout.write(text)
        return 0
    Path(args[0]).write_text(text, encoding="utf-8")
    print(f"wrote {args[0]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return page_main(argv, render, COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
