"""The code explains itself: no tracker ticket or bare section-sign pointer in a comment or docstring.

A reader of sbxcheck has neither the issue tracker nor the spec numbering in mind, so a comment
says the reason itself. A spec may still be named as a trailing pointer ("specs/sandboxed-sh.md,
3.4") where it records an upstream fact, but never with a ticket number or a section sign, and
never as the opening words of a docstring.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sbxcheck", "gates", "canaries", "benchmarks")
POINTER = re.compile(r"\bissues?\s*#?\d+|§", re.IGNORECASE)
OPENING_POINTER = re.compile(r"^\s*(\(?\s*(issues?\s*#?\d+|§|specs?/\S+)|see\s+(issue|§))", re.IGNORECASE)


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES if (ROOT / pkg).is_dir() for p in (ROOT / pkg).rglob("*.py"))


def _docstrings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    yield body[0].lineno, value


def _comments(text: str) -> Iterator[tuple[int, str]]:
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def offences(path: Path, root: Path = ROOT) -> list[str]:
    """Every ticket/section-sign pointer in a comment or docstring of ``path``, as ``file:line: text``."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(root).as_posix()
    found: list[str] = []
    for line, comment in _comments(text):
        if POINTER.search(comment):
            found.append(f"{name}:{line}: comment {comment.strip()[:80]!r}")
    for line, doc in _docstrings(ast.parse(text, filename=name)):
        if OPENING_POINTER.match(doc):
            found.append(f"{name}:{line}: docstring begins with a pointer {doc.strip()[:60]!r}")
        for offset, doc_line in enumerate(doc.splitlines()):
            if POINTER.search(doc_line):
                found.append(f"{name}:{line + offset}: docstring {doc_line.strip()[:80]!r}")
    return found


def test_no_ticket_or_section_sign_in_comments_and_docstrings() -> None:
    found = [offence for path in _sources() for offence in offences(path)]
    assert not found, "say the reason, not the ticket:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('"""Issue 21: a reason."""\n', 2),
        ("x = 1  # see issue 27\n", 1),
        ('def f() -> None:\n    """Closes the stream (§3.4)."""\n', 1),
        ('"""specs/sandboxed-sh.md 3.4 says so."""\n', 1),
        ('"""Closes the stream (specs/sandboxed-sh.md, 3.4)."""\nx = "issue 21"  # a reason\n', 0),
    ],
)
def test_the_rule_sees_comments_and_docstrings_only(tmp_path: Path, source: str, expected: int) -> None:
    path = tmp_path / "mod.py"
    path.write_text(source, encoding="utf-8")
    assert len(offences(path, tmp_path)) == expected, offences(path, tmp_path)
