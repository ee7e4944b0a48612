"""One live status line while an item waits, so a long wait never looks hung: what is waited on, elapsed of deadline.

On a terminal the line is rewritten in place ("sbxcheck: 3 missions: 2 pending, 1 active — 12 s of
120 s"); when stdout is not a TTY (CI logs) a plain line is written every :data:`PLAIN_EVERY_S`;
with ``-q`` nothing. Only waits longer than :data:`QUIET_FOR_S` show anything. The waiting code
reports through :meth:`ProgressLine.update` from the thread that waits (the test's), so the line is
written with capture suspended, as pytest's live logging does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from sbxcheck.display import for_display_line

__all__ = ["PLAIN_EVERY_S", "QUIET_FOR_S", "ProgressLine", "describe_wait"]

#: A wait shorter than this prints nothing.
QUIET_FOR_S = 2.0
#: How often a plain (non-TTY) progress line is written.
PLAIN_EVERY_S = 10.0


def describe_wait(what: str, states: dict[str, int], elapsed_s: float, deadline_s: float) -> str:
    """``3 missions: 2 pending, 1 active — 12 s of 120 s``."""
    total = sum(states.values())
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items(), key=lambda kv: (-kv[1], kv[0])))
    noun = what if total == 1 else f"{what}s"
    return f"{total} {noun}: {counts} — {elapsed_s:.0f} s of {deadline_s:.0f} s"


class ProgressLine:
    """The status line of this process's terminal (None of it on an xdist worker or with -q)."""

    def __init__(self, config: Any) -> None:
        self.reporter = config.pluginmanager.get_plugin("terminalreporter")
        self.capture = config.pluginmanager.get_plugin("capturemanager")
        self.enabled = (
            self.reporter is not None
            and getattr(config, "workerinput", None) is None
            and config.get_verbosity() >= 0
        )
        self.tty = bool(self.enabled and getattr(self.reporter, "isatty", False))
        self._shown = False
        self._last_plain = 0.0

    @contextlib.contextmanager
    def _uncaptured(self) -> Iterator[None]:
        if self.capture is None:
            yield
            return
        with self.capture.global_and_fixture_disabled():
            yield

    def update(self, text: str, waited_s: float) -> None:
        """Show ``text`` after a wait of ``waited_s`` (nothing before :data:`QUIET_FOR_S`)."""
        if not self.enabled or waited_s < QUIET_FOR_S:
            return
        now = time.monotonic()
        if not self.tty and now - self._last_plain < PLAIN_EVERY_S:
            return
        text = for_display_line(text)  # mission states are the server's words: one line, nothing obeyed
        with self._uncaptured():
            if self.tty:
                if not self._shown:
                    self.reporter.write("\n")
                self.reporter.rewrite(f"sbxcheck: waiting for {text}", erase=True)
            else:
                self.reporter.write_line(f"sbxcheck: waiting for {text}")
        self._shown, self._last_plain = True, now

    def done(self) -> None:
        """Erase the live line (a plain log keeps its lines)."""
        if self.tty and self._shown:
            with self._uncaptured():
                self.reporter.rewrite("", erase=True)
        self._shown = False
