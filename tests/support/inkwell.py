"""A real inkwell checkout for the real-recipe tests, named by ``$SBXCHECK_TEST_INKWELL``.

Fetched code is never committed, here or beside the project: the person running the tests points the
variable at their own clone of disler/inkwell-agent-sandboxes-and-software-factory (or a modified
copy). Unset, the tests that need it are reported skipped with the variable to set, CI included.
"""

from __future__ import annotations

import os
from pathlib import Path

INKWELL_VARIABLE = "SBXCHECK_TEST_INKWELL"
INKWELL_REPOSITORY = "https://github.com/disler/inkwell-agent-sandboxes-and-software-factory"


def inkwell_checkout() -> Path | None:
    """The checkout the variable names, resolved; None when it is unset or empty."""
    value = os.environ.get(INKWELL_VARIABLE, "").strip()
    return Path(value).expanduser().resolve() if value else None


def inkwell_absent() -> str | None:
    """Why the real-recipe tests cannot run here, or None when the checkout is usable."""
    checkout = inkwell_checkout()
    if checkout is None:
        return (
            f"set {INKWELL_VARIABLE} to an inkwell checkout (git clone {INKWELL_REPOSITORY}) "
            "to run the real-recipe tests"
        )
    if not (checkout / "just" / "sandbox").is_dir():
        return f"{INKWELL_VARIABLE}={checkout} is not an inkwell checkout: no just/sandbox directory"
    return None
