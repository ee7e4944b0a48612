"""A path written after an sbxcheck option with a space (``--sbx-sim-sssf ../inkwell``) can move pytest's rootdir.

pytest picks its rootdir and ini file before any plugin has declared its options, from the command
line's arguments that exist as paths: the value of a ``--sbx-*`` option written with a space is such
an argument then. A value outside the project moves the rootdir there, and with it the ini file
(testpaths, markers) and every node id (history is kept by node id). Written ``--sbx-x=PATH`` it
cannot. :func:`moved_rootdir` tells when that happened, so the run stops with the fix instead of
collecting another tree.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from sbxcheck.plugin.settings import OPTIONS, flag


def _valued_flags() -> frozenset[str]:
    return frozenset(o.flag for o in OPTIONS if o.flag is not None and o.parse is not flag)


def moved_rootdir(config: pytest.Config) -> str | None:
    """The one-line usage error when an ``--sbx-* PATH`` value moved pytest's rootdir, else None."""
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
    usual = _rootdir_without(config, here)
    if usual is None or usual == config.rootpath:
        return None
    option, value = spaced[0]
    return (
        f"sbxcheck: pytest took {value} (the value of {option}) for a test path when it chose its rootdir: "
        f"{config.rootpath} instead of {usual}, so its ini file and node ids are not this project's; "
        f"write {option}={value}"
    )


def _rootdir_without(config: pytest.Config, here: Path) -> Path | None:
    """The rootdir pytest picks from the run's test paths alone (None when this pytest cannot say)."""
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
            return Path(determine_setup(**kwargs)[0])  # type: ignore[arg-type]
        except TypeError:
            continue
        except Exception:  # a pytest that cannot say: no false alarm
            return None
    return None
