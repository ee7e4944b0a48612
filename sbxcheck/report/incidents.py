"""Group failures that share a cause into incidents: one cause is one incident, not N failures.

Rules, applied to records whose outcome is ``failed`` or ``error`` (a ``passed`` record is never
part of an incident, nor is a ``skipped`` one: a skip states an absent precondition, not a
failure):

a. Records with the same non-empty ``cause`` form one incident when there are two or more of
   them, or when a single one carries an infrastructure-type classification (see
   :data:`INFRA_CLASSIFICATIONS`).
b. Records without a cause that fail with one message (the same text once each record's target
   is masked, and the same classification) form one incident when there are two or more of
   them: one expired token is one incident however many routes it broke.
c. Records without a cause whose classification is a connection-level one (see
   :data:`TARGET_CLASSIFICATIONS`) form one incident per ``(target, classification)`` when there
   are two or more: an unreachable VM turns all of its items into one incident.
d. Nothing else is grouped; a lone ordinary check failure is not an incident.

A group of rule b on a single target with a connection-level classification is the same
incident as rule c would make, with the same id. Incident ids are ``INC-`` plus the first 8 hex
digits of a SHA-1 over the classification and the cause (rule a), the masked message (rule b) or
the target (rule c), so the same failure gets the same id on every run.

The recommendation is the one the group's own records give most often (a check's own next step
is never replaced by a generic one); only when none gives a usable one does the default for the
classification apply. A recommendation that proposes a destructive action is never used.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sbxcheck.redact import default_redactor
from sbxcheck.results import CheckRecord, Classification, Incident, Outcome, incident_id

__all__ = [
    "DEFAULT_RECOMMENDATIONS",
    "INFRA_CLASSIFICATIONS",
    "TARGET_CLASSIFICATIONS",
    "build_incidents",
    "default_recommendation",
    "incident_id",
    "is_destructive",
    "leftover_incidents",
]

C = Classification

#: Connection-level classifications: uncaused records with one of these group per target.
TARGET_CLASSIFICATIONS: frozenset[Classification] = frozenset(
    {
        C.INFRA_UNREACHABLE,
        C.HOST_KEY_MISMATCH,
        C.HOST_KEY_UNKNOWN,
        C.AUTH_FAILED,
        C.TIMEOUT,
        C.TRANSPORT_FAILURE,
    }
)

#: Infrastructure-type classifications: a single record with a cause and one of these is an incident.
INFRA_CLASSIFICATIONS: frozenset[Classification] = TARGET_CLASSIFICATIONS | {C.INFRASTRUCTURE}

_NOTHING_CHANGED = "nothing was changed"

#: What to do, per classification, when no record of the incident says better. None of these
#: proposes a destructive action: teardown is always the choice of the person running the suite.
DEFAULT_RECOMMENDATIONS: dict[Classification, str] = {
    C.DEGRADED: (
        "the route works only with a lower setting than requested (see the evidence) — update the "
        "inventory or the backend's caps deliberately; " + _NOTHING_CHANGED
    ),
    C.INFRA_UNREACHABLE: (
        "check the host is up and reachable (ssh -o ConnectTimeout=10 <target> true); " + _NOTHING_CHANGED
    ),
    C.HOST_KEY_MISMATCH: (
        "the host presented a different key than known_hosts — verify the fingerprint out of band "
        "before trusting it; never auto-accept"
    ),
    C.HOST_KEY_UNKNOWN: (
        "known_hosts has no entry for the host — obtain its fingerprint out of band, add it to "
        "known_hosts and re-run; never auto-accept"
    ),
    C.TIMEOUT: (
        "the remote side did not answer before its deadline — check the host's load and network "
        "path, then re-run; raise the timeout only if the work is known to be slow; " + _NOTHING_CHANGED
    ),
    C.AUTH_FAILED: (
        "the server refused our credentials — check the user, key file or token env var the "
        "inventory names (and that the env var is set in this shell); " + _NOTHING_CHANGED
    ),
    C.TRANSPORT_FAILURE: (
        "the connection failed below the level of the checks — read the transport error in the "
        "evidence, check the host and the network path, then re-run; " + _NOTHING_CHANGED
    ),
    C.INFRASTRUCTURE: (
        "shared infrastructure failed for these checks — fix it first and re-run; the individual "
        "verdicts are not meaningful until then"
    ),
    C.CONFIG_DEFECT: (
        "the same configuration defect affects these checks — correct the inventory or config "
        "named in the evidence, then re-run"
    ),
    C.SECURITY_EXPOSURE: (
        "rotate the exposed credential at its issuer, then find how it leaked (the evidence names "
        "where; the value itself is redacted); keep the sandbox for investigation"
    ),
    C.WORKSPACE_MOUNT_DEFECT: (
        "the workspace mount is wrong — inspect the mount named in the evidence on the host; the "
        "sandbox was kept for inspection"
    ),
    C.BAD_RESPONSE: (
        "a remote system answered with something we cannot interpret — compare the response "
        "excerpt in the evidence with the service's version and API"
    ),
    C.CHECK_FAILED: (
        "these checks failed for the same cause — read the evidence of each; fix the cause once "
        "and re-run them together"
    ),
    C.NO_USABLE_ANSWER: (
        "the model was addressed but returned no usable answer, also to one bounded direct-output "
        "retry — report it as such, synthesise only from routes that answered, and do not swap in "
        "another model or retry again; " + _NOTHING_CHANGED
    ),
    C.SPEND_CAP: (
        "the run reached --sbx-max-spend before these items could be dispatched — raise the cap "
        "deliberately, or run fewer routes; " + _NOTHING_CHANGED
    ),
    C.INTERNAL_ERROR: (
        "sbxcheck itself failed — report it with this evidence; the system under test may be fine"
    ),
    C.RATE_LIMITED: (
        "the control plane kept answering 429/503 with Retry-After until the item's deadline — not a "
        "defect of the fleet; re-run off-peak, lower max_concurrency, or raise the server's limit; "
        + _NOTHING_CHANGED
    ),
}

_DESTRUCTIVE = re.compile(
    r"\b(tear\s*down|teardown|rm\s+-|rm\s+/|delete|destroy|terminate|wipe|purge|reap|drop\s+table)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(not|never|no|don't|do\s+not|without|nothing)\b[^.;]{0,40}$", re.IGNORECASE)
_LEFT_TO_HUMAN = re.compile(
    r"^[^.;]{0,60}\b(is|stays|remains)\s+(your|the\s+operator's|a\s+human's)\s+(decision|choice)",
    re.IGNORECASE,
)


def is_destructive(text: str) -> bool:
    """True when ``text`` proposes a destructive action (an unnegated teardown/rm/delete/...).

    Naming one as someone else's decision ("tearing down stays your decision") proposes nothing.
    """
    for match in _DESTRUCTIVE.finditer(text):
        before = text[: match.start()]
        if not _NEGATION.search(before) and not _LEFT_TO_HUMAN.search(text[match.end() :]):
            return True
    return False


def default_recommendation(
    classification: Classification, targets: Sequence[str] = (), *, probe: str | None = None
) -> str:
    """The default advice for ``classification``, with ``probe`` (a command that reaches the host or
    service, see :mod:`sbxcheck.report.nextsteps`) where it says ``<target>``; without one that
    clause is dropped. A target (a run id, a route label) is never put where a host name belongs."""
    from sbxcheck.report.nextsteps import fill_probe

    text = DEFAULT_RECOMMENDATIONS.get(classification, DEFAULT_RECOMMENDATIONS[C.CHECK_FAILED])
    return fill_probe(text, probe)


def _classification_of(record: CheckRecord) -> Classification:
    if record.classification is not None:
        return record.classification
    return C.CHECK_FAILED if record.outcome is Outcome.FAILED else C.INTERNAL_ERROR


def _cause_of(record: CheckRecord) -> str:
    return (record.cause or "").strip()


def _one_line(text: str, limit: int = 120) -> str:
    return default_redactor().trim(" ".join(text.split()), limit)


def _target_list(targets: Sequence[str], shown: int = 5) -> str:
    if len(targets) <= shown:
        return ", ".join(targets)
    return ", ".join(targets[:shown]) + f", … (+{len(targets) - shown} more)"


@dataclass
class _Group:
    kind: str  # "cause", "message" or "target"
    key: str
    records: list[CheckRecord] = field(default_factory=list)

    def classification(self) -> Classification:
        """``infrastructure`` when a member says so (it explains the rest), else the most common one.

        Ties go to the first in nodeid order.
        """
        counts = Counter(_classification_of(r) for r in self.records)
        if C.INFRASTRUCTURE in counts:
            return C.INFRASTRUCTURE
        best = max(counts.values())
        return next(c for c in map(_classification_of, self.records) if counts[c] == best)

    def targets(self) -> list[str]:
        """What the members ran against; an item without a target is named by its check, never ``""``."""
        return sorted({r.target or r.check for r in self.records})


def _recommendation(
    records: Iterable[CheckRecord], classification: Classification, targets: list[str]
) -> tuple[str, list[str]]:
    """The records' own next step given most often (first in nodeid order on a tie) and that record's
    commands, else the default with its probe (a command built from the evidence) as its one command."""
    records = list(records)
    own = [(text, r) for r in records if (text := (r.recommendation or "").strip()) and not is_destructive(text)]
    if own:
        counts = Counter(text for text, _ in own)
        best = max(counts.values())
        return next((text, list(r.commands)) for text, r in own if counts[text] == best)
    from sbxcheck.report.nextsteps import probe_of

    probe = probe_of(r.evidence for r in records)
    text = default_recommendation(classification, targets, probe=probe)
    return text, [probe] if probe and probe in text else []


def _masked_message(record: CheckRecord, targets: Sequence[str]) -> str:
    """The record's message with every known target masked (longest first), whitespace folded."""
    text = " ".join(record.message.split())
    for target in targets:
        if target:
            text = text.replace(target, "<target>")
    return text


def _summary(group: _Group, classification: Classification, targets: list[str]) -> str:
    n = len(group.records)
    checks = f"{n} check{'s' if n != 1 else ''}"
    outcomes = Counter(r.outcome.value for r in group.records)
    detail = ", ".join(f"{count} {name}" for name, count in sorted(outcomes.items()))
    line = f"{classification.value} on {_target_list(targets)}: {checks} ({detail})"
    if group.kind == "cause":
        line += f"; cause: {_one_line(group.key)}"
    elif group.kind == "message":
        line += f"; each: {_one_line(group.key.split(chr(0), 1)[1])}"
    return line


def build_incidents(records: Sequence[CheckRecord]) -> list[Incident]:
    """Group the failed/errored records that share a cause into incidents (rules in the module doc).

    The result does not depend on the order of ``records``: members are listed by nodeid and
    incidents are ordered by size (largest first), then classification, then id.
    """
    ordered = sorted(
        (r for r in records if r.outcome in (Outcome.FAILED, Outcome.ERROR)),
        key=lambda r: (r.nodeid, r.target, r.check),
    )
    all_targets = sorted({r.target for r in ordered}, key=lambda t: (-len(t), t))
    by_cause: dict[str, _Group] = {}
    by_message: dict[tuple[Classification, str], _Group] = {}
    for record in ordered:
        cause = _cause_of(record)
        if cause:
            by_cause.setdefault(cause, _Group("cause", cause)).records.append(record)
            continue
        key = (_classification_of(record), _masked_message(record, all_targets))
        by_message.setdefault(key, _Group("message", f"{key[0].value}\x00{key[1]}")).records.append(record)

    groups: list[_Group] = []
    for group in by_cause.values():
        if len(group.records) >= 2 or group.classification() in INFRA_CLASSIFICATIONS:
            groups.append(group)
    by_target: dict[tuple[str, Classification], _Group] = {}
    for group in by_message.values():
        one_target = len({r.target for r in group.records}) == 1
        connection_level = _classification_of(group.records[0]) in TARGET_CLASSIFICATIONS
        if len(group.records) >= 2 and not (one_target and connection_level):
            groups.append(group)
            continue
        for record in group.records:  # rule c: left to per-target grouping
            if record.classification in TARGET_CLASSIFICATIONS:
                per_target = (record.target, record.classification)
                by_target.setdefault(per_target, _Group("target", record.target)).records.append(record)
    groups.extend(g for g in by_target.values() if len(g.records) >= 2)  # one failing item is not an incident

    incidents: list[Incident] = []
    for group in groups:
        classification = group.classification()
        targets = group.targets()
        recommendation, commands = _recommendation(group.records, classification, targets)
        incidents.append(
            Incident(
                id=incident_id(classification, group.key, kind=group.kind),
                classification=classification,
                summary=_summary(group, classification, targets),
                checks=[r.nodeid for r in group.records],
                recommendation=recommendation,
                commands=commands,
            )
        )
    incidents.sort(key=lambda i: (-len(i.checks), i.classification.value, i.id))
    return incidents


def leftover_incidents(cleanup: Sequence[Mapping[str, Any]]) -> list[Incident]:
    """One incident per mission the session's close left behind: still there, not ended, after its cancel
    (a cleanup line with ``left_status``). No item carries it: it happened after every item ran."""
    incidents = []
    for line in cleanup:
        status = line.get("left_status")
        if line.get("kind") != "mission" or not isinstance(status, str):
            continue
        ident = str(line.get("ident"))
        incidents.append(
            Incident(
                id=incident_id(C.INFRASTRUCTURE, f"mission-left:{ident}"),
                classification=C.INFRASTRUCTURE,
                summary=f"mission {ident} is still {status} after this session's cancel: "
                + _one_line(str(line.get("action")), 200),
                checks=[],
                recommendation=(
                    f"the control plane kept mission {ident} ({status}): it cancels only the missions it runs "
                    "(upstream #149, #580), so this one may start later or wait forever; end it where the release "
                    f"allows (its dashboard, or POST /api/control/missions/{ident}/status with status interrupted), "
                    "or leave it — the ledger keeps it open for the next session's review; nothing else was changed"
                ),
            )
        )
    return incidents
