"""Secret-safe workspace discovery (§8.11) and the stored GitHub auth probe (§8.12).

Secret values are seeded at random; none may appear in a CheckResult (JSON), in an exception's
text, or in what ``pytest -l`` prints for a failing assertion or an escaping exception.
"""

from __future__ import annotations

import json
import secrets
import string
from typing import Any

import httpx
import pytest

from sbxcheck.checks.discovery import (
    MCP_ENDPOINT,
    check_discovery_mcp,
    check_discovery_rest,
    discover_mcp,
    discover_rest,
)
from sbxcheck.checks.github import check_github_auth, mcp_exec, probe_script, rest_exec
from sbxcheck.clients.mcp import McpToolResult
from sbxcheck.clients.sandboxed import SandboxedClient
from sbxcheck.clients.sandboxed_models import ExecResult
from sbxcheck.errors import BadResponseError, SbxError
from sbxcheck.results import CheckResult, Classification, Outcome

ALNUM = string.ascii_letters + string.digits
PLAIN = {
    "LEAN_CACHE_URL": f"sim-secret-{secrets.token_hex(12)}",
    "DEPLOY_PASSWORD": f"sim-secret-{secrets.token_hex(12)}",
}
CREDS = {
    "GH_TOKEN": "ghp_" + "".join(secrets.choice(ALNUM) for _ in range(36)),
    "ANTHROPIC_API_KEY": "sk-ant-api03-" + secrets.token_urlsafe(30),
}
SECRETS = [*PLAIN.values(), *CREDS.values()]


def workspaces(*, creds: bool, scrubbed: bool = False) -> list[dict[str, Any]]:
    env: dict[str, str] = {**PLAIN, **(CREDS if creds else {})}
    if scrubbed:
        env = {k: "[redacted]" for k in env}
    return [
        {
            "id": "00000000-0000-0000-0000-000000000000",
            "name": "host",
            "workspace_type": "host",
            "status": "ready",
            "env_vars": {},
            "skills": [],
            "init_scripts": [],
        },
        {
            "id": "3f0c8a52-6d0e-4d0b-9a57-1f0b7c1e2d33",
            "name": "verity",
            "workspace_type": "container",
            "status": "ready",
            "env_vars": env,
            "skills": ["lean-proofs"],
            "init_scripts": ["base", "uv-python", "github-cli"],
            "init_script": f"export X={SECRETS[0]}",
            "config": {"note": SECRETS[1]},
        },
    ]


def rest_client(payload: Any) -> SandboxedClient:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/workspaces"
        return httpx.Response(200, json=payload)

    return SandboxedClient(
        "http://cp.invalid", token="tok-" + "x" * 20, transport=httpx.MockTransport(handler)
    )


class FakeMcp:
    """Answers list_workspaces with pre-rendered text (as the assistant MCP would)."""

    def __init__(self, text: str, *, is_error: bool = False) -> None:
        self._text, self._is_error = text, is_error

    def call(
        self, tool: str, arguments: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> McpToolResult:
        assert tool == "list_workspaces" and timeout_s is not None
        return McpToolResult(is_error=self._is_error, text=self._text, tool=tool)


def mcp_of(payload: Any) -> FakeMcp:
    return FakeMcp(json.dumps(payload, indent=2))


def assert_clean(*texts: str) -> None:
    for text in texts:
        for value in SECRETS:
            assert value not in text


def dump(result: CheckResult) -> str:
    return result.model_dump_json() + repr(result) + str(result)


# ---------------------------------------------------------------- REST


def test_rest_values_are_expected_by_design_and_reduced() -> None:
    r = check_discovery_rest(rest_client(workspaces(creds=False)))
    assert r.outcome is Outcome.PASSED, r.message
    assert r.evidence["exposure_class"] == "expected-by-design, reduced at source"
    assert r.evidence["env_values_returned"] is True
    verity = r.evidence["workspaces"][1]
    assert verity == {
        "id": "3f0c8a52-6d0e-4d0b-9a57-1f0b7c1e2d33",
        "name": "verity",
        "status": "ready",
        "init_scripts": ["base", "uv-python", "github-cli"],
        "skills": ["lean-proofs"],
        "env_var_names": ["DEPLOY_PASSWORD", "LEAN_CACHE_URL"],
    }
    assert_clean(dump(r))


def test_rest_credential_like_values_are_a_security_exposure() -> None:
    r = check_discovery_rest(rest_client(workspaces(creds=True)))
    assert r.outcome is Outcome.FAILED
    assert r.classification is Classification.SECURITY_EXPOSURE
    assert r.message.startswith(
        "REST GET /api/workspaces returns env var values (credential-like: 2 names (anthropic-key, github-token))"
    )
    assert r.evidence["credential_like_names"] == {"verity": ["ANTHROPIC_API_KEY", "DEPLOY_PASSWORD", "GH_TOKEN"]}
    assert r.evidence["credential_classes"]["verity"]["DEPLOY_PASSWORD"] == "generic-secret"
    assert r.recommendation is not None and "rotation" in r.recommendation
    assert_clean(dump(r))


def broken_workspaces() -> list[dict[str, Any]]:
    """A list whose second record lacks ``name`` but carries every seeded value."""
    broken = workspaces(creds=True)
    del broken[1]["name"]
    return broken


MALFORMED = {
    "workspaces-not-a-list": lambda: json.dumps({"workspaces": {"verity": {"env_vars": PLAIN}}}),
    "secret-keys": lambda: json.dumps({SECRETS[0]: SECRETS[1]}),
    "not-json": lambda: "not json " + SECRETS[0],
    "record-without-name": lambda: json.dumps({"workspaces": [{"id": "x", "env_vars": {**PLAIN, **CREDS}}]}),
}


def test_rest_empty_list_fails_and_errors_carry_no_body() -> None:
    # Raw payloads are built inside calls, never held in this frame's locals (showlocals below).
    assert check_discovery_rest(rest_client([])).outcome is Outcome.FAILED
    r = check_discovery_rest(rest_client(broken_workspaces()))
    assert r.outcome is Outcome.ERROR and r.classification is Classification.BAD_RESPONSE
    assert_clean(dump(r))
    with pytest.raises(SbxError) as info:
        discover_rest(rest_client(broken_workspaces()))
    assert info.value.__context__ is None and info.value.__cause__ is None
    assert_clean(str(info.value), repr(info.value.evidence), str(info.getrepr(showlocals=True, style="long")))


# ---------------------------------------------------------------- MCP


def test_mcp_scrubbed_passes() -> None:
    r = check_discovery_mcp(mcp_of({"workspaces": workspaces(creds=True, scrubbed=True)}))
    assert r.outcome is Outcome.PASSED, r.message
    assert r.evidence["endpoint"] == MCP_ENDPOINT and r.evidence["env_values_returned"] is False
    assert r.evidence["workspaces"][1]["env_var_names"] == [
        "ANTHROPIC_API_KEY",
        "DEPLOY_PASSWORD",
        "GH_TOKEN",
        "LEAN_CACHE_URL",
    ]


@pytest.mark.parametrize("creds", [False, True])
def test_mcp_any_unscrubbed_value_is_a_security_exposure(creds: bool) -> None:
    r = check_discovery_mcp(mcp_of({"workspaces": workspaces(creds=creds)}))
    assert r.outcome is Outcome.FAILED and r.classification is Classification.SECURITY_EXPOSURE
    assert r.message.startswith(
        f"{MCP_ENDPOINT} returns env var values (1 of 2 workspaces; credential-like: "
    )
    assert r.cause == f"env-values-exposed:{MCP_ENDPOINT}"
    assert_clean(dump(r))


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_mcp_malformed_results_are_errors_without_values(kind: str) -> None:
    r = check_discovery_mcp(FakeMcp(MALFORMED[kind]()))
    assert r.outcome is Outcome.ERROR and r.classification is Classification.BAD_RESPONSE
    assert_clean(dump(r))
    with pytest.raises(BadResponseError) as info:
        discover_mcp(FakeMcp(MALFORMED[kind]()))
    assert_clean(str(info.value), str(info.getrepr(showlocals=True, style="long")))


def test_mcp_tool_error_is_an_error() -> None:
    r = check_discovery_mcp(FakeMcp("Workspace list failed (401): Invalid or expired token", is_error=True))
    assert r.outcome is Outcome.ERROR and "Invalid or expired token" in r.message


# ---------------------------------------------------------------- pytest -l


CHILD = """
import json
import pathlib

import httpx

from sbxcheck.checks.discovery import check_discovery_mcp, check_discovery_rest, discover_mcp, discover_rest
from sbxcheck.clients.mcp import McpToolResult
from sbxcheck.clients.sandboxed import SandboxedClient

PAYLOAD = pathlib.Path(__file__).with_name("payload.json")
BROKEN = pathlib.Path(__file__).with_name("broken.json")


def _handler(request):
    return httpx.Response(200, content=PAYLOAD.read_bytes(), headers={"content-type": "application/json"})


def _broken(request):
    return httpx.Response(200, content=BROKEN.read_bytes(), headers={"content-type": "application/json"})


class FakeMcp:
    def __init__(self, path):
        self.path = path

    def call(self, tool, arguments=None, *, timeout_s=None):
        text = json.dumps({"workspaces": json.loads(self.path.read_text())})
        return McpToolResult(is_error=False, text=text, data=json.loads(text), tool=tool)


def test_failing_assert_shows_reduced_data_only():
    client = SandboxedClient(
        "http://cp.invalid", token="child-token-0123456789", transport=httpx.MockTransport(_handler)
    )
    rest = check_discovery_rest(client)
    mcp = check_discovery_mcp(FakeMcp(PAYLOAD))
    found = discover_mcp(FakeMcp(PAYLOAD))
    assert rest.outcome == "passed" and mcp.outcome == "passed" and not found.with_values


def test_escaping_rest_error_shows_no_body():
    client = SandboxedClient(
        "http://cp.invalid", token="child-token-0123456789", transport=httpx.MockTransport(_broken)
    )
    discover_rest(client)


def test_escaping_mcp_error_shows_no_body():
    discover_mcp(FakeMcp(BROKEN))
"""


def test_pytest_showlocals_prints_no_value(pytester: pytest.Pytester) -> None:
    pytester.path.joinpath("payload.json").write_text(json.dumps(workspaces(creds=True)))
    pytester.path.joinpath("broken.json").write_text(json.dumps(broken_workspaces()))
    pytester.makepyfile(test_child=CHILD)
    # -vv: locals are printed in full (pprint), not cut at 240 characters
    result = pytester.runpytest("-l", "-vv", "--tb=long", "-p", "no:sbxcheck", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    out = result.stdout.str() + result.stderr.str()
    assert "client     = SandboxedClient(" in out  # -l did print locals
    assert "rest       = CheckResult(" in out
    assert "security_exposure" in out and "'GH_TOKEN'" in out  # full reprs: names shown, values not
    assert_clean(out)


# ---------------------------------------------------------------- GitHub probe (§8.12)


def gh_exec(stdout: str, *, exit_code: int = 0, timed_out: bool = False) -> tuple[list[str], Any]:
    sent: list[str] = []

    def run(command: str, timeout_s: float) -> ExecResult:
        sent.append(command)
        assert timeout_s > 0
        return ExecResult(exit_code, stdout, "", timed_out)

    return sent, run


def test_probe_script_discards_output_and_unsets_env_tokens() -> None:
    script = probe_script("acme/verity")
    assert script.count("env -u GH_TOKEN -u GITHUB_TOKEN") == 3
    assert script.count(">/dev/null 2>&1") >= 4
    assert "gh api user --jq .login" in script
    assert "gh repo view acme/verity --json nameWithOwner" in script
    assert "git ls-remote https://github.com/acme/verity.git HEAD" in script
    with pytest.raises(ValueError):
        probe_script("acme/verity; cat ~/.config/gh/hosts.yml")


def test_github_probe_all_ok_keeps_booleans_only() -> None:
    sent, run = gh_exec("SBX_GH=yes\nSBX_API=0\nSBX_REPO=0\nSBX_GIT=0\n")
    r = check_github_auth(run, workspace="verity", repo="acme/verity", via="rest")
    assert r.outcome is Outcome.PASSED
    assert "github_api_capability=ok; git_read_capability=ok" in r.message
    assert r.evidence["github_api_capability"] is True and r.evidence["repo_view"] is True
    assert r.evidence["git_read_capability"] is True and r.evidence["push_transport"] == "not proven"
    assert not any(k in r.evidence for k in ("stdout", "stderr", "login"))
    assert len(sent) == 1


def test_github_probe_failures() -> None:
    _, run = gh_exec("SBX_GH=no\nSBX_API=127\nSBX_REPO=127\nSBX_GIT=0\n")
    r = check_github_auth(run, workspace="verity", repo="acme/verity", via="mcp")
    assert (
        r.outcome is Outcome.FAILED
        and "github_api_capability=no" in r.message
        and "gh CLI not installed" in r.message
    )
    _, run = gh_exec("SBX_GH=yes\nSBX_API=0\n", exit_code=1)
    assert (
        check_github_auth(run, workspace="v", repo="a/b", via="rest").classification
        is Classification.BAD_RESPONSE
    )
    _, run = gh_exec("", exit_code=-1, timed_out=True)
    assert (
        check_github_auth(run, workspace="v", repo="a/b", via="rest").classification is Classification.TIMEOUT
    )


def test_github_probe_transports() -> None:
    class Rest:
        def workspace_exec(
            self, workspace_id: str, command: str, timeout_s: float = 60.0, *, cwd: str | None = None
        ) -> ExecResult:
            assert workspace_id == "ws-1" and "SBX_API" in command
            return ExecResult(0, "SBX_GH=yes\nSBX_API=0\nSBX_REPO=0\nSBX_GIT=0\n", "")

    class Mcp:
        def __init__(self, data: Any, is_error: bool = False) -> None:
            self.data, self.is_error = data, is_error

        def workspace_bash(
            self,
            command: str,
            *,
            workspace_id: str | None = None,
            cwd: str | None = None,
            timeout_secs: int | None = None,
        ) -> McpToolResult:
            assert workspace_id == "ws-1" and timeout_secs is not None
            return McpToolResult(self.is_error, json.dumps(self.data), self.data, "workspace_bash")

    assert (
        check_github_auth(rest_exec(Rest(), "ws-1"), workspace="w", repo="a/b", via="rest").outcome
        is Outcome.PASSED
    )
    ok = {
        "exit_code": 0,
        "stdout": "SBX_GH=yes\nSBX_API=0\nSBX_REPO=0\nSBX_GIT=0\n",
        "stderr": "",
        "timed_out": False,
    }
    assert (
        check_github_auth(mcp_exec(Mcp(ok), "ws-1"), workspace="w", repo="a/b", via="mcp").outcome
        is Outcome.PASSED
    )
    r = check_github_auth(
        mcp_exec(Mcp("Workspace exec failed (404): not found", True), "ws-1"),
        workspace="w",
        repo="a/b",
        via="mcp",
    )
    assert r.outcome is Outcome.ERROR and "workspace_bash" in r.message


# ---------------------------------------------------------------- values of any type


def wrapped(shape: str) -> list[dict[str, Any]]:
    """The credential-bearing workspaces with every value of another JSON type than a string."""
    listed = workspaces(creds=True)
    env: dict[str, Any] = {}
    for name, value in {**PLAIN, **CREDS}.items():
        env[name] = {
            "object": {"value": value, "source": "vault"},
            "list": [value],
            "nested": {"layers": [{"value": value}]},
        }[shape]
    listed[1]["env_vars"] = env
    return listed


@pytest.mark.parametrize("shape", ["object", "list", "nested"])
def test_secret_discovery_reads_values_of_any_type(shape: str) -> None:
    rest = check_discovery_rest(rest_client(wrapped(shape)))
    assert rest.outcome is Outcome.FAILED and rest.classification is Classification.SECURITY_EXPOSURE, rest.message
    assert rest.evidence["credential_like_names"]["verity"] == ["ANTHROPIC_API_KEY", "DEPLOY_PASSWORD", "GH_TOKEN"]
    mcp = check_discovery_mcp(mcp_of({"workspaces": wrapped(shape)}))
    assert mcp.outcome is Outcome.FAILED and mcp.classification is Classification.SECURITY_EXPOSURE, mcp.message
    assert_clean(dump(rest), dump(mcp))


def test_a_number_or_boolean_the_mcp_returns_is_an_unscrubbed_value() -> None:
    listed = workspaces(creds=False)
    listed[1]["env_vars"] = {"PORT": 8080, "DEBUG": True, "EMPTY": {}, "GONE": None, "HIDDEN": "[redacted]"}
    r = check_discovery_mcp(mcp_of({"workspaces": listed}))
    assert r.outcome is Outcome.FAILED and r.classification is Classification.SECURITY_EXPOSURE
    assert r.evidence["workspaces_with_env_values"] == ["verity"]
    listed[1]["env_vars"] = {"EMPTY": {}, "NONE": [], "GONE": None, "HIDDEN": {"v": "[redacted]"}}
    assert check_discovery_mcp(mcp_of({"workspaces": listed})).outcome is Outcome.PASSED
