"""Issue 20: ids from servers are data, and control characters never reach an output raw."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest
from support.schemas import validate_junit

from sbxcheck.clients.sandboxed import SandboxedClient
from sbxcheck.display import display_data, for_display, neutralise, xml_text
from sbxcheck.errors import BadResponseError
from sbxcheck.ids import check_id, path_segment
from sbxcheck.redact import MASK, Redactor
from sbxcheck.report.html import render_html
from sbxcheck.report.junit import render_junit_xml
from sbxcheck.report.results_json import assemble_report, report_dict
from sbxcheck.results import CheckRecord, Classification, InventoryInfo, Outcome

HOSTILE = "\x1b]52;c;aGk=\x07\x1b]0;t\x07\x1b[2J\rFORGED\x0bline\x0c\x01\x08\x1f\x7f\x85\u202e\ufffe\x00"
_RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
PATH_ID = "../../../admin/wipe-everything?confirm=yes#"
UUID = "5a84a887-56cc-41bc-aa9a-bc43ef6aa5f7"


def test_neutralise_shows_every_control_character_and_keeps_text() -> None:
    shown = neutralise(HOSTILE + "\tok\n")
    assert _RAW_CONTROL.search(shown) is None
    assert "^[]52;c;aGk=^G" in shown and "^MFORGED^Kline^L" in shown and "\\u202e" in shown
    assert shown.endswith("\tok\n")
    assert neutralise(shown) == shown  # idempotent


def test_redaction_comes_before_neutralising() -> None:
    secret = "s3cr3t-Value-99"
    redactor = Redactor([secret])
    # a control character next to a secret neither hides it from the redactor nor survives
    assert for_display(f"\x1b[31m{secret}\x1b[0m", redactor) == f"^[[31m{MASK}^[[0m"
    assert display_data({f"k\r{secret}": [f"\x07{secret}"]}, redactor) == {f"k^M{MASK}": [f"^G{MASK}"]}


def test_xml_text_leaves_no_character_xml_forbids() -> None:
    ET.fromstring(f"<a>{xml_text(HOSTILE)}</a>")  # well-formed


@pytest.mark.parametrize("bad", [PATH_ID, "..", "", f"{UUID}/cancel", f"{UUID}\n", None, 7])
def test_ids_of_the_wrong_shape_are_refused(bad: object) -> None:
    with pytest.raises(BadResponseError, match="field 'id' is not a canonical hyphenated UUID"):
        check_id(bad, field="id", source="POST /api/control/missions")


def test_a_valid_id_is_one_encoded_segment() -> None:
    assert path_segment(UUID) == UUID
    assert path_segment("dgx-spark", shape="name") == "dgx-spark"
    with pytest.raises(BadResponseError):
        path_segment("..", shape="name")
    assert check_id("a" * 64, shape="key_hash", field="key_hash", source="run record") == "a" * 64


def test_a_path_shaped_id_from_create_is_never_requested() -> None:
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path))
        if request.url.path == "/api/control/missions":
            return httpx.Response(200, json={"id": PATH_ID, "status": "pending"})
        return httpx.Response(404, text="not found")

    client = SandboxedClient("http://cp.test", token="t0ken-abcdef", transport=httpx.MockTransport(handler))
    with pytest.raises(BadResponseError, match="field 'id'"):
        client.create_mission(title="x", prompt="y")
    for call in (client.get_mission, client.cancel_mission, client.mission_events):
        with pytest.raises(BadResponseError, match="not a canonical hyphenated UUID"):
            call(PATH_ID)
    with pytest.raises(BadResponseError):
        client.workspace_exec("../../etc", "true")
    assert seen == [("POST", "/api/control/missions")]


def _hostile_report() -> object:
    check = CheckRecord(
        nodeid=f"canaries/test_routes.py::test_route[r{HOSTILE}]",
        suite="canary",
        check=f"route{HOSTILE}",
        target=f"t{HOSTILE}",
        outcome=Outcome.FAILED,
        classification=Classification.CHECK_FAILED,
        message=f"create refused: {HOSTILE}",
        evidence={"reason": HOSTILE, f"k{HOSTILE}": [HOSTILE]},
    )
    return assemble_report(
        [check],
        started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:00:01Z",
        inventory=InventoryInfo(source=f"inv{HOSTILE}", sim=True),
    )


def test_every_writer_shows_control_characters_visibly(tmp_path: Path) -> None:
    redactor = Redactor()
    document = report_dict(_hostile_report(), redactor)  # type: ignore[arg-type]
    xml = render_junit_xml(document, redactor)
    ET.fromstring(xml.encode("utf-8"))
    for text in (xml, render_html(document, redactor), str(document)):
        assert _RAW_CONTROL.search(text) is None
        assert "\x1b" not in text and "\u202e" not in text
    validate_junit(_write(tmp_path / "junit.xml", xml))  # last: without the schema it skips (fails in CI)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("toml", "fix"),
    [
        ('[sandboxed]\nurl = "http://admin:Hunter2-Passw0rd@cp.example:3000"\n', "password_env"),
        (
            '[sssf]\ncheckout = "."\nopenrouter_base_url = "https://u:Hunter2-Passw0rd@or.example/api/v1"\n',
            "provisioning_key_env",
        ),
    ],
)
def test_a_url_with_userinfo_is_refused_at_load_without_showing_it(tmp_path: Path, toml: str, fix: str) -> None:
    from sbxcheck.errors import InventoryError
    from sbxcheck.inventory import load_inventory

    path = tmp_path / "sbxcheck.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    message = str(info.value)
    assert "must not carry a user name or password" in message and fix in message
    assert "Hunter2" not in message and "\n" not in message


def test_a_redirect_is_named_with_its_host_only() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"location": "https://evil.example/elsewhere?token=abc123secret"})

    client = SandboxedClient("http://cp.test", token="t0ken-abcdef", transport=httpx.MockTransport(handler))
    with pytest.raises(BadResponseError) as info:
        client.health()
    message = str(info.value)
    assert "unexpected redirect 302 to host evil.example" in message and "not followed" in message
    assert "abc123secret" not in message and "not JSON" not in message


def test_a_workspace_held_by_another_session_is_could_not_tell_not_a_config_defect() -> None:
    from sbxcheck.checks.workspace import check_workspace_visible
    from sbxcheck.clients.missionruns import CanaryRun, RouteRun
    from sbxcheck.clients.sandboxed import MissionRejected
    from sbxcheck.inventory import RouteSpec, WorkspaceCanarySpec
    from sbxcheck.results import Classification, Outcome

    body = {
        "error": "workspace_occupied",
        "mission_id": UUID,
        "title": "sbxcheck 1b76e8e6 canary codex-verity",
        "message": f"Workspace verity already has a live mission {UUID}",
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json=body)

    client = SandboxedClient("http://cp.test", token="t0ken-abcdef", transport=httpx.MockTransport(handler))
    with pytest.raises(MissionRejected) as info:
        client.create_mission(title="sbxcheck 9f00aa11 canary codex-verity", prompt="p", workspace_id=UUID)
    spec = WorkspaceCanarySpec(backend="codex", workspace="verity", checkout="/work/verity")
    run = RouteRun(
        route=RouteSpec(backend="codex", workspace="verity"), title="t", idempotency_key="k", requested={}
    )
    run.rejection = info.value
    result = check_workspace_visible(CanaryRun(spec=spec, run=run))
    assert (result.outcome, result.classification) == (Outcome.ERROR, Classification.INFRASTRUCTURE)
    assert "busy with session 1b76e8e6's live mission" in result.message and UUID in result.message
    assert result.evidence["holder_session_tag"] == "1b76e8e6"


LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@pytest.mark.parametrize("brk", list(LINE_BREAKS))
def test_every_line_printed_from_outside_text_is_one_line(brk: str) -> None:
    """Whatever line break a server's text holds, a printed line stays one line (str.splitlines
    splits on each of these; a terminal starts a new line at some)."""
    from sbxcheck.display import SanitisingWriter, for_display_line
    from sbxcheck.doctor_findings import Finding

    forged = f"refused{brk}verdict: HEALTHY \u2014 every check passed{brk}PASSED forged"
    written: list[str] = []

    class Terminal:
        def write_line(self, line: str, **markup: bool) -> None:
            written.append(line)

    SanitisingWriter(Terminal()).write_line(f"cleanup: mission x: cancel failed: {forged}")
    for line in (for_display_line(forged), written[0], Finding(False, "control plane", forged).render()):
        assert len(line.splitlines()) == 1, repr(line)
        assert "verdict: HEALTHY" in line  # shown, on the line it came in


def test_a_check_failed_with_a_line_feed_in_its_message_fails_on_one_line() -> None:
    from sbxcheck.display import neutralise_exception

    class Info:
        value = BadResponseError("POST /api/control/missions: refused\nverdict: HEALTHY")

    neutralise_exception(Info())
    assert str(Info.value) == "POST /api/control/missions: refused^Jverdict: HEALTHY"
