"""Inventory paths are checked when the inventory loads: one config_defect naming the field and path."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbxcheck.errors import InventoryError
from sbxcheck.inventory import load_inventory


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "sssf"
    (repo / "adws" / "adw_sssf_config").mkdir(parents=True)
    (repo / "adws" / "adw_sssf_config" / "sssf.config.yaml").write_text("defaults:\n  model: a/b\n")
    return repo


def load(tmp_path: Path, text: str) -> Exception | None:
    inv = tmp_path / "sbxcheck.toml"
    inv.write_text(text)
    try:
        load_inventory(inv)
    except InventoryError as exc:
        return exc
    return None


def test_a_good_inventory_loads(tmp_path: Path, checkout: Path) -> None:
    (tmp_path / "ssh_config").write_text("Host *\n")
    assert load(tmp_path, f'[ssh]\nconfig = "ssh_config"\n[sssf]\ncheckout = "{checkout}"\n') is None


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ('[ssh]\nconfig = "nope/ssh_config"\n', "ssh.config"),
        ('[ssh]\nknown_hosts = ["nope/known_hosts"]\n', "ssh.known_hosts[0]"),
        ('[ssh]\nidentity = "nope/id_ed25519"\n', "ssh.identity"),
    ],
)
def test_a_missing_ssh_file_is_one_error_naming_field_and_path(
    tmp_path: Path, checkout: Path, section: str, field: str
) -> None:
    exc = load(tmp_path, section + f'[sssf]\ncheckout = "{checkout}"\n')
    assert exc is not None
    assert f"field '{field}': expected a file at {tmp_path / 'nope'}" in str(exc)


def test_a_missing_checkout_is_named_not_no_open_runs(tmp_path: Path) -> None:
    exc = load(tmp_path, '[sssf]\ncheckout = "gone"\n')
    assert exc is not None and f"field 'sssf.checkout': expected a directory at {tmp_path / 'gone'}" in str(
        exc
    )


def test_a_missing_roster_config_is_named(tmp_path: Path, checkout: Path) -> None:
    exc = load(tmp_path, f'[sssf]\ncheckout = "{checkout}"\nroster_config = "adws/other.yaml"\n')
    assert exc is not None and "field 'sssf.roster_config'" in str(exc) and "adws/other.yaml" in str(exc)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_money_fields_refuse_nan_and_infinity(tmp_path: Path, checkout: Path, value: str) -> None:
    exc = load(tmp_path, f'[sssf]\ncheckout = "{checkout}"\ncredit_floor_usd = {value}\n')
    assert exc is not None and "credit_floor_usd" in str(exc)


@pytest.mark.parametrize("suffix", [".exe.xyz -oProxyCommand=x", "exe.xyz", ".exe..xyz", ".a_b"])
def test_the_vm_host_suffix_is_made_of_host_labels(tmp_path: Path, checkout: Path, suffix: str) -> None:
    exc = load(tmp_path, f'[sssf]\ncheckout = "{checkout}"\nvm_host_suffix = "{suffix}"\n')
    assert exc is not None and "vm_host_suffix" in str(exc)
