"""A path written after an sbxcheck option with a space (``--sbx-sim-sssf ../inkwell``) can move pytest's rootdir.

pytest picks its rootdir and ini file before any plugin has declared its options, from the command
line's arguments that exist as paths: the value of a ``--sbx-*`` option written with a space is such
an argument then. A value outside the project moves the rootdir there, and with it the ini file
(testpaths, markers, sbxcheck's own ini settings) and every node id (history is kept by node id).
Written ``--sbx-x=PATH`` it cannot. :func:`moved_rootdir` tells when that happened: a run that lost
its ini file stops with the fix instead of collecting another tree; one whose node ids moved is warned.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from sbxcheck.plugin.settings import OPTIONS, flag


def _valued_flags() -> frozenset[str]:
    return frozenset(o.flag for o in OPTIONS if o.flag is not None and o.parse is not flag)


def moved_rootdir(config: pytest.Config) -> tuple[str, bool] | None:
    """What to say when an ``--sbx-* PATH`` value moved pytest's rootdir, else None; True with it when
    the ini file moved too (the project's configuration is not read: a usage error), False when only
    the rootdir and so the node ids did (a warning)."""
    args = [str(a) for a in config.invocation_params.args]
    here = Path(config.invocation_params.dir)
    valued = _valued_flags()
    spaced = [
        (option, value)
        for option, value in itertools.pairwise(args)
        if option in valued and not value.startswith("-") and (here / value).exists()
    ]
    if not spaced:
        return None
    usual = _setup_without(config, here)
    if usual is None or usual[0] == config.rootpath:
        return None
    rootdir, inipath = usual
    option, value = spaced[0]
    moved_ini = inipath != config.inipath
    effect = (
        f"and read {config.inipath or 'no ini file'} instead of {inipath or 'no ini file'}"
        if moved_ini
        else "so every node id differs from this project's"
    )
    return (
        f"sbxcheck: pytest took {value} (the value of {option}) for a test path when it chose its rootdir "
        f"({config.rootpath} instead of {rootdir}) {effect}; write {option}={value}",
        moved_ini,
    )


def _setup_without(config: pytest.Config, here: Path) -> tuple[Path, Path | None] | None:
    """The rootdir and ini file pytest picks from the run's test paths alone (None: this pytest cannot say)."""
    from _pytest.config.findpaths import determine_setup

    paths = [str(a) for a in config.option.file_or_dir or []]
    rootdir_arg = getattr(config.option, "rootdir", None) or None
    inifile = getattr(config.option, "inifilename", None)
    override = getattr(config.option, "override_ini", None)
    attempts = (
        {"inifile": inifile, "override_ini": override, "args": paths, "rootdir_cmd_arg": rootdir_arg,
         "invocation_dir": here},
        {"inifile": inifile, "args": paths, "rootdir_cmd_arg": rootdir_arg, "invocation_dir": here},
    )  # fmt: skip
    for kwargs in attempts:  # the signature changed between pytest releases
        try:
            found = determine_setup(**kwargs)  # type: ignore[arg-type]
            return Path(found[0]), (Path(found[1]) if found[1] is not None else None)
        except TypeError:
            continue
        except Exception:  # a pytest that cannot say: no false alarm
            return None
    return None
