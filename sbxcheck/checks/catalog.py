"""Workspace and catalog readiness: the seed's rules for picking a workspace, an agent and a model.

Read once per session (:func:`read_catalog`), judged per workspace and per route:

* :func:`check_workspace_ready` — status ``ready`` (``pending``/``building`` may take minutes,
  ``error`` carries ``error_message``), and the init scripts, MCPs, skills and env-var *names* the
  inventory expects for it are present (values are never read: the client reduces at the source).
* :func:`check_catalog` — the route's backend is registered (``/backends``), its agent is
  registered (``/library/agent`` or the backend's own) and its provider was not removed (the
  inventory's ``removed_providers``): each a failure. Whether its model id is an exact catalog id
  of a provider whose ``use_for_backends`` includes the route's backend is sbxcheck's own reading
  of the catalog, and backends expand aliases and rewrite ids: a miss is a warning naming the
  near ids (``opus-4.8`` → ``claude-opus-4-8``), never a failure; the server's 400 decides.

:func:`route_preflight` combines both for the dispatcher: a route that fails here (on what the
server or the inventory declared) is not dispatched, so no money is burned on a doomed mission.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from sbxcheck.checks.base import run_check
from sbxcheck.clients.sandboxed_models import NIL_UUID, AiProvider, BackendInfo, CatalogProvider, Workspace
from sbxcheck.errors import SbxError
from sbxcheck.inventory import RouteSpec, WorkspaceExpectation
from sbxcheck.results import CheckResult, Classification, Outcome

CHECK_WORKSPACE: Final = "workspace_ready"
CHECK_CATALOG: Final = "catalog"
NATIVE_AGENT_BACKENDS: Final = frozenset({"codex", "claudecode", "gemini", "grok"})
#: Backends whose create skips agent validation (they bring their own agents): an agent the library lacks
#: does not keep the route back, the server decides (v0.7.0 src/api/control.rs:1360-1365: claudecode, amp,
#: codex; 1.3.0 src/api/control/mod.rs:4652-4657: claudecode, codex, gemini, grok).
UNVALIDATED_AGENT_BACKENDS: Final = NATIVE_AGENT_BACKENDS | {"amp"}
_NORM_RE: Final = re.compile(r"[^a-z0-9]")


class CatalogApi(Protocol):
    """The REST reads of :class:`~sbxcheck.clients.sandboxed.SandboxedClient` this module uses."""

    def list_workspaces(self) -> list[Workspace]: ...

    def library_agents(self) -> list[str]: ...

    def backends(self) -> list[BackendInfo]: ...

    def backend_agents(self, backend: str) -> list[str]: ...

    def ai_providers(self) -> list[AiProvider]: ...

    def provider_catalog(self) -> list[CatalogProvider]: ...


@dataclass
class CatalogSnapshot:
    """What the control plane said about workspaces, agents, backends and models, once per session.

    Each part is its answer or the error that stopped it (a part that could not be read makes
    the items that need it ``error``, never a pass).
    """

    workspaces: list[Workspace] | SbxError
    library_agents: list[str] | SbxError
    backends: list[str] | SbxError
    providers: list[AiProvider] | SbxError
    catalog: list[CatalogProvider] | SbxError
    backend_agents: Callable[[str], list[str] | SbxError] = field(repr=False, default=lambda b: [])


def _try(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except SbxError as exc:
        exc.__cause__ = exc.__context__ = None
        return exc.with_traceback(None)


def read_catalog(client: CatalogApi) -> CatalogSnapshot:
    """Read every part now (each bounded by the client's timeout); per-backend agents lazily, once each."""
    cache: dict[str, list[str] | SbxError] = {}

    def backend_agents(backend: str) -> list[str] | SbxError:
        if backend not in cache:
            cache[backend] = _try(lambda: client.backend_agents(backend))
        return cache[backend]

    backends = _try(client.backends)
    return CatalogSnapshot(
        workspaces=_try(client.list_workspaces),
        library_agents=_try(client.library_agents),
        backends=backends if isinstance(backends, SbxError) else [b.id for b in backends],
        providers=_try(client.ai_providers),
        catalog=_try(client.provider_catalog),
        backend_agents=backend_agents,
    )


def _need(part: Any) -> Any:
    if isinstance(part, SbxError):
        raise part
    return part


# ------------------------------------------------------------------ workspaces


def find_workspace(workspaces: Sequence[Workspace], name_or_id: str) -> Workspace | None:
    """The workspace called (or with id) ``name_or_id``; ``host`` is the nil-UUID workspace."""
    for ws in workspaces:
        if name_or_id in (ws.name, ws.id):
            return ws
    return None


def check_workspace_ready(
    snapshot: CatalogSnapshot, name: str, expected: WorkspaceExpectation | None = None
) -> CheckResult:
    """One workspace: listed, ``ready``, and carrying what the inventory expects (names only)."""

    def body() -> CheckResult:
        workspaces: list[Workspace] = _need(snapshot.workspaces)
        ws = find_workspace(workspaces, name)
        listed = sorted(w.name for w in workspaces)
        if ws is None:
            return CheckResult.failed(
                CHECK_WORKSPACE,
                name,
                f"workspace {name!r} is not listed by GET /api/workspaces (listed: {', '.join(listed) or 'none'})",
                {"listed": listed},
                Classification.CONFIG_DEFECT,
                cause=f"workspace-missing:{name}",
                recommendation="create the workspace, or correct the name in the inventory; nothing was "
                "dispatched to it",
            )
        evidence: dict[str, Any] = {
            "endpoint": "GET /api/workspaces",
            "id": ws.id,
            "status": ws.status,
            "init_scripts": ws.init_scripts,
            "mcps": ws.mcps,
            "skills": ws.skills,
            "env_var_names": ws.env_var_names,
        }
        if ws.error_message:
            evidence["error_message"] = ws.error_message
        if ws.status != "ready":
            what = {
                "pending": "the container has not started yet and may take minutes",
                "building": "the container is still building",
                "error": f"the build failed: {ws.error_message or 'no error_message'}",
            }.get(str(ws.status), "a status the runbook does not dispatch to")
            return CheckResult.failed(
                CHECK_WORKSPACE,
                name,
                f"workspace {name} is {ws.status!r}, not ready: {what}",
                evidence,
                Classification.INFRASTRUCTURE,
                cause=f"workspace-not-ready:{name}",
                recommendation=(
                    f"wait for {name} to become ready (GET /api/workspaces/{ws.id}); if it stays "
                    f"{ws.status}, read GET /api/workspaces/{ws.id}/init-log; missions for it were not dispatched"
                ),
            )
        missing: dict[str, list[str]] = {}
        if expected is not None:
            for what, want, have in (
                ("init_scripts", expected.init_scripts, ws.init_scripts),
                ("mcps", expected.mcps, ws.mcps),
                ("skills", expected.skills, ws.skills),
                ("env_names", expected.env_names, ws.env_var_names),
            ):
                gone = [x for x in want if x not in have]
                if gone:
                    missing[what] = gone
            evidence["expected"] = expected.model_dump(exclude={"name"})
        if missing:
            evidence["missing"] = missing
            parts = "; ".join(f"{k.replace('_', ' ')}: {', '.join(v)}" for k, v in missing.items())
            return CheckResult.failed(
                CHECK_WORKSPACE,
                name,
                f"workspace {name} is ready but lacks what the inventory expects — {parts}",
                evidence,
                Classification.CONFIG_DEFECT,
                recommendation=(
                    f"add the missing items to {name} (update_workspace init_scripts/mcps, then rebuild "
                    "deliberately), or correct [[sandboxed.workspaces]]; tasks needing them will not work there"
                ),
            )
        if expected is None:
            checked = "status ready; the inventory expects nothing more of it"
        else:
            n = sum(
                len(v) for v in (expected.init_scripts, expected.mcps, expected.skills, expected.env_names)
            )
            checked = f"status ready; the {n} expected init scripts, MCPs, skills and env names present"
        return CheckResult.passed(CHECK_WORKSPACE, name, f"workspace {name}: {checked}", evidence)

    return run_check(CHECK_WORKSPACE, name, body)


# ------------------------------------------------------------------ catalog


def _norm(text: str) -> str:
    return _NORM_RE.sub("", text.lower())


def near_misses(wanted: str, valid: Sequence[str], limit: int = 3) -> list[str]:
    """Catalog ids a mistyped ``wanted`` probably meant (``opus-4.8`` → ``claude-opus-4-8``)."""
    key = _norm(wanted)
    by_norm = {_norm(v): v for v in valid}
    out = [v for n, v in by_norm.items() if key and (key in n or n in key)]
    out += [by_norm[n] for n in difflib.get_close_matches(key, list(by_norm), n=limit, cutoff=0.6)]
    seen: list[str] = []
    for v in out:
        if v not in seen:
            seen.append(v)
    return seen[:limit]


def _split_model(model: str) -> tuple[str | None, str]:
    prefix, sep, rest = model.partition("/")
    return (prefix, rest) if sep and rest else (None, model)


def check_catalog(
    snapshot: CatalogSnapshot, route: RouteSpec, *, removed_providers: Sequence[str] = ()
) -> CheckResult:
    """One route: backend registered, agent registered, provider not removed (else failed); its model
    an exact reachable catalog id (else a warning: the route is dispatched, the server decides)."""
    target = route.label

    def fail(message: str, evidence: dict[str, Any], cause: str, step: str) -> CheckResult:
        return CheckResult.failed(
            CHECK_CATALOG,
            target,
            message,
            evidence,
            Classification.CONFIG_DEFECT,
            cause=f"catalog:{cause}",
            recommendation=step + "; the route was not dispatched (no mission, no spend)",
        )

    def warn(message: str, evidence: dict[str, Any], step: str) -> CheckResult:
        """What only sbxcheck's reading of the catalog says: a warning, never a reason not to
        dispatch (backends expand aliases and rewrite ids; the server's own 400 decides)."""
        evidence["warning"] = message
        return CheckResult(
            check=CHECK_CATALOG,
            target=target,
            outcome=Outcome.PASSED,
            message=f"backend {route.backend} and agent {route.agent or '(default)'} registered; WARNING: "
            f"{message} — dispatched anyway: the server decides (a model it refuses fails the route "
            "with its valid ids)",
            evidence=evidence,
            recommendation=step,
        )

    def body() -> CheckResult:
        evidence: dict[str, Any] = {
            "backend": route.backend,
            "agent": route.agent,
            "model_override": route.model_override,
        }
        removed = {p.lower() for p in removed_providers}
        prefix, bare = _split_model(route.model_override or "")
        if prefix is not None and prefix.lower() in removed:
            return fail(
                f"model {route.model_override!r} names provider {prefix!r}, which was removed from the "
                "catalog (inventory removed_providers)",
                evidence,
                f"removed-provider:{prefix.lower()}",
                f"route {target} to a current provider (e.g. claude-fable-5-1 via claudecode, never "
                f"opencode + {prefix})",
            )
        backends: list[str] = _need(snapshot.backends)
        evidence["registered_backends"] = backends
        if route.backend not in backends:
            return fail(
                f"backend {route.backend!r} is not registered (GET /api/backends: {', '.join(backends) or 'none'})",
                evidence,
                f"backend:{route.backend}",
                "enable the backend on the control plane, or drop the route from the inventory",
            )
        if route.agent:
            library: list[str] = _need(snapshot.library_agents)
            own = snapshot.backend_agents(route.backend)
            own_ids = [] if isinstance(own, SbxError) else own
            registered = sorted(set(library) | set(own_ids))
            evidence["registered_agents"] = registered
            native = route.agent == route.backend and route.backend in NATIVE_AGENT_BACKENDS
            if route.agent not in registered and not native and route.backend in UNVALIDATED_AGENT_BACKENDS:
                return warn(
                    f"agent {route.agent!r} is not registered (registered: {', '.join(registered) or 'none'}), "
                    f"but the control plane's create skips agent validation for {route.backend}",
                    evidence,
                    f"register {route.agent!r} or drop it from {target} if {route.backend} should not see it",
                )
            if route.agent not in registered and not native:
                return fail(
                    f"agent {route.agent!r} is not registered on this deployment "
                    f"(registered: {', '.join(registered) or 'none'}; never assumed)",
                    evidence,
                    f"agent:{route.agent}",
                    f"pick a registered agent for {target} (build and plan are the universal ones) or "
                    "register it in the library",
                )
        if not route.model_override:
            evidence["model"] = "not requested (the backend's default applies)"
            return CheckResult.passed(
                CHECK_CATALOG,
                target,
                f"backend {route.backend} and agent {route.agent or '(default)'} registered; no model requested",
                evidence,
            )
        providers: list[AiProvider] = _need(snapshot.providers)
        catalog: list[CatalogProvider] = _need(snapshot.catalog)
        reach = {p.provider_type: p for p in providers if p.enabled}
        evidence["providers"] = {p.provider_type: p.use_for_backends for p in providers}
        # where the exact id lives: the prefix's provider, else any provider's models
        homes = [
            c.id
            for c in catalog
            if (prefix is None or c.id == prefix)
            and any(m.id in (bare, route.model_override) for m in c.models)
        ]
        catalog_ids = sorted({m.id for c in catalog for m in c.models})
        if prefix is not None and not any(c.id == prefix for c in catalog):
            return warn(
                f"model {route.model_override!r} names provider {prefix!r}, which is not in the catalog "
                f"(providers: {', '.join(sorted(c.id for c in catalog)) or 'none'}) — removed?",
                evidence,
                f"if the create is refused, route {target} to a provider the catalog lists",
            )
        if not homes:
            close = near_misses(bare, catalog_ids)
            evidence["near_misses"] = close
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            return warn(
                f"model {route.model_override!r} is not an exact catalog id{hint} (an alias the backend "
                "expands is not listed)",
                evidence,
                "if the create is refused, copy an exact id from its valid list into the inventory",
            )
        reachable = [h for h in homes if h in reach and route.backend in reach[h].use_for_backends]
        evidence["model_providers"] = homes
        if not reachable:
            served = {h: reach[h].use_for_backends if h in reach else [] for h in homes}
            via = sorted({b for bs in served.values() for b in bs})
            return warn(
                f"model {route.model_override!r} is served by {', '.join(homes)}, which "
                + (f"lists only {', '.join(via)}" if via else "is not configured or not enabled")
                + f": backend {route.backend} may not reach it",
                evidence,
                f"if the mission fails, use backend {via[0]} for this model"
                if via
                else "if the mission fails, configure the provider (GET /api/ai/providers)",
            )
        status = reach[reachable[0]].status or {}
        evidence["provider_status"] = status.get("type")
        message = (
            f"backend {route.backend}, agent {route.agent or '(default)'} registered; model "
            f"{route.model_override} in the {reachable[0]} catalog, reachable via {route.backend}"
        )
        if status.get("type") in ("needs_auth", "error"):
            message += f"; WARNING: provider {reachable[0]} status {status.get('type')}"
        return CheckResult.passed(CHECK_CATALOG, target, message, evidence)

    return run_check(CHECK_CATALOG, target, body)


def route_preflight(
    snapshot: CatalogSnapshot,
    route: RouteSpec,
    *,
    removed_providers: Sequence[str] = (),
) -> CheckResult | None:
    """The failing readiness result that dooms ``route`` (catalog, or its workspace not ready), else None.

    A part that could not be read dooms nothing: the dispatch then finds out for itself.
    """
    catalog = check_catalog(snapshot, route, removed_providers=removed_providers)
    if catalog.outcome is Outcome.FAILED:
        return catalog
    if route.workspace and route.workspace not in ("host", NIL_UUID):
        ready = check_workspace_ready(snapshot, route.workspace)
        if ready.outcome is Outcome.FAILED and (ready.cause or "").startswith(
            ("workspace-not-ready", "workspace-missing")
        ):
            return ready
    return None
