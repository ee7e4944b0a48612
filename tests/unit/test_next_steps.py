"""Next steps are commands that work as printed: the probe, the inventory flag, and the harness
that checks every fault's report (tests/next_step_harness.py) catching what would not work."""

from __future__ import annotations

from pathlib import Path

from support.next_step_harness import next_step_problems

from sbxcheck.report.incidents import default_recommendation
from sbxcheck.report.nextsteps import fill_probe, inventory_flag, probe_command, probe_of
from sbxcheck.results import Classification


def test_probe_is_ssh_by_alias_with_the_config_or_curl_for_a_service() -> None:
    ssh = probe_command({"alias": "alpha-1.exe.xyz", "hostname": "127.0.0.1", "ssh_config": "/f/ssh config"})
    assert ssh == "ssh -F '/f/ssh config' -o ConnectTimeout=10 alpha-1.exe.xyz true"
    assert (
        probe_command({"service": "http://127.0.0.1:9"})
        == "curl -sS -m 10 -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:9"
    )
    assert probe_command({"endpoint": "GET /api/health"}) is None  # a route label is not a host
    assert probe_of([{"alias": "a"}, {"alias": "b"}]) is None and probe_of([{"alias": "a"}, {}]) is not None


def test_advice_without_a_probe_drops_the_clause_never_a_placeholder() -> None:
    text = default_recommendation(Classification.INFRA_UNREACHABLE, ["opencode-glm"])
    assert "<target>" not in text and "opencode-glm" not in text and "ssh" not in text
    assert "(curl" in default_recommendation(
        Classification.INFRA_UNREACHABLE, probe=probe_command({"service": "https://cp.example"})
    )
    assert fill_probe("x (ssh <target> true); y", None) == "x; y"


def test_inventory_flag_only_for_an_inventory_file() -> None:
    assert inventory_flag("/srv/prod.toml") == "--sbx-inventory=/srv/prod.toml"
    assert inventory_flag("embedded simulated fleet") == ""


def _report(commands: list[str], inventory: Path, text: str = "check it; nothing was changed") -> dict[str, object]:
    check = {
        "nodeid": "g.py::test_a[alpha-20261202-aaaaaa]", "suite": "gate", "check": "a",
        "target": "alpha-20261202-aaaaaa", "outcome": "error", "classification": "infra_unreachable",
        "message": "down", "evidence": {}, "next_step": text, "recommendation": text, "commands": commands,
    }  # fmt: skip
    incident = {"id": "INC-1", "classification": "infra_unreachable", "summary": "s", "checks": [check["nodeid"]],
                "recommendation": text, "commands": commands}  # fmt: skip
    return {"checks": [check], "incidents": [incident], "inventory": {"source": str(inventory), "sim": False}}


def test_harness_catches_placeholders_wrong_hosts_and_missing_flags(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host *.exe.xyz\n    User exedev\n")
    inventory = tmp_path / "fleet.toml"
    inventory.write_text(f'[ssh]\nconfig = "{config}"\n')
    good = f"ssh -F {config} -o ConnectTimeout=10 alpha-20261202-aaaaaa.exe.xyz true"
    assert next_step_problems(_report([good], inventory), inventory) == []
    assert next_step_problems(_report([good], tmp_path / "other.toml"), inventory)  # another fleet's flag
    assert next_step_problems(_report([good], inventory, "check <target>"), inventory)  # a placeholder in prose
    bad = [
        "ssh -o ConnectTimeout=10 <target> true",
        f"ssh -F {config} -o ConnectTimeout=10 alpha-20261202-aaaaaa true",  # a run id, not a host
        "ssh -o ConnectTimeout=10 alpha-20261202-aaaaaa.exe.xyz true",  # no -F: it would not resolve
        "ssh -o ConnectTimeout=10  true",
        "pytest g.py::test_a",
    ]
    for command in bad:
        assert next_step_problems(_report([good, command], inventory), inventory), command
