"""The schema helper never drops a validation silently: under $CI a missing schema fails, elsewhere it skips."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import schemas

GOOD = (
    '<testsuites><testsuite name="s" tests="1" failures="0" errors="0" skipped="0" time="0">'
    '<testcase name="t" classname="c"/></testsuite></testsuites>'
)


def test_the_schema_is_found_and_validates(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(GOOD)
    schemas.validate_junit(junit)
    junit.write_text("<testsuites><bogus/></testsuites>")
    with pytest.raises(Exception, match="bogus"):
        schemas.validate_junit(junit)


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_schema_fails_under_ci_and_skips_visibly_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setattr(schemas, "SCHEMA_DIRS", (tmp_path / "nowhere",))
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"junit-10\.xsd not found in .*nowhere"):
        schemas.junit_xsd()
