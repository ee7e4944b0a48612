"""The real upstream SSSF recipes (the inkwell checkout ``$SBXCHECK_TEST_INKWELL`` names) on the embedded fleet.

Every line sbxcheck parses here comes from running the real recipe: mount, execute's pid,
run.log's success and failure, harvest's every answer, teardown with and without a minted key,
reap's orphan audit, and a teardown that meets GNU ``mktemp``. Without the variable (CI included: fetched
code is never committed anywhere) every test here is reported skipped, naming the variable to set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.gate_harness import REPO, run_suite
from support.inkwell import inkwell_absent, inkwell_checkout

from sbxcheck.checks.run import finish_outcome
from sbxcheck.lifecycle.quirks import explain_quirk
from sbxcheck.lifecycle.recipes import (
    MountInfo,
    RecipeResult,
    RecipeTemplates,
    parse_harvest_output,
    parse_mount_output,
    parse_teardown_output,
    run_recipe,
)
from sbxcheck.sim.fleet import SimFleet

UPSTREAM = inkwell_checkout() or Path("/nonexistent-inkwell")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(inkwell_absent() is not None, reason=inkwell_absent() or ""),
    pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh"),
]
BARE_PATH = {"PATH": "/usr/bin:/bin"}  # no venv, no version manager: what cron and CI give a recipe


class World:
    """One served fleet on the real recipes, and the run the scenario mounts."""

    def __init__(self, fleet: SimFleet, checkout_before: dict[str, tuple[int, int]]) -> None:
        self.fleet = fleet
        self.checkout_before = checkout_before
        assert fleet.upstream is not None
        self.templates: RecipeTemplates = fleet.upstream.templates()

    def just(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A recipe sbxcheck does not template (execute), as a person types it."""
        return self.run("just", *args)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        assert self.fleet.upstream is not None
        env = {**os.environ, "PATH": f"{Path(shutil.which('just') or 'just').parent}:/usr/bin:/bin"}
        return subprocess.run(
            [str(self.fleet.upstream.env_tool), *args], cwd=self.fleet.checkout, env=env,
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def record(self, *args: str) -> str:
        done = self.run("sandbox_mount/host/run_record.py", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def vm_home(self, run_id: str) -> Path:
        return self.fleet.root / "vms" / run_id


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` (its .git too): size and modification time, by relative path."""
    return {
        str(path.relative_to(root)): (stat.st_size, stat.st_mtime_ns)
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink()
        for stat in (path.stat(),)
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    before = tree_state(UPSTREAM)
    with SimFleet(tmp_path_factory.mktemp("real-recipes"), [], sssf_checkout=UPSTREAM) as fleet:
        yield World(fleet, before)


@dataclass(frozen=True)
class Mounted:
    """The run the real mount recipe made (with a PATH that lacks the venv), and what it printed."""

    run_id: str
    result: RecipeResult
    info: MountInfo


@pytest.fixture(scope="module")
def mounted(world: World) -> Mounted:
    """One mount per module and worker: every test that needs the run gets it, whichever worker it runs on.

    The mount recipe calls ``just`` by name again: only the interpreter's tool dir on PATH finds it.
    """
    result = run_recipe(world.templates, "mount", run_id="demo", env=BARE_PATH)
    info = parse_mount_output(result.stdout)
    assert result.ok and info.ok and info.run_id, (info, result.stderr[-2000:])
    return Mounted(info.run_id, result, info)


def test_the_copy_leaves_the_checkout_alone(world: World) -> None:
    assert world.fleet.recipe_set == f"real ({UPSTREAM})"
    assert tree_state(UPSTREAM) == world.checkout_before  # the person's checkout: never written
    assert (world.fleet.checkout / "just" / "sandbox" / "lifecycle" / "teardown.just").read_bytes() == (
        UPSTREAM / "just" / "sandbox" / "lifecycle" / "teardown.just"
    ).read_bytes()


def test_doctor_and_a_bad_checkout(world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sbxcheck.cli import main as cli_main

    cli_main(["doctor", "--inventory", str(world.fleet.inventory_path)])
    assert f"✓ simulated fleet's recipes: real ({UPSTREAM})" in capsys.readouterr().out
    assert cli_main(["sim", "up", "--dir", str(tmp_path / "d"), "--sssf-checkout", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is not an SSSF checkout: no justfile" in err and "Traceback" not in err


def test_mount_without_the_venv_on_path(world: World, mounted: Mounted) -> None:
    rid, info = mounted.run_id, mounted.info
    assert rid.startswith("demo-") and info.vm == rid
    assert rid in world.fleet.live_vms() and f"sbx-{rid}" in world.fleet.live_keys()
    assert "[setup] GATE PASSED" in mounted.result.stdout and "app  200 anonymous" in mounted.result.stdout


def test_execute_pid_gate_and_run_items(world: World, mounted: Mounted, pytester: pytest.Pytester) -> None:
    rid = mounted.run_id
    done = world.just("sbx", "lifecycle", "execute", rid, "add a word-count badge")
    assert done.returncode == 0, done.stderr
    pid = world.record("get", rid, "pid")
    assert pid.isdigit() and f"→ pid {pid} recorded" in done.stdout
    suites = (REPO / "gates" / "test_gate.py", REPO / "gates" / "test_run.py")
    gate = run_suite(pytester, world.fleet, "gate or run", suites, "--sbx-run-id", rid, timeout=120)
    outcomes = {c["nodeid"].split("::")[-1]: c["outcome"] for c in gate.report["checks"]}
    assert gate.ret == 0 and outcomes and set(outcomes.values()) == {"passed"}, (
        outcomes,
        gate.stdout[-3000:],
    )
    names = {name.split("[")[0] for name in outcomes}
    assert {"test_gate_A_git_integrity", "test_run_alive", "test_run_log_clean", "test_observe_app"} <= names


def _run_log_after(world: World, rid: str, fail: bool) -> list[str]:
    sim = world.vm_home(rid) / ".sim"
    sim.mkdir(exist_ok=True)
    (sim / "sdlc-seconds").write_text("0\n", encoding="utf-8")
    fault = sim / "sdlc-fault"
    fault.write_text("plan\n", encoding="utf-8") if fail else fault.unlink(missing_ok=True)
    done = world.just("sbx", "lifecycle", "execute", rid, "add a footer")
    assert done.returncode == 0, done.stderr
    log = world.vm_home(rid) / "app" / "run.log"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        if any("╰" in line for line in lines) and (
            not fail or any(line.startswith("error:") for line in lines)
        ):
            return lines
        time.sleep(0.1)
    raise AssertionError(
        f"the SDLC did not finish: {log.read_text(encoding='utf-8') if log.exists() else '-'}"
    )


def test_run_log_success_and_failure(world: World, mounted: Mounted) -> None:
    rid = mounted.run_id
    ok = _run_log_after(world, rid, fail=False)
    assert any("ADW complete" in line for line in ok)
    assert finish_outcome(ok) == ("finished", "status   ✓ success")
    bad = _run_log_after(world, rid, fail=True)
    assert any("ADW complete" in line for line in bad)  # the panel prints on failure too
    verdict = finish_outcome(bad)
    assert verdict is not None and verdict[0] == "failed" and "failed on line" in verdict[1], bad


def test_every_harvest_answer(world: World, mounted: Mounted) -> None:
    rid = mounted.run_id
    nothing = run_recipe(world.templates, "harvest", run_id=rid)
    assert parse_harvest_output(nothing.stdout, run_id=rid).status == "nocommits", nothing.stdout
    app = world.vm_home(rid) / "app"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}  # fmt: skip
    (app / "NOTE.md").write_text("work\n", encoding="utf-8")
    subprocess.run(["git", "-C", str(app), "add", "NOTE.md"], check=True, env=env)
    subprocess.run(["git", "-C", str(app), "commit", "-qm", "the run's work"], check=True, env=env)
    got = run_recipe(world.templates, "harvest", run_id=rid)
    parsed = parse_harvest_output(got.stdout, run_id=rid)
    assert got.ok and (parsed.status, parsed.count, parsed.ref) == ("harvested", 1, f"refs/sandbox/{rid}"), (
        got
    )
    app.rename(app.with_name("app.away"))
    try:
        norepo = run_recipe(world.templates, "harvest", run_id=rid)
    finally:
        app.with_name("app.away").rename(app)
    assert parse_harvest_output(norepo.stdout, run_id=rid).status == "norepo", norepo.stdout
    bare = "nothing-20261204-0000aa"
    world.record("create", bare)
    no_vm = run_recipe(world.templates, "harvest", run_id=bare)
    assert parse_harvest_output(no_vm.stdout, run_id=bare).status == "no_vm", no_vm.stdout
    world.record("set", bare, f"vm_name={rid}")
    no_sha = run_recipe(world.templates, "harvest", run_id=bare)
    assert parse_harvest_output(no_sha.stdout, run_id=bare).status == "no_commit_sha", no_sha.stdout


def test_teardown_without_a_key_is_a_success(world: World) -> None:
    rid = "neverkey-20261204-0000bb"
    world.record("create", rid)
    result = run_recipe(world.templates, "teardown", run_id=rid)
    parsed = parse_teardown_output(result.stdout, run_id=rid)
    assert result.ok and parsed.ok and parsed.key == "never_minted", result.stdout
    assert f"✓ teardown complete for {rid} (no key was ever minted)" in result.stdout


def test_teardown_revokes_then_reap_finds_no_orphan(world: World, mounted: Mounted) -> None:
    rid = mounted.run_id
    result = run_recipe(world.templates, "teardown", run_id=rid, env=BARE_PATH)
    parsed = parse_teardown_output(result.stdout, run_id=rid)
    assert result.ok and parsed.ok and (parsed.key, parsed.gate) == ("revoked", "passed"), result.stdout
    assert rid not in world.fleet.live_vms() and f"sbx-{rid}" not in world.fleet.live_keys()
    assert world.record("get", rid, "closed_at")
    reap = run_recipe(world.templates, "reap")
    assert reap.ok and "reap: no orphaned sbx-* keys" in reap.stdout, reap.text


def test_gnu_mktemp_names_the_recipe_line(tmp_path: Path) -> None:
    with SimFleet(tmp_path / "gnu", ["host.gnu-mktemp"], sssf_checkout=UPSTREAM) as fleet:
        assert fleet.upstream is not None
        templates = fleet.upstream.templates()
        rid = "gnu-20261204-0000cc"
        fleet.create_vm(rid)
        rr = [str(fleet.upstream.env_tool), "sandbox_mount/host/run_record.py"]
        for args in (["create", rid], ["set", rid, f"vm_name={rid}"]):
            subprocess.run([*rr, *args], cwd=fleet.checkout, check=True, capture_output=True)
        result = run_recipe(templates, "teardown", run_id=rid)
        assert not result.ok and "too few X's" in result.text, result.text
        quirk = explain_quirk(result.text, templates.cwd)
        assert quirk is not None and "just/sandbox/lifecycle/teardown.just:105" in quirk.sites, quirk
        assert rid in fleet.live_vms()  # it stopped before destroying anything


def test_gate_mounts_and_tears_down_on_pass(world: World, pytester: pytest.Pytester) -> None:
    """The whole first night on the real recipes: mount, the gate, teardown on-pass, the key proven gone."""
    keys_before = set(world.fleet.live_keys())
    gate = run_suite(
        pytester, world.fleet, "gate", (REPO / "gates" / "test_gate.py",),
        "--sbx-mount", "demo", "--sbx-teardown", "on-pass", timeout=300,
    )  # fmt: skip
    [mount] = gate.report["mounts"]
    outcomes = {c["outcome"] for c in gate.report["checks"] if c["target"].startswith(mount["run_id"] or "?")}
    assert gate.ret == 0 and outcomes == {"passed"}, (outcomes, gate.stdout[-3000:])
    assert mount["action"] == "torn-down", mount
    proof = mount["teardown"]
    assert (proof["exit_code"], proof["key"], proof["revocation"]["status"]) == (0, "revoked", "revoked"), (
        proof
    )
    assert f"sbx-{mount['run_id']}" not in world.fleet.live_keys()
    assert set(world.fleet.live_keys()) <= keys_before
