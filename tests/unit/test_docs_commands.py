"""Every command the README and docs/ show uses only what exists: each `sbxcheck ...` line parses with the
CLI's own parser, and each --sbx-* option on a `pytest` line is a row of OPTIONS (plugin/settings.py).
Running them is a separate, slower matter; this catches a renamed or invented flag at once."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sbxcheck.cli import _parser as cli_parser
from sbxcheck.plugin.settings import OPTIONS

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FLAGS = {o.flag for o in OPTIONS if o.flag}


def shell_lines(markdown: str) -> list[str]:
    """The command lines of the ```sh blocks, comments dropped and continuations joined."""
    lines: list[str] = []
    in_block = False
    pending = ""
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_block = line.strip() == "```sh" and not in_block
            continue
        if not in_block or line.lstrip().startswith("#"):
            continue
        text = pending + re.sub(r"\s+#\s.*$", "", line).strip()
        pending = text[:-1] + " " if text.endswith("\\") else ""
        if not pending and text:
            lines.append(text)
    return lines


def _commands(prefix: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for line in shell_lines(page.read_text(encoding="utf-8")):
            for part in re.split(r"\s*&&\s*", line):
                if part.startswith(prefix):
                    found.append((str(page.relative_to(REPO)), part))
    return found


def test_the_pages_show_commands_to_check() -> None:
    assert len(_commands("sbxcheck ")) >= 8 and len(_commands("pytest ")) >= 20


@pytest.mark.parametrize(("page", "command"), _commands("sbxcheck "))
def test_each_sbxcheck_command_parses(page: str, command: str) -> None:
    args = shlex.split(re.sub(r"\[[^\]]*\]", "", command))[1:]  # [--keep N]: optional parts left out
    try:
        cli_parser().parse_args(args)
    except SystemExit as exc:
        assert exc.code == 0, f"{page}: `{command}` is not a command sbxcheck accepts"


@pytest.mark.parametrize(("page", "command"), _commands("pytest "))
def test_each_pytest_command_uses_only_existing_sbx_options(page: str, command: str) -> None:
    unknown = [f for f in re.findall(r"--sbx-[a-z-]+", command) if f not in FLAGS]
    assert not unknown, f"{page}: `{command}` uses {', '.join(unknown)}, not an option of sbxcheck"


def test_a_made_up_option_or_subcommand_is_caught() -> None:
    page = "```sh\npytest -m gate --sbx-no-such-thing   # nope\nsbxcheck sim upp --dir x\n```\n"
    pytest_line, cli_line = shell_lines(page)
    assert [f for f in re.findall(r"--sbx-[a-z-]+", pytest_line) if f not in FLAGS] == ["--sbx-no-such-thing"]
    with pytest.raises(SystemExit) as exc:
        cli_parser().parse_args(shlex.split(cli_line)[1:])
    assert exc.value.code == 2
