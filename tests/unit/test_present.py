"""What a person sees of a failed check: whole next steps, key evidence lines, no runbook section numbers."""

from __future__ import annotations

import pytest

from sbxcheck.report.present import detail_block, key_evidence_lines, next_step, shorten, user_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the VM is left up (runbook §8.8) — get in", "the VM is left up — get in"),
        (
            "validate with one narrow probe before relaunching (§8.8)",
            "validate with one narrow probe before relaunching",
        ),
        ("see sandboxed-sh.md §8.3–§8.10 for the rules", "for the rules"),
        ("secret-safe discovery (sandboxed-sh.md §8.11, §7, §9).", "secret-safe discovery."),
        ("costs $5 and 10% (two calls)", "costs $5 and 10% (two calls)"),
    ],
)
def test_runbook_section_numbers_are_not_shown(text: str, expected: str) -> None:
    assert user_text(text) == expected


def test_next_step_is_whole_and_only_for_failures() -> None:
    long = "do this; " * 100 + "END"
    assert next_step({"outcome": "failed", "recommendation": long}) == long.strip()
    assert next_step({"outcome": "passed", "recommendation": long}) is None
    lone = next_step({"outcome": "failed", "classification": "check_failed", "nodeid": "g.py::t[x]"})
    assert lone is not None and lone.endswith("(pytest 'g.py::t[x]')")
    # issue 19: the probe names the host the check connected to (its ssh alias), never the target
    evidence = {"alias": "vm-1.exe.xyz", "ssh_config": "/srv/ssh_config"}
    unreachable = next_step(
        {"outcome": "error", "classification": "infra_unreachable", "target": "vm-1", "evidence": evidence}
    )
    assert (
        unreachable is not None
        and "ssh -F /srv/ssh_config -o ConnectTimeout=10 vm-1.exe.xyz true" in unreachable
    )
    unknown = next_step({"outcome": "error", "classification": "infra_unreachable", "target": "vm-1"})
    assert unknown is not None and "<target>" not in unknown and "vm-1 true" not in unknown


def test_key_evidence_lists_the_things_not_their_count() -> None:
    lines = key_evidence_lines(
        {
            "porcelain_lines": 2,
            "porcelain_sample": [" M a.py", "?? b"],
            "stdout": "x" * 900,
            "nested": {"a": 1},
        }
    )
    assert lines == ["porcelain_sample:", "   M a.py", "  ?? b", "porcelain_lines: 2"]
    assert key_evidence_lines({"key_evidence": ["HEAD abc != def"], "other": 1}) == ["HEAD abc != def"]
    many = key_evidence_lines({"missing": [f"model-{i}" for i in range(30)]})
    assert many[-1] == "  … and 20 more"


def test_shorten_cuts_at_a_word_and_detail_block_has_every_part() -> None:
    assert shorten("alpha beta gamma delta", 12) == "alpha beta…"
    block = detail_block(
        {"outcome": "error", "classification": "timeout", "message": "m", "evidence": {"host": "h"}}, "INC-1"
    )
    assert block.splitlines()[:4] == [
        "outcome: error",
        "classification: timeout",
        "message: m",
        "incident: INC-1",
    ]
    assert "  host: h" in block and "next step: " in block
