"""The inventory TOML writer: any string value round-trips through tomllib."""

from __future__ import annotations

import tomllib
from pathlib import Path

from sbxcheck.inventory import Inventory, SshSection, SssfSection, dump_inventory


def test_strings_with_newlines_quotes_and_backslashes_round_trip(tmp_path: Path) -> None:
    awkward = 'line one\nline "two"\\ and a tab\t'
    inv = Inventory(
        ssh=SshSection(machines=["vm-a", awkward]),
        sssf=SssfSection(checkout=tmp_path / "co", roster_config=awkward, mounts=["m\n1"]),
    )
    path = tmp_path / "sbxcheck.toml"
    path.write_text(dump_inventory(inv), encoding="utf-8")
    # parsed and validated as the loader does, without its check that the paths exist
    loaded = Inventory.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    assert loaded.sssf is not None and loaded.sssf.roster_config == awkward
    assert loaded.sssf.mounts == ["m\n1"]
    assert loaded.ssh.machines == ["vm-a", awkward]
    assert loaded.sssf.checkout == tmp_path / "co"
