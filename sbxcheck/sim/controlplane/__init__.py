"""A simulated sandboxed.sh control plane (as specs/sandboxed-sh.md describes it) on Starlette.

:class:`ControlPlaneDouble` holds the state; ``.app`` is the Starlette app to serve with
:class:`sbxcheck.sim.httpserver.BackgroundServer`. Routes, bodies, status codes and the plain-text
401/4xx bodies follow the spec; items the spec marks [U] are chosen once and noted inline.

Public: ``POST /api/auth/login``, ``GET /api/auth/status``, ``GET /api/health``. Bearer JWT
(HS256, random secret) on: ``GET /api/health/fleet``, ``GET /api/remote-nodes``,
``POST /api/nodes/{name}/cordon|uncordon``, ``GET /api/backends``, ``GET|POST
/api/control/missions``, ``GET|DELETE /api/control/missions/{id}``, ``GET .../{id}/events``,
``POST .../{id}/cancel``, ``GET /api/control/running``, ``GET /api/workspaces[/{id}]``,
``POST /api/workspaces/{id}/exec``.

**Simulated agent.** Each mission gets an asyncio task on the server loop: ``pending`` for 1–2 s
(times ``latency_scale``), then ``active`` (``user_message``), then tool events, an
``assistant_message`` and ``completed`` (``finish_status``). A prompt without steps runs
``echo ok`` for real and answers ``ok``.

**Canary step grammar.** Every prompt line ``STEP: <step>`` (at most 32) is one step, run in
order with cwd = the mission's execution scope (the workspace directory; an empty ephemeral
directory under ``cp.mount-missing``). A path equal to or under the workspace's ``path`` is mapped
into the scope, so absolute and relative forms behave alike.

- ``STEP: <argv>`` — shlex-split, run without a shell (timeout ``step_timeout_s``); programs
  limited to read-only ones (``test``, ``[``, ``cat``, ``ls``, ``head``, ``tail``, ``wc``, ``stat``,
  ``sha256sum``, ``pwd``, ``echo``, ``printf``, ``true``, ``false``, and ``git`` with a read-only
  subcommand). Events: ``tool_call`` (``tool_name`` ``bash``, content ``{"command": ...}``), then
  ``tool_result`` (content = stdout + stderr; metadata ``exit_code``, ``timed_out``, ``is_error``,
  ``step``).
- ``STEP: mcp read_file <path>`` / ``STEP: mcp list_dir <path>`` — the workspace MCP server:
  ``tool_call`` named ``mcp__workspace__read_file`` (content ``{"path": ...}``), ``tool_result``
  holding the file text (or listing), or ``project not found: <dir>`` / ``file not found: <path>``
  with ``metadata.is_error`` true.

**Faults** (:data:`CONTROLPLANE_FAULTS`, enabled with :meth:`ControlPlaneDouble.inject`) change
the world, never a verdict; each has a target (a backend, workspace or node; ``*`` = all).

Split by resource: :mod:`.auth` (login, status, the bearer guard), :mod:`.fleet` (health, nodes),
:mod:`.missions` (create, read, list, cancel, running), :mod:`.events` (events, emitting them to
the live stream :mod:`sbxcheck.sim.stream`), :mod:`.agent` (the simulated agent's run),
:mod:`.workspaces`, :mod:`.providers` (backends and the catalog), :mod:`.ops` (integrity, tracks,
``ops.*`` faults); :mod:`.model` holds specs, faults and records, :mod:`.base` the state, and
:mod:`.double` assembles them. :mod:`.releases` holds the release profiles (``release=``: today's API
by default, ``v0.7`` (Feb 2026), ``1.3`` (Jun 2026) or ``cba9502``, the newest the search index
shows), each fact cited from the release's source.
"""

from __future__ import annotations

from sbxcheck.sim.controlplane.double import ControlPlaneDouble
from sbxcheck.sim.controlplane.model import CONTROLPLANE_FAULTS, NIL_UUID, PATH_SHAPED_ID

__all__ = ["CONTROLPLANE_FAULTS", "NIL_UUID", "PATH_SHAPED_ID", "ControlPlaneDouble"]
