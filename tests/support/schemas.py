"""The published schemas the tests validate against (``../shared/schemas`` beside the repository).

Absent, a validation is never silently dropped: under ``$CI`` it fails (CI must validate), elsewhere the
test skips and says why, after its other assertions have run (call :func:`validate_junit` last).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[2]
SCHEMA_DIRS = (REPO.parent / "shared" / "schemas", REPO.parent.parent / "shared" / "schemas")


def _missing(what: str) -> NoReturn:
    if os.environ.get("CI", "").strip():
        pytest.fail(f"{what}: CI must validate junit.xml (set CI= only where the schema cannot be had)")
    pytest.skip(what)


def junit_xsd() -> Path:
    """junit-10.xsd (a worktree finds it one directory further up); fails under $CI, else skips, when absent."""
    for directory in SCHEMA_DIRS:
        if (directory / "junit-10.xsd").is_file():
            return directory / "junit-10.xsd"
    _missing(f"junit-10.xsd not found in {' or '.join(str(d) for d in SCHEMA_DIRS)}")


def validate_junit(path: Path) -> None:
    """``path`` is valid against junit-10.xsd (xmlschema is the [test] extra's)."""
    schema = junit_xsd()
    try:
        import xmlschema
    except ImportError:
        _missing("xmlschema is not installed (pip install -e '.[test]')")
    xmlschema.XMLSchema(str(schema)).validate(str(path))
