"""Fleet canaries report the check their name says; [dgx] takes several agent-cores; the GitHub host is configurable."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from sbxcheck.suites.canaries import test_fleet as fleet_suite

from sbxcheck.checks.github import check_github_auth, probe_script, remote_for
from sbxcheck.clients.sandboxed_models import ExecResult, FleetHealth, HealthInfo
from sbxcheck.errors import InventoryError
from sbxcheck.inventory import DgxSection, GithubProbeSpec, load_inventory
from sbxcheck.results import CheckResult


class _Client:
    def health(self) -> HealthInfo:
        return HealthInfo.model_validate({"status": "ok", "version": "1"})

    def fleet_health(self) -> FleetHealth:
        return FleetHealth.model_validate(
            {
                "status": "ok",
                "control_responsive": True,
                "disk_level": "ok",
                "disk_percent": 10.0,
                "disk_free_gib": 500.0,
                "disk_required_gib": 128.0,
            }
        )


class _Session:
    def sandboxed_client(self) -> _Client:
        return _Client()


@pytest.mark.parametrize(
    ("test_name", "check", "endpoint"),
    [
        ("test_fleet_health", "fleet_health", "GET /api/health/fleet"),
        ("test_fleet_control_plane", "control_plane_health", "GET /api/health"),
    ],
)
def test_each_fleet_item_reports_the_check_its_name_says(test_name: str, check: str, endpoint: str) -> None:
    seen: list[CheckResult] = []
    getattr(fleet_suite, test_name)(sbx_session=_Session(), sbx_verdict=seen.append)
    [result] = seen
    assert (result.check, result.evidence["endpoint"]) == (check, endpoint)


def test_dgx_takes_one_or_several_agent_cores() -> None:
    one = DgxSection()
    assert one.agent_cores == ["agent-core"] and [s.core for s in one.per_agent_core()] == ["agent-core"]
    two = DgxSection.model_validate({"agent_core": ["core-a", "core-b"]})
    per = two.per_agent_core()
    assert [s.core for s in per] == ["core-a", "core-b"]
    assert all(s.agent_core == s.core for s in per)  # each item sees a single agent-core
    for bad in ([], ["a", "a"], [""]):
        with pytest.raises(ValueError):
            DgxSection.model_validate({"agent_core": bad})


def test_dgx_agent_core_list_loads_from_toml(tmp_path: Any) -> None:
    path = tmp_path / "sbxcheck.toml"
    path.write_text('[dgx]\nagent_core = ["core-a", "core-b"]\nremediation_sudo = "always"\n')
    inv = load_inventory(path)
    assert inv.dgx is not None and inv.dgx.agent_cores == ["core-a", "core-b"]
    path.write_text('[dgx]\nremediation_sudo = "sometimes"\n')
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert "remediation_sudo" in str(err.value)


def test_github_probe_reads_the_configured_host() -> None:
    script = probe_script("acme/verity", host="github.example.com")
    assert "https://github.example.com/acme/verity.git" in script and "github.com/" not in script
    assert "GH_HOST=github.example.com" in script and "-u GH_ENTERPRISE_TOKEN" in script
    mirror = "https://git.mirror.example/acme/verity.git"
    assert shlex.quote(mirror) in probe_script("acme/verity", remote_url=mirror)
    assert "GH_HOST" not in probe_script("acme/verity")  # the default host needs no override
    assert remote_for("a/b") == "https://github.com/a/b.git"


@pytest.mark.parametrize(
    "remote",
    ["https://user:tok@git.example/a/b.git", "https://tok@git.example/a/b.git", "ftp://x/a", "git.example/a"],
)
def test_a_credential_bearing_or_odd_remote_is_refused(remote: str) -> None:
    with pytest.raises(ValueError):
        GithubProbeSpec(workspace="w", repo="a/b", remote_url=remote)
    with pytest.raises(ValueError):
        remote_for("a/b", remote_url=remote)


def test_ssh_remote_with_a_user_name_is_fine_and_reported() -> None:
    spec = GithubProbeSpec(
        workspace="w", repo="a/b", host="ghe.local:8443", remote_url="ssh://git@ghe.local/a/b.git"
    )
    out = "SBX_GH=yes\nSBX_API=0\nSBX_REPO=0\nSBX_GIT=0\n"
    r = check_github_auth(
        lambda cmd, t: ExecResult(exit_code=0, stdout=out, stderr="", timed_out=False),
        workspace=spec.workspace,
        repo=spec.repo,
        via="rest",
        host=spec.host,
        remote_url=spec.remote_url,
    )
    assert r.evidence["host"] == "ghe.local:8443" and r.evidence["remote"] == "ssh://git@ghe.local/a/b.git"
