"""Result model: what one check saw and concluded, and the report of a whole run.

These are the shapes written to ``results.json`` (schema 1).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class Outcome(enum.StrEnum):
    """What happened to a check."""

    PASSED = "passed"
    FAILED = "failed"  # the system is wrong
    ERROR = "error"  # we could not tell: unreachable, timed out, bad response
    SKIPPED = "skipped"  # a stated precondition is absent
    WAIVED = "waived"  # failed for a cause a waiver accepts until a date: left out of the verdict


class Classification(enum.StrEnum):
    """Why a check did not pass; groups failures that share a cause."""

    CHECK_FAILED = "check_failed"
    INFRA_UNREACHABLE = "infra_unreachable"
    TIMEOUT = "timeout"
    TRANSPORT_FAILURE = "transport_failure"
    AUTH_FAILED = "auth_failed"
    HOST_KEY_MISMATCH = "host_key_mismatch"
    HOST_KEY_UNKNOWN = "host_key_unknown"
    CONFIG_DEFECT = "config_defect"
    BAD_RESPONSE = "bad_response"
    WORKSPACE_MOUNT_DEFECT = "workspace_mount_defect"
    SECURITY_EXPOSURE = "security_exposure"
    INFRASTRUCTURE = "infrastructure"
    DEGRADED = "degraded"
    RATE_LIMITED = "rate_limited"  # the server pushed back (429 / 503 + Retry-After) until the deadline
    INTERNAL_ERROR = "internal_error"
    SPEND_CAP = "spend_cap"  # not run because --sbx-max-spend was reached
    NO_USABLE_ANSWER = "no_usable_answer"  # the model was addressed twice and returned nothing


Evidence = dict[str, Any]


class CheckResult(BaseModel):
    """The verdict of one check on one target, with the evidence it rests on."""

    model_config = ConfigDict(extra="forbid")

    check: str
    target: str
    outcome: Outcome
    classification: Classification | None = None
    message: str = ""
    evidence: Evidence = Field(default_factory=dict)
    duration_s: float = 0.0
    attempts: int = 1
    cause: str | None = None  # a short signature; failures sharing one form an incident
    recommendation: str | None = None
    # what to type for the recommendation: built by sbxcheck's templates (sbxcheck.commands), never
    # taken from text a server, a VM or an agent wrote; report.html offers these (and the re-run) to copy
    commands: list[str] = Field(default_factory=list)

    @classmethod
    def passed(cls, check: str, target: str, message: str, evidence: Evidence) -> CheckResult:
        return cls(check=check, target=target, outcome=Outcome.PASSED, message=message, evidence=evidence)

    @classmethod
    def failed(
        cls,
        check: str,
        target: str,
        message: str,
        evidence: Evidence,
        classification: Classification = Classification.CHECK_FAILED,
        **extra: Any,
    ) -> CheckResult:
        return cls(
            check=check,
            target=target,
            outcome=Outcome.FAILED,
            classification=classification,
            message=message,
            evidence=evidence,
            **extra,
        )

    @classmethod
    def errored(
        cls,
        check: str,
        target: str,
        message: str,
        classification: Classification,
        evidence: Evidence | None = None,
        **extra: Any,
    ) -> CheckResult:
        return cls(
            check=check,
            target=target,
            outcome=Outcome.ERROR,
            classification=classification,
            message=message,
            evidence=evidence or {},
            **extra,
        )


class CheckRecord(CheckResult):
    """A CheckResult placed in a run: the pytest node and suite it came from."""

    model_config = ConfigDict(extra="ignore")  # results.json may carry extra fields (readers ignore them)

    nodeid: str
    suite: str
    next_step: str | None = None  # the recommendation as shown to people (or the classification's default)
    key_evidence: list[str] = Field(default_factory=list)  # the evidence lines a person needs to act
    wait_s: float | None = None  # share of duration_s spent waiting (e.g. for a shared connection)
    # the waiver that matched the item: what it says, what it did (status) and what the item had
    waiver: dict[str, Any] | None = None
    # with --sbx-history, a failing or waived item: "new in this run", "failing for 6 runs since 2026-12-01"
    failing_for: str | None = None


def incident_id(classification: Classification, key: str, *, kind: str = "cause") -> str:
    """Stable, readable incident id: ``INC-`` + 8 hex of SHA-1 over (classification, kind, key)."""
    digest = hashlib.sha1(f"{classification.value}\x00{kind}\x00{key}".encode(), usedforsecurity=False)
    return "INC-" + digest.hexdigest()[:8]


class Incident(BaseModel):
    """Several checks that failed for one reason, and what to do about it."""

    id: str
    classification: Classification
    summary: str
    checks: list[str]
    recommendation: str
    commands: list[str] = Field(default_factory=list)  # the recommendation's own commands (sbxcheck's)


class InventoryInfo(BaseModel):
    source: str
    sim: bool
    details: dict[str, Any] = Field(default_factory=dict)


class RunReport(BaseModel):
    """Everything one pytest session found: the results.json document."""

    schema_: int = Field(default=SCHEMA_VERSION, alias="schema")
    started_at: str
    finished_at: str
    inventory: InventoryInfo
    checks: list[CheckRecord]
    incidents: list[Incident] = Field(default_factory=list)
    summary: dict[str, int] = Field(default_factory=dict)
    machine_inventory: list[dict[str, Any]] = Field(default_factory=list)
    mounts: list[dict[str, Any]] = Field(default_factory=list)
    # what the end of the session did: teardowns and mission cancels, each {kind, ident, action, ok}
    cleanup: list[dict[str, Any]] = Field(default_factory=list)
    # interrupted (Ctrl-C / SIGTERM): the selected items that never ran, and what the ledger still holds
    interrupted: bool = False
    # why it stopped: "Ctrl-C or SIGTERM", "stopping after 1 failures" (-x/--maxfail), "internal error"
    interrupted_reason: str = ""
    not_run: list[str] = Field(default_factory=list)
    left: list[dict[str, Any]] = Field(default_factory=list)
    # what the run spent ({total_usd, missions, missions_cost_unknown, cap_usd, cap_reached, not_run})
    spend: dict[str, Any] = Field(default_factory=dict)
    # where the run's report.html is published (--sbx-report-url), so a page or alert can link to it
    report_url: str = ""
    # every waiver of the run (inventory and waivers file): what it says, its status, the items per status
    waivers: list[dict[str, Any]] = Field(default_factory=list)

    model_config = ConfigDict(populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)


@dataclass(frozen=True)
class GateColumn:
    """One column of the report page's gate grid (runs × items): a gate check and its short label."""

    check: str
    label: str
    #: one column per roster model, labelled ``<label> <model>``; the check's target is ``<run id>-<model>``
    per_model: bool = False


#: The gate grid of the report page, in column order. A gate check declares its column here, in the
#: core that both ``checks/`` and ``report/`` read: the page builds the grid from this table alone, so a
#: new gate check is one row and no edit of the page. A check without a row is listed below the grid.
GATE_COLUMNS: tuple[GateColumn, ...] = (
    GateColumn("run_record", "record"),
    GateColumn("A_git_integrity", "A git"),
    GateColumn("B_pi_models", "B pi"),
    GateColumn("C_roster_matches", "C roster"),
    GateColumn("C_model_answers", "C", per_model=True),
    GateColumn("D_cost_reported", "D cost"),
    GateColumn("E_credit_remaining", "E credit"),
)
