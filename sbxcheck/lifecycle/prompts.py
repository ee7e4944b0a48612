"""What sbxcheck asks of a mission: the prompts (canary steps, repair probe, direct-output retry),
the create fields of a dispatch contract, the effort fallbacks, and the items ``--sbx-probe`` keeps."""

from __future__ import annotations

from typing import Any

from sbxcheck.inventory import RouteSpec, WorkspaceCanarySpec

EFFORT_LADDER = ("max", "xhigh", "high")


CANARY_STEPS_HEADER = (
    "sbxcheck workspace-visibility canary. Read-only: change nothing. Carry out exactly these steps, "
    "in order, with your tools, and report each output verbatim."
)


def effort_fallbacks(effort: str | None) -> list[str | None]:
    """The efforts to try in order: the requested one, then one step down at a time (a backend refuses others)."""
    if effort not in EFFORT_LADDER:
        return [effort]
    return list(EFFORT_LADDER[EFFORT_LADDER.index(effort) :])


def canary_prompt(spec: WorkspaceCanarySpec) -> str:
    """Explicit, checkable, read-only steps; their outputs (not the agent's summary) are the evidence."""
    steps = [f"STEP: ls -d {spec.checkout}", f"STEP: git -C {spec.checkout} rev-parse HEAD"]
    if spec.pin_file:
        steps.append(f"STEP: cat {spec.checkout}/{spec.pin_file}")
    steps.append(f"STEP: mcp read_file {spec.checkout}/{spec.mcp_file}")
    return "\n".join([CANARY_STEPS_HEADER, *steps])


PROBE_PROMPT = (
    "sbxcheck repair-validation probe (no push): change nothing, commit nothing, push nothing. Run "
    "`echo ok` once with your shell tool, then reply with the word ok."
)


PROBE_ITEMS = ("test_route_dispatched", "test_route_record_echoes_request", "test_route_reaches_execution")


def probe_items(items: list[Any], route: str) -> tuple[list[Any], list[Any]]:
    """For ``--sbx-probe``: the selected items of ``route``'s three route checks, and all the others."""
    kept: list[Any] = []
    other: list[Any] = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = getattr(item, "originalname", "")
        (kept if name in PROBE_ITEMS and params.get("sbx_route") == route else other).append(item)
    return kept, other


DIRECT_OUTPUT_PROMPT = (
    "sbxcheck direct-output retry. Do not use any tool, file or the web. Reply at once with exactly "
    "one line of at most 12 words, of the form `answer: <your one-line answer>`, to: what is 2 + 2?"
)


def contract_fields(route: RouteSpec) -> dict[str, Any]:
    """The create fields of a route's dispatch contract (none for an ordinary route)."""
    if route.contract == "roadmap":
        return {
            "project": route.project,
            "track": route.track,
            "extra": {"acceptance_criteria": list(route.acceptance_criteria)},
        }
    if route.contract == "conversational":
        return {"origin": "hermes", "origin_session_id": route.origin_session_id}
    return {}
