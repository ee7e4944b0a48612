"""The one secret table: every class is masked by the redactor and named by discovery; never a value.

Values are generated at random for each run, in the shape of their class.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.secret_seeds import in_context, seeded_secrets

from sbxcheck.checks.base import trim
from sbxcheck.clients.sandboxed_models import Workspace
from sbxcheck.errors import InventoryError, SbxError
from sbxcheck.inventory import load_inventory
from sbxcheck.lifecycle.ledger import Ledger
from sbxcheck.redact import MASK, SHORTEST_SHAPE, RedactingFilter, Redactor, clip, redact_report
from sbxcheck.report.junit import trim_json
from sbxcheck.secrets import SECRET_CLASSES, classify, looks_like_env_name


@pytest.mark.parametrize("name", sorted(seeded_secrets()))
def test_every_class_is_masked_in_context(name: str) -> None:
    value = seeded_secrets()[name]
    text = in_context(name, value)
    redacted = Redactor().redact_text(text)
    assert value not in redacted and MASK in redacted
    assert Redactor().redact_text(redacted) == redacted  # idempotent


@pytest.mark.parametrize(
    ("var", "key", "expected"),
    [
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-key", "aws-secret-key"),
        ("AWS_ACCESS_KEY_ID", "aws-access-key-id", "aws-access-key-id"),
        ("AWS_SESSION_TOKEN", "aws-session-token", "aws-session-token"),
        ("GOOGLE_CLIENT_SECRET", "google-oauth-client-secret", "google-oauth-client-secret"),
        ("MAPS_KEY", "google-api-key", "google-api-key"),
        ("SLACK_BOT", "slack-token", "slack-token"),
        ("GH_TOKEN", "github-pat", "github-token"),
        ("OPENAI_API_KEY", "openai-key", "openai-key"),
        ("SIGNING", "jwt", "jwt"),
        ("DEPLOY_KEY", "private-key", "private-key"),
        ("SERVICE_PASSWORD", "generic-token", "generic-secret"),
    ],
)
def test_discovery_names_the_class_never_the_value(var: str, key: str, expected: str) -> None:
    value = seeded_secrets()[key]
    assert classify(value, var) == expected
    ws = Workspace.model_validate({"id": "w", "name": "verity", "env_vars": {var: value, "PLAIN": "hello"}})
    assert ws.credential_classes == {var: expected}
    dumped = ws.model_dump_json() + repr(ws)
    assert value not in dumped and var in dumped
    assert Redactor().redact_text(dumped) == dumped  # the class survives the report's redaction


@pytest.mark.parametrize(
    "text",
    [
        "HEAD 0123456789abcdef0123456789abcdef01234567 matches",  # a git SHA
        "key_hash=" + "ab" * 32,
        "idempotency_key: sbxcheck-3f2a-route-1",
        'password_env = "SBX_PASSWORD"',
        "ssh_key=/home/u/.ssh/id_ed25519",
        "tokens_used=12345",
        "src/components/Header/Button/index1.tsx",
        "ssh://git@github.com/org/repo.git",
        "a task-scheduler-with-a-long-hyphenated-name",
    ],
)
def test_ordinary_evidence_is_left_alone(text: str) -> None:
    assert Redactor().redact_text(text) == text


@pytest.mark.parametrize("name", ["openrouter-key", "aws-access-key-id", "github-token", "private-key"])
def test_a_key_cut_in_the_middle_leaves_no_recognisable_prefix(name: str) -> None:
    value = seeded_secrets()[name]
    text = "x" * 89 + " " + value + " tail"
    cut = 90 + len(value) // 2  # every trimmer cuts through the middle of the key
    for trimmed in (trim(text, cut), clip(text, cut), trim_json(text, cut)):
        assert value[:8] not in trimmed, trimmed


def test_exception_texts_and_evidence_are_redacted() -> None:
    key = seeded_secrets()["aws-access-key-id"]
    exc = SbxError(f"upload failed for {key}", evidence={"stderr": f"AccessDenied {key}"})
    assert key not in str(exc) and key not in repr(exc.evidence)


def test_log_records_are_redacted_for_every_handler(caplog: pytest.LogCaptureFixture) -> None:
    url = f"https://user:{seeded_secrets()['url-password']}@cp.example.com/api"
    jwt = seeded_secrets()["jwt"]
    caplog.handler.addFilter(RedactingFilter())
    log = logging.getLogger("sbxcheck.test")
    with caplog.at_level(logging.DEBUG):
        log.debug("HTTP Request: GET %s", url)
        try:
            raise RuntimeError(f"token {jwt}")
        except RuntimeError:
            log.exception("failed")
    assert "cp.example.com" in caplog.text
    assert url.split("@")[0].split(":")[-1] not in caplog.text and jwt not in caplog.text


def test_redact_report_masks_longrepr_and_sections() -> None:
    key = seeded_secrets()["anthropic-key"]
    report = SimpleNamespace(longrepr=f"E   locals: key = '{key}'", sections=[("Captured log call", key)])
    redact_report(report)
    assert key not in str(report.longrepr) and key not in report.sections[0][1]
    skipped = SimpleNamespace(longrepr=("f.py", 1, f"Skipped: {key}"), sections=[])
    redact_report(skipped)
    assert key not in skipped.longrepr[2]


def test_ledger_how_and_why_are_written_redacted(tmp_path: Path) -> None:
    key = seeded_secrets()["aws-access-key-id"]
    ledger = Ledger(tmp_path)
    released = ledger.record_intent("mount", "demo", run_id=None)
    ledger.mark_released(released, f"teardown said: bad credentials {key}")
    kept = ledger.record_intent("mission", "m1", run_id=None)
    ledger.mark_kept(kept, f"policy; stderr {key}")
    assert key not in ledger.path.read_text()


@pytest.mark.parametrize("field", ["password_env", "token_env"])
@pytest.mark.parametrize("secret", ["github-token", "aws-access-key-id", "generic-token", "openrouter-key"])
def test_a_secret_pasted_as_an_env_name_is_never_echoed(tmp_path: Path, field: str, secret: str) -> None:
    value = seeded_secrets()[secret]
    path = tmp_path / "sbxcheck.toml"
    path.write_text(f'[sandboxed]\nurl = "http://cp"\n{field} = "{value}"\n')
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert f"the value of {field} does not look like a variable name" in str(info.value)
    assert value not in str(info.value) and value[:6] not in str(info.value)


def test_env_names_still_load(tmp_path: Path) -> None:
    path = tmp_path / "sbxcheck.toml"
    roster = tmp_path / "adws" / "adw_sssf_config" / "sssf.config.yaml"  # paths are checked at load
    roster.parent.mkdir(parents=True)
    roster.write_text("models: []\n")
    path.write_text(
        '[sandboxed]\nurl = "http://cp"\npassword_env = "SANDBOXED_PASSWORD"\n'
        '[sssf]\ncheckout = "."\nprovisioning_key_env = "OPENROUTER_PROVISIONING_KEY"\n'
    )
    inv = load_inventory(path)
    assert inv.sandboxed is not None and inv.sandboxed.password_env == "SANDBOXED_PASSWORD"
    assert looks_like_env_name("my_token_var") and not looks_like_env_name(seeded_secrets()["generic-token"])


def test_duplicate_route_and_canary_names_are_rejected_at_load(tmp_path: Path) -> None:
    path = tmp_path / "sbxcheck.toml"
    path.write_text(
        '[sandboxed]\nurl = "http://cp"\n'
        '[[sandboxed.routes]]\nname = "fast"\nbackend = "claudecode"\n'
        '[[sandboxed.routes]]\nname = "fast"\nbackend = "opencode"\nvia = "mcp"\n'
        '[[sandboxed.canaries]]\nbackend = "opencode"\nworkspace = "verity"\ncheckout = "/w"\n'
        '[[sandboxed.canaries]]\nbackend = "opencode"\nworkspace = "verity"\ncheckout = "/x"\n'
    )
    with pytest.raises(
        InventoryError,
        match=r"duplicate route name\(s\) 'fast'.*duplicate canary name\(s\) 'opencode-verity'",
    ):
        load_inventory(path)


def test_url_userinfo_is_never_echoed_by_the_http_clients() -> None:
    import httpx

    from sbxcheck.clients.sandboxed import SandboxedClient

    password = seeded_secrets()["url-password"]

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = SandboxedClient(
        f"http://ops:{password}@cp.invalid", transport=httpx.MockTransport(refuse), retries=0
    )
    with pytest.raises(SbxError) as info:
        client.health()
    assert "cp.invalid" in info.value.message
    assert password not in info.value.message + repr(info.value.evidence)


def test_retry_after_as_an_http_date_is_bounded() -> None:
    import email.utils
    import time

    import httpx

    from sbxcheck.transports.http import RetryPolicy

    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    policy = RetryPolicy(max_wait_s=2.0)
    assert policy.wait_s(0, httpx.Response(503, headers={"retry-after": later})) == 2.0
    assert policy.wait_s(1, httpx.Response(503, headers={"retry-after": "0.25"})) == 0.25
    assert policy.wait_s(1, httpx.Response(503)) == 0.5


def test_a_numeric_value_in_an_env_field_is_not_printed_either(tmp_path: Path) -> None:
    path = tmp_path / "sbxcheck.toml"
    path.write_text('[sandboxed]\nurl = "http://cp"\ntoken_env = 73919461\n')
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert "token_env" in info.value.message and "73919461" not in info.value.message


# ---- the redactor's shortcuts never skip a secret


_SHAPE_ALPHABET = "aAkK:/@=-_.eyJsKEYtokenSECRET0123456789 \"'"


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=_SHAPE_ALPHABET, max_size=SHORTEST_SHAPE - 1))
def test_no_class_matches_text_shorter_than_the_shortest_shape(text: str) -> None:
    assert not [c.name for c in SECRET_CLASSES if any(c.matches(text))]


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=_SHAPE_ALPHABET + "sk-or-v1ghp_xoxb", min_size=0, max_size=80))
def test_every_hint_is_true_where_its_class_matches(text: str) -> None:
    for cls in SECRET_CLASSES:
        if cls.hint is not None and any(cls.pattern.finditer(text)):
            assert cls.hint(text), (cls.name, text)


def test_a_remembered_redaction_is_forgotten_when_a_secret_is_registered() -> None:
    r = Redactor()
    text = "the pass is hunter2hunter2 today"
    assert r.redact_text(text) == text  # remembered as clean
    r.register("hunter2hunter2")
    assert r.redact_text(text) == "the pass is [REDACTED] today"
    r.register("hunter2")  # a shorter secret inside a longer one: the longer is masked whole
    assert r.redact_text("hunter2hunter2 and hunter2") == "[REDACTED] and [REDACTED]"
