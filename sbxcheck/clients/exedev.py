"""exe.dev's control plane over SSH (specs/sssf-sandbox.md, 6): ``ssh exe.dev ls --json``, read-only.

exe.dev's SSH endpoint takes a verb as the command, so the caller hands over a
:class:`~sbxcheck.checks.base.RemoteShell` connected to the alias ``exe.dev`` and the command
sent is exactly ``ls --json``. The answer, ``{"vms": [{"vm_name", "https_url", "ssh_dest",
"status", ...}]}``, is the authority on whether a VM exists. A failure is an exception, never an
empty list: upstream's rule is that "unknown" must never show as "gone".
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from sbxcheck.clients.sandboxed import _validation_summary, excerpt
from sbxcheck.errors import BadResponseError, TransportError
from sbxcheck.safeio import loads_bounded
from sbxcheck.transports.ssh import CommandResult, SshHost

LS_COMMAND: Final = "ls --json"


class ExeVm(BaseModel):
    """One VM of ``ls --json``; unknown fields are kept (``region``, ``proxy_port``, …)."""

    model_config = ConfigDict(extra="allow")

    vm_name: str
    https_url: str | None = None
    ssh_dest: str | None = None
    status: str | None = None
    region: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _name_alias(cls, data: object) -> object:
        # upstream's create reads vm_name, else name; ls itself was verified to send vm_name
        if isinstance(data, dict) and "vm_name" not in data and isinstance(data.get("name"), str):
            return {**data, "vm_name": data["name"]}
        return data


class ControlShell(Protocol):
    """An SSH session to the ``exe.dev`` alias (same shape as ``checks.base.RemoteShell``)."""

    alias: str

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult: ...


class ExeDevCommandFailed(TransportError):
    """``ssh exe.dev <verb>`` ran but exited non-zero."""


def list_vms(shell: ControlShell, *, timeout_s: float = 30.0) -> list[ExeVm]:
    """Every VM ``ls --json`` lists; raises (never returns ``[]``) when the answer cannot be had."""
    if isinstance(shell, SshHost):  # exe.dev's SSH endpoint is its CLI, not a shell: no framing wrapper
        res = shell.run(LS_COMMAND, timeout=timeout_s, frame=False)
    else:
        res = shell.run(LS_COMMAND, timeout=timeout_s)
    ev: dict[str, Any] = {"host": shell.alias, "ran": LS_COMMAND, "exit_code": res.exit_code}
    if res.exit_code != 0:
        ev["stderr"] = excerpt(res.stderr, 500)
        last = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "no message"
        raise ExeDevCommandFailed(
            f"ssh {shell.alias} {LS_COMMAND} exited {res.exit_code}: {excerpt(last)}", evidence=ev
        )
    try:
        doc = loads_bounded(res.stdout)
    except ValueError:
        ev["stdout"] = excerpt(res.stdout, 300)
        raise BadResponseError(f"ssh {shell.alias} {LS_COMMAND}: output is not JSON", evidence=ev) from None
    vms = doc.get("vms") if isinstance(doc, dict) else None
    if not isinstance(vms, list):
        shape = f"keys {sorted(doc)[:8]}" if isinstance(doc, dict) else type(doc).__name__
        raise BadResponseError(
            f'ssh {shell.alias} {LS_COMMAND}: expected {{"vms": [...]}}, got {shape}', evidence=ev
        )
    try:
        return [ExeVm.model_validate(vm) for vm in vms]
    except ValidationError as exc:
        raise BadResponseError(
            f"ssh {shell.alias} {LS_COMMAND}: a VM entry is malformed ({_validation_summary(exc)})",
            evidence=ev,
        ) from None
