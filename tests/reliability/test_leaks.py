"""No seeded secret of any class reaches any artifact, by any path: 0 hits.

One child pytest session runs the gate (A and the run records) against the embedded fleet plus a
probe item that drives the paths the gate alone does not: HTTP error bodies, exception texts,
URLs with userinfo, logs at DEBUG (live and captured), ``-l`` locals, ``--tb=long``, long evidence
that gets trimmed. Secrets of every class are seeded as git file names on a VM (command output,
porcelain) and handed to the probe through the environment. Then every file the session wrote
(results.json, junit, report.html, Allure, the ledger, history and metrics when those options
exist) and its terminal output are scanned for each value and for any recognisable part of one.

The same session proves that a FIFO and a hostile record in the runs directory neither hang the
collection nor stop the good runs from being gated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.gate_harness import run_gate
from support.secret_seeds import SELF_IDENTIFYING, in_context, seeded_secrets

from sbxcheck.sim.fleet import SimFleet

PROBE = """
import json, logging, os
import httpx, pytest
from sbxcheck.checks.base import trim
from sbxcheck.clients.sandboxed import SandboxedClient
from sbxcheck.errors import SbxError
from sbxcheck.results import CheckResult

pytestmark = pytest.mark.gate
SEEDS = json.loads(os.environ["SBXLEAK_SEEDS"])
TEXTS = json.loads(os.environ["SBXLEAK_TEXTS"])  # each seed as it appears in real output
log = logging.getLogger("sbxcheck.leakprobe")


def _error_body(request):
    return httpx.Response(500, json={"error": "boom", "message": " ".join(TEXTS.values())})


def test_leak_probe_http_error_body(sbx_verdict):
    password = SEEDS["url-password"]
    client = SandboxedClient(
        f"http://deploy:{password}@cp.invalid", token=SEEDS["jwt"], transport=httpx.MockTransport(_error_body),
        retries=0,
    )
    try:
        client.health()
    except SbxError as exc:
        sbx_verdict(CheckResult.failed("leak_probe_http", "cp", exc.message, dict(exc.evidence)))


def test_leak_probe_logs_and_trimmed_evidence(sbx_verdict):
    for text in TEXTS.values():
        log.debug("seeded: %s", text)
    blob = "x" * 37 + " " + " ".join(TEXTS.values())
    evidence = {name: trim(f"prefix {text} suffix", 40) for name, text in TEXTS.items()}
    sbx_verdict(CheckResult.failed("leak_probe_trim", "probe", trim(blob, 120), {"cut": evidence, "raw": blob}))


def test_leak_probe_ledger(sbx_session, sbx_verdict):
    ledger = sbx_session.ledger()
    entry = ledger.record_intent("mission", "leak-probe", run_id=None, detail={"seen": TEXTS["aws-secret-key"]})
    ledger.mark_released(entry, "teardown said: " + TEXTS["aws-access-key-id"] + " " + TEXTS["generic-token"])
    sbx_verdict(CheckResult.passed("leak_probe_ledger", "ledger", f"wrote {ledger.path.name}", {}))


def test_leak_probe_locals_and_long_traceback():
    aws_secret = SEEDS["aws-secret-key"]
    every = dict(SEEDS)
    log.warning("about to fail with %s", every)
    raise RuntimeError(f"exception text with {aws_secret} and {every}")
"""


def _fragments(value: str) -> list[str]:
    """The value and its recognisable parts: a cut key must not leave its head or its tail."""
    parts = [value]
    body = value.split("-----")[2] if value.startswith("-----BEGIN") else value
    for line in body.split():
        if len(line) >= 16:
            parts += [line[:16], line[-16:]]
    return parts


def _scan(texts: dict[str, str], seeds: dict[str, str], fleet_secrets: list[str]) -> dict[str, list[str]]:
    hits: dict[str, list[str]] = {}
    for where, text in texts.items():
        found = [name for name, value in seeds.items() if any(f in text for f in _fragments(value))]
        found += [f"fleet secret #{i}" for i, s in enumerate(fleet_secrets) if s in text]
        if found:
            hits[where] = found
    return hits


def _reporting_args(tmp_path: Path) -> list[str]:
    """--sbx-history / --sbx-metrics: their files are scanned like the rest."""
    return ["--sbx-history", str(tmp_path / "history"), "--sbx-metrics", str(tmp_path / "metrics.prom")]


@pytest.mark.slow
def test_no_seeded_secret_reaches_any_artifact(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeds = seeded_secrets()
    monkeypatch.setenv("SBXLEAK_SEEDS", json.dumps(seeds))
    monkeypatch.setenv("SBXLEAK_TEXTS", json.dumps({n: in_context(n, v) for n, v in seeds.items()}))
    pytester.makepyfile(test_leak_probe=PROBE)
    allure_dir = tmp_path / "allure"
    with SimFleet(tmp_path / "fleet") as fleet:
        # command output and git porcelain: untracked files named after secrets on the first VM
        app = fleet.runs[0].home / "app"
        for name in sorted(SELF_IDENTIFYING):
            if "\n" not in seeds[name] and "/" not in seeds[name]:
                (app / f"{name}-{seeds[name]}.txt").write_text("x")
        # hostile neighbours in the runs directory: a FIFO nobody writes to, a deep record
        runs_dir = fleet.checkout / ".sandbox" / "runs"
        os.mkfifo(runs_dir / "fifo-run.json")
        (runs_dir / "deep-run.json").write_text("[" * 100000 + "]" * 100000)
        outcome = run_gate(
            pytester,
            fleet,
            str(pytester.path / "test_leak_probe.py"),
            "-k",
            "git or leak_probe",
            "-rA",
            "-l",
            "--tb=long",
            "--log-level=DEBUG",
            "--log-cli-level=DEBUG",
            "--log-file",
            str(tmp_path / "pytest.log"),
            "--alluredir",
            str(allure_dir),
            "--junitxml",
            str(tmp_path / "pytest-junit.xml"),
            *_reporting_args(tmp_path),
            timeout=300,
        )
        fleet_secrets = fleet.secrets()
        run_ids = list(fleet.run_ids)
    # the paths really ran: the probe items, and A saw the secret-named files on the first VM
    checks = {(c["check"], c["target"]): c for c in outcome.report["checks"]}
    assert any(check.startswith("leak_probe") for check, _ in checks), sorted(checks)
    a_items = {c["nodeid"]: c for c in outcome.report["checks"] if c["check"] == "A_git_integrity"}
    dirty = [c for n, c in a_items.items() if run_ids[0] in n]
    assert dirty and dirty[0]["outcome"] == "failed", dirty
    # the good runs were gated despite the FIFO and the deep record beside them
    for run_id in run_ids[1:]:
        assert any(run_id in n and c["outcome"] == "passed" for n, c in a_items.items()), (run_id, a_items)

    texts = {"terminal": outcome.stdout + "\n" + outcome.stderr}
    for root in (pytester.path, tmp_path):
        for path in sorted(root.rglob("*")):
            if path.is_file() and "fleet" not in path.relative_to(root).parts[:1] and path.suffix != ".py":
                texts[str(path)] = path.read_text(encoding="utf-8", errors="replace")
    # the ledger sits beside the inventory (under the fleet dir, skipped above); only this test's own
    # dirs are searched, and only regular files are read: a sibling test's FIFO ledger would block open()
    for ledger in {*tmp_path.rglob("ledger.jsonl"), *pytester.path.rglob("ledger.jsonl")}:
        if ledger.is_file() and not ledger.is_symlink():
            texts[str(ledger)] = ledger.read_text(encoding="utf-8", errors="replace")
    scanned = set(texts)
    assert any(p.endswith("results.json") for p in scanned) and any(
        p.endswith("report.html") for p in scanned
    )
    assert any("allure" in p for p in scanned) and any(p.endswith("pytest.log") for p in scanned)
    assert any(p.endswith("ledger.jsonl") for p in scanned), sorted(scanned)
    leaks = _scan(texts, seeds, fleet_secrets)
    assert not leaks, "\n".join(f"{where}: {names}" for where, names in leaks.items())
