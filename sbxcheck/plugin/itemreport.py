"""What a pytest report of an sbxcheck item becomes: its CheckResult, its longrepr redacted in place,
and an SbxError's traceback cut where it entered sbxcheck."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sbxcheck.plugin.stash import RESULT_KEY, suite_of

if TYPE_CHECKING:
    from sbxcheck.results import CheckResult

__all__ = ["hide_sbxcheck_frames", "redact_longrepr", "result_from_report"]


def result_from_report(
    item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]
) -> CheckResult:
    """The CheckResult for an item: the one the test recorded, else one derived from what happened."""
    from sbxcheck.checks.base import trim
    from sbxcheck.errors import SbxError, service_cause
    from sbxcheck.results import CheckResult, Classification, Outcome

    recorded = item.stash.get(RESULT_KEY, None)
    name = item.originalname if isinstance(item, pytest.Function) else item.name
    check = name.removeprefix("test_").removeprefix(f"{suite_of(item)}_")
    target = item.callspec.id if isinstance(item, pytest.Function) and hasattr(item, "callspec") else ""
    exc = call.excinfo.value if call.excinfo is not None else None
    if recorded is not None and report.when == "call":
        return recorded
    if isinstance(exc, SbxError):
        host = exc.evidence.get("alias") or exc.evidence.get("endpoint")
        # one unreachable host or service = one incident, keyed as a check's own error keys it
        cause = service_cause(exc) or (f"{exc.classification.value}:{host}" if host else None)
        return CheckResult.errored(
            check, target, exc.message, exc.classification, dict(exc.evidence), cause=cause,
            recommendation=exc.recommendation,
        )  # fmt: skip
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
        return CheckResult(
            check=check, target=target, outcome=Outcome.SKIPPED, message=str(reason).removeprefix("Skipped: ")
        )
    if report.failed:
        text = trim(str(exc) if exc is not None else str(report.longrepr), 1000)
        if report.when == "call" and isinstance(exc, (AssertionError, pytest.fail.Exception)):
            # the test's own assertion said no: the system is wrong, not sbxcheck
            return CheckResult.failed(check, target, text or "assertion failed", {})
        where = "" if report.when == "call" else f" during {report.when}"
        return CheckResult.errored(
            check,
            target,
            f"{type(exc).__name__ if exc else 'error'}{where}: {text}",
            Classification.INTERNAL_ERROR,
        )
    return CheckResult.passed(check, target, "passed without recording evidence", {})


def redact_longrepr(obj: Any, redact: Any, seen: set[int]) -> Any:
    """Redact every string inside pytest's longrepr objects in place, keeping their structure.

    Keeping the objects (not their text) keeps what pytest derives from them: the short summary's
    crash line, ``--junitxml``'s failure message, colours and ``--tb`` styles.
    """
    if isinstance(obj, str):
        return redact(obj)
    if id(obj) in seen or obj is None or isinstance(obj, (int, float, bool)):
        return obj
    seen.add(id(obj))
    if isinstance(obj, list):
        obj[:] = [redact_longrepr(v, redact, seen) for v in obj]
        return obj
    if isinstance(obj, tuple):
        return tuple(redact_longrepr(v, redact, seen) for v in obj)
    if isinstance(obj, dict):
        return {k: redact_longrepr(v, redact, seen) for k, v in obj.items()}
    if type(obj).__module__.startswith("_pytest."):
        for key, value in list(vars(obj).items()):
            with contextlib.suppress(AttributeError, TypeError):
                object.__setattr__(obj, key, redact_longrepr(value, redact, seen))
    return obj


def hide_sbxcheck_frames(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """An SbxError's traceback ends where it entered sbxcheck (``--full-trace`` shows it whole).

    The error is sbxcheck's answer about the fleet (unreachable, host key changed, bad inventory),
    with its message, classification and evidence in the item's sbxcheck section: the frames inside
    sbxcheck are noise at 3 a.m., and pytest renders each with its source (tenths of a second per
    item, for every item of an unreachable VM). A user's test frame that called sbxcheck stays.
    """
    from sbxcheck.errors import SbxError

    if not isinstance(excinfo.value, SbxError):
        return  # anything else may be a bug: its whole traceback is the evidence
    import _pytest
    import pluggy

    package = Path(__file__).resolve().parents[1]  # the sbxcheck package (this is sbxcheck/plugin/)
    runners = (Path(_pytest.__file__).resolve().parent, Path(pluggy.__file__).resolve().parent)
    kept = []
    for entry in excinfo.traceback:
        path = entry.path
        if not isinstance(path, Path):
            kept.append(entry)
        elif path.is_relative_to(package) and not path.is_relative_to(package / "suites"):
            break  # (an installed suite's frame is the test's own, kept as a checkout's is)
        elif not any(path.is_relative_to(runner) for runner in runners):  # pytest would cut these too
            kept.append(entry)
    excinfo.traceback = type(excinfo.traceback)(kept)
