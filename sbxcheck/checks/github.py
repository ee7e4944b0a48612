"""Stored GitHub auth probe inside a workspace (specs/sandboxed-sh.md, 8.12).

A workspace without ``GH_TOKEN``/``GITHUB_TOKEN`` may still hold stored gh and git credentials.
The probe runs three commands in the workspace with the env tokens unset, sends all of their
output to ``/dev/null`` and prints only their exit statuses; the evidence keeps booleans only.
Never a login, token, credential-bearing remote or git config. It proves API and read transport,
not push, and it does not waive a policy that requires a named env secret.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from sbxcheck.checks.base import run_check
from sbxcheck.clients.mcp_auth import auth_refusal
from sbxcheck.clients.sandboxed import excerpt
from sbxcheck.clients.sandboxed_models import ExecResult
from sbxcheck.errors import BadResponseError
from sbxcheck.inventory import GITHUB_HOST_RE, credential_free_remote
from sbxcheck.results import CheckResult, Classification

if TYPE_CHECKING:  # the MCP client (and the mcp SDK) load only when a session uses MCP
    from sbxcheck.clients.mcp import McpToolResult

CHECK: Final = "github_stored_auth"
_REPO_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+$")
_MARK_RE: Final = re.compile(r"^SBX_(GH|API|REPO|GIT)=(\S+)$")
_PER_COMMAND_S: Final = 30
NOT_PROVEN: Final = (
    "push transport is not proven: re-check it immediately before a guarded, non-force push; stored "
    "credentials do not waive a policy that requires a named env secret"
)

#: Runs ``command`` in the workspace with a deadline and returns what ``/exec`` returns.
WorkspaceExec = Callable[[str, float], ExecResult]


DEFAULT_HOST: Final = "github.com"
_TOKEN_ENVS: Final = ("GH_TOKEN", "GITHUB_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN")


def remote_for(repo: str, host: str = DEFAULT_HOST, remote_url: str | None = None) -> str:
    """The git remote the probe reads: ``remote_url`` (a mirror) or ``https://<host>/<repo>.git``.

    ValueError for a host that is not a host name, or a URL that is not https/ssh or carries a user
    name or token (a credential-bearing remote never goes into a command).
    """
    if not GITHUB_HOST_RE.match(host):
        raise ValueError(f"host must be a host name (optionally :port), got {host!r}")
    if remote_url is None:
        return f"https://{host}/{repo}.git"
    if not credential_free_remote(remote_url):
        raise ValueError(
            "remote_url must be an https:// URL with no user info, or an ssh:// URL without a password"
        )
    return remote_url


def probe_script(
    repo: str,
    per_command_s: int = _PER_COMMAND_S,
    *,
    host: str = DEFAULT_HOST,
    remote_url: str | None = None,
) -> str:
    """The probe: three commands, output discarded, one ``SBX_<NAME>=<exit>`` line each.

    ``host`` is the GitHub host (GitHub Enterprise: its host name; ``gh`` gets it as ``GH_HOST``);
    ``remote_url`` overrides the git remote read by ``git ls-remote`` (a mirror).
    """
    if not _REPO_RE.match(repo):
        raise ValueError(f"repo must be <owner>/<name>, got {repo!r}")
    q = shlex.quote(repo)
    url = shlex.quote(remote_for(repo, host, remote_url))
    unset = " ".join(f"-u {name}" for name in _TOKEN_ENVS)
    gh_host = f" GH_HOST={shlex.quote(host)}" if host != DEFAULT_HOST else ""
    t = f"timeout {int(per_command_s)} env {unset}{gh_host} GIT_TERMINAL_PROMPT=0 GH_PROMPT_DISABLED=1"
    return (
        "if command -v gh >/dev/null 2>&1; then echo SBX_GH=yes; else echo SBX_GH=no; fi; "
        f"{t} gh api user --jq .login >/dev/null 2>&1; echo SBX_API=$?; "
        f"{t} gh repo view {q} --json nameWithOwner >/dev/null 2>&1; echo SBX_REPO=$?; "
        f"{t} git ls-remote {url} HEAD >/dev/null 2>&1; echo SBX_GIT=$?"
    )


def check_github_auth(
    run: WorkspaceExec,
    *,
    workspace: str,
    repo: str,
    via: str,
    timeout_s: float = 120.0,
    host: str = DEFAULT_HOST,
    remote_url: str | None = None,
) -> CheckResult:
    """API, repo view and git read work from ``workspace`` with stored credentials only (booleans)."""
    target = f"{workspace}:{repo}"

    def body() -> CheckResult:
        res = run(probe_script(repo, host=host, remote_url=remote_url), timeout_s)
        marks: dict[str, str] = {}
        for line in res.stdout.splitlines():
            m = _MARK_RE.match(line.strip())
            if m:
                marks[m.group(1)] = m.group(2)
        ev: dict[str, Any] = {
            "workspace": workspace,
            "repo": repo,
            "host": host,
            "remote": remote_for(repo, host, remote_url),
            "via": via,
            "ran": f"env -u {' -u '.join(_TOKEN_ENVS)}: gh api user; gh repo view; git ls-remote HEAD "
            "(all output to /dev/null)",
            "exec_exit_code": res.exit_code,
            "timed_out": res.timed_out,
        }
        if res.timed_out or set(marks) != {"GH", "API", "REPO", "GIT"}:
            ev["markers_seen"] = sorted(marks)
            return CheckResult.errored(
                CHECK,
                target,
                f"the probe in {workspace} did not finish"
                + (" (timed out)" if res.timed_out else f" (exit {res.exit_code}; markers {sorted(marks)})"),
                Classification.TIMEOUT if res.timed_out else Classification.BAD_RESPONSE,
                ev,
            )
        ev.update(
            gh_cli_present=marks["GH"] == "yes",
            github_api_capability=marks["API"] == "0",
            repo_view=marks["REPO"] == "0",
            git_read_capability=marks["GIT"] == "0",
            push_transport="not proven",
        )
        caps = ("github_api_capability", "repo_view", "git_read_capability")
        line = "; ".join(f"{c}={'ok' if ev[c] else 'no'}" for c in caps)
        if all(ev[c] for c in caps):
            return CheckResult.passed(
                CHECK, target, f"{workspace}: github_api_capability=ok; git_read_capability=ok ({repo})", ev
            )
        why = "" if ev["gh_cli_present"] else " (gh CLI not installed)"
        return CheckResult.failed(
            CHECK,
            target,
            f"{workspace}: stored GitHub auth incomplete for {repo}: {line}{why}",
            ev,
            recommendation="record the auth blocker with these booleans only; never print or copy stored "
            f"credentials, and never invent a secret name. {NOT_PROVEN}",
        )

    return run_check(CHECK, target, body)


# ---------------------------------------------------------------- transports


class _RestExec(Protocol):
    def workspace_exec(
        self, workspace_id: str, command: str, timeout_s: float = 60.0, *, cwd: str | None = None
    ) -> ExecResult: ...


class _McpBash(Protocol):
    def workspace_bash(
        self,
        command: str,
        *,
        workspace_id: str | None = None,
        cwd: str | None = None,
        timeout_secs: int | None = None,
    ) -> McpToolResult: ...


def rest_exec(client: _RestExec, workspace_id: str) -> WorkspaceExec:
    """Run through ``POST /api/workspaces/:id/exec`` (the client bounds the HTTP wait)."""
    return lambda command, timeout_s: client.workspace_exec(workspace_id, command, timeout_s)


def mcp_exec(client: _McpBash, workspace_id: str) -> WorkspaceExec:
    """Run through the assistant MCP's ``workspace_bash`` (the client bounds the call)."""

    def run(command: str, timeout_s: float) -> ExecResult:
        result = client.workspace_bash(
            command, workspace_id=workspace_id, timeout_secs=max(1, round(timeout_s))
        )
        data = result.data if isinstance(result.data, dict) else {}
        refused = auth_refusal(result)
        if refused is not None:
            raise refused
        if result.is_error or not isinstance(data.get("exit_code"), int):
            reason = excerpt(result.text)
            raise BadResponseError(
                f"MCP workspace_bash in {workspace_id} failed: {reason or 'no exit_code in the result'}",
                evidence={"tool": result.tool, "error_code": result.error_code},
            )
        return ExecResult(
            exit_code=data["exit_code"],
            stdout=str(data.get("stdout") or ""),
            stderr=str(data.get("stderr") or ""),
            timed_out=bool(data.get("timed_out")),
        )

    return run
