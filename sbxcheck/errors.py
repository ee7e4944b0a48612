"""One exception tree for sbxcheck. Every error knows how it is classified in a report.

::

    SbxError                      (internal_error)
    ├── InventoryError            (config_defect)    bad or missing inventory file
    ├── RunRecordError            (config_defect)    bad .sandbox/runs/<id>.json
    ├── BadResponseError          (bad_response)     a remote answer we cannot parse
    ├── SimError                  (internal_error)   the embedded fleet could not start
    │   └── SimSetupError         (config_defect)    ... because of this machine's setup (npm, a CA bundle)
    ├── LedgerError               (internal_error)   the ledger or an owner lock is unusable
    ├── NotServed                 (config_defect)    the control plane's release lacks the route (a skip)
    └── TransportError            (transport_failure)
        ├── HostUnreachable       (infra_unreachable) refused, no route, DNS, connect timeout
        ├── CommandTimeout        (timeout)           a remote command outlived its deadline
        ├── AuthFailed            (auth_failed)       the server refused our credentials
        ├── HostKeyMismatch       (host_key_mismatch) known_hosts says otherwise: refused
        └── HostKeyUnknown        (host_key_unknown)  no known_hosts entry: refused

Messages never contain secrets: callers pass names (env vars, paths), never values.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ValidationError

from sbxcheck.redact import default_redactor
from sbxcheck.results import Classification
from sbxcheck.secrets import is_secret_name


class SbxError(Exception):
    """Base of every sbxcheck error; carries a classification and optional evidence."""

    classification: ClassVar[Classification] = Classification.INTERNAL_ERROR
    #: what items that met this error share (one incident), when it is more than the service it came from
    cause: ClassVar[str | None] = None

    def __init__(
        self, message: str, *, evidence: dict[str, Any] | None = None, recommendation: str | None = None
    ) -> None:
        redactor = default_redactor()  # no exception text or evidence ever holds a secret
        message = redactor.redact_text(message)
        super().__init__(message)
        self.message = message
        self.evidence: dict[str, Any] = redactor.redact(dict(evidence or {}))
        #: the next step when the error itself knows it (else the classification's default applies)
        self.recommendation = redactor.redact_text(recommendation) if recommendation else None

    def __str__(self) -> str:
        return self.message


class InventoryError(SbxError):
    """The inventory file is missing, unreadable or invalid."""

    classification = Classification.CONFIG_DEFECT


class RunRecordError(SbxError):
    """A run record is malformed, has unknown fields, or is not usable for this check."""

    classification = Classification.CONFIG_DEFECT


class BadResponseError(SbxError):
    """A remote system answered with something we cannot interpret."""

    classification = Classification.BAD_RESPONSE


class SimError(SbxError):
    """The embedded simulated fleet could not be built or started."""


class SimSetupError(SimError):
    """The embedded fleet cannot start because of how this machine is set up (e.g. npm cannot install pi)."""

    classification = Classification.CONFIG_DEFECT


class LedgerError(SbxError):
    """The ledger or an owner lock could not be used (I/O error, lock wait exceeded, bad id)."""


class NotServed(SbxError):
    """The control plane's release does not serve what was asked (a route, a field, the assistant MCP).

    Not a defect of the fleet: an item that meets it is skipped, naming the release's version.
    """

    classification = Classification.CONFIG_DEFECT

    def __init__(self, what: str, version: str | None, how: str, *, evidence: dict[str, Any] | None = None) -> None:
        shown = version or "unknown"
        super().__init__(
            f"not served by this control plane (version {shown}): {what} {how}".rstrip(),
            evidence={"not_served": what, "version": shown, "how": how, **(evidence or {})},
        )
        self.what = what
        self.version = shown


class TransportError(SbxError):
    """A remote call failed below the level of the check."""

    classification = Classification.TRANSPORT_FAILURE


class RateLimited(TransportError):
    """The server kept pushing back (429, or 503 with Retry-After) until the deadline was spent."""

    classification = Classification.RATE_LIMITED


class HostUnreachable(TransportError):
    """No SSH session could be established (refused, no route, DNS, connect timeout)."""

    classification = Classification.INFRA_UNREACHABLE


class CommandTimeout(TransportError):
    """A remote command did not finish before its deadline."""

    classification = Classification.TIMEOUT


class AuthFailed(TransportError):
    """The remote side refused our credentials."""

    classification = Classification.AUTH_FAILED


class HostKeyMismatch(TransportError):
    """The host presented a key that known_hosts does not list for it."""

    classification = Classification.HOST_KEY_MISMATCH


class HostKeyUnknown(TransportError):
    """known_hosts has no entry for the host; strict checking refuses it."""

    classification = Classification.HOST_KEY_UNKNOWN


def made_nothing(exc: SbxError) -> str | None:
    """Why the request that met ``exc`` cannot have acted, else None (it may have).

    Never sent (evidence ``request_sent`` false: a connect that failed, the login before it that
    failed, a password refused over cleartext), or refused by the server before it acted (evidence
    ``refused_before_acting``: a 401/403, a login page where the answer belonged).
    """
    evidence = exc.evidence
    if evidence.get("request_sent") is False:
        return f"{evidence.get('reason') or 'not connected'} before the request was sent"
    refused = evidence.get("refused_before_acting")
    if isinstance(refused, str) and refused:
        return f"refused before it acted ({refused})"
    return None


def service_cause(exc: SbxError) -> str | None:
    """One cause key per failing service: ``<classification>:<service URL>`` for an error that names
    the service it met (every HTTP client's transport and auth errors do), so every item that met it
    is one incident however the item reached it; None otherwise."""
    service = exc.evidence.get("service")
    return f"{exc.classification.value}:{service}" if isinstance(service, str) and service else None


def describe_validation_error(exc: ValidationError, source: str) -> str:
    """One readable line per problem: file, dotted field, what was expected."""
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            parts.append(f"{source}: unknown field '{field}'")
        elif err["type"] == "missing":
            parts.append(f"{source}: missing required field '{field}'")
        else:
            got = err.get("input")
            last = str(err["loc"][-1]) if err["loc"] else ""
            plain = isinstance(got, (int, float, bool)) or got is None
            # never the value of a field that names or holds a secret, not even a number
            secretish = last.endswith("_env") or is_secret_name(last)
            shown = repr(got) if plain and not secretish else type(got).__name__
            parts.append(f"{source}: field '{field}': {err['msg']} (got {shown})")
    more = len(exc.errors()) - 5
    if more > 0:
        parts.append(f"... and {more} more")
    return default_redactor().redact_text("; ".join(parts))
