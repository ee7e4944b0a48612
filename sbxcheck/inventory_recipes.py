"""The [sssf.recipes] section: the just sbx command templates lifecycle/recipes.py runs, and their checks."""

from __future__ import annotations

import shlex
import string
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, model_validator

RecipeName = Literal["mount", "teardown", "harvest", "list", "reap"]
RECIPES: tuple[RecipeName, ...] = ("mount", "teardown", "harvest", "list", "reap")
NEEDS_RUN_ID = frozenset({"mount", "teardown", "harvest"})
_SHELL_TOKENS = frozenset({";", "&", "&&", "|", "||", ">", ">>", "<", "<<", "2>", "2>&1", "`"})
_PROBE = "sbx probe ';\"$x"  # a value that only survives templating as one whole token


class RecipeTimeouts(BaseModel):
    """Seconds each recipe may run before its process group is killed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mount: PositiveFloat = Field(default=600.0, description="seconds `mount` may run")
    teardown: PositiveFloat = Field(default=300.0, description="seconds `teardown` may run")
    harvest: PositiveFloat = Field(default=120.0, description="seconds `harvest` may run")
    list: PositiveFloat = Field(default=60.0, description="seconds `list` may run")
    reap: PositiveFloat = Field(default=60.0, description="seconds `reap` (a dry run) may run")


class RecipeTemplates(BaseModel):
    """Command templates for the recipes sbxcheck may run, and where to run them.

    Each runs without a shell (no `;`, `|`, `>`, `&&`), `{run_id}` is its only placeholder (quoted for
    you; mount, teardown and harvest need it, list and reap take none), and `--yes` is never allowed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mount: str = Field(
        default="just sbx mount {run_id}",
        description="mounts a sandbox (--sbx-mount NAME, [sssf] mounts); {run_id} is the mount name",
    )
    teardown: str = Field(default="just sbx lifecycle teardown {run_id}", description="tears a run down")
    harvest: str = Field(
        default="just sbx manage harvest {run_id}", description="harvests a run before its teardown"
    )
    list: str = Field(default="just sbx manage list", description="lists the fleet's runs")
    reap: str = Field(default="just sbx manage reap", description="lists orphaned keys (a dry run)")
    cwd: Path | None = Field(default=None, description="where the recipes run; default: [sssf] checkout")
    timeout_s: RecipeTimeouts = Field(default=RecipeTimeouts(), description="per recipe, in seconds")

    @model_validator(mode="after")
    def _check_templates(self) -> RecipeTemplates:
        for name in RECIPES:
            _validate_template(name, getattr(self, name))
        return self

    def template(self, name: RecipeName) -> str:
        if name not in RECIPES:
            raise ValueError(f"unknown recipe {name!r}; expected one of {', '.join(RECIPES)}")
        value: str = getattr(self, name)
        return value

    def timeout(self, name: RecipeName) -> float:
        value: float = getattr(self.timeout_s, name)
        return value


def _validate_template(name: str, template: str) -> None:
    if "--yes" in template.lower():
        raise ValueError(f"recipe {name!r}: '--yes' is never allowed; sbxcheck only runs reap as a dry run")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"recipe {name!r}: bad template braces ({exc})") from None
    fields = {(fname, spec, conv) for _, fname, spec, conv in parsed if fname is not None}
    if fields - {("run_id", "", None)}:
        raise ValueError(f"recipe {name!r}: the only placeholder allowed is {{run_id}}")
    if name in NEEDS_RUN_ID and not fields:
        raise ValueError(f"recipe {name!r}: the template must contain {{run_id}}")
    if name not in NEEDS_RUN_ID and fields:
        raise ValueError(f"recipe {name!r}: takes no run id; remove {{run_id}}")
    try:
        argv = shlex.split(template.format(run_id=shlex.quote(_PROBE)))
    except ValueError as exc:
        raise ValueError(f"recipe {name!r}: cannot split the template ({exc})") from None
    if not argv:
        raise ValueError(f"recipe {name!r}: the template is empty")
    shellish = sorted(set(argv) & _SHELL_TOKENS)
    if shellish:
        raise ValueError(f"recipe {name!r}: runs without a shell, so {' '.join(shellish)} would be literal")
    if fields and not any(_PROBE in token for token in argv):
        raise ValueError(f"recipe {name!r}: put {{run_id}} outside quotes; it is quoted for you")
