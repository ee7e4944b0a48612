"""Incidents: one cause is one incident, and a check's own next step survives grouping."""

from __future__ import annotations

from sbxcheck.checks.gate import gate_advice, runtime_key_rejected_next
from sbxcheck.report.incidents import DEFAULT_RECOMMENDATIONS, build_incidents, is_destructive
from sbxcheck.results import CheckRecord, Classification, Outcome

C = Classification


def rec(
    check: str,
    target: str,
    message: str,
    classification: Classification,
    *,
    outcome: Outcome = Outcome.FAILED,
    cause: str | None = None,
    recommendation: str | None = None,
) -> CheckRecord:
    return CheckRecord(
        nodeid=f"x.py::test_{check}[{target}]",
        suite="canary",
        check=check,
        target=target,
        outcome=outcome,
        classification=classification,
        message=message,
        evidence={"checked": check},
        cause=cause,
        recommendation=recommendation,
    )


def test_one_expired_token_is_one_incident_not_one_per_route() -> None:
    routes = ["codex-terra", "claudecode-opus", "opencode-glm", "gemini-flash"]
    records = [
        rec(
            check, r, f"POST /api/control/missions for route {r}: 401 Invalid or expired token", C.AUTH_FAILED
        )
        for r in routes
        for check in ("route_starts", "route_echo")
    ]
    [incident] = build_incidents(records)
    assert len(incident.checks) == 8 and incident.classification is C.AUTH_FAILED
    assert "each: POST /api/control/missions for route <target>: 401" in incident.summary
    assert (
        incident.recommendation == DEFAULT_RECOMMENDATIONS[C.AUTH_FAILED]
    )  # the harness's token: the inventory


def test_identical_errors_of_any_classification_are_one_incident() -> None:
    records = [
        rec(c, run, "[ssh] config /x/ssh_config: no such file", C.CONFIG_DEFECT, outcome=Outcome.ERROR)
        for run in ("alpha", "bravo", "charlie")
        for c in ("A", "B", "C", "D", "E", "R", "C1", "C2")
    ]
    [incident] = build_incidents(records)
    assert len(incident.checks) == 24


def test_different_messages_stay_apart_and_a_lone_failure_is_no_incident() -> None:
    records = [
        rec("A", "alpha", "tree dirty", C.CHECK_FAILED),
        rec("A", "bravo", "HEAD moved", C.CHECK_FAILED),
    ]
    assert build_incidents(records) == []


def test_a_rejected_runtime_key_keeps_its_own_next_step() -> None:
    advice = runtime_key_rejected_next("alpha-20261130-abcdef")["recommendation"]
    records = [
        rec(
            "C_model_answers",
            f"alpha-20261130-abcdef-{m}",
            f"{m} did not answer (HTTP 401): User not found.",
            C.AUTH_FAILED,
            cause="runtime-key-rejected:alpha-20261130-abcdef",
            recommendation=advice,
        )
        for m in ("a/b", "c/d")
    ] + [
        rec(
            "E_credit_remaining",
            "alpha-20261130-abcdef",
            "/api/v1/key answered HTTP 401",
            C.AUTH_FAILED,
            cause="runtime-key-rejected:alpha-20261130-abcdef",
            recommendation=advice,
        )
    ]
    records = [r.model_copy(update={"commands": ["just sbx lifecycle fill alpha-20261130-abcdef"]}) for r in records]
    [incident] = build_incidents(records)
    assert incident.recommendation == advice
    assert "inventory names" not in incident.recommendation and "just sbx lifecycle fill" in advice
    assert incident.commands == ["just sbx lifecycle fill alpha-20261130-abcdef"]  # the advice's own commands


def test_the_gate_advice_is_not_mistaken_for_a_destructive_proposal() -> None:
    from sbxcheck.checks.gate import GateTarget

    target = GateTarget("alpha", "alpha.exe.xyz", "ab" * 20, (), "cfg", "http://x", 1.0, "m", 60, 180)
    advice = gate_advice(target)
    assert not is_destructive(advice)
    assert not is_destructive("raising the cap or tearing down stays your decision")
    assert not is_destructive("teardown is the operator's decision; nothing was changed")
    assert is_destructive("run teardown now")
    records = [
        rec(c, "alpha", "no ~/app on this VM — FILL never ran", C.CHECK_FAILED, recommendation=advice)
        for c in ("A", "E")
    ]
    [incident] = build_incidents(records)
    assert incident.recommendation == advice


def test_an_item_without_a_target_is_named_by_its_check_in_the_summary() -> None:
    cause = "infra_unreachable:http://127.0.0.1:9"
    records = [
        rec("fleet_machine_inventory", "", "cannot connect", C.INFRA_UNREACHABLE, cause=cause),
        rec("catalog", "ashur", "cannot connect", C.INFRA_UNREACHABLE, cause=cause),
    ]
    [incident] = build_incidents(records)
    assert incident.summary.startswith("infra_unreachable on ashur, fleet_machine_inventory: 2 checks")
