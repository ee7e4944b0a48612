"""The simulated agent: a mission's run on the server loop (branches, canary steps, MCP reads, events)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sbxcheck.sim.controlplane import lies, ops
from sbxcheck.sim.controlplane.events import EventRoutes
from sbxcheck.sim.controlplane.model import (
    DISPATCH_S,
    FINISH_S,
    GIT_READ_ONLY,
    GOAL_LIMIT,
    MAX_OUTPUT_BYTES,
    MAX_STEPS,
    NO_EVIDENCE_ACTIVE_S,
    READ_ONLY_PROGRAMS,
    STEP_RE,
    STEP_S,
    TERMINAL,
    THINK_S,
    MissionState,
    WorkspaceState,
    iso_time,
    run_bounded,
)


class AgentRunner(EventRoutes):
    """The simulated agent: one asyncio task per mission on the server loop."""

    async def _sleep(self, base_s: float) -> None:
        await asyncio.sleep(max(0.0, base_s * self.latency_scale))

    def _start_agent(self, m: MissionState) -> None:
        """Run ``m``'s agent as a task on the server loop."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        task = loop.create_task(self._agent(m.id), name=f"sim-agent-{m.id[:8]}")
        m.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _scope_for(self, m: MissionState) -> tuple[Path, Path]:
        """``(workspace_path, scope)``: the scope is the workspace, or an empty ephemeral dir."""
        ws = self._workspaces[m.record["workspace_id"]]
        if self._fault_on("cp.mount-missing", m.record["backend"]) or self._fault_on(
            "cp.mount-missing-exitcode", m.record["backend"]
        ):
            scope = self.root / "missions" / m.id
            scope.mkdir(parents=True, exist_ok=True)
            return ws.path, scope
        return ws.path, ws.path

    def _env_for(self, ws: WorkspaceState, home: Path) -> dict[str, str]:
        path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        env = {
            "PATH": os.pathsep.join([*self.exec_path_prefix, path]),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CEILING_DIRECTORIES": str(home.parent),
        }
        env.update(ws.env)
        if self._fault_on("cp.env-values-exposed", ws.name, ws.id):
            env.update(ws.exposed_env)
        return env

    def _alive(self, mid: str) -> MissionState | None:
        m = self._missions.get(mid)
        return m if m is not None and m.status not in TERMINAL else None

    async def _agent(self, mid: str) -> None:
        try:
            await self._sleep(self._rng.uniform(*DISPATCH_S))
            with self._lock:
                m = self._missions.get(mid)
                if m is None or m.status != "pending":
                    return
                backend = m.record["backend"]
                if self._fault_on("cp.stuck-pending", backend) or lies.stays_pending(self, m):
                    return
                branch = self._branch(m)
                self._dispatch(m, evidence_free=branch == "no-evidence")
            await self._run_branch(mid, branch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a simulator bug must show up as a failed mission, not a hang
            with self._lock:
                m = self._alive(mid)
                if m is not None:
                    self._emit(m, "error", f"simulator error: {type(exc).__name__}")
                    self._set_status(m, "failed", reason="sim_internal_error")

    def _branch(self, m: MissionState) -> str:
        backend = m.record["backend"]
        if self._fault_on("cp.backend-crash", backend):
            return "crash"
        if self._fault_on("cp.model-not-found", backend) and m.requested_model:
            return "model-not-found"
        objective = m.record.get("goal_objective")
        if isinstance(objective, str) and len(objective) > GOAL_LIMIT:
            return "goal-too-long"
        if self._fault_on("cp.no-evidence", backend):
            return "no-evidence"
        if self._fault_on("cp.server-shutdown", backend):
            return "shutdown"
        if self._fault_on("ops.model-silent", backend):
            return "silent"
        return "run"

    def _dispatch(self, m: MissionState, *, evidence_free: bool) -> None:
        self._set_status(m, "active")
        stamp = iso_time(self.clock())
        if m.prompt:
            m.record["history"].append({"role": "user", "content": m.prompt})
        m.evidence_free = evidence_free
        if evidence_free:
            return
        m.execution = {
            "run_id": str(uuid.uuid4()),
            "mission_id": m.id,
            "generation": 1,
            "execution_state": "running",
            "owner_actor_id": "sim-control-actor",
            "scope_unit": None,
            "started_at": stamp,
            "heartbeat_at": stamp,
            "stopping_at": None,
            "ended_at": None,
            "terminal_reason": None,
        }
        if m.prompt:
            self._emit(
                m,
                "user_message",
                m.prompt,
                metadata={"id": str(uuid.uuid4()), "queued": False, "source": f"api:{m.owner}"},
            )

    async def _run_branch(self, mid: str, branch: str) -> None:
        await self._sleep(THINK_S)
        if branch == "no-evidence":
            await self._sleep(NO_EVIDENCE_ACTIVE_S)
            with self._lock:
                m = self._alive(mid)
                if m is not None:
                    self._finish_turn(m, None)
            return
        if branch == "crash":
            with self._lock:
                m = self._alive(mid)
                if m is None:
                    return
                self._emit(
                    m,
                    "agent_phase",
                    "Performing one-time database migration... done",
                    metadata={"phase": "migration", "agent": "opencode"},
                )
            await self._sleep(FINISH_S)
            self._fail(mid, "fn3 is not a function", reason="agent_error")
            return
        if branch == "shutdown":  # a deploy restarted the control plane: interrupted before any tool call
            with self._lock:
                m = self._alive(mid)
                if m is not None:
                    self._emit(m, "error", "Server shutting down: mission interrupted", metadata={"resumable": True})
                    self._set_status(m, "interrupted", reason="server_shutdown")
            return
        if branch == "silent":  # active, then an idle timeout without any output
            await self._sleep(FINISH_S)
            self._fail(mid, ops.IDLE_TIMEOUT, reason="idle_timeout")
            return
        if branch == "goal-too-long":
            self._fail(
                mid,
                "codex thread/goal/set failed: goal objective must be at most 4000 characters",
                reason="agent_error",
            )
            return
        if branch == "model-not-found":
            with self._lock:
                m = self._alive(mid)
                if m is None:
                    return
                text = f"ProviderModelNotFoundError: provider '{m.requested_model}' not found"
                self._emit(m, "error", text, metadata={"mission_id": mid, "resumable": True})
                self._set_status(m, "awaiting_user", awaiting_kind="decision")
            return
        await self._run_steps(mid)

    def _fail(self, mid: str, message: str, *, reason: str) -> None:
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return
            self._emit(m, "error", message, metadata={"mission_id": mid, "resumable": False})
            self._set_status(m, "failed", reason=reason, evidence=message)

    async def _run_steps(self, mid: str) -> None:
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return
            ws = self._workspaces[m.record["workspace_id"]]
            ws_path, scope = self._scope_for(m)
            env = self._env_for(ws, scope)
            steps = STEP_RE.findall(m.prompt or "")[:MAX_STEPS]
            deep = lies.deep_content(self, m)
            if deep is not None:  # said first, with no cost: a cost reader looks inside the content
                model = m.record.get("model_override") or m.requested_model
                self._emit(m, "assistant_message", deep, metadata={"id": str(uuid.uuid4()), "model": model})
        failures = 0
        for index, step in enumerate(steps or ["echo ok"], start=1):
            ok = await self._run_step(mid, index, step, ws_path, scope, env)
            failures += 0 if ok else 1
            await self._sleep(STEP_S)
        await self._sleep(FINISH_S)
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return
            passed = len(steps) - failures
            reply = f"Workspace canary: ran {len(steps)} step(s), {passed} succeeded." if steps else "ok"
            m.record["history"].append({"role": "assistant", "content": reply})
            costs = lies.reported_costs(self, m, self.mission_cost_cents)
            for index, cents in enumerate(costs, start=1):
                self._emit(
                    m,
                    "assistant_message",
                    reply if index == len(costs) else "working on it",
                    metadata={
                        "id": str(uuid.uuid4()),
                        "success": True,
                        "cost_cents": cents,
                        "model": m.record.get("model_override") or m.requested_model,
                        "shared_files": [],
                        "resumable": False,
                    },
                )
        await self._sleep(FINISH_S)
        with self._lock:
            m = self._alive(mid)
            if m is not None:
                self._finish_turn(m, f"assistant_message after {len(steps) or 1} tool call(s)")

    def _finish_turn(self, m: MissionState, evidence: str | None) -> None:
        """The end of a turn that went well: ``finish_status`` (completed), or where the release parks a
        finished turn (1.3.0: awaiting_user, awaiting_kind ack, terminal_reason turn_complete)."""
        if self.release.turn_end == "awaiting_user" and self.finish_status == "completed":
            self._set_status(m, "awaiting_user", awaiting_kind="ack")
            m.record["terminal_reason"] = "turn_complete"
            return
        self._set_status(m, self.finish_status, reason="completed", evidence=evidence)

    async def _run_step(
        self, mid: str, index: int, step: str, ws_path: Path, scope: Path, env: dict[str, str]
    ) -> bool:
        """Run one canary step for real; emit its tool_call/tool_result pair. True on success."""
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        try:
            argv = shlex.split(step)
        except ValueError:
            argv = []
        is_mcp = len(argv) >= 2 and argv[0] == "mcp"
        if is_mcp:
            tool_name = f"mcp__workspace__{argv[1]}"
            args: dict[str, Any] = {"path": argv[2] if len(argv) > 2 else ""}
        else:
            tool_name, args = "bash", {"command": step}
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return False
            if m.execution is not None:
                m.execution["execution_state"] = "waiting_tool"
            self._emit(m, "tool_call", json.dumps(args), tool_name=tool_name, tool_call_id=call_id)
            exit_code_only = self._fault_on("cp.mount-missing-exitcode", m.record["backend"])
        meta: dict[str, Any] = {"step": index}
        if is_mcp:
            text, is_error = await asyncio.to_thread(_mcp_tool, argv[1], argv[2:], ws_path, scope)
            meta["is_error"] = is_error
        else:
            translated = [_translate(a, ws_path, scope) for a in argv]
            refusal = _refuse(translated)
            if refusal is not None:
                code, out, err, timed_out = 126, "", refusal + "\n", False
            else:
                code, out, err, timed_out = await asyncio.to_thread(
                    run_bounded, translated, scope, env, self.step_timeout_s
                )
            text = out + err
            if scope != ws_path:  # inside a container the missing path is named as the step asked for it
                text = text.replace(str(scope), str(ws_path))
            is_error = code != 0 or timed_out
            meta.update(exit_code=code, timed_out=timed_out, is_error=is_error)
        if exit_code_only:  # the upstream shape some harnesses store: an exit code and nothing else
            meta = {"step": index, "exit_code": meta.get("exit_code", int(is_error))}
        await self._sleep(STEP_S)
        with self._lock:
            m = self._alive(mid)
            if m is None:
                return False
            if m.execution is not None:
                m.execution["execution_state"] = "running"
            self._emit(m, "tool_result", text, tool_name=tool_name, tool_call_id=call_id, metadata=meta)
        return not is_error


def _translate(token: str, ws_path: Path, scope: Path) -> str:
    """Map a path at or under the workspace into the mission's scope (identity when they agree)."""
    base = str(ws_path)
    if scope == ws_path or not (token == base or token.startswith(base + "/")):
        return token
    return str(scope) + token[len(base) :]


def _refuse(argv: Sequence[str]) -> str | None:
    """Why the simulator will not run this step (not a read-only program), or None."""
    if not argv:
        return "empty or unparsable step"
    program = argv[0]
    if program not in READ_ONLY_PROGRAMS:
        return f"{program}: not allowed in the simulated agent (read-only steps only)"
    if program == "git":
        rest = list(argv[1:])
        while rest and rest[0] in ("-C", "-c"):
            rest = rest[2:]
        if not rest or rest[0] not in GIT_READ_ONLY:
            return f"git {rest[0] if rest else ''}: not a read-only git subcommand".replace("  ", " ")
    return None


def _mcp_tool(tool: str, args: Sequence[str], ws_path: Path, scope: Path) -> tuple[str, bool]:
    """The workspace MCP server's ``read_file`` / ``list_dir``: ``(text, is_error)``."""
    if tool not in ("read_file", "list_dir"):
        return f"Unknown tool: {tool}", True
    if not args:
        return "Invalid params: missing field `path`", True
    requested = args[0]
    raw = Path(_translate(requested, ws_path, scope))
    target = (raw if raw.is_absolute() else scope / raw).resolve()
    root = scope.resolve()
    if target != root and root not in target.parents:
        return f"path outside workspace: {requested}", True
    rel = target.relative_to(root)
    if rel.parts and not (root / rel.parts[0]).exists():
        return f"project not found: {rel.parts[0]}", True
    if tool == "list_dir":
        if not target.is_dir():
            return f"directory not found: {requested}", True
        return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())), False
    if not target.is_file():
        return f"file not found: {requested}", True
    data = target.read_bytes()[:MAX_OUTPUT_BYTES]
    return data.decode("utf-8", errors="replace"), False
