"""Write the settings reference (docs/settings.md) from ``OPTIONS``, the one table of sbxcheck's settings.

``python -m sbxcheck.plugin.docs_settings docs/settings.md`` writes the page; without a path it prints
it. Each row gives the command-line option, environment variable and ini name a setting can be written
as, its default and its help text. Nothing at run time imports this module.
"""

from __future__ import annotations

from typing import Any

from sbxcheck.docs_inventory import page_main, table_cell
from sbxcheck.plugin.settings import OPTIONS, Option

COMMAND = "python -m sbxcheck.plugin.docs_settings docs/settings.md"

INTRO = """\
# Settings: every option, environment variable and ini name

<!-- Generated from OPTIONS in sbxcheck/plugin/settings.py by `{command}`; do not edit by hand. -->

[← README](../README.md) · what the fleet is: [the inventory](inventory.md)

A setting is read once per run, from the first place that sets it: the command line, then the
environment, then the ini file (`[tool.pytest.ini_options]` in pyproject.toml, or pytest.ini), then
its default. A relative path is taken from where it was written: the command line's and the
environment's from the directory pytest was started in, the ini's from the ini file's directory. A
bad value is one usage error naming where it was written (`--sbx-x`, `$SBXCHECK_X`, `ini sbx_x in
pyproject.toml`), exit 4. Write path options as `--sbx-x=VALUE`: pytest picks its rootdir before it
loads plugins, so a separate value naming an existing path counts as a test path. "—" means the
setting cannot be written there.

| setting | command line | environment | ini | default | what it does |
| --- | --- | --- | --- | --- | --- |
"""


def _flag(option: Option) -> str:
    if option.flag is None:
        return "—"
    if option.action == "store_true":
        return f"`{option.flag}`"
    value = f"{option.flag}={option.metavar or 'VALUE'}"
    return f"`{value}` (repeatable)" if option.action == "append" else f"`{value}`"


def _default(value: Any) -> str:
    if value is None or value == ():
        return "—"
    if value is False:
        return "off"
    return f"`{value}`"


def row(option: Option) -> str:
    """One table row for ``option``."""
    env = f"`{option.env}`" if option.env else "—"
    if option.env and option.action == "store_true":
        env = f"`{option.env}=1`"
    ini = f"`{option.ini}`" if option.ini else "—"
    cells = (f"`{option.name}`", _flag(option), env, ini, _default(option.default), option.help)
    return "| " + " | ".join(table_cell(c) for c in cells) + " |"


def render() -> str:
    """The whole page, Markdown."""
    return INTRO.format(command=COMMAND) + "\n".join(row(o) for o in OPTIONS) + "\n"


def main(argv: list[str] | None = None) -> int:
    return page_main(argv, render, COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
