"""The simulated SSSF recipes: the ``just sbx`` surface in the sim checkout, and exe.dev's verbs.

:func:`write_recipes` copies ``assets/sssf/`` (``just/sandbox/*.just`` and
``sandbox_mount/host/*``) into the checkout before its first commit, so VM clones carry them, as
upstream's do. They run with the real ``just`` from the checkout: ``just sbx mount RUN_ID``,
``just sbx lifecycle create|fill|setup|execute|observe|teardown`` (execute and observe start the
stand-ins of :mod:`sbxcheck.sim.run_services`), ``just sbx manage list|harvest|reap``.
:func:`write_sim_env` writes ``.sandbox/sim.env`` (gitignored, non-secret): where ssh_config,
known_hosts, the OpenRouter double and the fill source are. The recipes source it.

:func:`install_exedev_verbs` puts ``new``, ``rm`` and ``share`` into the exe.dev host's bin dir.
``new``/``rm`` call the sim admin API (:mod:`sbxcheck.sim.admin`) with the token from a 0600 file.

Knobs: files in the fleet's ``knobs/`` dir, read at the moment of use, so tests flip them at runtime.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Final

from sbxcheck.errors import SimError

ASSETS: Final = Path(__file__).resolve().parent / "assets" / "sssf"
_EXECUTABLE: Final = frozenset({"sandbox_mount/host/run_record.py", "sandbox_mount/host/sbx_json.py"})

KNOBS: Final[dict[str, str]] = {
    "revoke-fail": "run ids, one a line, or '*': teardown's DELETE /keys/<hash> answers 500, so teardown "
    "exits 1 at the revoke step with the VM untouched and the record open",
    "mount-fail": "'new' (or empty): exe.dev `new` exits 1; 'mint': POST /keys answers 500 (the VM stays, an "
    "orphan). Either way create prints `create FAILED (exit N). Nothing was destroyed — inspect, then:`",
    "mount-slow": "seconds: mount sleeps this long before printing `mounted:`, after writing the "
    "`mount-started` marker beside the knobs (the VM, key and record exist then; for interrupt tests)",
    "teardown-slow": "seconds: teardown sleeps this long before its first step, after writing the "
    "`teardown-started` marker beside the knobs (for interrupt tests)",
}


def recipe_files() -> dict[str, tuple[str, int]]:
    """Checkout-relative path -> (text, mode) of every recipe asset."""
    if not ASSETS.is_dir():
        raise SimError(f"sim: recipe assets missing at {ASSETS}")
    out: dict[str, tuple[str, int]] = {}
    for path in sorted(ASSETS.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        rel = path.relative_to(ASSETS).as_posix()
        out[rel] = (path.read_text(encoding="utf-8"), 0o755 if rel in _EXECUTABLE else 0o644)
    return out


def write_recipes(checkout: Path) -> list[str]:
    """Write the recipe assets into ``checkout``; return their relative paths."""
    files = recipe_files()
    for rel, (text, mode) in files.items():
        target = checkout / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        target.chmod(mode)
    return list(files)


def write_sim_env(checkout: Path, values: dict[str, str]) -> Path:
    """Write ``.sandbox/sim.env`` (shell-quoted ``SBX_*`` assignments; never a secret)."""
    lines = ["# written by the sbxcheck simulator: where the simulated fleet is (no secrets)"]
    for name, value in values.items():
        if not name.startswith("SBX_") or not name.replace("_", "").isalnum():
            raise SimError(f"sim: bad sim.env name {name!r}")
        lines.append(f"{name}={shlex.quote(value)}")
    path = checkout / ".sandbox" / "sim.env"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("sim.env.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def set_knob(knobs_dir: Path, name: str, value: str = "") -> Path:
    """Set knob ``name`` (see :data:`KNOBS`) to ``value``."""
    if name not in KNOBS:
        raise SimError(f"sim: unknown knob {name!r}; known: {', '.join(KNOBS)}")
    knobs_dir.mkdir(parents=True, exist_ok=True)
    path = knobs_dir / name
    tmp = knobs_dir / f".{name}.tmp"
    tmp.write_text(value + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def clear_knob(knobs_dir: Path, name: str) -> None:
    """Unset knob ``name``."""
    if name not in KNOBS:
        raise SimError(f"sim: unknown knob {name!r}; known: {', '.join(KNOBS)}")
    (knobs_dir / name).unlink(missing_ok=True)


# ---------------------------------------------------------------- exe.dev verbs

_COMMON = r'''
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

ADMIN = @ADMIN@
TOKEN_FILE = Path(@TOKEN@)
KNOBS = Path(@KNOBS@)
TIMEOUT_S = 15


def admin(method, path, body=None):
    """(status, JSON body) of one admin API call; (0, {}) when it cannot be reached."""
    token = TOKEN_FILE.read_text(encoding="utf-8").strip()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(ADMIN + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    req.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=TIMEOUT_S) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except (OSError, ValueError):
        return 0, {}


def message(doc):
    err = doc.get("error") if isinstance(doc, dict) else None
    return err.get("message", "") if isinstance(err, dict) else ""


def knob(name):
    try:
        return (KNOBS / name).read_text(encoding="utf-8").strip()
    except OSError:
        return None
'''

_NEW = r"""
VALUE_FLAGS = {"--name", "--image", "--cpu", "--memory", "--disk", "--env", "--tag", "--setup-script",
               "--prompt", "--integration", "--registry-auth", "--comment", "--pool"}


def main(argv):
    opts = {"--tag": []}
    as_json = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        if arg == "--json":
            as_json = True
        elif arg == "--no-email":
            pass
        elif flag in VALUE_FLAGS:
            if not eq:
                i += 1
                if i >= len(argv):
                    print(f"error: {flag} needs a value", file=sys.stderr)
                    return 2
                inline = argv[i]
            if flag == "--tag":
                opts["--tag"].append(inline)
            else:
                opts[flag] = inline
        else:
            print(f"error: unknown flag {arg!r} (there is no --command)", file=sys.stderr)
            return 2
        i += 1
    fail = knob("mount-fail")
    if fail is not None and fail in ("", "new"):
        print("error: failed to create VM: simulated failure (sbxcheck knob mount-fail)", file=sys.stderr)
        return 1
    name = opts.get("--name")
    if not name:
        import secrets
        name = "vm-" + secrets.token_hex(3)
    status, doc = admin("POST", "/vms", {"name": name, "tags": opts["--tag"]})
    if status == 409:
        print(f"error: a VM named {name!r} already exists", file=sys.stderr)
        return 1
    if status != 201:
        print(f"error: could not create VM {name!r}: {message(doc) or status or 'unreachable'}", file=sys.stderr)
        return 1
    shown = {
        "vm_name": doc["vm_name"],
        "tags": opts["--tag"],
        "ssh_command": "ssh " + doc["ssh_dest"],
        "ssh_dest": doc["ssh_dest"],
        "ssh_port": doc["ssh_port"],
        "https_url": doc["https_url"],
    }
    if as_json:
        print(json.dumps(shown, indent=2))
    else:
        print(f"Created {shown['vm_name']}\n  ssh {shown['ssh_dest']}\n  {shown['https_url']}")
    return 0


sys.exit(main(sys.argv[1:]))
"""

_RM = r"""
def main(argv):
    if not argv or any(a.startswith("-") or "/" in a for a in argv):
        import os
        os.execv(@REAL_RM@, [@REAL_RM@, *argv])  # not a VM name: the real rm
    rc = 0
    for name in argv:
        status, doc = admin("DELETE", "/vms/" + name)
        if status == 200:
            print(f"Deleted {name}")
        elif status == 404:
            print(f"error: VM {name!r} not found", file=sys.stderr)
            rc = 1
        else:
            print(f"error: could not delete {name!r}: {message(doc) or status or 'unreachable'}", file=sys.stderr)
            rc = 1
    return rc


sys.exit(main(sys.argv[1:]))
"""

_SHARE = r"""
USAGE = "usage: share port <vm> <port> | share set-public <vm> | share set-private <vm> | share show <vm>"


def main(argv):
    if len(argv) < 2 or argv[0] not in ("port", "set-public", "set-private", "show"):
        print(USAGE, file=sys.stderr)
        return 2
    verb, vm = argv[0], argv[1]
    if verb == "port" and (len(argv) != 3 or not argv[2].isdigit()):
        print(USAGE, file=sys.stderr)
        return 2
    status, doc = admin("GET", "/vms")
    if status != 200:
        print(f"error: could not list VMs: {message(doc) or status or 'unreachable'}", file=sys.stderr)
        return 1
    if not any(v.get("vm_name") == vm for v in doc.get("vms", [])):
        print(f"error: VM {vm!r} not found", file=sys.stderr)
        return 1
    if verb == "show":
        print(json.dumps({"vm_name": vm, "port": 4501, "public": True}))
    return 0  # accepted; the sim has no proxy to configure


sys.exit(main(sys.argv[1:]))
"""


def _script(body: str, admin_url: str, token_file: Path, knobs_dir: Path) -> str:
    python = sys.executable or "/usr/bin/python3"
    text = f"#!{python} -I\n# exe.dev verb, written by the sbxcheck simulator\n{_COMMON}{body}"
    real_rm = "/bin/rm" if Path("/bin/rm").exists() else "/usr/bin/rm"
    values = {
        "@ADMIN@": repr(admin_url.rstrip("/")),
        "@TOKEN@": repr(str(token_file)),
        "@KNOBS@": repr(str(knobs_dir)),
        "@REAL_RM@": repr(real_rm),
    }
    for marker, value in values.items():
        text = text.replace(marker, value)
    return text


def install_exedev_verbs(bin_dir: Path, *, admin_url: str, token_file: Path, knobs_dir: Path) -> list[Path]:
    """Write exe.dev's ``new``, ``rm`` and ``share`` into ``bin_dir`` (``ls``/``whoami`` exist already)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, body in (("new", _NEW), ("rm", _RM), ("share", _SHARE)):
        path = bin_dir / name
        path.write_text(_script(body, admin_url, token_file, knobs_dir), encoding="utf-8")
        path.chmod(0o755)
        written.append(path)
    return written
