"""Allure history links a gate item across nights: new VMs (new run ids), one history per item."""

from __future__ import annotations

import json
import shutil

import pytest
from support.gate_harness import REPO

pytestmark = pytest.mark.slow  # two children, each on an embedded fleet of its own


def test_gate_history_id_survives_new_run_ids(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(REPO / "gates" / "test_gate.py", pytester.path / "test_gate.py")
    runs: list[dict[str, str]] = []
    names: list[set[str]] = []
    for n, seed in enumerate(("11", "12")):  # another seed: the same run names, other ids (another night)
        monkeypatch.setenv("SBXCHECK_SIM_SEED", seed)
        result = pytester.runpytest_subprocess(
            "-m", "gate", "-k", "A_git or C_model", f"--alluredir=allure{n}", f"--sbx-report=rep{n}",
            "-p", "no:randomly", timeout=300,
        )  # fmt: skip
        assert result.ret == 0, result.stdout.str()[-2000:]
        by_identity: dict[str, str] = {}
        for path in (pytester.path / f"allure{n}").glob("*-result.json"):
            doc = json.loads(path.read_text())
            params = {p["name"]: p["value"] for p in doc.get("parameters", [])}
            by_identity[params["identity"].strip("'")] = doc["historyId"]
        runs.append(by_identity)
        names.append(
            {json.loads(p.read_text())["name"] for p in (pytester.path / f"allure{n}").glob("*-result.json")}
        )
    assert names[0].isdisjoint(names[1])  # every item's name carries its (new) run id
    assert len(runs[0]) == 3 * 4  # A and C per model on three VMs
    assert "gate/C_model_answers/google/gemini-3.6-flash@alpha" in runs[0]
    assert runs[0] == runs[1]  # ... and its history id does not
    assert len(set(runs[0].values())) == len(runs[0])
