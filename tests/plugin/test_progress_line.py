"""A wait over ~2 s shows what is waited on: a live line on a TTY, plain lines in CI logs, nothing with -q."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.gate_harness import run_canary

from sbxcheck.plugin.progress import ProgressLine, describe_wait
from sbxcheck.sim.fleet import SimFleet


class _Reporter:
    def __init__(self, tty: bool) -> None:
        self.isatty = tty
        self.calls: list[tuple[str, str]] = []

    def write(self, text: str) -> None:
        self.calls.append(("write", text))

    def rewrite(self, text: str, erase: bool = False) -> None:
        self.calls.append(("rewrite", text))

    def write_line(self, text: str) -> None:
        self.calls.append(("line", text))


def _config(reporter: _Reporter, verbosity: int = 0) -> Any:
    plugins = {"terminalreporter": reporter, "capturemanager": None}
    return SimpleNamespace(
        pluginmanager=SimpleNamespace(get_plugin=plugins.get), get_verbosity=lambda: verbosity
    )


def test_describe_wait_reads_as_the_issue_asks() -> None:
    text = describe_wait("mission", {"pending": 2, "active": 1}, 12.2, 120)
    assert text == "3 missions: 2 pending, 1 active — 12 s of 120 s"


def test_tty_rewrites_one_line_and_erases_it_plain_logs_throttle_quiet_prints_nothing() -> None:
    tty = _Reporter(tty=True)
    line = ProgressLine(_config(tty))
    line.update("1 mission: 1 pending — 1 s of 10 s", 1.0)  # under 2 s: nothing
    assert tty.calls == []
    line.update("1 mission: 1 pending — 3 s of 10 s", 3.0)
    line.update("1 mission: 1 pending — 4 s of 10 s", 4.0)
    line.done()
    assert tty.calls == [
        ("write", "\n"),
        ("rewrite", "sbxcheck: waiting for 1 mission: 1 pending — 3 s of 10 s"),
        ("rewrite", "sbxcheck: waiting for 1 mission: 1 pending — 4 s of 10 s"),
        ("rewrite", ""),
    ]
    plain = _Reporter(tty=False)
    line = ProgressLine(_config(plain))
    for second in range(3, 9):
        line.update(f"1 mission: 1 pending — {second} s of 10 s", float(second))
    line.done()
    assert plain.calls == [("line", "sbxcheck: waiting for 1 mission: 1 pending — 3 s of 10 s")]
    quiet = _Reporter(tty=True)
    line = ProgressLine(_config(quiet, verbosity=-1))
    line.update("x", 5.0)
    assert quiet.calls == [] and not line.enabled


@pytest.mark.slow  # a canary child waiting out a stuck mission's deadline (-q is the unit test above)
def test_a_stuck_mission_prints_plain_progress_lines_in_a_log(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    with SimFleet(tmp_path / "fleet", ["cp.stuck-pending"]) as fleet:  # gemini missions stay pending
        loud = run_canary(pytester, fleet, "-k", "gemini-flash and route_dispatched")
    lines = [line for line in loud.stdout.splitlines() if line.startswith("sbxcheck: waiting for ")]
    assert lines, loud.stdout[-2000:]
    assert re.fullmatch(r"sbxcheck: waiting for 1 mission: 1 pending — \d+ s of 10 s", lines[0]), lines
