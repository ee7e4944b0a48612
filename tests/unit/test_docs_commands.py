"""Every command the README and docs/ show uses only what exists: each `sbxcheck ...` line parses with the
CLI's own parser, and each --sbx-* option on a `pytest` line is a row of OPTIONS (plugin/settings.py).
Running them is a separate, slower matter; this catches a renamed or invented flag at once."""

from __future__ import annotations

import re
import shlex

import pytest
from support.doc_commands import numbered_shell_lines, shell_lines, shown_commands

from sbxcheck.cli import _parser as cli_parser
from sbxcheck.plugin.settings import OPTIONS

FLAGS = {o.flag for o in OPTIONS if o.flag}


def _commands(prefix: str) -> list[tuple[str, str]]:
    return [(shown.page, part) for shown in shown_commands() for part in shown.parts() if part.startswith(prefix)]


def test_the_pages_show_commands_to_check() -> None:
    assert len(_commands("sbxcheck ")) >= 8 and len(_commands("pytest ")) >= 20


def test_each_line_is_numbered_where_the_page_shows_it() -> None:
    page = "text\n```sh\nsbxcheck --version   # a comment\n# only a comment\npytest -m gate \\\n  -k A\n```\n"
    assert numbered_shell_lines(page) == [(3, "sbxcheck --version"), (5, "pytest -m gate -k A")]


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
