"""The pi CLI for simulated VMs: the real @mariozechner/pi-coding-agent from npm, else a stand-in.

``ensure_pi`` installs the pinned pi once into a per-user cache (``$SBXCHECK_CACHE`` or
``~/.cache/sbxcheck``) under an exclusive file lock, so concurrent pytest-xdist workers share one
install. It never raises: any failure yields the stdlib-only stand-in with a reason that names
what failed. ``write_pi_shim`` puts an executable ``pi`` into a VM's bin dir.

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
from typing import Literal

from sbxcheck.errors import SimError
from sbxcheck.redact import default_redactor

PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_VERSION = "0.73.1"
STANDIN_PATH = Path(__file__).resolve().parent / "assets" / "pi_standin.py"
_VERIFY_TIMEOUT_S = 30.0
_LOCK_POLL_S = 0.2


@dataclass(frozen=True)
class PiInstall:
    """Which pi a simulated VM gets. ``entry`` is pi's JS entry (real) or the stand-in script."""

    kind: Literal["real", "stand-in"]
    version: str
    entry: Path
    reason: str  # why the stand-in is used; "" for the real pi


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


def _standin(reason: str) -> PiInstall:
    return PiInstall("stand-in", PI_VERSION, STANDIN_PATH, reason)


def _forced_standin() -> bool:
    return os.environ.get("SBXCHECK_PI", "").strip().lower() == "stand-in"


def _cached(cache: Path) -> PiInstall | None:
    entry = _cli_entry(_install_dir(cache))
    return PiInstall("real", PI_VERSION, entry, "") if entry is not None else None


def pi_status(cache_dir: Path | str | None = None) -> str:
    """One line for a report header; never installs anything."""
    if _forced_standin():
        return "stand-in pi (SBXCHECK_PI=stand-in)"
    if shutil.which("node") is None:
        return "stand-in pi (node not on PATH)"
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if _cached(cache) is not None:
        return f"real pi {PI_VERSION} (cached)"
    if shutil.which("npm") is not None:
        return f"real pi {PI_VERSION} (will be installed with npm on first use)"
    return "stand-in pi (npm not on PATH)"


def ensure_pi(
    cache_dir: Path | str | None = None, *, allow_install: bool = True, timeout_s: float = 300.0
) -> PiInstall:
    """The real pi (cached, or installed now with npm), else the stand-in with a reason. Never raises."""
    if _forced_standin():
        return _standin("SBXCHECK_PI=stand-in forces the stand-in")
    if shutil.which("node") is None:
        return _standin("node not on PATH")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cached = _cached(cache)
    if cached is not None:
        return cached
    npm = shutil.which("npm")
    if npm is None:
        return _standin(f"pi {PI_VERSION} not cached in {cache} and npm not on PATH")
    if not allow_install:
        return _standin(f"pi {PI_VERSION} not cached in {cache} and installing is disabled")
    deadline = time.monotonic() + timeout_s
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return _standin(f"cannot create cache dir {cache}: {exc.strerror or exc}")
    try:
        with _exclusive_lock(cache / f"pi-{PI_VERSION}.lock", deadline):
            cached = _cached(cache)  # another worker may have finished while we waited
            if cached is not None:
                return cached
            return _install(npm, cache, deadline)
    except TimeoutError:
        return _standin(f"timed out after {timeout_s:g}s waiting for the install lock in {cache}")
    except OSError as exc:
        return _standin(f"cannot lock {cache}: {exc.strerror or exc}")
    except Exception as exc:  # never let a test session die here: fall back and say why
        return _standin(f"installing pi failed: {type(exc).__name__}: {_tail(str(exc))}")


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


def _install(npm: str, cache: Path, deadline: float) -> PiInstall:
    """npm-install into a temp dir in the cache, move it into place, verify ``--version``."""
    final = _install_dir(cache)
    for leftover in cache.glob(f".pi-{PI_VERSION}-*"):  # from a killed run; we hold the lock
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".pi-{PI_VERSION}-", dir=cache))
    try:
        argv = [npm, "install", "--prefix", str(tmp), "--no-audit", "--no-fund", "--loglevel=error"]
        argv.append(f"{PI_PACKAGE}@{PI_VERSION}")
        env = dict(os.environ, npm_config_update_notifier="false")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _standin("no time left to run npm install")
        result = _run_bounded(argv, remaining, env=env, cwd=tmp)
        if result is None:
            return _standin(f"npm install {PI_PACKAGE}@{PI_VERSION} timed out")
        code, output = result
        if code != 0:
            return _standin(f"npm install {PI_PACKAGE}@{PI_VERSION} failed (exit {code}): {_tail(output)}")
        if _cli_entry(tmp) is None:
            return _standin(f"npm install left no pi {PI_VERSION} CLI entry")
        if final.exists():  # a broken leftover: move it aside, then drop it
            stale = Path(tempfile.mkdtemp(prefix=f".pi-{PI_VERSION}-stale-", dir=cache))
            os.replace(final, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(tmp, final)
    except OSError as exc:
        return _standin(f"installing pi {PI_VERSION} into {cache} failed: {exc.strerror or exc}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    entry = _cli_entry(final)
    problem = _verify(entry) if entry is not None else "no CLI entry after the move"
    if problem:
        shutil.rmtree(final, ignore_errors=True)  # let the next run try again
        return _standin(f"installed pi {PI_VERSION} failed verification: {problem}")
    assert entry is not None
    return PiInstall("real", PI_VERSION, entry, "")


def _verify(entry: Path) -> str:
    """Run ``<shim> --version``; return "" when it reports PI_VERSION, else what went wrong."""
    install = PiInstall("real", PI_VERSION, entry, "")
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
    if install.kind == "real":
        node = shutil.which("node")
        if node is None:
            raise SimError("cannot write the pi shim: node not on PATH")
        command = [str(Path(node).resolve()), str(install.entry)]
    else:
        command = [sys.executable or "python3", str(install.entry)]
    bash = shutil.which("bash") or "/bin/bash"
    label = f"real pi {install.version}" if install.kind == "real" else "sbxcheck stand-in pi"
    script = (
        f"#!{Path(bash).resolve()}\n"
        f"# {label}, written by sbxcheck\n"
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
