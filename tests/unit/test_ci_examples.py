"""examples/ci: every sbxcheck option, command and path they use exists, and both validate offline."""

from __future__ import annotations

import re
import shlex
import socket
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from sbxcheck import plugin
from sbxcheck.cli import _parser as cli_parser
from sbxcheck.inventory import INVENTORY_ENV
from sbxcheck.report.writers import JUNIT_NAME

REPO = Path(__file__).resolve().parents[2]
GITHUB = REPO / "examples" / "ci" / "github-actions-nightly.yml"
GITLAB = REPO / "examples" / "ci" / "gitlab-ci.yml"
ALERTS = REPO / "examples" / "alerts" / "sbxcheck.rules.yml"


class _Options:
    """Stands in for pytest's parser and records the options a plugin registers."""

    def __init__(self) -> None:
        self.options: set[str] = set()
        self.ini: set[str] = set()

    def getgroup(self, *args: Any, **kwargs: Any) -> _Options:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.options.update(names)

    _addoption = addoption

    def addini(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.ini.add(name)


def _registered_options() -> set[str]:
    import allure_pytest.plugin
    from _pytest import junitxml

    recorder = _Options()
    for module in (plugin, allure_pytest.plugin, junitxml):
        module.pytest_addoption(recorder)  # type: ignore[attr-defined]
    return recorder.options


def _load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def _commands(node: Any) -> list[str]:
    """Every shell text in a workflow: ``run:`` steps and GitLab script lists."""
    out: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("run",) and isinstance(value, str):
                out.append(value)
            elif key in ("script", "before_script", "after_script"):
                out.extend(v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str))
            else:
                out.extend(_commands(value))
    elif isinstance(node, list):
        for value in node:
            out.extend(_commands(value))
    return out


def _pytest_argv(commands: list[str]) -> list[str]:
    calls = [c for c in commands if "-m pytest" in c]
    assert len(calls) == 1, calls
    argv = shlex.split(calls[0].replace("\n", " "))
    return argv[argv.index("pytest") + 1 :]


def _option_values(argv: list[str]) -> dict[str, str]:
    """``--opt=value`` (a separate value naming an existing directory sways pytest's rootdir) and ``-m X``."""
    values = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    values.update({a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-m"})
    return values


@pytest.mark.parametrize("path", [GITHUB, GITLAB], ids=["github", "gitlab"])
def test_every_option_command_and_path_exists(path: Path) -> None:
    doc = _load(path)
    commands = _commands(doc)
    argv = _pytest_argv(commands)
    known = _registered_options()
    used = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    assert all("=" in a for a in argv if a.startswith("--sbx-")), argv
    assert {o for o in used if o.startswith("--sbx-")} >= {"--sbx-report", "--sbx-history", "--sbx-metrics"}
    assert used <= known, used - known
    values = _option_values(argv)
    assert values["-m"] == "canary or triage"
    assert int(values["--sbx-history-keep"]) >= 1
    assert (REPO / "canaries").is_dir()  # the suites -m selects are there in a checkout

    report_dir, history_dir = values["--sbx-report"], values["--sbx-history"]
    assert values["--sbx-metrics"].startswith(report_dir + "/") and values["--junitxml"].startswith(
        report_dir + "/"
    )
    text = path.read_text(encoding="utf-8")
    assert f"{report_dir}/" in text.split("-m pytest", 1)[1]  # the report directory is uploaded
    assert values["--alluredir"] in text.split("-m pytest", 1)[1]
    assert f"{INVENTORY_ENV}:" in text  # the env var the plugin reads
    assert 'SBXCHECK_REQUIRE_INVENTORY: "1"' in text  # a lost inventory is exit 4, not a simulated run
    from sbxcheck.plugin.settings import OPTIONS

    published = {o.env for o in OPTIONS if o.env}
    named = set(re.findall(r"^\s*(SBXCHECK_\w+):", text, re.MULTILINE))
    assert "SBXCHECK_REPORT_URL" in named and named <= published, named - published  # alerts link to the page

    # the sbxcheck subcommands they call parse
    for command in commands:
        for match in re.finditer(r"\bsbxcheck (report|history) (\S+)", command):
            cli_parser().parse_args([match.group(1), match.group(2)])
            assert match.group(2) in (report_dir, history_dir)

    if path is GITHUB:
        steps = doc["jobs"]["canary"]["steps"]
        cached = [s["with"]["path"] for s in steps if str(s.get("uses", "")).startswith("actions/cache/")]
        assert cached == [history_dir, history_dir]  # restored before, saved after (always)
        assert all(
            s.get("if") == "always()"
            for s in steps
            if str(s.get("uses", "")).startswith(("actions/upload-artifact", "actions/cache/save"))
        )
        assert "schedule" in doc["on"] and "${{ secrets." in text
    else:
        job = doc["sbxcheck-nightly"]
        assert job["cache"][0]["paths"] == [history_dir + "/"] and job["cache"][0]["when"] == "always"
        assert job["artifacts"]["when"] == "always"
        assert job["artifacts"]["reports"]["junit"] == f"{report_dir}/{JUNIT_NAME}"
        assert any("schedule" in rule["if"] for rule in job["rules"])


def _validate(schema: str, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """check-jsonschema's CLI, in process (a child interpreter costs seconds)."""
    from check_jsonschema import main as check_jsonschema

    try:
        check_jsonschema(["--builtin-schema", schema, str(path)])
    except SystemExit as exit_:
        out = capsys.readouterr()
        return int(exit_.code or 0), out.out + out.err
    raise AssertionError("check-jsonschema returned without an exit status")


def test_examples_validate_offline_against_vendored_schemas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip(
        "check_jsonschema", reason="check-jsonschema is not installed (pip install -e '.[test]')"
    )

    def no_network(self: socket.socket, *args: Any) -> None:
        raise OSError("network access during an offline validation")

    monkeypatch.setattr(socket.socket, "connect", no_network)  # the schemas are vendored: nothing is fetched
    for schema, path in (("vendor.github-workflows", GITHUB), ("vendor.gitlab-ci", GITLAB)):
        code, output = _validate(schema, path, capsys)
        assert code == 0, output
    broken = tmp_path / "broken.yml"
    broken.write_text(GITHUB.read_text(encoding="utf-8").replace("runs-on: ubuntu-latest", "runs-on: 3"))
    code, output = _validate("vendor.github-workflows", broken, capsys)
    assert code == 1 and "runs-on" in output  # the validator does look


def test_alert_rules_use_the_series_sbxcheck_writes() -> None:
    from support import report_scenarios as scenarios

    from sbxcheck.redact import Redactor
    from sbxcheck.report.history import analyse
    from sbxcheck.report.metrics import build_registry

    runs = scenarios.history_runs(3)
    registry = build_registry(runs[-1], Redactor(), analyse(runs))
    written = {family.name for family in registry.collect()}
    rules = _load(ALERTS)
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = {name for expr in exprs for name in re.findall(r"\bsbxcheck_\w+", expr)}
    assert len(exprs) >= 5 and used and used <= written, used - written
