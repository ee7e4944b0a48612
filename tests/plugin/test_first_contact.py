"""First contact (issue 18): a bad configuration is one usage error, a lost inventory never a green fleet,
the doctor says what is missing before anything runs, and tools come with the interpreter."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.lifecycle_harness import child_argv, read_report, suites_dir

from sbxcheck.cli import _parser as cli_parser
from sbxcheck.cli import main as cli_main
from sbxcheck.doctor import run_doctor
from sbxcheck.preflight import InventoryChoice, selected_suites
from sbxcheck.sim.fleet import SimFleet

GATE_STUB = "import pytest\npytestmark = pytest.mark.gate\n\ndef test_stub():\n    pass\n"


def _usage_error(result: pytest.RunResult) -> str:
    """The one ERROR line of an exit-4 run (no traceback, nothing collected)."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    out, err = result.stdout.str(), result.stderr.str()
    assert "Traceback" not in out + err and "collected" not in out
    lines = [line for line in err.splitlines() if line.startswith("ERROR:")]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ configuration errors: exit 4


def test_require_inventory_without_one_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_stub=GATE_STUB)
    line = _usage_error(pytester.runpytest_subprocess("-m", "gate", "--sbx-require-inventory"))
    assert "no inventory found and --sbx-require-inventory requires one" in line and "--sbx-inventory" in line
    env = pytester.runpytest_subprocess("-m", "gate", "--collect-only")  # the switch is off by default
    assert env.ret == pytest.ExitCode.OK
    os.environ["SBXCHECK_REQUIRE_INVENTORY"] = "1"
    try:
        assert "$SBXCHECK_REQUIRE_INVENTORY" in _usage_error(pytester.runpytest_subprocess("-m", "gate"))
        os.environ["SBXCHECK_REQUIRE_INVENTORY"] = "maybe"
        assert "expected 1/true/yes or 0/false/no" in _usage_error(
            pytester.runpytest_subprocess("-m", "gate")
        )
    finally:
        del os.environ["SBXCHECK_REQUIRE_INVENTORY"]
    pytester.makeini("[pytest]\nsbx_require_inventory = true\n")
    assert "ini sbx_require_inventory" in _usage_error(pytester.runpytest_subprocess("-m", "gate"))


def test_toml_error_unknown_fault_and_unset_env_var_are_one_message_each(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_stub=GATE_STUB)
    broken = pytester.path / "broken.toml"
    broken.write_text("[ssh\nconnect_timeout_s = 5\n")
    line = _usage_error(pytester.runpytest_subprocess("-m", "gate", f"--sbx-inventory={broken}"))
    assert f"{broken}: not valid TOML" in line and "fix the file" in line
    line = _usage_error(pytester.runpytest_subprocess("-m", "gate", "--sbx-max-parallel=-1"))
    assert line == "ERROR: --sbx-max-parallel: expected 0 (no fan-out) or a number of VMs at once, got -1"
    line = _usage_error(pytester.runpytest_subprocess("-m", "gate", "--sbx-sim-fault", "vm.on-fire"))
    assert "--sbx-sim-fault: unknown fault 'vm.on-fire'; known faults:" in line
    unset = pytester.path / "unset.toml"
    unset.write_text('[sandboxed]\nurl = "http://127.0.0.1:9"\ntoken_env = "SBX_FIRST_CONTACT_UNSET"\n')
    os.environ.pop("SBX_FIRST_CONTACT_UNSET", None)
    line = _usage_error(pytester.runpytest_subprocess("-m", "canary or triage", f"--sbx-inventory={unset}"))
    assert "sandboxed.token_env: SBX_FIRST_CONTACT_UNSET" in line and "export them" in line
    # the gate reads no secret from the environment: the same inventory is fine for -m gate
    gate = pytester.runpytest_subprocess("-m", "gate", "--collect-only", f"--sbx-inventory={unset}")
    assert gate.ret == pytest.ExitCode.OK, gate.stderr.str()


@pytest.mark.parametrize(
    ("expr", "suites"),
    [
        ("", {"gate", "canary", "triage"}),
        ("gate", {"gate"}),
        ("canary or triage", {"canary", "triage"}),
        ("not gate", {"canary", "triage"}),
        ("(gate or canary) and not slow", {"gate", "canary"}),
        ("gate and canary", set()),
        ("flaky(reruns=2)", {"gate", "canary", "triage"}),  # not understood: every suite, never fewer
    ],
)
def test_selected_suites_reads_the_marker_expression(expr: str, suites: set[str]) -> None:
    assert selected_suites(expr) == suites


# ------------------------------------------------------------------ a simulated run says so


def test_simulated_run_says_so_in_header_junit_and_results(
    pytester: pytest.Pytester, healthy_fleet: SimFleet
) -> None:
    pytester.makepyfile(
        test_sim="""
        import pytest
        from sbxcheck.results import CheckResult
        pytestmark = pytest.mark.gate

        def test_one(sbx_verdict):
            sbx_verdict(CheckResult.passed("one", "t", "ok", {"checked": True}))
        """
    )
    result = pytester.runpytest_subprocess("-m", "gate", "--sbx-sim", "--sbx-report=r")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["sbxcheck: SIMULATED RUN: these verdicts are about a simulated fleet*"])
    import json
    import xml.etree.ElementTree as ET

    assert json.loads((pytester.path / "r" / "results.json").read_text())["inventory"]["sim"] is True
    root = ET.parse(pytester.path / "r" / "junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["sbxcheck.fleet"] == "simulated"
    assert 'id="simulated"' in (pytester.path / "r" / "report.html").read_text()
    # an inventory `sbxcheck sim up` wrote (its [sim] section) is a simulated fleet too
    upped = pytester.runpytest_subprocess(
        "-m", "gate", f"--sbx-inventory={healthy_fleet.inventory_path}", "--sbx-report=u"
    )
    assert upped.ret == 0, upped.stdout.str()
    upped.stdout.fnmatch_lines(["sbxcheck: SIMULATED RUN:*"])
    assert json.loads((pytester.path / "u" / "results.json").read_text())["inventory"]["sim"] is True
    real = pytester.path / "real.toml"
    real.write_text("[ssh]\nconnect_timeout_s = 5\n")
    plain = pytester.runpytest_subprocess("-m", "gate", f"--sbx-inventory={real}", "--sbx-report=p")
    assert plain.ret == 0 and "SIMULATED" not in plain.stdout.str(), plain.stdout.str()
    root = ET.parse(pytester.path / "p" / "junit.xml").getroot()
    assert {p.get("name"): p.get("value") for p in root.iter("property")}["sbxcheck.fleet"] == "real"


# ------------------------------------------------------------------ CLI


def test_version_flag_and_help_on_every_argument(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("sbxcheck ")
    missing: list[str] = []

    def walk(parser: object, path: str) -> None:
        for action in parser._actions:  # type: ignore[attr-defined]
            if action.help is None and not action.choices:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
            for name, sub in (action.choices or {}).items() if hasattr(action, "_name_parser_map") else []:
                walk(sub, f"{path} {name}")

    walk(cli_parser(), "sbxcheck")
    assert missing == []


# ------------------------------------------------------------------ doctor


def _doctor(path: Path | None) -> tuple[int, str]:
    out = io.StringIO()
    code = run_doctor(InventoryChoice(path, "--sbx-inventory" if path else "no inventory given"), out)
    return code, out.getvalue()


def test_doctor_on_a_healthy_fleet_passes(healthy_fleet: SimFleet) -> None:
    code, out = _doctor(healthy_fleet.inventory_path)
    assert code == 0, out
    for label in (
        "inventory validates",
        "file ssh.identity",
        "known_hosts exe.dev",
        "control plane auth",
        "OpenRouter provisioning key",
        "just",
        "node",
        "pi",
        "pytest",
        "pytest-xdist",
    ):
        assert f"✓ {label}:" in out, label
    assert "✓ simulated fleet's recipes: stand-in" in out  # a --sssf-checkout fleet says real (<dir>)
    assert "✓ control plane release: version 0.9.0-sim: serves every route sbxcheck reads" in out
    assert "· missions at once: the control plane sets no limit (0 running now)" in out
    assert "✗" not in out and out.rstrip().endswith("sbxcheck doctor: all preconditions met")
    password = (
        Path(healthy_fleet.inventory_path.parent / "secrets" / "controlplane_password").read_text().strip()
    )
    assert password not in out  # no secret value printed


def test_doctor_names_an_older_control_plane_and_what_it_will_skip(tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet", cp_version="v0.7") as fleet:
        code, out = _doctor(fleet.inventory_path)
    assert code == 0, out
    [line] = [x for x in out.splitlines() if "control plane release" in x]
    assert line.startswith("✓ control plane release: version 0.7.0: items that need these are skipped")
    for said in (
        "GET /api/health/fleet: answered 404 with an empty body (no such route) → skips fleet_health",
        "GET /api/remote-nodes",
        "GET /api/control/missions/integrity: answered 400",
        "GET /api/control/tracks",
        "the assistant MCP is not one of its components",
        "creates, event cursors and list queries are learned in a run",
    ):
        assert said in line, said
    # v0.7 runs one mission at a time (MAX_PARALLEL_MISSIONS' default): a fact, said once
    assert "· missions at once: one at a time (0 running now): a canary's missions wait" in out, out


def test_doctor_without_an_inventory_says_the_embedded_fleet_will_be_used_without_a_check_mark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No inventory is not a met precondition: a neutral line says which fleet the run would check."""
    import sbxcheck.fleetsource

    monkeypatch.setattr(sbxcheck.fleetsource, "sim_installed", lambda: False)  # no fleet started: fast
    _, out = _doctor(None)
    first = out.splitlines()[0]
    assert first.startswith("· inventory: none found") and "embedded simulated fleet will be used" in first, out


def test_doctor_names_each_missing_precondition_and_its_fix(healthy_fleet: SimFleet, tmp_path: Path) -> None:
    """A key file 0644, an unset token env var, a host missing from known_hosts, an unreachable control
    plane: exit 1, one ✗ line each naming the file/var/host/URL and the fix (the fleet is not touched)."""
    import tomllib

    import tomli_w

    doc = tomllib.loads(healthy_fleet.inventory_path.read_text())
    key = tmp_path / "id_wide"
    shutil.copy(doc["ssh"]["identity"], key)
    key.chmod(0o644)
    known = tmp_path / "known_hosts"
    lines = Path(doc["ssh"]["known_hosts"][0]).read_text().splitlines()
    kept = []
    for line in lines:  # drop the pattern dgx-spark from every entry (an entry may name several hosts)
        hosts, _, rest = line.partition(" ")
        names = [h for h in hosts.split(",") if h != "dgx-spark"]
        if names:
            kept.append(",".join(names) + " " + rest)
    known.write_text("\n".join(kept) + "\n")
    doc["ssh"].update(identity=str(key), known_hosts=[str(known)])
    doc["sandboxed"].update(url="http://127.0.0.1:9", token_env="SBX_DOCTOR_UNSET_TOKEN")  # discard port
    os.environ.pop("SBX_DOCTOR_UNSET_TOKEN", None)
    inventory = tmp_path / "sbxcheck.toml"
    inventory.write_text(tomli_w.dumps(doc))
    code, out = _doctor(inventory)
    assert code == 1 and "Traceback" not in out
    failed = [line for line in out.splitlines() if line.startswith("✗")]
    assert any(f"{key}: mode 0644" in line and f"fix: chmod 600 {key}" in line for line in failed), out
    assert any("env SBX_DOCTOR_UNSET_TOKEN: not set (sandboxed.token_env" in line for line in failed), out
    assert any(
        line.startswith("✗ known_hosts dgx-spark:") and "ssh-keyscan" in line and str(known) in line
        for line in failed
    ), out
    assert any(
        line.startswith("✗ control plane: http://127.0.0.1:9/api/health") and "[sandboxed] url" in line
        for line in failed
    )
    assert len(failed) == 4, out  # nothing else is blamed


def test_pytest_sbx_doctor_collects_nothing(pytester: pytest.Pytester, healthy_fleet: SimFleet) -> None:
    pytester.makepyfile(test_stub=GATE_STUB)
    result = pytester.runpytest_subprocess("--sbx-doctor", f"--sbx-inventory={healthy_fleet.inventory_path}")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["✓ inventory: *(from --sbx-inventory)", "sbxcheck doctor: all preconditions met"]
    )
    assert "collected" not in result.stdout.str()


# ------------------------------------------------------------------ tools come with the interpreter


@pytest.mark.slow  # mounts a sandbox through the real `just sbx` recipes
def test_mount_finds_the_venvs_just_without_the_venv_on_path(tmp_path: Path) -> None:
    venv_bin = Path(sys.executable).parent
    assert (venv_bin / "just").exists() and shutil.which("just", path="/usr/bin:/bin") is None
    with SimFleet(tmp_path / "fleet") as fleet:
        suites = suites_dir(tmp_path, quick_gate=True)
        argv = child_argv(
            suites, fleet.inventory_path, tmp_path, "--sbx-mount", "demo", "--sbx-teardown=always"
        )
        env = {**os.environ, "PATH": "/usr/bin:/bin"}  # venv/bin/python -m pytest, the venv not activated
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False
        )
        report = read_report(tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        [mount] = report["mounts"]
        assert mount["mounted"] and "just is not installed" not in proc.stdout


def test_doctor_other_failures_each_name_their_fix(
    healthy_fleet: SimFleet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An invalid inventory, a missing file, a refused token, no `just`: one ✗ each, exit 1, via the CLI too."""
    import tomllib

    import tomli_w

    bad = tmp_path / "bad.toml"
    bad.write_text("[ssh]\nport_knocking = true\n")
    code, out = _doctor(bad)
    assert code == 1 and "✗ inventory validates:" in out and "unknown field 'ssh.port_knocking'" in out
    assert "docs/inventory.md lists every field" in out  # the manual's page, not the model's source
    doc = tomllib.loads(healthy_fleet.inventory_path.read_text())
    doc["ssh"]["config"] = str(tmp_path / "no-such-ssh-config")
    doc["sandboxed"]["token_env"] = "SBX_DOCTOR_WRONG_TOKEN"
    doc["sandboxed"].pop("password_file", None)
    monkeypatch.setenv("SBX_DOCTOR_WRONG_TOKEN", "not-a-valid-jwt-for-this-control-plane")
    monkeypatch.setattr("sbxcheck.tools.find_tool", lambda name: None)
    inventory = tmp_path / "sbxcheck.toml"
    inventory.write_text(tomli_w.dumps(doc))
    assert cli_main(["doctor", "--inventory", str(inventory)]) == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("✗")]
    assert any(
        line.startswith("✗ inventory validates:") and "no-such-ssh-config" in line for line in failed
    ), out
    assert "not-a-valid-jwt" not in out  # the value is never printed
    doc["ssh"].pop("config")
    inventory.write_text(tomli_w.dumps(doc))
    assert cli_main(["doctor", "--inventory", str(inventory)]) == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("✗")]
    assert any(line.startswith("✗ control plane auth: GET /api/workspaces refused") for line in failed), out
    assert any(line.startswith("✗ just: not found") and "pip install rust-just" in line for line in failed), (
        out
    )
    assert "not-a-valid-jwt" not in out


@pytest.mark.parametrize("suite", ["gate", "canary"])
def test_the_suites_without_the_plugin_are_one_line_naming_it(suite: str) -> None:
    """``-p no:sbxcheck``: one usage error that names the plugin, not one "fixture not found" per item."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:sbxcheck", "-p", "no:cacheprovider", "-q", "-m", suite],
        cwd=repo, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "need the sbxcheck pytest plugin" in errors[0], errors
    assert "-p no:sbxcheck" in errors[0] and "not found" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (200, {"max_parallel_missions": 4, "running_count": 3}, "· missions at once: 4 at a time (3 running now)"),
        (200, {"max_parallel_missions": -1}, "· missions at once: not read: GET /api/control/parallel/config"),
        (404, None, None),  # a release without the route: nothing more said
    ],
    ids=["four", "nonsense", "not-served"],
)
def test_doctor_says_how_many_missions_run_at_once(status: int, body: Any, said: str | None) -> None:
    import httpx

    from sbxcheck.clients.sandboxed import SandboxedClient
    from sbxcheck.doctor import _check_mission_slots
    from sbxcheck.doctor_findings import Finding

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/control/parallel/config"
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status)

    found: list[Finding] = []
    with SandboxedClient("http://cp.test", token="t", transport=httpx.MockTransport(answer), retries=0) as client:
        _check_mission_slots(client, found.append)
    lines = [f.render() for f in found]
    assert all(f.ok for f in found)  # a fact, never a failed precondition
    assert (lines == []) if said is None else (len(lines) == 1 and lines[0].startswith(said)), lines


def test_doctor_judges_a_symlinked_key_file_as_a_link(tmp_path: Path) -> None:
    """A key file that is a link: named as one, with where it points; no chmod offered that would follow it."""
    target = tmp_path / "shared" / "team_key"
    target.parent.mkdir()
    target.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n-----END OPENSSH PRIVATE KEY-----\n")
    target.chmod(0o644)
    link = tmp_path / "id_ed25519"
    link.symlink_to(target)
    known = tmp_path / "known_hosts"
    known.write_text("")
    inventory = tmp_path / "sbxcheck.toml"
    inventory.write_text(f'[ssh]\nidentity = "{link}"\nknown_hosts = ["{known}"]\n')
    code, out = _doctor(inventory)
    [line] = [ln for ln in out.splitlines() if ln.startswith("✗ file ssh.identity")]
    assert code == 1 and f"{link}: a symlink to {target}" in line, out
    assert "chmod" not in line and "0644" not in line
    assert target.stat().st_mode & 0o777 == 0o644
