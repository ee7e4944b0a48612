"""Secret-safe workspace discovery by REST and by MCP (specs/sandboxed-sh.md, 8.11).

Every workspace record is secret-bearing. Each one is reduced **at the source** to ``id``,
``name``, ``status``, ``init_scripts``, ``skills`` and the env-var **names**, plus two facts about
the values that were dropped: whether any was present and which names held a credential-like one.
The raw record never leaves the helper that reduces it; helpers that touch raw data return
reduced data or a problem text and never raise, so no traceback (``pytest -l`` included) can
show a raw local.

What counts as an exposure differs per endpoint, by design of the real server:

* **REST** ``GET /api/workspaces`` is never scrubbed: values always come back. That is
  *expected by design* and reduced here; the item fails as ``security_exposure`` only when a
  value is credential-shaped (GitHub/OpenAI/Anthropic/Tailscale tokens, private keys, …), because
  the runbook asks that exactly such an exposure be reported to the security owner for rotation.
* **MCP** ``list_workspaces`` is scrubbed by the real server (every env value becomes
  ``[redacted]``), and its results go into agent prompts. Any unredacted value there means the
  scrub is missing: ``security_exposure``, whatever the value looks like.

Messages name the endpoint and the exposure class (counts, variable names); values appear nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from pydantic import ValidationError

from sbxcheck.checks.base import run_check
from sbxcheck.clients.mcp_auth import auth_refusal
from sbxcheck.clients.sandboxed import _validation_summary, excerpt
from sbxcheck.clients.sandboxed_models import Workspace
from sbxcheck.errors import BadResponseError, SbxError
from sbxcheck.results import CheckResult, Classification
from sbxcheck.safeio import loads_bounded
from sbxcheck.secrets import GENERIC

if TYPE_CHECKING:  # the MCP client (and the mcp SDK) load only when a session uses MCP
    from sbxcheck.clients.mcp import McpToolResult

REST_ENDPOINT: Final = "REST GET /api/workspaces"
MCP_ENDPOINT: Final = "MCP list_workspaces"
CHECK_REST: Final = "workspace_discovery_rest"
CHECK_MCP: Final = "workspace_discovery_mcp"
ROTATE: Final = (
    "report the endpoint and exposure class (never the value) to the security owner for rotation of the "
    "named variables; do not copy the output anywhere"
)


@dataclass(frozen=True)
class DiscoveredWorkspace:
    """A workspace as discovery keeps it: no value of any env var, ever."""

    id: str
    name: str
    status: str | None
    init_scripts: tuple[str, ...]
    skills: tuple[str, ...]
    env_var_names: tuple[str, ...]
    env_values_present: bool
    credential_like_names: tuple[str, ...]
    credential_classes: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_workspace(cls, ws: Workspace) -> DiscoveredWorkspace:
        return cls(
            id=ws.id,
            name=ws.name,
            status=ws.status,
            init_scripts=tuple(ws.init_scripts),
            skills=tuple(ws.skills),
            env_var_names=tuple(ws.env_var_names),
            env_values_present=ws.env_values_present,
            credential_like_names=tuple(ws.credential_like_env_names),
            credential_classes=tuple(sorted(ws.credential_classes.items())),
        )

    def summary(self) -> dict[str, Any]:
        """The six fields secret-safe discovery keeps (names, not values)."""
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "init_scripts": list(self.init_scripts),
            "skills": list(self.skills),
            "env_var_names": list(self.env_var_names),
        }


@dataclass(frozen=True)
class Discovery:
    """What one endpoint listed, reduced; counts and names describe what was dropped."""

    endpoint: str
    workspaces: tuple[DiscoveredWorkspace, ...]

    @property
    def with_values(self) -> list[DiscoveredWorkspace]:
        return [w for w in self.workspaces if w.env_values_present]

    @property
    def credential_like(self) -> dict[str, list[str]]:
        """Workspace name -> names of variables whose (dropped) value looked like a credential."""
        return {w.name: list(w.credential_like_names) for w in self.workspaces if w.credential_like_names}

    def evidence(self) -> dict[str, Any]:
        cred = self.credential_like
        return {
            "endpoint": self.endpoint,
            "workspaces": [w.summary() for w in self.workspaces],
            "workspace_count": len(self.workspaces),
            "env_values_returned": bool(self.with_values),
            "workspaces_with_env_values": sorted(w.name for w in self.with_values),
            "credential_like_names": cred,
            "credential_like_count": sum(len(v) for v in cred.values()),
            "credential_classes": {
                w.name: dict(w.credential_classes) for w in self.workspaces if w.credential_classes
            },
            "reduced_at_source": True,
        }


class WorkspaceLister(Protocol):
    """REST: :meth:`SandboxedClient.list_workspaces` (already reduced while parsing)."""

    def list_workspaces(self) -> list[Workspace]: ...


class McpCaller(Protocol):
    """MCP: :meth:`AssistantMcpClient.call` (raw text; reduced here before anything else reads it)."""

    def call(
        self, tool: str, arguments: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> McpToolResult: ...


# ---------------------------------------------------------------- reduction


def discover_rest(client: WorkspaceLister) -> Discovery:
    """``GET /api/workspaces``, reduced (the client's Workspace model drops values while parsing).

    A client error is re-raised detached from the client's frames, whose locals hold the raw body.
    """
    listed = _list_rest(client)
    if isinstance(listed, SbxError):
        raise listed
    return Discovery(REST_ENDPOINT, tuple(DiscoveredWorkspace.from_workspace(w) for w in listed))


def _list_rest(client: WorkspaceLister) -> list[Workspace] | SbxError:
    try:
        return client.list_workspaces()
    except SbxError as exc:
        # Drop the traceback and chained exceptions: their frames hold the raw, secret-bearing body.
        exc.__cause__ = exc.__context__ = None
        return exc.with_traceback(None)


def discover_mcp(client: McpCaller, *, timeout_s: float = 30.0) -> Discovery:
    """``list_workspaces`` over MCP, reduced; the raw result is handed straight to the reducer."""
    result = client.call("list_workspaces", {}, timeout_s=timeout_s)
    refused = auth_refusal(result)
    if refused is not None:
        raise refused
    reduced = _reduce_mcp_result(result)
    if isinstance(reduced, str):
        raise BadResponseError(f"{MCP_ENDPOINT}: {reduced}", evidence={"endpoint": MCP_ENDPOINT})
    return Discovery(MCP_ENDPOINT, reduced)


def _reduce_mcp_result(result: McpToolResult) -> tuple[DiscoveredWorkspace, ...] | str:
    """Reduced workspaces, or the reason there are none. Never raises and never returns raw data."""
    if result.is_error:
        how = f"code {result.error_code}" if result.error_code else "isError"
        return f"the tool failed ({how}): {excerpt(result.text)}"
    try:
        doc = loads_bounded(result.text)
    except ValueError:
        return f"the result is not JSON ({len(result.text)} characters; not shown: it may hold secrets)"
    items = doc.get("workspaces") if isinstance(doc, dict) else doc if isinstance(doc, list) else None
    if not isinstance(items, list):
        kind = f"an object with {len(doc)} key(s)" if isinstance(doc, dict) else type(doc).__name__
        return f'expected {{"workspaces": [...]}}, got {kind} (not shown: it may hold secrets)'
    out: list[DiscoveredWorkspace] = []
    for index, item in enumerate(items):
        try:
            out.append(DiscoveredWorkspace.from_workspace(Workspace.model_validate(item)))
        except ValidationError as exc:
            return f"workspace #{index} is not a workspace record ({_validation_summary(exc)})"
    return tuple(out)


# ---------------------------------------------------------------- checks


def check_discovery_rest(client: WorkspaceLister, *, target: str = "control-plane") -> CheckResult:
    """REST discovery: values are expected by design and dropped; credential-shaped ones fail."""

    def body() -> CheckResult:
        return _judge(CHECK_REST, target, discover_rest(client), strict=False)

    return run_check(CHECK_REST, target, body)


def check_discovery_mcp(
    client: McpCaller, *, target: str = "assistant-mcp", timeout_s: float = 30.0
) -> CheckResult:
    """MCP discovery: the server must scrub env values; any value that arrives fails."""

    def body() -> CheckResult:
        return _judge(CHECK_MCP, target, discover_mcp(client, timeout_s=timeout_s), strict=True)

    return run_check(CHECK_MCP, target, body)


def _judge(check: str, target: str, found: Discovery, *, strict: bool) -> CheckResult:
    ev = found.evidence()
    n = len(found.workspaces)
    if n == 0:
        return CheckResult.failed(
            check, target, f"{found.endpoint} listed no workspaces: nothing was discovered", ev
        )
    by_class: dict[str, list[str]] = {}
    for ws_name, per_ws in ev["credential_classes"].items():
        for var, cls in per_ws.items():
            by_class.setdefault(cls, []).append(f"{ws_name}.{var}")
    generic = sorted(by_class.pop(GENERIC, []))
    cred = sum(len(v) for v in by_class.values())  # recognised credential formats
    valued = len(found.with_values)
    cred_note = f"credential-like: {cred} name{'s' if cred != 1 else ''}" + (
        f" ({', '.join(sorted(by_class))})" if by_class else ""
    )
    ev["credential_like_formats"] = {cls: sorted(names) for cls, names in sorted(by_class.items())}
    ev["secret_named_values"] = generic
    if strict and valued:
        ev["exposure_class"] = "unscrubbed env values" + (" (credential-like)" if cred else "")
        return CheckResult.failed(
            check,
            target,
            f"{found.endpoint} returns env var values ({valued} of {n} workspaces; {cred_note}); the assistant "
            "MCP must scrub them because its results reach agent prompts. Values were dropped at the "
            "source and appear nowhere in this report",
            ev,
            Classification.SECURITY_EXPOSURE,
            cause=f"env-values-exposed:{found.endpoint}",
            recommendation=ROTATE,
        )
    if cred:
        ev["exposure_class"] = "credential-like env values"
        return CheckResult.failed(
            check,
            target,
            f"{found.endpoint} returns env var values ({cred_note}); values were dropped at the source and "
            "appear nowhere in this report",
            ev,
            Classification.SECURITY_EXPOSURE,
            cause=f"env-values-exposed:{found.endpoint}",
            recommendation=ROTATE,
        )
    if valued:
        ev["exposure_class"] = "expected-by-design, reduced at source"
        note = (
            f"; env values returned for {valued} workspace(s) (expected by design: REST is never "
            "scrubbed), none of a recognised credential format"
        )
        if generic:
            note += f"; {len(generic)} under secret-sounding names ({', '.join(generic[:6])}) dropped unread"
    else:
        ev["exposure_class"] = "none"
        note = "; no env values returned"
    return CheckResult.passed(
        check,
        target,
        f"{found.endpoint}: {n} workspace(s) reduced to id/name/status/init_scripts/skills/env names{note}",
        ev,
    )
