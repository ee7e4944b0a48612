"""sbxcheck's settings: one table, read once into a frozen Settings, handed to xdist workers whole."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import execnet
import pytest

from sbxcheck.plugin.settings import OPTIONS, Settings

#: Every setting's command-line option, environment variable, ini name and default, as users write them.
PUBLISHED = {
    "inventory": ("--sbx-inventory", "SBXCHECK_INVENTORY", "sbx_inventory", None),
    "sim": ("--sbx-sim", None, None, False),
    "sim_faults": ("--sbx-sim-fault", None, None, ()),
    "sim_seed": (None, "SBXCHECK_SIM_SEED", None, None),
    "sim_sssf": ("--sbx-sim-sssf", "SBXCHECK_SIM_SSSF", "sbx_sim_sssf", None),
    "sim_cp_version": ("--sbx-sim-cp-version", "SBXCHECK_SIM_CP_VERSION", "sbx_sim_cp_version", None),
    "sim_pi_version": ("--sbx-sim-pi-version", "SBXCHECK_SIM_PI_VERSION", "sbx_sim_pi_version", None),
    "run_ids": ("--sbx-run-id", None, None, ()),
    "remediate": ("--sbx-remediate", None, None, False),
    "mounts": ("--sbx-mount", None, None, ()),
    "teardown": ("--sbx-teardown", "SBXCHECK_TEARDOWN", "sbx_teardown", "never"),
    "sweep": ("--sbx-sweep", None, None, False),
    "state": ("--sbx-state", "SBXCHECK_STATE_DIR", "sbx_state_dir", None),
    "probe": ("--sbx-probe", None, None, None),
    "max_parallel": ("--sbx-max-parallel", None, None, None),
    "max_spend_usd": ("--sbx-max-spend", None, "sbx_max_spend", None),
    "report_dir": ("--sbx-report", "SBXCHECK_REPORT_DIR", "sbx_report_dir", "sbxcheck-report"),
    "history": ("--sbx-history", None, "sbx_history", None),
    "history_keep": ("--sbx-history-keep", None, "sbx_history_keep", 30),
    "metrics": ("--sbx-metrics", None, "sbx_metrics", None),
    "waivers": ("--sbx-waivers", "SBXCHECK_WAIVERS", "sbx_waivers", None),
    "report_url": ("--sbx-report-url", "SBXCHECK_REPORT_URL", "sbx_report_url", None),
    "require_inventory": (
        "--sbx-require-inventory",
        "SBXCHECK_REQUIRE_INVENTORY",
        "sbx_require_inventory",
        False,
    ),
    "shipped_suites": ("--sbx-shipped-suites", "SBXCHECK_SHIPPED_SUITES", "sbx_shipped_suites", "auto"),
    "doctor": ("--sbx-doctor", None, None, False),
}

DUMP = """
import json, pytest
from sbxcheck.plugin.settings import settings_of

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    worker = getattr(config, "workerinput", {}).get("workerid", "controller")
    with open(f"settings-{worker}.json", "w") as f:
        json.dump(settings_of(config).to_wire(), f, default=str)
"""


@pytest.fixture(autouse=True)
def _only_the_settings_a_test_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py sets $SBXCHECK_SHIPPED_SUITES for every child; these tests read their sources."""
    monkeypatch.delenv("SBXCHECK_SHIPPED_SUITES", raising=False)


def test_the_table_publishes_the_same_names_and_defaults() -> None:
    rows = {o.name: (o.flag, o.env, o.ini, o.default) for o in OPTIONS}
    assert rows == PUBLISHED


def test_each_row_is_a_field_of_settings_and_each_field_a_row() -> None:
    fields = {f.name for f in dataclasses.fields(Settings)} - {"rootdir", "invocation_dir", "sources"}
    assert fields == {o.name for o in OPTIONS}


def test_the_wire_form_is_plain_and_round_trips(tmp_path: Path) -> None:
    settings = Settings.defaults(
        tmp_path,
        inventory=tmp_path / "fleet.toml",
        sim_faults=("vm.down@r1",),
        max_spend_usd=0.5,
        history_keep=7,
        sources={"inventory": "--sbx-inventory"},
    )
    wire = settings.to_wire()
    execnet.dumps(wire)  # what xdist's workerinput can carry
    assert Settings.from_wire(wire) == settings


def _configured(pytester: pytest.Pytester, *args: str) -> dict[str, object]:
    pytester.makeconftest(DUMP)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", *args)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), result.stderr.str()
    loaded: dict[str, object] = json.loads((pytester.path / "settings-controller.json").read_text())
    return loaded


def test_command_line_beats_environment_beats_ini_beats_default(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SBXCHECK_REPORT_DIR", raising=False)
    base = pytester.path
    assert _configured(pytester)["report_dir"] == str(base / "sbxcheck-report")
    (base / "cfg").mkdir()
    pytester.makeini("[pytest]\nsbx_report_dir = from-ini\nsbx_history_keep = 5\n")
    got = _configured(pytester)
    assert got["report_dir"] == str(base / "from-ini") and got["history_keep"] == 5
    ini = {"report_dir": "ini sbx_report_dir in tox.ini", "history_keep": "ini sbx_history_keep in tox.ini"}
    assert got["sources"] == ini
    monkeypatch.setenv("SBXCHECK_REPORT_DIR", "from-env")
    got = _configured(pytester)
    assert got["report_dir"] == str(base / "from-env")
    got = _configured(pytester, "--sbx-report=from-cli", "--sbx-history-keep=3")
    assert (got["report_dir"], got["history_keep"]) == (str(base / "from-cli"), 3)
    assert got["sources"] == {"report_dir": "--sbx-report", "history_keep": "--sbx-history-keep"}


def test_a_bad_value_names_where_it_was_written(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SBXCHECK_SIM_SEED", "many")
    result = pytester.runpytest_subprocess("--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: $SBXCHECK_SIM_SEED: expected a whole number (a fleet layout), got 'many'"])


def test_xdist_workers_get_the_controllers_settings_whole(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(DUMP)
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    monkeypatch.setenv("SBXCHECK_SIM_SEED", "7")
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider", "--sbx-history-keep=4")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    controller = json.loads((pytester.path / "settings-controller.json").read_text())
    worker = json.loads((pytester.path / "settings-gw0.json").read_text())
    assert worker == controller and controller["sim_seed"] == 7 and controller["history_keep"] == 4


def test_a_report_url_is_a_plain_web_address(tmp_path: Path) -> None:
    from sbxcheck.plugin.settings import web_url

    assert web_url(" https://ci.example.com/job/42/report.html ", tmp_path) == (
        "https://ci.example.com/job/42/report.html"
    )
    assert web_url("", tmp_path) is None
    for bad in ("ci.example.com/report.html", "ftp://ci.example.com/r", "https://", "https://a b/c"):
        with pytest.raises(ValueError, match="expected"):
            web_url(bad, tmp_path)
    with pytest.raises(ValueError, match="user:password@") as info:
        web_url("https://ops:hunter2@ci.example.com/r.html", tmp_path)
    assert "hunter2" not in str(info.value)
