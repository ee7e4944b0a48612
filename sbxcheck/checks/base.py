"""What every check shares: the remote-shell protocol, timing, and error-to-result mapping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from sbxcheck.errors import NotServed, SbxError, service_cause
from sbxcheck.redact import default_redactor
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.safeio import loads_bounded
from sbxcheck.transports.ssh import CommandResult

TRIM_CHARS = 2000


class RemoteShell(Protocol):
    """A host that runs a command and returns its exit code and output (SshHost satisfies it)."""

    alias: str

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult: ...


def trim(text: str, limit: int = TRIM_CHARS) -> str:
    """Keep evidence short: the head of ``text``, redacted **before** the cut, and a note of how much was cut.

    Redacting first matters: a secret cut in half no longer matches its class, so the half would leak.
    """
    text = default_redactor().redact_text(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [{len(text) - limit} more characters trimmed]"


def json_or_none(text: str) -> Any:
    """The parsed document, or None for anything that is not strict JSON (NaN/Infinity included)."""
    try:
        return loads_bounded(text, parse_constant=_reject_constant)
    except ValueError:  # not JSON, a NaN/Infinity, or refused as too deep or large
        return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def run_check(check: str, target: str, body: Callable[[], CheckResult]) -> CheckResult:
    """Run one check body, timing it; an SbxError becomes an ``error`` result, never a crash (a
    route or feature the control plane's release does not serve: a skip naming the version)."""
    started = time.monotonic()
    try:
        result = body()
    except NotServed as exc:
        result = not_served(check, target, exc)
    except SbxError as exc:  # the service it met keys its cause: one unreachable endpoint, one incident
        result = CheckResult.errored(
            check, target, exc.message, exc.classification, dict(exc.evidence), cause=service_cause(exc)
        )
    except Exception as exc:  # a bug in a check must not stop the other checks
        result = CheckResult.errored(
            check,
            target,
            f"internal error in check {check}: {type(exc).__name__}: {exc}",
            Classification.INTERNAL_ERROR,
        )
    return result.model_copy(update={"duration_s": round(time.monotonic() - started, 3)})


def not_served(check: str, target: str, exc: NotServed, evidence: dict[str, object] | None = None) -> CheckResult:
    """The skip of an item whose route (or feature) the control plane's release does not serve."""
    return CheckResult(
        check=check,
        target=target,
        outcome=Outcome.SKIPPED,
        message=exc.message,
        evidence={**(evidence or {}), **exc.evidence},
    )
