"""One cause, one error: a wrong inventory path is one config_defect item, not one error per gate item."""

from __future__ import annotations

import json
import shutil

import pytest
from gate_harness import GATE_SUITE


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
    checks = json.loads((report / "results.json").read_text())["checks"]
    errors = [c for c in checks if c["outcome"] in ("failed", "error")]
    assert len(errors) == 1, [c["message"] for c in errors]
    [item] = errors
    assert (item["outcome"], item["classification"]) == ("error", "config_defect")
    assert (
        f"field 'ssh.config': expected a file at {pytester.path / 'gone' / 'ssh_config'}" in item["message"]
    )
    assert {c["outcome"] for c in checks if c is not item} <= {"skipped"}
    assert "Traceback" not in result.stdout.str()
