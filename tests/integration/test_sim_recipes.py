"""The simulated SSSF recipes, run with the real ``just`` against a served SimFleet.

One scenario walks a run through its life (mount -> gate suite -> harvest -> a failing teardown
-> teardown); the knobs, reap and exe.dev's verbs get their own tests. Every recipe's raw output
is scanned for the fleet's secrets. Only the child gate session needs the sbxcheck plugin.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from support.gate_harness import run_gate

from sbxcheck.lifecycle.recipes import (
    RecipeTemplates,
    RecipeTimeouts,
    parse_harvest_output,
    parse_mount_output,
    parse_teardown_output,
    run_recipe,
)
from sbxcheck.sim.fleet import HOST_SUFFIX, SimFleet

JUST = shutil.which("just")
SSH = shutil.which("ssh")
KEY_SHAPE = re.compile(r"sk-or-v1-[0-9a-f]{64}")
pytestmark = [  # end-to-end: child sessions against a fleet
    pytest.mark.slow,
    pytest.mark.skipif(
        JUST is None or SSH is None, reason="needs the just binary (pip install rust-just) and OpenSSH's ssh"
    ),
]


@dataclass(frozen=True)
class Ran:
    """One raw (unredacted) recipe run."""

    argv: list[str]
    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return f"{self.out}\n{self.err}"


class Recipes:
    """Runs ``just sbx ...`` in the fleet's checkout and remembers every output for the leak scan."""

    def __init__(self, fleet: SimFleet) -> None:
        self.fleet = fleet
        self.ran: list[Ran] = []
        # the real interpreter's bin dir first: python3 and just resolve without pyenv shims (pytester moves HOME)
        path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "/usr/bin:/bin")])
        self.env = {**os.environ, "PATH": path}
        self.env.pop("OPENROUTER_PROVISIONING_KEY", None)

    def __call__(self, *args: str, timeout: float = 60) -> Ran:
        assert JUST is not None
        argv = [JUST, *args]
        proc = subprocess.run(
            argv,
            cwd=self.fleet.checkout,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        ran = Ran(argv, proc.returncode, proc.stdout, proc.stderr)
        self.ran.append(ran)
        return ran

    def assert_no_secrets(self) -> None:
        secrets = self.fleet.secrets()
        for ran in self.ran:
            assert not [i for i, s in enumerate(secrets) if s in ran.text], f"a secret leaked: {ran.argv}"
            assert not KEY_SHAPE.search(ran.text), f"a key-shaped string in the output of {ran.argv}"


def ssh(
    fleet: SimFleet, host: str, command: str, *, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """OpenSSH with the sim's config and known_hosts, strict, batch mode."""
    assert SSH is not None
    d = fleet.ssh_dir
    argv = [
        SSH, "-F", str(d / "ssh_config"), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
        "-o", f"UserKnownHostsFile={d / 'known_hosts'}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes", host, command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    with SimFleet(tmp_path_factory.mktemp("recipes") / "fleet") as served:
        yield served


@pytest.fixture
def just(fleet: SimFleet) -> Iterator[Recipes]:
    recipes = Recipes(fleet)
    yield recipes
    for knob in ("revoke-fail", "mount-fail", "mount-slow"):
        fleet.clear_knob(knob)
    recipes.assert_no_secrets()


def record(fleet: SimFleet, run_id: str) -> dict[str, object]:
    path = fleet.checkout / ".sandbox" / "runs" / f"{run_id}.json"
    data: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _observed(ports: object) -> bool:
    """observe recorded the ports it serves on (free ports: the sim's VMs share one machine)."""
    return isinstance(ports, dict) and sorted(ports) == ["app", "obs"] and all(type(p) is int for p in ports.values())


def test_a_run_from_mount_to_teardown(fleet: SimFleet, just: Recipes, pytester: pytest.Pytester) -> None:
    started = time.monotonic()
    # mount: create -> fill -> setup -> observe
    mount = just("sbx", "mount", "demo", timeout=120)
    assert mount.rc == 0, mount.text
    info = parse_mount_output(mount.out)
    assert info.ok, info.reason
    run_id = info.run_id
    assert run_id is not None and re.fullmatch(r"demo-\d{8}-[0-9a-f]{6}", run_id)
    assert mount.out.splitlines()[-5] == f"mounted: {run_id}"
    assert info.vm == run_id and info.url == f"https://{run_id}{HOST_SUFFIX}"
    assert [line.split()[0] for line in info.lines] == ["execute", "agent", "harvest", "teardown"]
    rec = record(fleet, run_id)
    assert len(rec) == 12 and rec["vm_name"] == run_id and rec["closed_at"] is None
    assert rec["limit"] == 50.0 and _observed(rec["ports"])
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=fleet.checkout,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    assert rec["commit_sha"] == head
    key_file = fleet.checkout / ".sandbox" / "runs" / f"{run_id}.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    for path in (
        fleet.checkout / ".sandbox" / "runs" / f"{run_id}.json",
        fleet.checkout / ".sandbox" / "sim.env",
    ):
        assert not [s for s in fleet.secrets() if s in path.read_text(encoding="utf-8")], path
    assert ssh(fleet, f"{run_id}{HOST_SUFFIX}", "true").returncode == 0
    assert f"sbx-{run_id}" in fleet.live_keys()
    assert run_id in fleet.live_vms() and fleet.created_by_recipes()[-1] == run_id

    listing = just("sbx", "manage", "list")
    assert listing.rc == 0
    row = next(line for line in listing.out.splitlines() if line.startswith(run_id))
    assert row.split()[1:3] == ["open", "up"]

    # the shipped gate suite passes against the mounted run
    gate = run_gate(pytester, fleet, "--sbx-run-id", run_id, timeout=180)
    outcomes = {c["check"]: c["outcome"] for c in gate.report["checks"]}
    assert gate.ret == 0, gate.stdout[-3000:]
    assert all(c["target"].startswith(run_id) for c in gate.report["checks"])
    assert set(outcomes.values()) == {"passed"} and len(gate.report["checks"]) >= 8, outcomes

    # harvest: nothing yet, then two commits made on the VM land in refs/sandbox/<id>
    assert (
        parse_harvest_output(just("sbx", "manage", "harvest", run_id).out, run_id=run_id).status
        == "nocommits"
    )
    commit = (
        "cd app && git -c user.name=agent -c user.email=agent@example.invalid commit -q --allow-empty -m one"
        " && git -c user.name=agent -c user.email=agent@example.invalid commit -q --allow-empty -m two"
        " && git rev-parse HEAD"
    )
    tip = ssh(fleet, f"{run_id}{HOST_SUFFIX}", commit).stdout.strip()
    harvest = just("sbx", "manage", "harvest", run_id)
    result = parse_harvest_output(harvest.out, run_id=run_id)
    assert result.ok and result.status == "harvested" and result.count == 2, harvest.text
    fetched = subprocess.run(
        ["git", "rev-parse", f"refs/sandbox/{run_id}"],
        cwd=fleet.checkout, capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip()  # fmt: skip
    assert fetched == tip

    # the revoke-fail knob: teardown stops at revoke, exit 1, VM and key untouched, record open
    fleet.set_knob("revoke-fail", run_id)
    failed = just("sbx", "lifecycle", "teardown", run_id, timeout=120)
    assert failed.rc == 1 and "!! revoke FAILED" in failed.out, failed.text
    assert not parse_teardown_output(failed.out, run_id=run_id).ok
    assert run_id in fleet.live_vms() and f"sbx-{run_id}" in fleet.live_keys()
    assert record(fleet, run_id)["closed_at"] is None and key_file.exists()
    fleet.clear_knob("revoke-fail")

    # teardown: spend, revoke, destroy, close, shred, gate
    teardown = just("sbx", "lifecycle", "teardown", run_id, "--no-harvest", timeout=120)
    assert teardown.rc == 0, teardown.text
    parsed = parse_teardown_output(teardown.out, run_id=run_id)
    assert parsed.ok and parsed.key == "revoked" and parsed.gate == "passed", parsed
    assert f"sbx-{run_id}" not in fleet.live_keys() and run_id not in fleet.live_vms()
    closed = record(fleet, run_id)
    assert closed["closed_at"] is not None and isinstance(closed["spend"], float) and closed["spend"] > 0
    assert not key_file.exists()
    assert ssh(fleet, f"{run_id}{HOST_SUFFIX}", "true").returncode == 255
    again = just("sbx", "lifecycle", "teardown", run_id, timeout=120)
    assert parse_teardown_output(again.out, run_id=run_id).key == "already_gone"
    assert record(fleet, run_id)["closed_at"] == closed["closed_at"]  # the first close wins
    assert time.monotonic() - started < 90


@pytest.mark.parametrize("step", ["new", "mint"])
def test_mount_fail_knob_keeps_what_exists(fleet: SimFleet, just: Recipes, step: str) -> None:
    fleet.set_knob("mount-fail", step)
    mount = just("sbx", "mount", f"broken-{step}", timeout=120)
    assert mount.rc == 1
    assert "create FAILED (exit 1). Nothing was destroyed — inspect, then:" in mount.out
    info = parse_mount_output(mount.out)
    assert not info.ok and info.run_id is not None
    rec = record(fleet, info.run_id)
    assert rec["key_hash"] is None and rec["closed_at"] is None
    assert (info.run_id in fleet.live_vms()) == (step == "mint")  # a failed mint leaves the VM (an orphan)
    assert f"sbx-{info.run_id}" not in fleet.live_keys()


def test_reap_dry_run_lists_orphans_and_deletes_nothing(fleet: SimFleet, just: Recipes) -> None:
    _, ghost = fleet.openrouter.mint("sbx-ghost-20261101-abcdef", 5.0)  # no record, no VM
    _, personal = fleet.openrouter.mint("mac-mini-agent", None)
    try:
        before = fleet.live_keys()
        result = run_recipe(RecipeTemplates(cwd=fleet.checkout), "reap", env=just.env)
        assert result.ok, result.text
        assert "sbx-ghost-20261101-abcdef" in result.stdout and "no longer exists" in result.stdout
        assert "mac-mini-agent" not in result.stdout
        assert "dry run — nothing deleted" in result.stdout
        assert fleet.live_keys() == before
        assert not fleet.openrouter.key(ghost).deleted and not fleet.openrouter.key(personal).deleted
        for run_id in fleet.run_ids:  # live runs with open records are left alone
            assert f"sbx-{run_id} " not in result.stdout
        assert just("sbx", "manage", "reap", "--force").rc == 2
    finally:
        fleet.openrouter.delete(ghost)
        fleet.openrouter.delete(personal)


def test_mount_slow_knob_lets_the_runner_interrupt(fleet: SimFleet, just: Recipes) -> None:
    # The knob's sleep outlasts the runner's timeout by far; the timeout leaves a loaded CI machine
    # (two cores, four workers) room to reach the sleep: an unloaded mount takes about 2 s.
    (fleet.knobs_dir / "mount-started").unlink(missing_ok=True)
    fleet.set_knob("mount-slow", "600")
    templates = RecipeTemplates(cwd=fleet.checkout, timeout_s=RecipeTimeouts(mount=20))
    started = time.monotonic()
    result = run_recipe(templates, "mount", run_id="slow", env=just.env)
    assert result.timed_out and time.monotonic() - started < 60
    info = parse_mount_output(result.stdout)
    assert not info.ok and info.run_id is not None and "mounted:" not in result.stdout
    assert (fleet.knobs_dir / "mount-started").exists(), result.text  # cut in its sleep
    assert _observed(record(fleet, info.run_id)["ports"])  # observe had finished


def test_exedev_verbs_and_admin_api(fleet: SimFleet) -> None:
    assert ssh(fleet, "exe.dev", "whoami").returncode == 0
    new = ssh(fleet, "exe.dev", "new --name verbs-20261101-000001 --tag inkwell --json")
    assert new.returncode == 0, new.stderr
    shown = json.loads(new.stdout)
    assert shown["vm_name"] == "verbs-20261101-000001" and shown["tags"] == ["inkwell"]
    assert shown["ssh_dest"] == "verbs-20261101-000001.exe.xyz" and shown["https_url"].startswith("https://")
    assert ssh(fleet, "exe.dev", "new --name verbs-20261101-000001 --json").returncode == 1  # taken
    assert ssh(fleet, "verbs-20261101-000001.exe.xyz", "pi --version").returncode == 0
    listed = json.loads(ssh(fleet, "exe.dev", "ls --json").stdout)
    assert "verbs-20261101-000001" in [v["vm_name"] for v in listed["vms"]]
    assert ssh(fleet, "exe.dev", "share port verbs-20261101-000001 4501").returncode == 0
    assert ssh(fleet, "exe.dev", "share set-public verbs-20261101-000001").returncode == 0
    assert ssh(fleet, "exe.dev", "share port nosuch-vm 4501").returncode == 1
    assert ssh(fleet, "exe.dev", "rm verbs-20261101-000001").returncode == 0
    assert ssh(fleet, "exe.dev", "rm verbs-20261101-000001").returncode == 1
    assert "verbs-20261101-000001" not in fleet.live_vms()
    # the admin API: loopback, token from a 0600 file
    assert fleet.admin_url.startswith("http://127.0.0.1:")
    assert fleet.admin_token_file.stat().st_mode & 0o777 == 0o600
    token = fleet.admin_token_file.read_text(encoding="utf-8").strip()
    with httpx.Client(base_url=fleet.admin_url, timeout=10, trust_env=False) as client:
        assert client.get("/vms").status_code == 401
        assert (
            client.get("/vms", headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 401
        )
        auth = {"Authorization": f"Bearer {token}"}
        assert client.post("/vms", json={"name": "Bad Name"}, headers=auth).status_code == 400
        assert client.delete("/vms/nosuch-vm", headers=auth).status_code == 404
        names = [v["vm_name"] for v in client.get("/vms", headers=auth).json()["vms"]]
    assert names == fleet.live_vms()
