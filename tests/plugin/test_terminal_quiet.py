"""The sbxcheck terminal section follows -q, -qq and --tb=no, and prints shared evidence once."""

from __future__ import annotations

import pytest

SUITE = """
import pytest
from sbxcheck.results import CheckResult, Classification

pytestmark = pytest.mark.gate

EVIDENCE = {"alias": "vm-2.exe.xyz", "reason": "connection refused", "port": 2222}


@pytest.mark.parametrize("check", ["A", "B", "C"])
def test_unreachable(sbx_verdict, check):
    sbx_verdict(CheckResult.errored(check, "vm-2", "cannot reach vm-2.exe.xyz: connection refused",
                Classification.INFRA_UNREACHABLE, dict(EVIDENCE), cause="infra_unreachable:vm-2.exe.xyz"))


def test_dirty(sbx_verdict):
    sbx_verdict(CheckResult.failed("dirty", "vm-1", "the tree is dirty", {"porcelain_lines": 2}))
"""


def _section(pytester: pytest.Pytester, *args: str) -> list[str]:
    inventory = pytester.path / "fleet.toml"
    inventory.write_text("[ssh]\n")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", "-m", "gate", f"--sbx-inventory={inventory}", *args
    )
    assert result.ret == 1
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "= sbxcheck =" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("report: "))
    return lines[start : end + 1]


def test_default_prints_the_incidents_shared_evidence_once(pytester: pytest.Pytester) -> None:
    section = _section(pytester)
    assert sum("reason: connection refused" in line for line in section) == 1
    assert sum("port: 2222" in line for line in section) == 1
    assert sum(line.strip().startswith("ERROR ") for line in section) == 3
    assert any("porcelain_lines: 2" in line for line in section)  # the lone failure keeps its evidence


@pytest.mark.parametrize("args", [("-q",), ("--tb=no",)], ids=["q", "tb-no"])
def test_quiet_or_tb_no_prints_one_line_per_item_and_no_evidence(
    pytester: pytest.Pytester, args: tuple[str, ...]
) -> None:
    section = _section(pytester, *args)
    text = "\n".join(section)
    assert "reason: connection refused" not in text and "porcelain_lines" not in text
    assert "next step:" in text and sum(line.strip().startswith("ERROR ") for line in section) == 3
    assert any(line.startswith("FAILED ") and "test_dirty" in line for line in section)
    assert len(section) <= 14, text


def test_qq_prints_the_verdict_and_counts_only(pytester: pytest.Pytester) -> None:
    section = _section(pytester, "-qq")
    text = "\n".join(section)
    assert "verdict: FAILED" in text and "checks: 4" in text
    assert "incident" not in text and "test_dirty" not in text
