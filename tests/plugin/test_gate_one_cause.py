"""One cause, one error: a wrong inventory path is one config_defect item, not one error per gate item."""

from __future__ import annotations

import shutil

import pytest
from support.gate_harness import GATE_SUITE


@pytest.mark.slow
def test_a_missing_ssh_config_is_one_config_defect_naming_field_and_path(pytester: pytest.Pytester) -> None:
    shutil.copy(GATE_SUITE, pytester.path / "test_gate.py")
    checkout = pytester.path / "sssf"
    (checkout / ".sandbox" / "runs").mkdir(parents=True)
    (checkout / "adws" / "adw_sssf_config").mkdir(parents=True)
    (checkout / "adws" / "adw_sssf_config" / "sssf.config.yaml").write_text("defaults:\n  model: a/b\n")
    inv = pytester.path / "inv.toml"
    inv.write_text(f'[ssh]\nconfig = "gone/ssh_config"\n[sssf]\ncheckout = "{checkout}"\n')
    report = pytester.path / "r"
    result = pytester.runpytest_subprocess(
        "-m",
        "gate",
        "-p",
        "no:randomly",
        "--sbx-inventory",
        str(inv),
        "--sbx-report",
        str(report),
        timeout=120,
    )
    # issue 18: an invalid inventory is one usage error before collection (exit 4), not an item
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*field 'ssh.config': expected a file at {pytester.path / 'gone' / 'ssh_config'}*"]
    )
    assert "Traceback" not in result.stderr.str() and not (report / "results.json").exists()
    assert "Traceback" not in result.stdout.str()
