"""Platform quirks a recipe can trip over, named with the recipe line that trips and the fix.

A recipe written on one platform can fail on another for a reason its output does not say. The
best known: BSD (macOS) ``mktemp -t PREFIX`` makes a file named after ``PREFIX``, while GNU
``mktemp`` reads ``-t``'s argument as a template and refuses one without ``XXX``
(``mktemp: too few X's in template``). The failure is right; what the operator needs next is
which recipe line to change and how. :func:`explain_quirk` reads a failed recipe's output,
recognises the quirk, and finds the lines of the checkout's ``.just`` files that use that form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Quirk", "explain_quirk"]

MAX_FILES = 200
MAX_FILE_BYTES = 512_000

_GNU_MKTEMP_ERROR = re.compile(r"mktemp: too few X'?s in template", re.I)
# `mktemp -t ARG` / `mktemp -d -t ARG` whose ARG holds no run of three X's (the BSD prefix form)
_MKTEMP_T = re.compile(r"\bmktemp\b(?:\s+-[a-zA-Z]+)*?\s+-[a-zA-Z]*t\s+(\"[^\"]*\"|'[^']*'|\S+)")


@dataclass(frozen=True)
class Quirk:
    """A recognised platform quirk: what failed, where in the recipes, and the fix."""

    name: str
    message: str
    fix: str
    sites: list[str] = field(default_factory=list)  # "just/sandbox/lifecycle/teardown.just:105"

    def evidence(self) -> dict[str, Any]:
        return {"name": self.name, "message": self.message, "fix": self.fix, "sites": list(self.sites)}

    def summary(self) -> str:
        where = f" at {', '.join(self.sites)}" if self.sites else ""
        return f"{self.message}{where}; fix: {self.fix}"


def _recipe_files(checkout: Path) -> list[Path]:
    files: list[Path] = []
    for pattern in ("justfile", "*.just", "just/**/*.just"):
        for path in sorted(checkout.glob(pattern)):
            if path.is_file() and path not in files:
                files.append(path)
            if len(files) >= MAX_FILES:
                return files
    return files


def _bsd_mktemp_sites(checkout: Path) -> list[str]:
    sites: list[str] = []
    for path in _recipe_files(checkout):
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith("#"):
                continue
            for match in _MKTEMP_T.finditer(line):
                if "XXX" not in match.group(1):
                    sites.append(f"{path.relative_to(checkout).as_posix()}:{number}")
    return sites


def explain_quirk(output: str, checkout: Path | None) -> Quirk | None:
    """The platform quirk ``output`` (a failed recipe's stdout and stderr) shows, or None."""
    if not _GNU_MKTEMP_ERROR.search(output or ""):
        return None
    sites = _bsd_mktemp_sites(checkout) if checkout is not None and checkout.is_dir() else []
    return Quirk(
        "gnu-mktemp",
        "the recipe uses the BSD/macOS form `mktemp -t PREFIX`, which GNU mktemp (Linux) refuses "
        "(`too few X's in template`)",
        "give -t a template GNU and BSD both accept, e.g. `mktemp -t \"sbx-$RUN_ID.XXXXXX\"` "
        "(or `mktemp \"${TMPDIR:-/tmp}/sbx-$RUN_ID.XXXXXX\"`)",
        sites,
    )
