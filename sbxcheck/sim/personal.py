"""A VM that is a person's machine: the login shell, its start-up files, git's configuration, the locale,
the roster's YAML style and where tools come from — each a fault (``sim/faults.py``) realised here.

The gate must judge such a VM exactly as a plain one: a healthy one passes every item, a broken one
fails for its real reason. Nothing here tells a check anything; each function changes the VM's home
(or, for the roster, the run's commit) the way a person's dotfiles would:

* ``vm.shell-fish`` / ``-zsh`` / ``-tcsh`` / ``-dash``: the login shell sshd runs the command line with
  (:func:`login_shell`), and its start-up file (:func:`startup_file`) printing on both streams, with
  text that looks like the gate's own markers, and functions or aliases named ``git``, ``bash``, ``env``,
  ``pi``, ``curl`` that print and fail;
* ``vm.git-fsmonitor``: a ``core.fsmonitor`` hook that prints two lines on stderr for every ``git status``;
* ``vm.git-config``: ``status.short``/``branch``/``showUntrackedFiles=no``, ``color.*=always``, a pager,
  ``advice.*``, ``core.quotepath``, an ``includeIf`` for ``~/app``, a global excludes file, and ``GIT_TRACE``
  exported by the login shell;
* ``vm.git-hooks``: ``core.hooksPath`` hooks that print on both streams whenever git runs them;
* ``vm.locale``: ``LANG=tr_TR.UTF-8`` (its dotless i) and ``LANGUAGE=de``: git answers in German;
* ``vm.tool-shims``: a version manager's shims directory first on the login ``PATH`` (pi, git, curl,
  python3), each printing a line on stderr before it runs the real tool;
* ``vm.roster-flow``: the run's commit holds the roster in YAML flow style (anchors, a merge key,
  quotes, comments), the same models as the block-style one.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from sbxcheck.errors import SimError
from sbxcheck.sim.faults import PERSONAL_FAULTS

__all__ = ["LOGIN_SHELL_FAULTS", "PERSONAL_FAULTS", "apply_personal_fault", "commit_flow_roster", "login_shell"]

LOGIN_SHELL_FAULTS: Final = {
    "vm.shell-fish": "fish",
    "vm.shell-zsh": "zsh",
    "vm.shell-tcsh": "tcsh",
    "vm.shell-dash": "dash",
}
DEFAULT_SHELL: Final = "/bin/bash"
LOCALE_ENV: Final = {"LANG": "tr_TR.UTF-8", "LANGUAGE": "de"}
SHIMMED_TOOLS: Final = ("pi", "git", "curl", "python3")
SHIMS_DIR: Final = ".local/share/mise/shims"

# What a person's roster may look like: flow style, an anchor and a merge key, quotes, comments.
ROSTER_FLOW_YAML: Final = """\
# sssf roster, flow style (a person's edit): same agents, same models
defaults: &defaults {coding_agent: pi, model: &fast "openrouter/deepseek/deepseek-v4-flash-0731", thinking: medium,
  data_dir: adws/adw_data}   # inherited by agents with no model
observability: {db: adws/adw_data/sssf.db, poll_ms: 500}
agents: [
  {name: planner, model: 'openrouter/google/gemini-3.6-flash', thinking: high, purpose: plan the change},
  {<<: *defaults, name: builder, purpose: write the code},    # model: the default one, by the merge key
  {name: reviewer, model: openrouter/openai/gpt-5.6-luna, purpose: "review the diff"},
]
"""

# Start-up noise per shell: stdout and stderr, a line left open, text shaped like the gate's markers and
# a JSON body, and functions/aliases shadowing the tools a command might call.
_MARKERS = 'SBX_END\\nSBX_HEAD 0000000000000000000000000000000000000000\\n{"data": {"usage": 0, "limit": 999}}\\n'
_STARTUP: Final[dict[str, str]] = {
    "bash": f"""# a person's ~/.bashrc (sbxcheck sim)
printf 'bash: welcome back\\n{_MARKERS}'
printf 'bash: direnv loading ~/.envrc\\n' >&2
printf 'bash: no newline here'
git() {{ echo "git is a bash function here" >&2; return 42; }}
env() {{ echo "env is a bash function here"; return 42; }}
export -f git
trap 'printf "\\nSBX_END\\nbash: bye\\n"' EXIT
""",
    "zsh": f"""# a person's ~/.zshenv (sbxcheck sim)
printf 'zsh: oh-my-zsh loaded\\n{_MARKERS}'
printf 'zsh: compinit: insecure directories\\n' >&2
printf 'zsh: no newline here'
alias git='echo git is a zsh alias here; false'
bash() {{ echo "bash is a zsh function here"; return 42; }}
env() {{ echo "env is a zsh function here"; return 42; }}
pi() {{ echo "pi is a zsh function here"; return 42; }}
zshexit() {{ printf '\\nSBX_END\\nzsh: bye\\n'; print -u2 'zsh: exiting' }}
""",
    "fish": f"""# a person's config.fish (sbxcheck sim)
printf 'fish: welcome, fish friend\\n{_MARKERS}'
echo 'fish: fisher plugins loaded' >&2
printf 'fish: no newline here'
function git; echo 'git is a fish function here'; return 42; end
function bash; echo 'bash is a fish function here'; return 42; end
function env; echo 'env is a fish function here'; return 42; end
function curl; echo 'curl is a fish function here'; return 42; end
function sbx_bye --on-event fish_exit; printf '\\nSBX_END\\nfish: bye\\n'; echo 'fish: exiting' >&2; end
""",
    "tcsh": f"""# a person's ~/.tcshrc (sbxcheck sim)
printf 'tcsh: welcome\\n{_MARKERS}'
echo 'tcsh: loading completions' > /dev/stderr
printf 'tcsh: no newline here'
alias git 'echo git is a tcsh alias here; false'
alias bash 'echo bash is a tcsh alias here; false'
alias env 'echo env is a tcsh alias here; false'
alias pi 'echo pi is a tcsh alias here; false'
""",
}

_FSMONITOR_HOOK: Final = """#!/bin/sh
# a watchman fsmonitor hook whose daemon is not running: it says so on stderr every time (sbxcheck sim)
echo "fsmonitor-watchman: watchman is not running (socket $HOME/.local/state/watchman/sock)" >&2
echo "fsmonitor-watchman: falling back to 'everything may have changed'" >&2
printf 'sbx-sim-token\\0/\\0'
"""

_HOOK: Final = """#!/bin/sh
# a person's global git hook (core.hooksPath) that talks on both streams (sbxcheck sim)
echo "hook $(basename "$0"): syncing the dotfiles index"
echo "hook $(basename "$0"): done" >&2
"""
_HOOK_NAMES: Final = ("post-index-change", "post-checkout", "reference-transaction", "pre-auto-gc", "post-commit")

_SHIM: Final = """#!/bin/sh
# a version manager's shim (sbxcheck sim): says which version it picked, then runs the real tool
tool=$(basename "$0")
echo "mise: $tool resolved from ~/.config/mise/config.toml" >&2
shims=$(cd "$(dirname "$0")" && pwd)
rest=$(printf '%s' "$PATH" | tr ':' '\\n' | grep -vxF "$shims" | paste -sd: -)
real=$(PATH=$rest command -v "$tool") || { echo "mise ERROR: $tool is not installed" >&2; exit 127; }
exec "$real" "$@"
"""


def login_shell(faults: Iterable[str]) -> str:
    """The absolute path of the login shell a VM with ``faults`` has (bash unless one names another)."""
    names = [LOGIN_SHELL_FAULTS[f] for f in faults if f in LOGIN_SHELL_FAULTS]
    if len(set(names)) > 1:
        raise SimError(f"a VM has one login shell; the faults ask for {', '.join(sorted(set(names)))}")
    if not names:
        return DEFAULT_SHELL
    return shell_path(names[0])


def shell_path(name: str) -> str:
    """Where ``name`` is installed, or a SimError naming the package that brings it."""
    found = shutil.which(name, path="/usr/bin:/bin:/usr/local/bin")
    if found is None:
        raise SimError(f"fault vm.shell-{name} needs {name} on this machine (apt-get install {name})")
    return found


def startup_file(home: Path, shell: str) -> Path | None:
    """The file ``shell -c`` reads first in ``home`` (None: dash and sh read none)."""
    name = os.path.basename(shell)
    return {
        "bash": home / ".bashrc",  # Debian's bash, for ssh commands (SimHost.source_bashrc)
        "zsh": home / ".zshenv",
        "fish": home / ".config" / "fish" / "config.fish",
        "tcsh": home / ".tcshrc",
        "csh": home / ".tcshrc",
    }.get(name)


def write_startup_noise(home: Path, shell: str) -> Path | None:
    """Give ``home`` the noisy start-up file of ``shell`` (nothing for dash)."""
    path = startup_file(home, shell)
    text = _STARTUP.get("tcsh" if os.path.basename(shell) == "csh" else os.path.basename(shell))
    if path is None or text is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)
    return path


def add_login_env(home: Path, shell: str, env: Mapping[str, str], path_first: Sequence[Path] = ()) -> Path:
    """Export ``env`` (and put ``path_first`` before PATH) in the start-up file ``shell`` reads for ``-c``."""
    path = startup_file(home, shell)
    name = os.path.basename(shell)
    if path is None:
        raise SimError(f"{name} reads no start-up file for `ssh host CMD`: nothing can export variables there")
    lines = []
    dirs = ":".join(str(d) for d in path_first)
    if name == "fish":
        lines += [f"set -gx {k} {shlex.quote(v)}" for k, v in env.items()]
        lines += [f"set -gx PATH {' '.join(shlex.quote(str(d)) for d in path_first)} $PATH"] if dirs else []
    elif name in ("tcsh", "csh"):
        lines += [f"setenv {k} {shlex.quote(v)}" for k, v in env.items()]
        lines += [f'setenv PATH {shlex.quote(dirs)}":$PATH"'] if dirs else []
    else:
        lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
        lines += [f'export PATH={shlex.quote(dirs)}":$PATH"'] if dirs else []
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text("\n".join(lines) + "\n" + existing, encoding="utf-8")  # exports first: before any noise
    return path


def _install(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


def _append_gitconfig(home: Path, text: str) -> None:
    with (home / ".gitconfig").open("a", encoding="utf-8") as fh:
        fh.write(text)


def apply_personal_fault(name: str, home: Path, shell: str) -> None:
    """Make the VM at ``home`` (login shell ``shell``) personal in the way fault ``name`` says.

    ``vm.roster-flow`` changes the run's commit: :func:`commit_flow_roster` does it.
    """
    if name in LOGIN_SHELL_FAULTS:
        write_startup_noise(home, shell)
    elif name == "vm.git-fsmonitor":
        hook = home / ".local" / "bin" / "fsmonitor-watchman"
        _install(hook, _FSMONITOR_HOOK)
        _append_gitconfig(home, f"[core]\n\tfsmonitor = {hook}\n")
    elif name == "vm.git-config":
        ignore = home / ".config" / "git" / "ignore"
        ignore.parent.mkdir(parents=True, exist_ok=True)
        ignore.write_text("*.txt\n*.md\n.envrc\n", encoding="utf-8")  # a person's global ignores, broad ones
        included = home / ".config" / "git" / "app.inc"
        included.write_text(
            "[diff]\n\tignoreSubmodules = all\n[status]\n\trenames = copies\n\taheadBehind = true\n", encoding="utf-8"
        )
        _append_gitconfig(
            home,
            "[status]\n\tshort = true\n\tbranch = true\n\tshowUntrackedFiles = no\n\tshowStash = true\n"
            "[color]\n\tui = always\n\tstatus = always\n\tdiff = always\n"
            "[core]\n\tpager = less -FRX\n\tquotepath = true\n\texcludesFile = ~/.config/git/ignore\n"
            "[advice]\n\tstatusHints = true\n\tdetachedHead = true\n"
            f'[includeIf "gitdir:~/app/"]\n\tpath = {included}\n',
        )
        add_login_env(home, shell, {"GIT_TRACE": "1", "GIT_PAGER": "less"})
    elif name == "vm.git-hooks":
        hooks = home / ".config" / "git" / "hooks"
        for hook_name in _HOOK_NAMES:
            _install(hooks / hook_name, _HOOK)
        _append_gitconfig(home, f"[core]\n\thooksPath = {hooks}\n")
    elif name == "vm.locale":
        add_login_env(home, shell, LOCALE_ENV)
    elif name == "vm.tool-shims":
        shims = home / SHIMS_DIR
        for tool in SHIMMED_TOOLS:
            _install(shims / tool, _SHIM)
        add_login_env(home, shell, {"MISE_SHELL": os.path.basename(shell)}, path_first=[shims])
    elif name != "vm.roster-flow":
        raise SimError(f"{name} is not a personal-VM fault")


def commit_flow_roster(app: Path, checkout: Path, config: str, git_env: Mapping[str, str]) -> str:
    """Commit the flow-style roster in ``app`` (the VM's clone) and fetch that commit into the host
    ``checkout`` (as FILL cloned it from there); return its sha."""

    def git(cwd: Path, *args: str) -> str:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env={**os.environ, **git_env, "HOME": str(cwd)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            raise SimError(f"sim: git {' '.join(args[:2])} failed in {cwd}: {proc.stderr.strip()[:300]}")
        return proc.stdout.strip()

    (app / config).write_text(ROSTER_FLOW_YAML, encoding="utf-8")
    git(app, "add", config)
    git(app, "commit", "-q", "-m", "roster: flow style")
    sha = git(app, "rev-parse", "HEAD")
    git(checkout, "fetch", "-q", str(app), f"+{sha}:refs/sim/roster-flow-{sha[:12]}")
    return sha
