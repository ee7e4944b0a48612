"""A real SSSF checkout's ``just sbx`` recipes, run against the embedded fleet.

The stand-in recipes (:mod:`sbxcheck.sim.sssf_recipes`) were written from the same specs as the
rest of sbxcheck; a real checkout (upstream inkwell, or a person's own modified copy) is the
test that matters. The fleet copies it to ``<root>/sssf`` (the original is never written), commits
the copy so VMs can clone it, and runs its recipes unchanged. What those recipes reach outside
the machine reaches the simulator instead, through small tools first on their PATH:

host side (``<root>/upstream/bin``, put first on PATH by ``sim-env``, the templates' argv[0])
  ``ssh``     the system ssh with the fleet's ssh_config and known_hosts: ``ssh exe.dev new|ls|rm|share``
              reaches the simulated exe.dev CLI (JSON as documented), ``ssh <vm>.exe.xyz`` its VM.
  ``scp``     ``scp host:path dest`` as ``ssh host cat path`` (the simulated sshd has no SFTP).
  ``curl``    ``https://openrouter.ai/…`` goes to the simulated OpenRouter (mint, usage, revoke, list);
              ``https://<vm>.exe.xyz[:port]/`` to that VM's app or trace UI.
  ``mktemp``  BSD's ``-t PREFIX`` form, which upstream's teardown and reap use, as macOS runs it.
              The ``host.gnu-mktemp`` fault leaves it out: GNU mktemp then refuses it, as on Linux.

VM side (each VM's ``~/bin``, and ``~/.gitconfig``)
  ``git``     the factory's GitHub URL (``url.<copy>.insteadOf``) clones the committed copy.
  ``curl``    OpenRouter as above; ``127.0.0.1:4501``/``:4600`` reach this VM's app and trace UI
              (VMs share one machine, so each service runs on a free port).
  ``ss``      lists this VM's app and trace UI as upstream's ports 4501 and 4600.
  ``bun``/``bunx``  ``--version``, ``install``, ``vite build``, ``run server.ts`` (the app) and
              ``run server/index.ts`` (the trace UI) of :mod:`sbxcheck.sim.run_services`.
  ``uv``      ``uv run``: provision's trace-db script creates the db with sqlite3, ``adw_prompt.py
              --help`` answers, any other ``adws/adw_*.py`` is a stand-in SDLC that prints the
              upstream closing panel (``ADW complete`` with its ``status`` row) and exits 0 or 1.
  ``pi``      the image's pi, with ``~/.pi/agent/models.json``'s public OpenRouter URL pointed at the
              simulated one first (provision writes it from the template as upstream ships it).

Knobs of the stand-in SDLC, in the VM's ``~/.sim/``: ``sdlc-seconds`` (how long it runs, default
3600) and ``sdlc-fault`` (any content: it fails after its first phase).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sbxcheck.errors import SimError
from sbxcheck.inventory import RECIPES, RecipeTemplates

__all__ = ["UpstreamRecipes", "looks_like_sssf_checkout"]

_SKIP: Final = frozenset({".git", ".sandbox", ".env", "node_modules", "dist", ".venv", "__pycache__"})
# what a VM writes inside app/ that upstream's own .gitignore keeps out of `git status`
_IGNORED: Final = (".env", ".sandbox/", "run.log", "node_modules/", "dist/", "adws/adw_data/", "*.db")
_GITHUB_RE: Final = re.compile(r"https://github\.com/[A-Za-z0-9._-]+/[A-Za-z0-9._-]+")
_MAX_COPY_FILES: Final = 20_000
# where upstream's observe looks for the app and the trace UI (the copy gets stand-ins if absent)
_APP_STANDINS: Final = {
    "apps/inkwell/server.ts": "// sbxcheck sim stand-in: the VM's bun serves the sim app for this file\n",
    ".claude/skills/sssf/apps/visualizer/server/index.ts": "// sbxcheck sim stand-in: the trace UI\n",
}
_GIT_ENV: Final = {
    "GIT_AUTHOR_NAME": "sbxcheck-sim",
    "GIT_AUTHOR_EMAIL": "sim@example.invalid",
    "GIT_COMMITTER_NAME": "sbxcheck-sim",
    "GIT_COMMITTER_EMAIL": "sim@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def looks_like_sssf_checkout(path: Path) -> str | None:
    """None when ``path`` holds SSSF recipes (``just/sandbox/``, ``run_record.py``), else why not."""
    if not path.is_dir():
        return f"{path} is not a directory"
    missing = [
        rel for rel in ("justfile", "just/sandbox", "sandbox_mount/host/run_record.py") if not (path / rel).exists()
    ]
    if missing:
        return f"{path} is not an SSSF checkout: no {', '.join(missing)} (expected the inkwell repository's root)"
    return None


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull}
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SimError(f"sim: git {args[0]} in {cwd} failed: {exc}") from None
    if done.returncode != 0:
        raise SimError(f"sim: git {' '.join(args[:2])} in {cwd} failed: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


def _write(path: Path, text: str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(mode)
    os.replace(tmp, path)
    return path


@dataclass
class UpstreamRecipes:
    """One fleet's copy of a real checkout, and the tools that point its recipes at the simulator."""

    source: Path
    root: Path  # the fleet's directory
    gnu_mktemp: bool = False  # the host.gnu-mktemp fault: no BSD-compatible mktemp on PATH

    @property
    def checkout(self) -> Path:
        return self.root / "sssf"

    @property
    def bin_dir(self) -> Path:
        return self.root / "upstream" / "bin"

    @property
    def env_tool(self) -> Path:
        """The templates' argv[0]: puts :attr:`bin_dir` first on PATH, then runs the rest."""
        return self.bin_dir / "sim-env"

    def describe(self) -> str:
        return f"real ({self.source})"

    def templates(self) -> RecipeTemplates:
        """The recipe templates, each run through :attr:`env_tool` from the copy."""
        tool = shlex.quote(str(self.env_tool))
        defaults = RecipeTemplates()
        fields: dict[str, object] = {str(name): f"{tool} {defaults.template(name)}" for name in RECIPES}
        fields["cwd"] = self.checkout
        return RecipeTemplates.model_validate(fields)

    # ------------------------------------------------------------ the copy

    def make_checkout(self, provisioning_key: str) -> str:
        """Copy the source to :attr:`checkout`, commit it (VMs clone that commit), write ``.env``; HEAD sha."""
        source = self.source.resolve()
        if (why := looks_like_sssf_checkout(source)) is not None:
            raise SimError(f"sim: --sssf-checkout: {why}")
        dest = self.checkout
        if dest.exists():
            shutil.rmtree(dest)
        count = 0

        def ignore(directory: str, names: list[str]) -> set[str]:
            nonlocal count
            count += len(names)
            if count > _MAX_COPY_FILES:
                raise SimError(f"sim: {source} has more than {_MAX_COPY_FILES} files to copy; point at the repo root")
            return {n for n in names if n in _SKIP}

        shutil.copytree(source, dest, symlinks=True, ignore=ignore)
        for rel, text in _APP_STANDINS.items():
            target = dest / rel
            if not target.parent.exists():  # the real app is absent from this copy: observe still finds a dir
                _write(target, text, 0o644)
        gitignore = dest / ".gitignore"
        have = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.is_file() else []
        extra = [line for line in _IGNORED if line not in have]
        if extra:
            _write(gitignore, "\n".join([*have, *extra]) + "\n", 0o644)
        _git(dest, "init", "-q", "-b", "main")
        _git(dest, "add", "-A")
        _git(dest, "commit", "-q", "-m", f"factory (copy of {source} for the sbxcheck simulator)")
        env_file = dest / ".env"
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"OPENROUTER_PROVISIONING_KEY={provisioning_key}\n")
        return _git(dest, "rev-parse", "HEAD")

    def session_id_callers(self) -> list[str]:
        """The checkout's ``adws/`` files that pass pi ``--session-id`` (the real ADWs' agent_pi.py does)."""
        adws = self.checkout / "adws"
        found = []
        for path in sorted(adws.rglob("*.py")) if adws.is_dir() else []:
            try:
                if "--session-id" in path.read_text(encoding="utf-8", errors="replace"):
                    found.append(str(path.relative_to(self.checkout)))
            except OSError:
                continue
        return found

    def github_urls(self) -> list[str]:
        """The GitHub repositories the recipes clone (fill's factory repo)."""
        found: set[str] = set()
        for path in sorted((self.checkout / "just").rglob("*.just")):
            found.update(m.removesuffix(".git") for m in _GITHUB_RE.findall(path.read_text(encoding="utf-8")))
        return sorted(found)

    # ------------------------------------------------------------ host tools

    def install_host_tools(self, *, ssh_config: Path, known_hosts: Path, openrouter_url: str, vms_root: Path) -> None:
        """Write ``sim-env``, ``ssh``, ``scp``, ``curl`` and (unless GNU's is wanted) ``mktemp``."""
        bin_dir = self.bin_dir
        bin_dir.mkdir(parents=True, exist_ok=True)
        real_ssh = shutil.which("ssh", path="/usr/bin:/bin:/usr/local/bin") or "ssh"
        real_curl = shutil.which("curl", path="/usr/bin:/bin:/usr/local/bin") or "curl"
        real_mktemp = shutil.which("mktemp", path="/usr/bin:/bin") or "mktemp"
        q = shlex.quote
        _write(
            self.env_tool,
            "#!/bin/sh\n# sbxcheck sim: the recipes' PATH starts with the simulator's tools\n"
            f'PATH={q(str(bin_dir))}:"$PATH"; export PATH\nexec "$@"\n',
        )
        ssh_opts = (
            f"-F {q(str(ssh_config))} -o UserKnownHostsFile={q(str(known_hosts))} "
            "-o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o LogLevel=ERROR"
        )
        _write(bin_dir / "ssh", f'#!/bin/sh\n# sbxcheck sim: the simulated fleet\nexec {q(real_ssh)} {ssh_opts} "$@"\n')
        _write(bin_dir / "scp", f"#!{sys.executable} -I\n" + _SCP.replace("@SSH@", repr(str(bin_dir / "ssh"))))
        _write(
            bin_dir / "curl",
            f"#!{sys.executable} -I\n"
            + _CURL.replace("@REAL@", repr(real_curl))
            .replace("@OPENROUTER@", repr(openrouter_url.rstrip("/")))
            .replace("@VMS@", repr(str(vms_root))),
        )
        if self.gnu_mktemp:
            (bin_dir / "mktemp").unlink(missing_ok=True)
        else:
            _write(bin_dir / "mktemp", _MKTEMP.replace("@REAL@", q(real_mktemp)))

    # ------------------------------------------------------------ VM tools

    def prepare_vm(self, home: Path, *, openrouter_url: str) -> None:
        """What a fresh VM needs for the recipes: the factory clone URL, and curl/ss/bun/bunx/uv/pi stand-ins."""
        urls = self.github_urls()
        lines = [f'[url "{self.checkout}"]', *(f"\tinsteadOf = {url}.git\n\tinsteadOf = {url}" for url in urls)]
        _write(home / ".gitconfig", "\n".join(lines) + "\n" if len(lines) > 1 else "", 0o644)
        bin_dir = home / "bin"
        services = Path(__file__).resolve().parent / "run_services.py"
        real_curl = shutil.which("curl", path="/usr/bin:/bin:/usr/local/bin") or "curl"
        head = f"#!{sys.executable} -I\n"
        _write(
            bin_dir / "curl",
            head
            + _CURL.replace("@REAL@", repr(real_curl))
            .replace("@OPENROUTER@", repr(openrouter_url.rstrip("/")))
            .replace("@VMS@", repr("")),
        )
        _write(bin_dir / "ss", head + _SS)
        tools = _VM_TOOLS.replace("@SERVICES@", repr(str(services))).replace("@PYTHON@", repr(sys.executable))
        for name in ("bun", "bunx", "uv"):
            _write(bin_dir / name, head + tools)
        pi = bin_dir / "pi"
        if pi.is_file() and "sbxcheck sim: models.json" not in pi.read_text(encoding="utf-8"):
            os.replace(pi, bin_dir / "pi-image")
            _write(
                pi,
                head
                + _PI.replace("@OPENROUTER@", repr(openrouter_url.rstrip("/"))).replace(
                    "@REAL@", repr(str(bin_dir / "pi-image"))
                ),
            )


# ---------------------------------------------------------------- the tools' sources (stdlib only)

_SCP = r'''# sbxcheck sim: scp as ssh + cat (the simulated sshd speaks no SFTP)
import os, sys
SSH = @SSH@
VALUE = {"-o", "-F", "-P", "-i", "-c", "-l", "-S", "-J"}
opts, paths, i, argv = [], [], 0, sys.argv[1:]
while i < len(argv):
    a = argv[i]
    if a in VALUE and i + 1 < len(argv):
        if a == "-P":
            opts += ["-p", argv[i + 1]]
        elif a != "-S":
            opts += [a, argv[i + 1]]
        i += 2
        continue
    if a.startswith("-"):
        i += 1
        continue
    paths.append(a)
    i += 1
if len(paths) != 2:
    sys.exit("scp (sbxcheck sim): expected SOURCE DEST")
src, dst = paths
import shlex, subprocess
if ":" in src and not src.startswith("/"):
    host, path = src.split(":", 1)
    with open(dst, "wb") as out:
        sys.exit(subprocess.call([SSH, *opts, host, "cat -- " + shlex.quote(path)], stdout=out))
host, path = dst.split(":", 1)
with open(src, "rb") as inp:
    sys.exit(subprocess.call([SSH, *opts, host, "cat > " + shlex.quote(path)], stdin=inp))
'''

_CURL = r'''# sbxcheck sim: curl with OpenRouter and the VMs' https URLs pointed at the simulator
import os, re, sys
from pathlib import Path
REAL, OPENROUTER, VMS = @REAL@, @OPENROUTER@, @VMS@
OBS_PORT = "4600"


def live(home, service):
    try:
        port, pid = (int(v) for v in (home / ".sim" / f"{service}.port").read_text().split()[:2])
        os.kill(pid, 0)
        return port
    except (OSError, ValueError):
        return None


def service_url(home, port, rest):
    got = live(home, "obs" if port == OBS_PORT else "app")
    return f"http://127.0.0.1:{got or 9}{rest}"  # nothing serving: port 9 refuses (000), as a dead proxy


def rewrite(arg):
    if arg.startswith("https://openrouter.ai"):
        return OPENROUTER.rsplit("/api/", 1)[0] + arg[len("https://openrouter.ai"):]
    m = re.match(r"https://([a-z0-9-]+)\.exe\.xyz(?::(\d+))?(/.*)?$", arg)
    if m and VMS:
        return service_url(Path(VMS) / m.group(1), m.group(2) or "443", m.group(3) or "/")
    m = re.match(r"https?://(?:127\.0\.0\.1|localhost):(4501|4600)(/.*)?$", arg)
    if m and not VMS:
        return service_url(Path(os.environ.get("HOME", "")), m.group(1), m.group(2) or "/")
    return arg


os.execv(REAL, [REAL, "--noproxy", "*", *(rewrite(a) for a in sys.argv[1:])])
'''

_MKTEMP = r"""#!/bin/bash
# sbxcheck sim: mktemp as macOS runs it, where `-t PREFIX` names a file after PREFIX (BSD); GNU
# mktemp reads -t's argument as a template and refuses one without XXX (the host.gnu-mktemp fault)
args=() dir=0 prefix=""
while [ $# -gt 0 ]; do
  case "$1" in
    -d) dir=1; args+=("$1") ;;
    -t) prefix=${2-}; shift ;;
    -dt) dir=1; args+=(-d); prefix=${2-}; shift ;;
    *) args+=("$1") ;;
  esac
  shift
done
if [ -n "$prefix" ] && [[ $prefix != *XXX* ]]; then
  exec @REAL@ "${args[@]}" "${TMPDIR:-/tmp}/$prefix.XXXXXXXX"
fi
[ -n "$prefix" ] && exec @REAL@ "${args[@]}" -t "$prefix"
exec @REAL@ "${args[@]}"
"""

_SS = r'''# sbxcheck sim: `ss -ltn` listing this VM's app and trace UI on upstream's ports
import os, sys
from pathlib import Path
home = Path(os.environ.get("HOME", ""))
print("State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process")
for service, port in (("app", 4501), ("obs", 4600)):
    try:
        real, pid = (int(v) for v in (home / ".sim" / f"{service}.port").read_text().split()[:2])
        os.kill(pid, 0)
    except (OSError, ValueError):
        continue
    print(f"LISTEN 0      128          *:{port}            *:*")
'''

_PI = r'''# sbxcheck sim: models.json's public OpenRouter URL points at the simulator, then the image's pi
import json, os, sys
from pathlib import Path
OPENROUTER, REAL = @OPENROUTER@, @REAL@
path = Path(os.environ.get("HOME", "")) / ".pi" / "agent" / "models.json"
try:
    text = path.read_text(encoding="utf-8")
    if "https://openrouter.ai/api/v1" in text:
        tmp = path.with_name(".models.json.tmp")
        tmp.write_text(text.replace("https://openrouter.ai/api/v1", OPENROUTER), encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
except OSError:
    pass
settings = path.with_name("settings.json")
if not settings.exists():
    try:  # the fleet has no route to openrouter.ai: short retries, same verdicts
        settings.write_text(json.dumps({"retry": {"baseDelayMs": 100, "provider": {"maxRetries": 0}}}))
    except OSError:
        pass
os.execv(REAL, [REAL, *sys.argv[1:]])
'''

_VM_TOOLS = r'''# sbxcheck sim: bun, bunx and uv as upstream's provision, observe and execute call them
import os, signal, sqlite3, sys, time
from pathlib import Path
SERVICES, PYTHON = @SERVICES@, @PYTHON@
home = Path(os.environ.get("HOME", ""))
tool, argv = Path(sys.argv[0]).name, sys.argv[1:]


def knob(name):
    try:
        return (home / ".sim" / name).read_text(encoding="utf-8").strip()
    except OSError:
        return None


def panel(ok, adw_id):
    status = "✓ success" if ok else "✗ fail"
    rows = [f" status   {status}", f" phases   {3 if ok else 1}/3 passed", " tokens   1,234",
            " cost     $0.0012", f" adw_id   {adw_id}", f" next     just phases {adw_id}"]
    width = max(len(r) for r in rows) + 2
    print("╭" + " ADW complete ".center(width, "─") + "╮")
    for r in rows:
        print("│" + r.ljust(width) + "│")
    print("╰" + "─" * width + "╯", flush=True)


def sdlc(script, rest):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    adw_id = "sim" + os.urandom(3).hex()
    print(f"adw_id: {adw_id}   engineer sbxcheck-sim", flush=True)
    print(f"▶ 01 plan  agent · planner  ({script})", flush=True)
    if knob("sdlc-fault") is not None:
        print("  ✗ plan 0.4s  pi exited 1", flush=True)
        panel(False, adw_id)
        return 1
    print("  ✓ plan 0.4s", flush=True)
    print("▶ 02 build  agent · builder", flush=True)
    seconds = knob("sdlc-seconds") or "3600"
    time.sleep(float(seconds) if seconds.replace(".", "", 1).isdigit() else 3600)
    print("  ✓ build 1.0s", flush=True)
    print("  ✓ test 0.2s", flush=True)
    panel(True, adw_id)
    return 0


def uv(argv):
    if argv[:1] == ["--version"]:
        print("uv 0.5.0 (sbxcheck sim)")
        return 0
    if argv[:1] != ["run"] or len(argv) < 2:
        print("uv (sbxcheck sim): only `uv run SCRIPT` is served", file=sys.stderr)
        return 2
    script, rest = argv[1], argv[2:]
    name = Path(script).name
    if name.startswith("sssf_init_db"):
        db = Path("adws/adw_data/sssf.db")
        db.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(db) as conn:
            for table in ("sessions", "phases", "events", "procs"):
                conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id TEXT PRIMARY KEY, body TEXT)")
        print(f"   {db} — 4 tables")
        return 0
    if "--help" in rest:
        print(f"usage: {name} [-h] [--config CONFIG] prompt")
        return 0
    if name.startswith("adw_") and name.endswith(".py"):
        return sdlc(script, rest)
    print(f"uv (sbxcheck sim): no stand-in for {script}", file=sys.stderr)
    return 1


def bun(argv):
    if argv[:1] == ["--version"]:
        print("1.2.0-sbxcheck-sim")
        return 0
    if argv[:1] == ["install"]:
        print("bun install (sbxcheck sim): nothing to install")
        return 0
    if argv[:1] == ["run"] and len(argv) > 1:
        service = "obs" if argv[1].startswith("server/") else "app"
        os.execv(PYTHON, [PYTHON, "-I", SERVICES, "serve", service])
    print(f"bun (sbxcheck sim): unsupported: {' '.join(argv)}", file=sys.stderr)
    return 1


if tool == "uv":
    sys.exit(uv(argv))
if tool == "bunx":
    print("vite build (sbxcheck sim): dist/ unchanged")
    sys.exit(0)
sys.exit(bun(argv))
'''
