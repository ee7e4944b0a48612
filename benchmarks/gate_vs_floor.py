"""`pytest -m gate` against the raw SSH floor on the same fresh embedded fleet, at N = 3 and N = 200.

    python benchmarks/gate_vs_floor.py [--runs 3 200] [--repeat 3]

The floor is a plain paramiko script: one connection per VM, VMs in parallel, each VM's scripts in
flight together over its connection — exactly the commands and stdin the gate's check functions send
(taken from the check functions themselves), read to the end, nothing judged. Both are child
processes, timed wall clock from start to exit, interleaved (floor, gate, floor, gate, …). Prints each
median, the ratio (targets: the gate's fixed cost, gate − floor, ≤ 0.8 s at N = 3; ≤ 1.05× at N = 200)
and the gate's peak RSS. The bare-pytest floor — ``pytest`` on one
trivial test, with the same plugins but sbxcheck — is timed beside them: what any pytest plugin pays
before and after its first item; the gate's fixed cost is its gap to the paramiko floor, beyond that.
The gate loads the pytest plugins the quick start installs (sbxcheck's own dependencies);
``--all-plugins`` adds the test extras' and the machine's (each adds its import and hooks to every
pytest run, sbxcheck or not).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _child import REPO, foreign_plugins

FLOOR_MARK = "--floor-child"


class _Sent(Exception):
    """Raised by the recording shell once a check has handed over its command."""


class _Recorder:
    """A RemoteShell that records the one command a gate check sends, then stops the check."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.sent: tuple[str, bytes, float | None] | None = None

    def run(self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None) -> Any:
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        self.sent = (command, data, timeout)
        raise _Sent


def gate_commands(inventory: Path) -> dict[str, list[tuple[str, bytes, float | None]]]:
    """Alias -> the (command, stdin, timeout) of every remote gate check, as the check functions build them."""
    from sbxcheck.checks import gate, gate_model, vm_hygiene
    from sbxcheck.fleetsource import FleetSource
    from sbxcheck.plugin.runstate import RunState
    from sbxcheck.plugin.session import SbxSession
    from sbxcheck.plugin.settings import Settings

    session = SbxSession(Settings.defaults(REPO), FleetSource(inventory, "--sbx-inventory"))
    out: dict[str, list[tuple[str, bytes, float | None]]] = {}
    checks = [
        gate.check_git_integrity,
        gate.check_pi_models,
        gate.check_roster_matches,
        gate_model.check_cost_reported,
        gate_model.check_credit_remaining,
        vm_hygiene.check_vm_hygiene,  # test_vm_hygiene's VM half: the gate sends it too
    ]
    for run in session.gate_runs(RunState()):
        target = run.target
        if target is None:
            continue
        calls: list[tuple[Any, tuple[str, ...]]] = [(c, ()) for c in checks]
        calls += [(gate_model.check_model_answers, (m,)) for m in target.roster]
        for check, args in calls:
            shell = _Recorder(target.host)
            with contextlib.suppress(_Sent):
                check(shell, target, *args)
            assert shell.sent is not None, check
            out.setdefault(target.host, []).append(shell.sent)
    return out


def floor(plan_file: Path) -> int:
    """The floor itself (a child process importing only paramiko): the gate's commands, VMs in parallel."""
    import paramiko

    plan = json.loads(plan_file.read_text())
    commands = {
        alias: [(c, stdin.encode("latin-1"), t) for c, stdin, t in cmds]
        for alias, cmds in plan["commands"].items()
    }
    config = paramiko.SSHConfig.from_path(plan["ssh_config"])
    key = paramiko.Ed25519Key.from_private_key_file(plan["identity"])

    def one(transport: paramiko.Transport, command: str, stdin: bytes, timeout: float | None) -> int:
        try:
            return run(transport, command, stdin, timeout)
        except TimeoutError:
            return -1  # counted: the machine could not keep up within the check's own deadline

    def run(transport: paramiko.Transport, command: str, stdin: bytes, timeout: float | None) -> int:
        channel = transport.open_session()
        channel.settimeout(timeout)
        channel.exec_command(command)
        channel.sendall(stdin)
        channel.shutdown_write()
        out, err = channel.makefile("rb"), channel.makefile_stderr("rb")
        with cf.ThreadPoolExecutor(1) as pool:
            drained = pool.submit(err.read)
            out.read()
            drained.result()
        return channel.recv_exit_status()

    def vm(alias: str) -> int:
        opts = config.lookup(alias)
        transport = paramiko.Transport((opts["hostname"], int(opts.get("port", 22))))
        transport.connect(username=opts["user"], pkey=key)  # the floor verifies no host key
        try:
            with cf.ThreadPoolExecutor(min(8, len(commands[alias]))) as pool:
                codes = list(pool.map(lambda c: one(transport, *c), commands[alias]))
        finally:
            transport.close()
        return sum(1 for c in codes if c < 0)

    with cf.ThreadPoolExecutor(min(plan["max_parallel"], len(commands))) as pool:
        timeouts = sum(pool.map(vm, commands))
    total = sum(len(c) for c in commands.values())
    print(f"floor: {total} commands on {len(commands)} VMs, {timeouts} over their deadline")
    return 0


def _timed(cmd: list[str], log: Path) -> tuple[float, int, int]:
    """(wall seconds, exit code, peak RSS in MB) of one child process."""
    with open(log, "w") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, proc.returncode, usage.ru_maxrss // 1024


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == FLOOR_MARK:
        return floor(Path(sys.argv[2]))
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, nargs="+", default=[3, 200])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--extra", default="", help="extra pytest arguments for the gate, space separated")
    parser.add_argument(
        "--all-plugins",
        action="store_true",
        help="load every installed pytest plugin into the gate (default: only those `pip install sbxcheck` brings)",
    )
    parser.add_argument(
        "--max-parallel",
        type=int,
        default=32,
        help="VMs in flight at once, floor and gate alike (default 32)",
    )
    args = parser.parse_args()
    from sbxcheck.sim.fleet import SimFleet

    blocked = [] if args.all_plugins else foreign_plugins()
    print(
        f"gate plugins: {'every installed one' if args.all_plugins else 'as installed by the quick start'}"
        f"{' (left out: ' + ' '.join(blocked[1::2]) + ')' if blocked else ''}",
        flush=True,
    )

    medians: dict[int, tuple[float, float]] = {}
    for n in args.runs:
        with tempfile.TemporaryDirectory() as tmp, SimFleet(Path(tmp) / "fleet", runs=n) as fleet:
            inv = fleet.inventory_path
            plan_file = Path(tmp) / "floor-plan.json"
            commands = gate_commands(inv)
            plan_file.write_text(
                json.dumps(
                    {
                        "ssh_config": str(fleet.ssh_dir / "ssh_config"),
                        "identity": str(fleet.ssh_dir / "id_ed25519"),
                        "max_parallel": args.max_parallel,
                        "commands": {
                            a: [(c, s.decode("latin-1"), t) for c, s, t in cmds]
                            for a, cmds in commands.items()
                        },
                    }
                )
            )
            floor_cmd = [sys.executable, str(Path(__file__).resolve()), FLOOR_MARK, str(plan_file)]
            gate_cmd = [
                sys.executable, "-m", "pytest", "-m", "gate", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                "--sbx-inventory", str(inv), "--sbx-report", str(Path(tmp) / "report"),
                "--sbx-max-parallel", str(args.max_parallel), *blocked, *args.extra.split(), str(REPO / "gates"),
            ]  # fmt: skip
            trivial = Path(tmp) / "bare" / "test_trivial.py"
            trivial.parent.mkdir()
            trivial.write_text("def test_trivial():\n    assert True\n")
            bare_cmd = [
                sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                "-p", "no:sbxcheck", *blocked, str(trivial),
            ]  # fmt: skip
            floors, gates, rss, bares = [], [], [], []
            for i in range(args.repeat):
                bare_wall, _, _ = _timed(bare_cmd, Path(tmp) / f"bare-{i}.log")
                bares.append(bare_wall)
                for label, cmd in (("floor", floor_cmd), ("gate", gate_cmd)):
                    log = Path(tmp) / f"{label}-{i}.log"
                    wall, code, peak = _timed(cmd, log)
                    last = (log.read_text().strip().splitlines() or ["(no output)"])[-1]
                    if code not in (0, 1):  # 1: some gate item did not pass (a loaded machine's timeouts)
                        print(log.read_text()[-3000:], file=sys.stderr)
                        print(f"{label} at N={n} exited {code}", file=sys.stderr)
                        return 1
                    (floors if label == "floor" else gates).append(wall)
                    if label == "gate":
                        rss.append(peak)
                    print(f"N={n} {label} #{i + 1}: {wall:.2f} s (peak RSS {peak} MB): {last}", flush=True)
            f_med, g_med, b_med = statistics.median(floors), statistics.median(gates), statistics.median(bares)
            medians[n] = (f_med, g_med)
            print(
                f"N={n}: floor median {f_med:.2f} s, gate median {g_med:.2f} s, ratio {g_med / f_med:.2f}x "
                "(targets: gate - floor <= 0.8 s at N = 3, <= 1.05x at N = 200); "
                f"gate peak RSS {max(rss)} MB; bare-pytest floor {b_med:.2f} s; "
                f"gate - paramiko floor {g_med - f_med:.2f} s, of which beyond the bare-pytest floor "
                f"{g_med - f_med - b_med:.2f} s",
                flush=True,
            )
    if len(medians) > 1:
        lo, hi = min(medians), max(medians)
        print(f"gate N={hi} / N={lo}: {medians[hi][1] / medians[lo][1]:.2f}x (target <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
