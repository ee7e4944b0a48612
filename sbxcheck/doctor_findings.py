"""One line of ``sbxcheck doctor``: a precondition met or not (and its fix), or a fact."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One precondition: met or not, what was seen, and the fix when not; ``note``: neither, only a fact."""

    ok: bool
    label: str
    detail: str
    fix: str = ""
    note: bool = False

    def render(self) -> str:
        """The line, redacted (a URL with a password, a key in an error text) and one line whatever a
        server's text in it holds (control characters and line breaks shown, never obeyed)."""
        from sbxcheck.display import for_display_line

        mark = "·" if self.note and self.ok else "✓" if self.ok else "✗"
        fix = f" — fix: {self.fix}" if self.fix and not self.ok else ""
        return for_display_line(f"{mark} {self.label}: {self.detail}{fix}")


Emit = Callable[[Finding], None]  # where a check sends each line as it is found
