"""Unit tests for sbxcheck.report: incidents, results.json, junit.xml, report.html, redaction."""

from __future__ import annotations

import json
import random
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from sbxcheck.errors import BadResponseError
from sbxcheck.redact import MASK, Redactor
from sbxcheck.report import (
    DEFAULT_RECOMMENDATIONS,
    assemble_report,
    build_incidents,
    incident_id,
    load_report,
    write_reports,
)
from sbxcheck.report.incidents import is_destructive
from sbxcheck.results import CheckRecord, Classification, InventoryInfo, Outcome, RunReport

C = Classification
REGISTERED_SECRET = "hunter2-registered-value-7f3a"
OR_KEY = "sk-or-v1-" + "0123456789abcdef" * 4  # 64 hex
STARTED = "2025-01-01T10:00:00+00:00"
FINISHED = "2025-01-01T10:05:00+00:00"
INVENTORY = InventoryInfo(source="sim (embedded)", sim=True, details={"vms": 3})


def rec(
    name: str,
    target: str,
    outcome: Outcome,
    *,
    check: str | None = None,
    suite: str = "gate",
    classification: Classification | None = None,
    message: str = "",
    evidence: dict[str, Any] | None = None,
    cause: str | None = None,
    recommendation: str | None = None,
    duration_s: float = 0.25,
) -> CheckRecord:
    check = check or name
    return CheckRecord(
        nodeid=f"gates/test_{suite}.py::test_{name}[{target}]",
        suite=suite,
        check=check,
        target=target,
        outcome=outcome,
        classification=classification,
        message=message,
        evidence=evidence if evidence is not None else {"checked": name},
        cause=cause,
        recommendation=recommendation,
        duration_s=duration_s,
    )


def make_records() -> list[CheckRecord]:
    """run-a healthy-ish, run-b unreachable (4 errors), two records sharing a cause, one lone failure."""
    return [
        rec("ssh", "run-a", Outcome.PASSED, message="ssh ok"),
        rec("models", "run-a", Outcome.PASSED, message="3 models"),
        rec(
            "runtime_key",
            "run-a",
            Outcome.FAILED,
            classification=C.SECURITY_EXPOSURE,
            message=f"key visible in env: {OR_KEY}",
            evidence={"env": f"OPENROUTER_API_KEY={OR_KEY}", "token": REGISTERED_SECRET, "exit": 0},
        ),
        rec("skipme", "run-a", Outcome.SKIPPED, message="no runtime key configured"),
        # run-b: unreachable, every item errors
        *[
            rec(
                name,
                "run-b",
                Outcome.ERROR,
                classification=C.INFRA_UNREACHABLE,
                message="connect refused",
                evidence={"host": "10.0.0.2", "port": 22},
            )
            for name in ("ssh", "models", "workspace", "agent")
        ],
        # two records on different targets sharing a cause
        rec(
            "mount",
            "run-a",
            Outcome.FAILED,
            classification=C.WORKSPACE_MOUNT_DEFECT,
            message="workspace is read-only",
            cause="workspace-ro",
        ),
        rec(
            "mount",
            "run-c",
            Outcome.FAILED,
            classification=C.WORKSPACE_MOUNT_DEFECT,
            message="workspace is read-only",
            cause="workspace-ro",
            recommendation="remount /workspace read-write and re-run the gate",
        ),
        rec("ssh", "run-c", Outcome.PASSED, message="ssh ok"),
        rec("xss", "run-c", Outcome.FAILED, message="<script>alert(1)</script> found", evidence={}),
    ]


def make_report(records: list[CheckRecord] | None = None) -> RunReport:
    return assemble_report(
        records if records is not None else make_records(),
        started_at=STARTED,
        finished_at=FINISHED,
        inventory=INVENTORY,
    )


@pytest.fixture
def redactor() -> Redactor:
    return Redactor([REGISTERED_SECRET])


@pytest.fixture
def written(tmp_path: Path, redactor: Redactor) -> dict[str, Path]:
    return write_reports(make_report(), tmp_path / "out", redactor)


# --- incidents -----------------------------------------------------------------------------------


def test_incidents_grouping() -> None:
    incidents = build_incidents(make_records())
    assert len(incidents) == 2
    unreachable, mount = incidents  # largest first
    assert unreachable.classification is C.INFRA_UNREACHABLE
    assert len(unreachable.checks) == 4
    assert all("[run-b]" in n for n in unreachable.checks)
    assert unreachable.checks == sorted(unreachable.checks)
    assert "run-b" in unreachable.summary and "4 checks" in unreachable.summary
    assert "infra_unreachable" in unreachable.summary
    # issue 19: a run id is not a host, and no <target> is left to fill in (the evidence names no alias)
    assert "run-b true" not in unreachable.recommendation and "<target>" not in unreachable.recommendation
    assert "\n" not in unreachable.summary

    assert mount.classification is C.WORKSPACE_MOUNT_DEFECT
    assert len(mount.checks) == 2
    assert "run-a" in mount.summary and "run-c" in mount.summary and "2 checks" in mount.summary
    assert mount.recommendation == "remount /workspace read-write and re-run the gate"

    grouped = {n for i in incidents for n in i.checks}
    assert not any("xss" in n or "runtime_key" in n or "skipme" in n for n in grouped)


def test_incident_ids_are_stable_and_readable() -> None:
    records = make_records()
    first = build_incidents(records)
    shuffled = records[:]
    random.Random(7).shuffle(shuffled)
    second = build_incidents(shuffled)
    assert [i.model_dump() for i in first] == [i.model_dump() for i in second]
    for inc in first:
        assert re.fullmatch(r"INC-[0-9a-f]{8}", inc.id)
    assert first[0].id == incident_id(C.INFRA_UNREACHABLE, "run-b", kind="target")
    assert first[1].id == incident_id(C.WORKSPACE_MOUNT_DEFECT, "workspace-ro")
    assert len({i.id for i in first}) == len(first)


def test_single_cause_groups_only_when_infrastructure() -> None:
    lone = rec("a", "t1", Outcome.FAILED, classification=C.CHECK_FAILED, cause="x")
    assert build_incidents([lone]) == []
    infra = rec("b", "t1", Outcome.ERROR, classification=C.INFRASTRUCTURE, cause="proxy down")
    (inc,) = build_incidents([lone, infra])
    assert inc.checks == [infra.nodeid]
    assert inc.classification is C.INFRASTRUCTURE
    # explicit cause wins over per-target grouping
    timed = rec("c", "t2", Outcome.ERROR, classification=C.TIMEOUT, cause="slow-disk")
    timed2 = rec("d", "t2", Outcome.ERROR, classification=C.TIMEOUT)
    incs = build_incidents([timed, timed2])
    assert [i.checks for i in incs] == [[timed.nodeid]]  # a lone uncaused timeout is not an incident
    timed3 = rec("e", "t2", Outcome.ERROR, classification=C.TIMEOUT)
    incs = build_incidents([timed, timed2, timed3])
    assert sorted(len(i.checks) for i in incs) == [1, 2]
    assert len({i.id for i in incs}) == 2


def test_passed_and_skipped_are_never_grouped() -> None:
    records = [
        rec("a", "t", Outcome.PASSED, classification=C.INFRA_UNREACHABLE),
        rec("b", "t", Outcome.SKIPPED, classification=C.INFRA_UNREACHABLE),
        rec("c", "t", Outcome.PASSED, cause="same"),
        rec("d", "t", Outcome.SKIPPED, cause="same"),
    ]
    assert build_incidents(records) == []


def test_default_recommendations_cover_all_and_are_not_destructive() -> None:
    assert set(DEFAULT_RECOMMENDATIONS) == set(Classification)
    for text in DEFAULT_RECOMMENDATIONS.values():
        assert not is_destructive(text), text
    assert "never auto-accept" in DEFAULT_RECOMMENDATIONS[C.HOST_KEY_MISMATCH]
    assert DEFAULT_RECOMMENDATIONS[C.SECURITY_EXPOSURE].startswith("rotate the exposed credential")


def test_destructive_record_recommendation_is_not_used() -> None:
    records = [
        rec("a", "t", Outcome.ERROR, classification=C.HOST_KEY_MISMATCH, recommendation="delete the VM"),
        rec("b", "t", Outcome.ERROR, classification=C.HOST_KEY_MISMATCH),
    ]
    (inc,) = build_incidents(records)
    assert inc.recommendation == DEFAULT_RECOMMENDATIONS[C.HOST_KEY_MISMATCH]
    assert not is_destructive("do not delete the VM; inspect it")
    assert is_destructive("run teardown")


# --- assemble / results.json ---------------------------------------------------------------------


def test_assemble_sorts_and_counts() -> None:
    report = make_report()
    nodeids = [c.nodeid for c in report.checks]
    assert nodeids == sorted(nodeids)
    assert report.summary == {"passed": 3, "failed": 4, "error": 4, "skipped": 1, "waived": 0, "total": 12}
    assert len(report.incidents) == 2


def test_shuffled_input_gives_same_order() -> None:
    records = make_records()
    serial = make_report(records)
    for seed in range(5):
        shuffled = records[:]
        random.Random(seed).shuffle(shuffled)
        xdist = make_report(shuffled)
        assert [c.nodeid for c in xdist.checks] == [c.nodeid for c in serial.checks]
        assert xdist.model_dump() == serial.model_dump()


def test_results_json_shape_and_round_trip(written: dict[str, Path]) -> None:
    assert set(written) == {"results.json", "junit.xml", "report.html"}
    path = written["results.json"]
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema"] == 1
    assert {"schema", "started_at", "finished_at", "inventory", "checks", "incidents"} <= set(data)
    assert data["inventory"]["source"] == "sim (embedded)" and data["inventory"]["sim"] is True
    check_keys = {
        "nodeid", "suite", "check", "target", "outcome", "classification",
        "message", "evidence", "duration_s", "attempts",
    }  # fmt: skip
    for check in data["checks"]:
        assert check_keys <= set(check)
        assert check["outcome"] in {"passed", "failed", "error", "skipped"}
    assert list(data["checks"][0])[:2] == ["nodeid", "suite"]
    for inc in data["incidents"]:
        assert set(inc) == {"id", "classification", "summary", "checks", "recommendation", "commands"}

    loaded = load_report(path)
    original = make_report()
    assert [c.nodeid for c in loaded.checks] == [c.nodeid for c in original.checks]
    assert loaded.incidents == original.incidents
    assert loaded.summary == original.summary
    assert loaded.inventory == original.inventory
    # everything but the redacted fields survives the round trip unchanged
    by_id = {c.nodeid: c for c in loaded.checks}
    for check in original.checks:
        if check.check != "runtime_key":
            assert by_id[check.nodeid] == check
    assert not list(path.parent.glob("*.tmp"))  # atomic write left no temporary file


# --- junit.xml -----------------------------------------------------------------------------------


def test_junit_xml_structure(written: dict[str, Path]) -> None:
    """One testsuite per suite; a failure's message carries classification, incident and next step."""
    root = ET.parse(written["junit.xml"]).getroot()
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"gate"}
    gate = suites["gate"]
    assert (gate.get("tests"), gate.get("failures"), gate.get("errors"), gate.get("skipped")) == (
        "12", "4", "4", "1"
    )  # fmt: skip
    assert float(gate.get("time", "0")) == pytest.approx(12 * 0.25)
    assert len(root.findall(".//failure")) == 8  # junit-10.xsd has no <error> inside a testcase
    assert not root.findall(".//error") and not root.findall(".//testcase/properties")
    # no suite-level evidence dump either: a testsuite's properties say which fleet was checked and the verdict
    [properties] = root.findall(".//properties")
    assert {p.get("name"): p.get("value") for p in properties} == {
        "sbxcheck.fleet": "simulated",
        "sbxcheck.inventory": "sim (embedded)",
        "sbxcheck.verdict": "failed",
    }
    assert len(root.findall(".//skipped")) == 1

    case = next(tc for tc in gate.findall("testcase") if tc.get("name") == "test_ssh[run-b]")
    assert case.get("classname") == "gate.ssh"
    assert float(case.get("time", "0")) == pytest.approx(0.25)
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("type") == "error/infra_unreachable"
    message = failure.get("message") or ""
    assert message.startswith("[infra_unreachable] ") and "connect refused" in message
    assert "(incident INC-" in message and "next step: check the host is up" in message
    out = case.find("system-out")
    assert out is not None and "host: 10.0.0.2" in (out.text or "") and '"port": 22' in (out.text or "")


@pytest.mark.parametrize(
    ("outcomes", "verdict"),
    [((Outcome.PASSED, Outcome.SKIPPED), "passed"), ((Outcome.PASSED, Outcome.ERROR), "error")],
)
def test_junit_names_the_verdict_of_every_run_in_every_suite(
    tmp_path: Path, redactor: Redactor, outcomes: tuple[Outcome, ...], verdict: str
) -> None:
    records = [rec(f"c{n}", "t", o, suite=suite) for n, o in enumerate(outcomes) for suite in ("gate", "canary")]
    url = "https://ci.example.com/job/42/artifacts/report.html"
    report = make_report(records).model_copy(update={"report_url": url})
    root = ET.parse(write_reports(report, tmp_path, redactor)["junit.xml"]).getroot()
    suites = root.findall("testsuite")
    assert len(suites) == 2
    for suite in suites:
        props = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert props["sbxcheck.verdict"] == verdict and props["sbxcheck.report_url"] == url


def test_junit_trims_long_evidence(tmp_path: Path, redactor: Redactor) -> None:
    record = rec("big", "t", Outcome.FAILED, evidence={"output": "x" * 10_000})
    paths = write_reports(make_report([record]), tmp_path, redactor)
    root = ET.parse(paths["junit.xml"]).getroot()
    out = root.find(".//system-out")
    assert out is not None and len(out.text or "") < 3000


# --- report.html ---------------------------------------------------------------------------------


def test_html_contains_every_nodeid_and_escapes(written: dict[str, Path]) -> None:
    page = written["report.html"].read_text(encoding="utf-8")
    for check in make_report().checks:
        assert check.nodeid in page
    assert page.count("<script>") == 1  # only the page's own filter script; check text is escaped
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "sim (embedded)" in page
    for inc in make_report().incidents:
        assert inc.id in page
    assert "<details>" in page
    assert page.count('<article class="item o-failed"') == 4


# --- redaction -----------------------------------------------------------------------------------


def test_no_secret_in_any_artifact(written: dict[str, Path]) -> None:
    for name, path in written.items():
        text = path.read_text(encoding="utf-8")
        assert REGISTERED_SECRET not in text, name
        assert OR_KEY not in text, name
        assert "sk-or-v1-0123" not in text, name
        assert MASK in text or MASK.replace("[", "&#x5B;") in text, name


def test_secret_in_incident_fields_is_redacted(tmp_path: Path, redactor: Redactor) -> None:
    records = [
        rec(n, "t", Outcome.FAILED, cause=f"leak {REGISTERED_SECRET}", recommendation=f"rotate {OR_KEY}")
        for n in ("a", "b")
    ]
    paths = write_reports(make_report(records), tmp_path, redactor)
    for path in paths.values():
        text = path.read_text(encoding="utf-8")
        assert REGISTERED_SECRET not in text and OR_KEY not in text


# --- load_report errors --------------------------------------------------------------------------


def _one_line_error(path: Path) -> str:
    with pytest.raises(BadResponseError) as info:
        load_report(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert info.value.__suppress_context__ or info.value.__cause__ is None
    return message


def test_load_report_invalid_field(written: dict[str, Path]) -> None:
    path = written["results.json"]
    data = json.loads(path.read_text(encoding="utf-8"))
    data["checks"][1]["outcome"] = "exploded"
    del data["started_at"]
    path.write_text(json.dumps(data), encoding="utf-8")
    message = _one_line_error(path)
    assert "checks[1].outcome" in message
    assert "started_at" in message
    assert len(message) < 600


def test_load_report_not_json_and_wrong_schema(tmp_path: Path) -> None:
    broken = tmp_path / "results.json"
    broken.write_text('{"schema": 1, "checks": [', encoding="utf-8")
    assert "not valid JSON" in _one_line_error(broken)
    broken.write_text("[]", encoding="utf-8")
    assert "top level" in _one_line_error(broken)
    broken.write_text('{"schema": 2}', encoding="utf-8")
    assert "'schema'" in _one_line_error(broken)
    assert "cannot read" in _one_line_error(tmp_path / "missing.json")


def test_report_package_reads_results_only() -> None:
    import sbxcheck.report  # noqa: F401

    forbidden = ("sbxcheck.plugin", "sbxcheck.transports", "sbxcheck.sim", "sbxcheck.clients")
    package_dir = Path(sys.modules["sbxcheck.report"].__file__ or "").parent
    source = "\n".join(p.read_text(encoding="utf-8") for p in package_dir.glob("*.py"))
    assert "import pytest" not in source
    for name in forbidden:
        assert name not in source


# --- a full or broken disk ---------------------------------------------------------------------


def test_a_disk_that_refuses_one_file_leaves_no_part_of_the_set(
    tmp_path: Path, redactor: Redactor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The set is all or nothing: a refused report.html takes results.json and junit.xml with it,
    an older results.json does not stand in for this run's, and the failure is returned, not raised."""
    import errno

    from sbxcheck.report import results_json, writers

    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"an older": "green run"}\n')
    real_stage = results_json.stage_text

    def full_disk(path: Path, text: str) -> str:
        if path.name == "report.html":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_stage(path, text)

    monkeypatch.setattr(writers, "stage_text", full_disk)
    written = writers.write_artifacts(make_report(), out, redactor)
    assert sorted(p.name for p in out.iterdir()) == []  # nothing left: no set, no temporary file
    assert set(written.missing) == {out / "results.json", out / "junit.xml", out / "report.html"}
    assert written.paths == {}
    problem = written.problem()
    assert "\n" not in problem and "No space left on device" in problem
    assert all(name in problem for name in ("results.json", "junit.xml", "report.html"))
    with pytest.raises(OSError, match=r"report\.html"):
        write_reports(make_report(), out, redactor)
