"""The embedded fleet's execute/observe world, for the SSSF run items: a stand-in SDLC, the app and the trace UI.

Stdlib only: the VMs run this file directly (``python -I run_services.py …``) through shims the
fleet writes into each VM's ``bin``:

- ``sim-adw NAME PROMPT [EXTRA…]`` is what the checkout's ``adw`` recipe runs (``just … adw sdlc
  PROMPT`` in ``~/app``, as upstream's execute starts it): a long-running stand-in that writes
  plausible ``run.log`` lines and never calls a model. With a ``run.sdlc-*`` fault it writes the
  fault's OpenRouter error and exits 1 right after spawn, as a real SDLC would.
- ``sim-observe start`` is what the sim's ``observe`` recipe runs on the VM: it starts the app
  (``~/inkwell-app.log``) and the trace UI (``~/sssf-visualizer.log``) if they are down, each on a
  free loopback port (VMs share this machine: fixed ports would collide), and prints
  ``SBX_PORTS {"app": N, "obs": M}`` and what an anonymous GET of each answered.
- ``just`` is the real ``just``, so ``nohup just --shell bash --shell-arg -c adw …`` runs as upstream's.

The app answers 200; the trace UI 307 to its login page, as upstream's does. Faults are files in the
VM's ``~/.sim/`` (written by the fleet): ``run.app-down`` keeps the app's port bound but never
listening (connection refused: HTTP 000), ``run.obs-502`` makes the trace UI answer 502. Every
process started here belongs to the SSH session that started it, so the sim's SSH server ends it
when the fleet stops.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# fault name -> (file under ~/.sim, its content)
RUN_FAULTS: dict[str, tuple[str, str]] = {
    "run.sdlc-credits": ("sdlc-fault", "credits"),
    "run.sdlc-key-dead": ("sdlc-fault", "key-dead"),
    "run.sdlc-no-zdr": ("sdlc-fault", "no-zdr"),
    "run.sdlc-provisioning-key": ("sdlc-fault", "provisioning-key"),
    "run.app-down": ("app-fault", "down"),
    "run.obs-502": ("obs-fault", "502"),
}
# What OpenRouter answers, as the SDLC's pi call prints it (no key ever appears in these).
SDLC_ERRORS: dict[str, str] = {
    "credits": 'Error: 402 {"error":{"message":"This request requires more credits, or fewer max_tokens. You '
    "requested up to 65536 tokens, but can only afford 1022. To increase, visit "
    'https://openrouter.ai/settings/keys and create a key with a higher total limit","code":402}}',
    "key-dead": 'Error: 401 {"error":{"message":"Unauthorized: the API key is disabled or revoked","code":401}}',
    "no-zdr": 'Error: 404 {"error":{"message":"No endpoints found matching your data policy (Zero data '
    'retention). Configure: https://openrouter.ai/settings/privacy","code":404}}',
    "provisioning-key": 'Error: 401 {"error":{"message":"User not found.","code":401}}',
}
SERVICES = {"app": "inkwell-app.log", "obs": "sssf-visualizer.log"}
SDLC_SECONDS = 3600  # a healthy stand-in runs this long (``~/.sim/sdlc-seconds`` overrides), then completes
START_WAIT_S = 10.0


def apply_run_fault(home: Path, name: str) -> None:
    """Write fault ``name`` into the VM home ``home`` (read when the SDLC or a service starts)."""
    file, value = RUN_FAULTS[name]
    sim = home / ".sim"
    sim.mkdir(parents=True, exist_ok=True)
    (sim / file).write_text(value + "\n", encoding="utf-8")


def _real_just() -> str | None:
    """The ``just`` binary itself (a version manager's shim would look for its root under the VM's HOME)."""
    from sbxcheck.tools import find_tool  # host side only: the VMs run this file with the stdlib alone

    found = find_tool("just")
    return str(Path(found).resolve()) if found else None


def write_run_shims(bin_dir: Path) -> list[Path]:
    """Write ``sim-adw``, ``sim-observe`` and (when this machine has it) ``just`` into a VM's ``bin_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    me = shlex.quote(str(Path(__file__).resolve()))
    python = shlex.quote(sys.executable or "python3")
    scripts = {
        "sim-adw": f'exec {python} -I {me} sdlc "$@"\n',
        "sim-observe": f'exec {python} -I {me} "$@"\n',
    }
    just = _real_just()
    if just is not None:
        scripts["just"] = f'exec {shlex.quote(just)} "$@"\n'
    written = []
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n# written by the sbxcheck simulator\n" + body, encoding="utf-8")
        path.chmod(0o755)
        written.append(path)
    return written


def _knob(home: Path, name: str) -> str:
    try:
        return (home / ".sim" / name).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


# ---------------------------------------------------------------- the stand-in SDLC


def sdlc(home: Path, argv: list[str]) -> int:
    """The stand-in SDLC: log like one, then fail as the fault says, or run until stopped."""
    name = argv[0] if argv else "sdlc"
    prompt = " ".join(argv[1:2])[:80]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def log(line: str) -> None:
        print(line, flush=True)

    log(f"[adw] {name}: starting in {Path.cwd()} — prompt: {prompt}")
    log("[adw] plan: planner on openrouter/google/gemini-3.6-flash (thinking high)")
    fault = _knob(home, "sdlc-fault")
    if fault in SDLC_ERRORS:
        log(f"[pi] planner: {SDLC_ERRORS[fault]}")
        log(f"[adw] {name}: FAILED in plan (pi exited 1)")
        return 1
    log("[adw] plan: wrote specs/plan.md")
    log("[adw] build: builder on openrouter/deepseek/deepseek-v4-flash-0731")
    seconds = _knob(home, "sdlc-seconds")
    time.sleep(float(seconds) if seconds.replace(".", "", 1).isdigit() else SDLC_SECONDS)
    log(f"[adw] {name}: completed")
    return 0


# ---------------------------------------------------------------- app and trace UI


class _Handler(http.server.BaseHTTPRequestHandler):
    service = "app"
    fault = ""

    def do_GET(self) -> None:
        if self.service == "app":
            self._answer(200, "<!doctype html><title>inkwell</title><h1>inkwell</h1><p>the factory app</p>")
        elif self.fault == "502":
            self._answer(502, "<!doctype html><title>502 Bad Gateway</title><h1>Bad Gateway</h1>")
        elif self.path.startswith("/login"):
            self._answer(200, "<!doctype html><title>sssf visualizer</title><form>sign in</form>")
        else:
            self._answer(307, "", location="/login")

    def _answer(self, status: int, body: str, location: str = "") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if location:
            self.send_header("Location", location)
        self.end_headers()
        self.wfile.write(data)


def _write_port(home: Path, service: str, port: int) -> None:
    path = home / ".sim" / f"{service}.port"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{port} {os.getpid()}\n", encoding="utf-8")
    tmp.replace(path)


def serve(home: Path, service: str) -> int:
    """Serve ``service`` on a free loopback port (written to ``~/.sim/<service>.port``) until stopped."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    (home / ".sim").mkdir(exist_ok=True)
    fault = _knob(home, f"{service}-fault")
    if service == "app" and fault == "down":  # the port stays ours, nothing ever answers on it
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        _write_port(home, service, int(sock.getsockname()[1]))
        print(f"{service}: crashed at start-up (sim fault run.app-down)", flush=True)
        while True:
            time.sleep(3600)
    handler = type("Handler", (_Handler,), {"service": service, "fault": fault})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    _write_port(home, service, int(server.server_address[1]))
    print(f"{service}: listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


def _live_port(home: Path, service: str) -> int | None:
    """The port of a running ``service`` (its process alive), else None."""
    try:
        port, pid = (int(v) for v in (home / ".sim" / f"{service}.port").read_text().split()[:2])
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return port


def _status(port: int) -> int:
    """What an anonymous GET of ``http://127.0.0.1:PORT/`` answers (no redirect followed; 0: nothing)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/")
        return int(conn.getresponse().status)
    except OSError:
        return 0
    finally:
        conn.close()


def start(home: Path) -> int:
    """Start the app and the trace UI where they are down; print their ports and first answers."""
    (home / ".sim").mkdir(exist_ok=True)
    ports: dict[str, int] = {}
    for service, log in SERVICES.items():
        port = _live_port(home, service)
        if port is None:
            (home / ".sim" / f"{service}.port").unlink(missing_ok=True)
            with open(home / log, "ab") as out:
                subprocess.Popen(
                    [sys.executable, "-I", str(Path(__file__).resolve()), "serve", service],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=home,
                )  # fmt: skip
            deadline = time.monotonic() + START_WAIT_S
            while (port := _live_port(home, service)) is None and time.monotonic() < deadline:
                time.sleep(0.05)
        if port is None:
            print(f"sim-observe: {service} did not start (see ~/{log})", file=sys.stderr)
            return 1
        ports[service] = port
    print("SBX_PORTS " + json.dumps(ports, separators=(",", ":")))
    print(f"SBX_CODES {_status(ports['app']):03d} {_status(ports['obs']):03d}")
    return 0


def main(argv: list[str]) -> int:
    home = Path(os.environ.get("HOME") or Path.home())
    if argv[:1] == ["sdlc"]:
        return sdlc(home, argv[1:])
    if argv[:1] == ["start"]:
        return start(home)
    if len(argv) == 2 and argv[0] == "serve" and argv[1] in SERVICES:
        with contextlib.suppress(KeyboardInterrupt):
            return serve(home, argv[1])
        return 0
    print("usage: sim-observe start | sim-adw NAME PROMPT [EXTRA...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
