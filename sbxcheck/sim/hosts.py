"""Simulated command hosts for the sim SSH server: agent-core, dgx-spark and the exe.dev control host.

Each ``make_*`` function materialises a home directory whose ``bin/`` holds small bash programs
standing in for ``systemctl``, ``tailscale`` and (on exe.dev) the ``ls`` verb. They keep their state
in files under ``<home>/.sim/``, so ``systemctl enable --now tailscaled`` really changes what
``is-enabled``/``is-active`` print afterwards, and ``tailscale ping`` fails while tailscaled is not
active. Exit codes are a real host's: is-enabled 0/1, is-active 0/3, tailscale ping 0 with a pong
or 1 with ``no reply``. Fault knobs are parameters; :data:`HOST_FAULTS` names them for ``--sbx-sim-fault``.

The result, a :class:`HostHome`, gives a :class:`~sbxcheck.sim.sshd.SimHost` what it needs (home,
``path_dirs``) and, for tests that run the programs directly, an environment with ``PATH`` set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from sbxcheck.errors import SimError
from sbxcheck.sim.sshd import SimHost

PingMode = Literal["ok", "derp", "no-reply", "timeout", "silent"]
PING_MODES: Final = ("ok", "derp", "no-reply", "timeout", "silent")
DGX_TAILSCALE_IP: Final = "100.77.4.93"  # the DGX's tailnet IP; duplicated on purpose: sim imports no checks
_STATE: Final = ".sim"
_PLACEHOLDER: Final = re.compile(r"@[A-Z_]+@")


@dataclass(frozen=True)
class HostHome:
    """A materialised host: its home, the directories to put first on PATH, and its state directory."""

    name: str
    home: Path
    path_dirs: tuple[Path, ...]

    @property
    def state_dir(self) -> Path:
        return self.home / _STATE

    def sim_host(self, *, user: str = "exedev", mode: Literal["ok", "refuse", "silent"] = "ok") -> SimHost:
        """The :class:`SimHost` serving this home over SSH (a home with a ~/.bashrc has it read, as on Debian)."""
        return SimHost(
            name=self.name,
            home=self.home,
            user=user,
            path_dirs=self.path_dirs,
            mode=mode,
            source_bashrc=(self.home / ".bashrc").is_file(),
        )

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment for running the programs directly: HOME and PATH (ours first)."""
        env = dict(os.environ if base is None else base)
        env["HOME"] = str(self.home)
        env["PATH"] = os.pathsep.join([*(str(d) for d in self.path_dirs), env.get("PATH", "/usr/bin:/bin")])
        return env

    def unit_state(self) -> tuple[str, str]:
        """``(enabled-state, active-state)`` of tailscaled as the state files hold it."""
        return _read(self.state_dir / "tailscaled.enabled"), _read(self.state_dir / "tailscaled.active")


@dataclass(frozen=True)
class HostFault:
    """A named host fault: which host it changes and the ``make_*`` keyword arguments that do it."""

    name: str
    host: str
    summary: str
    options: Mapping[str, Any]


HOST_FAULTS: Final[dict[str, HostFault]] = {
    f.name: f
    for f in (
        HostFault(
            "dgx.tailscaled-disabled",
            "agent-core",
            "tailscaled on agent-core is disabled and inactive (is-enabled 1, is-active 3)",
            {"tailscaled_enabled": False, "tailscaled_active": False},
        ),
        HostFault(
            "dgx.tailscaled-inactive",
            "agent-core",
            "tailscaled on agent-core is enabled but not running (is-active 3)",
            {"tailscaled_active": False},
        ),
        HostFault(
            "dgx.ping-timeout",
            "agent-core",
            "tailscale ping on agent-core hangs, then exits 1 (the caller's timeout fires first)",
            {"ping": "timeout"},
        ),
        HostFault(
            "dgx.ping-silent",
            "agent-core",
            "tailscale on agent-core prints nothing and exits 0",
            {"ping": "silent"},
        ),
        HostFault(
            "dgx.systemctl-unknown",
            "agent-core",
            "systemctl on agent-core answers 'unknown' for tailscaled",
            {"systemctl_unknown": True},
        ),
        HostFault(
            "dgx.sudo-refused",
            "agent-core",
            "tailscaled on agent-core is disabled and the SSH user has no passwordless sudo",
            {"tailscaled_enabled": False, "tailscaled_active": False, "sudo_refused": True},
        ),
        # the DGX incident's harder cases
        HostFault(
            "dgx.two-nodes-down",
            "agent-core",
            "tailscaled on agent-core is disabled and babylon is down too: the sentinel reports two nodes",
            {"tailscaled_enabled": False, "tailscaled_active": False, "sentinel_others": ("babylon",)},
        ),
        HostFault(
            "dgx.sentinel-stuck",
            "agent-core",
            "tailscaled on agent-core is disabled, and the sentinel still reports the DGX after the fix",
            {"tailscaled_enabled": False, "tailscaled_active": False, "sentinel_stuck": True},
        ),
        HostFault(
            "exedev.ls-fails",
            "exe.dev",
            "exe.dev's `ls --json` exits 1 (the VM list is unknown)",
            {"ls_fails": True},
        ),
        HostFault(
            "exedev.ls-garbage",
            "exe.dev",
            "exe.dev's `ls --json` prints a banner, not JSON",
            {"ls_garbage": True},
        ),
    )
}


def fault_options(host: str, faults: Iterable[str]) -> dict[str, Any]:
    """The ``make_*`` keyword arguments that the named faults set for ``host`` (others ignored)."""
    out: dict[str, Any] = {}
    for name in faults:
        fault = HOST_FAULTS.get(name)
        if fault is not None and fault.host == host:
            out.update(fault.options)
    return out


# ---------------------------------------------------------------- programs

_ID = r"""#!/bin/bash
# sbxcheck sim: the SSH user on this host is a regular account (uid 1000), not root.
case "$1" in -u) echo 1000 ;; -un) echo operator ;; *) echo "uid=1000(operator) gid=1000(operator)" ;; esac
"""

_SUDO = r"""#!/bin/bash
# sbxcheck sim: sudo for a user with passwordless sudo (or, with the sudo-refused flag, without it).
state=@STATE@
[ "$1" = -n ] && shift
if [ -e "$state/sudo-refused" ]; then echo "sudo: a password is required" >&2; exit 1; fi
exec "$@"
"""

_SYSTEMCTL = r"""#!/bin/bash
# sbxcheck sim: systemctl knowing one unit, tailscaled; state in files.
state=@STATE@
flag() { [ -e "$state/$1" ]; }
get() { cat "$state/tailscaled.$1" 2>/dev/null || echo "$2"; }
now=0; args=()
for a in "$@"; do
  case $a in --now) now=1 ;; -*) ;; *) args+=("$a") ;; esac
done
verb=${args[0]:-}; unit=${args[1]:-}; unit=${unit%.service}
if [ -n "$verb" ] && [ -z "$unit" ] && [ "$verb" != list-units ]; then
  echo "Too few arguments." >&2; exit 1
fi
known=1; [ "$unit" = tailscaled ] || known=0
case $verb in
  is-enabled)
    if flag unknown; then echo unknown; exit 1; fi
    if [ $known = 0 ]; then
      echo "Failed to get unit file state for $unit.service: No such file or directory" >&2; exit 1
    fi
    s=$(get enabled disabled); echo "$s"; [ "$s" = enabled ] && exit 0; exit 1 ;;
  is-active)
    if flag unknown; then echo unknown; exit 3; fi
    if [ $known = 0 ]; then echo inactive; exit 3; fi
    s=$(get active inactive); echo "$s"; [ "$s" = active ] && exit 0; exit 3 ;;
  enable|disable|start|stop|restart)
    if flag unknown || [ $known = 0 ]; then
      echo "Failed to $verb unit: Unit file $unit.service does not exist." >&2; exit 1
    fi
    if flag enable-denied; then
      echo "Failed to $verb unit: Access denied" >&2; exit 1
    fi
    case $verb in
      enable)
        if [ "$(get enabled disabled)" != enabled ]; then
          wants=/etc/systemd/system/multi-user.target.wants
          echo "Created symlink $wants/tailscaled.service → /lib/systemd/system/tailscaled.service." >&2
        fi
        echo enabled > "$state/tailscaled.enabled"
        [ $now = 1 ] && echo active > "$state/tailscaled.active" ;;
      disable)
        echo "Removed \"/etc/systemd/system/multi-user.target.wants/tailscaled.service\"." >&2
        echo disabled > "$state/tailscaled.enabled"
        [ $now = 1 ] && echo inactive > "$state/tailscaled.active" ;;
      start|restart) echo active > "$state/tailscaled.active" ;;
      stop) echo inactive > "$state/tailscaled.active" ;;
    esac
    exit 0 ;;
  status)
    s=$(get active inactive)
    echo "● $unit.service - Tailscale node agent"
    echo "     Loaded: loaded (/lib/systemd/system/tailscaled.service; $(get enabled disabled))"
    echo "     Active: $s"
    [ "$s" = active ] && exit 0; exit 3 ;;
  *) echo "Unknown command verb '$verb'." >&2; exit 1 ;;
esac
"""

_TAILSCALE = r"""#!/bin/bash
# sbxcheck sim: tailscale (ping, status, version) on a host whose tailscaled state is in files.
state=@STATE@
peer_ip=@PEER_IP@; peer_name=@PEER_NAME@; hang=@HANG@
mode=$(cat "$state/ping.mode" 2>/dev/null || echo ok)
sub=${1:-}; shift || true
running() { [ "$(cat "$state/tailscaled.active" 2>/dev/null)" = active ]; }
down() {
  echo "failed to connect to local tailscaled; it doesn't appear to be running (sudo systemctl start tailscaled ?)" >&2
  exit 1
}
case $sub in
  version) echo "1.80.2"; exit 0 ;;
  status) running || down; echo "$peer_ip  $peer_name  sbxcheck@  linux  -"; exit 0 ;;
  ping) ;;
  *) echo "tailscale: unknown subcommand: $sub" >&2; exit 1 ;;
esac
count=10; ip=""
while [ $# -gt 0 ]; do
  case $1 in
    -c|--c) count=$2; shift 2 ;;
    -c=*|--c=*) count=${1#*=}; shift ;;
    -*) shift ;;
    *) ip=$1; shift ;;
  esac
done
[ "$mode" = silent ] && exit 0
running || down
if [ "$mode" = timeout ]; then sleep "$hang"; echo "no reply" >&2; exit 1; fi
if [ "$mode" = no-reply ] || [ "$ip" != "$peer_ip" ]; then
  for _ in $(seq "$count"); do echo "ping \"$ip\" timed out"; done
  echo "no reply" >&2; exit 1
fi
if [ "$mode" = derp ]; then
  for _ in $(seq "$count"); do echo "pong from $peer_name ($peer_ip) via DERP(fra) in 23ms"; done
  echo "direct connection not established" >&2; exit 1
fi
echo "pong from $peer_name ($peer_ip) via 192.168.50.20:41641 in 3ms"
exit 0
"""

# The fleet's disk-sentinel, one pass: silent when every node answers, one line per node that
# does not. The DGX answers while tailscaled runs here and the DGX itself is up (ping mode not no-reply).
_SENTINEL = r"""#!/bin/bash
# sbxcheck sim: disk-sentinel --once
state=@STATE@; dgx=@PEER_NAME@
report() { echo "disk-sentinel: $1 unreachable (no answer on :22 for 7m)"; }
if [ -e "$state/sentinel.stuck" ] || [ "$(cat "$state/tailscaled.active" 2>/dev/null)" != active ] \
   || [ "$(cat "$state/ping.mode" 2>/dev/null)" = no-reply ]; then
  report "$dgx"
fi
for node in $(cat "$state/sentinel.others" 2>/dev/null); do report "$node"; done
exit 0
"""

_EXE_LS = r"""#!/bin/bash
# sbxcheck sim: exe.dev's `ls [-a] [pattern] --json` verb; without --json, the real ls.
state=@STATE@
json=0
for a in "$@"; do [ "$a" = --json ] && json=1; done
[ $json = 1 ] || exec @REAL_LS@ "$@"
if [ -e "$state/ls.fail" ]; then echo "error: internal error listing VMs, please retry" >&2; exit 1; fi
if [ -e "$state/ls.garbage" ]; then echo "Welcome to exe.dev! Type help for commands."; exit 0; fi
exec @PYTHON@ -c '
import fnmatch, json, sys
doc = json.load(open(sys.argv[1]))
pats = [a for a in sys.argv[2:] if not a.startswith("-")]
if pats:
    doc["vms"] = [v for v in doc["vms"] if any(fnmatch.fnmatchcase(v.get("vm_name", ""), p) for p in pats)]
print(json.dumps(doc, indent=2))
' "$state/vms.json" "$@"
"""

_EXE_WHOAMI = """#!/bin/bash
echo "sbxcheck-sim@exe.dev"
"""


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _fill(template: str, **values: str) -> str:
    for key, value in values.items():
        template = template.replace(f"@{key}@", value)
    leftover = _PLACEHOLDER.findall(template)
    if leftover:
        raise SimError(f"unfilled placeholders in a sim host program: {leftover}")
    return template


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _install(bin_dir: Path, name: str, text: str) -> Path:
    path = bin_dir / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return path


def _new_home(root: Path, name: str) -> tuple[Path, Path, Path]:
    home = root / name
    bin_dir, state = home / "bin", home / _STATE
    bin_dir.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    return home, bin_dir, state


def _tailscale_host(
    root: Path,
    name: str,
    *,
    enabled: bool,
    active: bool,
    ping: PingMode,
    systemctl_unknown: bool,
    enable_denied: bool,
    peer_ip: str,
    sudo_refused: bool = False,
    peer_name: str,
    ping_hang_s: float,
) -> HostHome:
    if ping not in PING_MODES:
        raise SimError(f"unknown ping mode {ping!r}; expected one of {', '.join(PING_MODES)}")
    home, bin_dir, state = _new_home(root, name)
    (state / "tailscaled.enabled").write_text("enabled\n" if enabled else "disabled\n")
    (state / "tailscaled.active").write_text("active\n" if active else "inactive\n")
    (state / "ping.mode").write_text(ping + "\n")
    for flag, on in (
        ("unknown", systemctl_unknown),
        ("enable-denied", enable_denied),
        ("sudo-refused", sudo_refused),
    ):
        (state / flag).unlink(missing_ok=True)
        if on:
            (state / flag).touch()
    q_state = _sh_quote(str(state))
    _install(bin_dir, "systemctl", _fill(_SYSTEMCTL, STATE=q_state))
    _install(bin_dir, "sudo", _fill(_SUDO, STATE=q_state))
    _install(bin_dir, "id", _ID)  # the operator logs in as a regular user, whoever runs the sim
    _install(
        bin_dir,
        "tailscale",
        _fill(
            _TAILSCALE,
            STATE=q_state,
            PEER_IP=_sh_quote(peer_ip),
            PEER_NAME=_sh_quote(peer_name),
            HANG=_sh_quote(f"{ping_hang_s:g}"),
        ),
    )
    return HostHome(name, home, (bin_dir,))


def make_agent_core(
    root: Path,
    *,
    name: str = "agent-core",
    tailscaled_enabled: bool = True,
    tailscaled_active: bool = True,
    ping: PingMode = "ok",
    systemctl_unknown: bool = False,
    enable_denied: bool = False,
    sudo_refused: bool = False,
    dgx_ip: str = DGX_TAILSCALE_IP,
    dgx_name: str = "dgx-spark",
    ping_hang_s: float = 60.0,
    lived_in: bool = False,
    sentinel_others: tuple[str, ...] = (),
    sentinel_stuck: bool = False,
) -> HostHome:
    """agent-core: systemctl + tailscale fakes; ``tailscale ping <dgx_ip>`` pongs while tailscaled is active.

    Knobs: tailscaled disabled / inactive, ``ping`` mode (``ok`` direct pong, ``derp`` relayed pongs
    then exit 1, ``no-reply``, ``timeout`` = sleep ``ping_hang_s`` then exit 1, ``silent`` = nothing,
    exit 0), ``systemctl_unknown`` (answers ``unknown``), ``enable_denied`` (enable fails: Access denied),
    ``sudo_refused`` (``sudo -n`` answers "a password is required"; otherwise sudo is passwordless),
    ``lived_in`` (a ~/.bashrc that prints around every command, see :data:`LIVED_IN_BASHRC`);
    ``disk-sentinel --once`` reports the DGX while it cannot answer, every node in ``sentinel_others``,
    and with ``sentinel_stuck`` the DGX even after it answers again.
    """
    host = _tailscale_host(
        root,
        name,
        enabled=tailscaled_enabled,
        active=tailscaled_active,
        ping=ping,
        systemctl_unknown=systemctl_unknown,
        enable_denied=enable_denied,
        sudo_refused=sudo_refused,
        peer_ip=dgx_ip,
        peer_name=dgx_name,
        ping_hang_s=ping_hang_s,
    )
    state = host.state_dir
    (state / "sentinel.others").write_text("".join(f"{n}\n" for n in sentinel_others))
    (state / "sentinel.stuck").unlink(missing_ok=True)
    if sentinel_stuck:
        (state / "sentinel.stuck").touch()
    _install(
        host.path_dirs[0],
        "disk-sentinel",
        _fill(_SENTINEL, STATE=_sh_quote(str(state)), PEER_NAME=_sh_quote(dgx_name)),
    )
    if lived_in:
        write_lived_in_shell(host.home)
    return host


def make_dgx_spark(
    root: Path, *, name: str = "dgx-spark", agent_core_ip: str = "100.64.0.1", lived_in: bool = False
) -> HostHome:
    """dgx-spark itself: a plain host (``true`` works) with tailscaled enabled and active."""
    host = _tailscale_host(
        root,
        name,
        enabled=True,
        active=True,
        ping="ok",
        systemctl_unknown=False,
        enable_denied=False,
        peer_ip=agent_core_ip,
        peer_name="agent-core",
        ping_hang_s=60.0,
    )
    if lived_in:
        write_lived_in_shell(host.home)
    return host


def make_exedev(
    root: Path,
    vms: Sequence[Mapping[str, Any]] = (),
    *,
    name: str = "exe.dev",
    ls_fails: bool = False,
    ls_garbage: bool = False,
) -> HostHome:
    """The exe.dev control host: ``ls --json`` prints ``{"vms": [...]}`` from ``.sim/vms.json``.

    ``ls`` without ``--json`` falls through to the real ``ls``. Knobs: ``ls_fails`` (exit 1 with an
    error), ``ls_garbage`` (a banner instead of JSON). Update the list with :func:`write_vms`.
    """
    home, bin_dir, state = _new_home(root, name)
    real_ls = shutil.which("ls", path="/usr/bin:/bin")
    if real_ls is None:
        raise SimError("no ls in /usr/bin or /bin for the exe.dev sim host to fall through to")
    host = HostHome(name, home, (bin_dir,))
    write_vms(host, vms)
    for flag, on in (("ls.fail", ls_fails), ("ls.garbage", ls_garbage)):
        (state / flag).unlink(missing_ok=True)
        if on:
            (state / flag).touch()
    q_state = _sh_quote(str(state))
    _install(
        bin_dir,
        "ls",
        _fill(_EXE_LS, STATE=q_state, REAL_LS=_sh_quote(real_ls), PYTHON=_sh_quote(sys.executable)),
    )
    _install(bin_dir, "whoami", _EXE_WHOAMI)
    return host


def exe_vm(vm_name: str, *, status: str = "running", region: str = "fra") -> dict[str, Any]:
    """One ``ls --json`` entry in the verified shape."""
    return {
        "vm_name": vm_name,
        "https_url": f"https://{vm_name}.exe.xyz",
        "ssh_dest": f"{vm_name}.exe.xyz",
        "status": status,
        "region": region,
        "region_display": "Frankfurt",
    }


def write_vms(host: HostHome, vms: Sequence[Mapping[str, Any]]) -> None:
    """Replace the exe.dev host's VM list (entries as :func:`exe_vm` builds them)."""
    host.state_dir.mkdir(parents=True, exist_ok=True)
    tmp = host.state_dir / "vms.json.tmp"
    tmp.write_text(json.dumps({"vms": [dict(v) for v in vms]}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, host.state_dir / "vms.json")


# ---------------------------------------------------------------- lived-in shells

# What a lived-in VM's ~/.bashrc prints for every `ssh host CMD` (Debian's bash reads it then): an
# MOTD hook and a version manager before the command, on both streams, a line left open, text that
# looks like the gate's own markers and a JSON body, and an EXIT trap that prints after the command.
LIVED_IN_BASHRC: Final = r"""# a lived-in VM: MOTD hook, nvm, direnv (sbxcheck sim)
printf 'Welcome to Ubuntu 24.04.1 LTS (GNU/Linux 6.8.0-49-generic x86_64)\n * Documentation:  https://help.ubuntu.com\n'
printf '{"data": {"usage": 0, "limit": 999}}\nSBX_HTTP 200\nSBX_CURL_RC 0\nSBX_END\n'
printf 'nvm: using node v22.11.0 (npm v10.9.0)\n' >&2
printf 'direnv: loading ~/.envrc'
printf 'direnv: export +VIRTUAL_ENV' >&2
trap 'printf "\nSBX_END\nlogout: see you soon\n"; printf "direnv: unloading\n" >&2' EXIT
"""


def write_bash_env(home: Path) -> Path:
    """Give ``home`` a ``~/.bash_env`` that every bash reads when ``BASH_ENV`` names it (nested ones too)."""
    path = home / ".bash_env"
    path.write_text(LIVED_IN_BASHRC.replace("(sbxcheck sim)", "(BASH_ENV, sbxcheck sim)"), encoding="utf-8")
    return path


def write_lived_in_shell(home: Path) -> Path:
    """Give ``home`` the noisy ~/.bashrc above; the SSH server must source it (``SimHost.source_bashrc``)."""
    rc = home / ".bashrc"
    rc.write_text(LIVED_IN_BASHRC, encoding="utf-8")
    return rc
