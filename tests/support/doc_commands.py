"""The commands the README and docs/ show: every line of their ```sh blocks, with where it is written."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Shown:
    """One command line as a page shows it: ``page:line`` and the text (comment dropped, continuations joined)."""

    page: str
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def parts(self) -> list[str]:
        """The commands of an ``a && b`` line, each on its own."""
        return re.split(r"\s*&&\s*", self.text)


def numbered_shell_lines(markdown: str) -> list[tuple[int, str]]:
    """The command lines of the ```sh blocks with the line number each starts on (1-based)."""
    lines: list[tuple[int, str]] = []
    in_block = False
    pending = ""
    start = 0
    for number, line in enumerate(markdown.splitlines(), start=1):
        if line.startswith("```"):
            in_block = line.strip() == "```sh" and not in_block
            continue
        if not in_block or line.lstrip().startswith("#"):
            continue
        text = pending + re.sub(r"\s+#\s.*$", "", line).strip()
        start = start if pending else number
        pending = text[:-1].rstrip() + " " if text.endswith("\\") else ""
        if not pending and text:
            lines.append((start, text))
    return lines


def shell_lines(markdown: str) -> list[str]:
    """The command lines of the ```sh blocks, comments dropped and continuations joined."""
    return [text for _, text in numbered_shell_lines(markdown)]


def shown_commands(pages: list[Path] = PAGES) -> list[Shown]:
    """Every command line of every page, in page order."""
    return [
        Shown(str(page.relative_to(REPO)), number, text)
        for page in pages
        for number, text in numbered_shell_lines(page.read_text(encoding="utf-8"))
    ]
