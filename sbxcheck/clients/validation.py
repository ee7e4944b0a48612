"""Pydantic validation errors as text a report may carry: where and what, never the input."""

from __future__ import annotations

from pydantic import ValidationError


def validation_summary(exc: ValidationError) -> str:
    """Locations and messages only: pydantic's default text would quote the (secret-bearing) input."""
    parts = [
        f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
        for err in exc.errors(include_input=False, include_url=False)[:3]
    ]
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
