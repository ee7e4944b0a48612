"""The ``sbxcheck`` command: run the embedded fleet in the background, list faults, read reports.

sbxcheck sim up --dir DIR [--fault NAME ...]   start the fleet, write DIR/sbxcheck.toml
sbxcheck sim down --dir DIR                    stop it
sbxcheck sim faults                            every fault name, one line each
sbxcheck report [DIR]                          summarise DIR/results.json
sbxcheck history DIR [--keep N]                flaky items, since-when failing, incidents new/ongoing/resolved,
                                               the waivers and their remaining days
sbxcheck waive NODEID --reason R --until DATE  append a waiver (a known failure that expires) to the waivers file
sbxcheck doctor [--inventory PATH]             every precondition of a run, one line each (exit 0/1)
sbxcheck version (or sbxcheck --version)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from sbxcheck import __version__
from sbxcheck.display import for_display_line
from sbxcheck.errors import SbxError

PID_FILE = "sim.pid"
READY_FILE = "sim.ready"
LOG_FILE = "sim.log"
UP_DEADLINE_S = 420.0
DOWN_GRACE_S = 10.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sbxcheck", description="sandbox fleet checks (pytest plugin companion)"
    )
    parser.add_argument("--version", action="version", version=f"sbxcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("sim", help="the embedded simulated fleet").add_subparsers(
        dest="sim_command", required=True
    )
    up = sim.add_parser("up", help="start the fleet in the background and write DIR/sbxcheck.toml")
    serve = sim.add_parser("serve", help="run the fleet in the foreground (what `up` starts)")
    for command in (up, serve):
        command.add_argument(
            "--dir", required=True, type=Path, help="the fleet's directory (its sbxcheck.toml, keys, log)"
        )
        command.add_argument(
            "--fault",
            action="append",
            default=[],
            metavar="NAME[@RUN]",
            help="inject a named fault (repeatable; `sbxcheck sim faults` lists them)",
        )
        command.add_argument(
            "--seed", type=int, default=None, help="a different fleet layout (run ids, ports); default fixed"
        )
        command.add_argument("--runs", type=int, default=3, metavar="N", help="simulated runs (VMs), default 3")
        command.add_argument(
            "--sssf-checkout", type=Path, default=None, metavar="DIR",
            help="run this SSSF checkout's real `just sbx` recipes (copied; never written) instead of the stand-ins",
        )  # fmt: skip
        command.add_argument(
            "--cp-version", default=None, metavar="PROFILE",
            help="the control plane serves this release's API: current (default), v0.7, 1.3 or cba9502",
        )  # fmt: skip
        command.add_argument(
            "--pi-version", default=None, metavar="VERSION",
            help="the pi release the VMs run (npm): 0.83.0, the exe.dev image's (default); 0.73.1, 1.6.0, ...",
        )  # fmt: skip
    down = sim.add_parser("down", help="stop a fleet started with `up`")
    down.add_argument("--dir", required=True, type=Path, help="the directory given to `sim up`")
    sim.add_parser("faults", help="list every fault name with one line each")
    report = sub.add_parser("report", help="summarise a results.json")
    report.add_argument(
        "dir",
        nargs="?",
        default="sbxcheck-report",
        type=Path,
        help="a report directory or a results.json (default sbxcheck-report)",
    )
    history = sub.add_parser(
        "history", help="summarise a --sbx-history directory: flaky, failing since, incidents, trends"
    )
    history.add_argument("dir", type=Path, help="the --sbx-history directory")
    history.add_argument("--keep", type=int, default=None, metavar="N", help="only the last N runs")
    waive = sub.add_parser(
        "waive", help="append a waiver (a known failure that expires) for NODEID to the waivers file"
    )
    waive.add_argument("nodeid", metavar="NODEID", help="the node id or pattern (* and ? allowed) it waives")
    waive.add_argument("--reason", required=True, help="why the failure is accepted")
    waive.add_argument(
        "--until", required=True, metavar="DATE",
        help="when it stops applying: YYYY-MM-DD (00:00 UTC), a date-time, or +Nd (N days from now); at most 90 days",
    )  # fmt: skip
    waive.add_argument("--cause", default=None, help="waive only this classification or cause key")
    waive.add_argument("--owner", default=None, help="who follows it up")
    waive.add_argument("--link", default=None, help="the upstream issue or ticket (http(s) URL)")
    waive.add_argument(
        "--file", type=Path, default=None, metavar="PATH",
        help="the waivers file (default: $SBXCHECK_WAIVERS, else ./sbxcheck-waivers.toml)",
    )  # fmt: skip
    doctor = sub.add_parser(
        "doctor", help="check every precondition of a run (inventory, files, known_hosts, env, services, tools)"
    )
    doctor.add_argument(
        "--inventory",
        metavar="PATH",
        default=None,
        help="the inventory to check (default: $SBXCHECK_INVENTORY, else ./sbxcheck.toml, else the embedded fleet)",
    )
    ledger = sub.add_parser("ledger", help="the ledger of what sessions created").add_subparsers(
        dest="ledger_command", required=True
    )
    compact = ledger.add_parser(
        "compact", help="rewrite STATE_DIR/ledger.jsonl to its open and recent closed entries"
    )
    compact.add_argument("state_dir", type=Path, help="the state dir (--sbx-state), e.g. .sbxcheck/state")
    sub.add_parser("version", help="print the version")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _command(args)
    except BrokenPipeError:  # the reader went away (`sbxcheck report DIR | head`): stop quietly
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the flush at exit finds no closed pipe either
        return SIGPIPE_EXIT


#: What a shell reports for a program ended by SIGPIPE (128 + 13).
SIGPIPE_EXIT = 141


def _command(args: argparse.Namespace) -> int:
    try:
        if args.command == "version":
            print(f"sbxcheck {__version__}")
            return 0
        if args.command == "doctor":
            from sbxcheck.doctor import choose_for_cli, run_doctor

            return run_doctor(choose_for_cli(args.inventory, Path.cwd()))
        if args.command == "report":
            return _report(args.dir)
        if args.command == "history":
            return _history(args.dir, args.keep)
        if args.command == "waive":
            return _waive(args)
        if args.command == "ledger":
            from sbxcheck.lifecycle.ledger import Ledger

            _say(Ledger(args.state_dir).compact().describe())
            return 0
        if args.sim_command == "faults":
            from sbxcheck.fleetsource import describe_faults

            print(describe_faults())
            return 0
        if args.sim_command == "serve":
            return _serve(
                args.dir, args.fault, args.seed, args.runs, args.sssf_checkout, args.cp_version, pi=args.pi_version
            )
        if args.sim_command == "up":
            return _up(
                args.dir, args.fault, args.seed, args.runs, args.sssf_checkout, args.cp_version, pi=args.pi_version
            )
        return _down(args.dir)
    except SbxError as exc:
        print(f"sbxcheck: {for_display_line(exc.message)}", file=sys.stderr)
        return 2


def _serve(
    root: Path,
    faults: list[str],
    seed: int | None,
    runs: int = 3,
    sssf: Path | None = None,
    cp: str | None = None,
    *,
    pi: str | None = None,
) -> int:
    from sbxcheck.fleetsource import open_embedded

    fleet = open_embedded(
        root, faults, seed=seed, runs=runs, embedded=False, sssf_checkout=sssf, cp_version=cp, pi_version=pi
    )
    root.mkdir(parents=True, exist_ok=True)
    (root / READY_FILE).unlink(missing_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    fleet.materialize()
    try:
        fleet.serve()
        (root / PID_FILE).write_text(f"{os.getpid()}\n", encoding="utf-8")
        (root / READY_FILE).write_text(", ".join(fleet.run_ids) + "\n", encoding="utf-8")
        print(
            f"sbxcheck sim: serving {len(fleet.run_ids)} runs; inventory {fleet.inventory_path}", flush=True
        )
        if fleet.pi is not None:
            print(f"sbxcheck sim: the VMs run {fleet.pi.describe()}", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        fleet.stop()
        (root / READY_FILE).unlink(missing_ok=True)
        (root / PID_FILE).unlink(missing_ok=True)
    return 0


def _up(
    root: Path,
    faults: list[str],
    seed: int | None,
    runs: int = 3,
    sssf: Path | None = None,
    cp: str | None = None,
    *,
    pi: str | None = None,
) -> int:
    from sbxcheck.fleetsource import check_cp_version, check_fault, check_pi_version, check_sssf_checkout

    for fault in faults:
        check_fault(fault)  # a bad name fails here, before anything starts
    if cp is not None:
        check_cp_version(cp)
    if pi is not None:
        check_pi_version(pi)
    if sssf is not None:
        sssf = sssf.resolve()
        check_sssf_checkout(sssf)
    root = root.resolve()
    if _alive_pid(root) is not None:
        print(f"sbxcheck sim: already running in {root} (sbxcheck sim down --dir {root})", file=sys.stderr)
        return 1
    root.mkdir(parents=True, exist_ok=True)
    (root / READY_FILE).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "sbxcheck.cli", "sim", "serve", "--dir", str(root)]
    for fault in faults:
        cmd += ["--fault", fault]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    cmd += ["--runs", str(runs)]
    if sssf is not None:
        cmd += ["--sssf-checkout", str(sssf)]
    if cp is not None:
        cmd += ["--cp-version", cp]
    if pi is not None:
        cmd += ["--pi-version", pi]
    with open(root / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + UP_DEADLINE_S
    while time.monotonic() < deadline:
        if (root / READY_FILE).exists():
            ready = (root / READY_FILE).read_text().strip()
            shown = ready if len(ready) < 400 else f"{ready[:200]} … ({ready.count(',') + 1} runs)"
            print(f"sbxcheck sim: up (pid {proc.pid}); runs: {shown}")
            print(f"inventory: {root / 'sbxcheck.toml'}")
            print(f"  pytest -m gate --sbx-inventory={root / 'sbxcheck.toml'}")
            first = ready.split(",")[0].strip()  # the fleet's own `just sbx` recipes run from its checkout
            just = "just" if sssf is None else f"{root / 'upstream' / 'bin' / 'sim-env'} just"
            print(
                f"  (cd {root / 'sssf'} && {just} sbx lifecycle execute {first} 'add a health endpoint'"
                f" && {just} sbx lifecycle observe {first})"
            )
            print(f"  pytest -m run --sbx-inventory={root / 'sbxcheck.toml'}")
            print(f"  sbxcheck sim down --dir {root}")
            return 0
        if proc.poll() is not None:
            print(
                f"sbxcheck sim: the fleet exited with {proc.returncode}; see {root / LOG_FILE}",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.2)
    proc.terminate()
    print(
        f"sbxcheck sim: not ready within {UP_DEADLINE_S:.0f}s; stopped it. See {root / LOG_FILE}",
        file=sys.stderr,
    )
    return 1


def _alive_pid(root: Path) -> int | None:
    try:
        pid = int((root / PID_FILE).read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _down(root: Path) -> int:
    pid = _alive_pid(root.resolve())
    if pid is None:
        print(f"sbxcheck sim: nothing running in {root}")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOWN_GRACE_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            print(f"sbxcheck sim: stopped (pid {pid})")
            return 0
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    print(f"sbxcheck sim: killed (pid {pid}) after {DOWN_GRACE_S:.0f}s")
    return 0


def _say(line: str) -> None:
    """Print one line built from a report's text: redacted, control characters and line breaks shown
    visibly (a node id or message holding ``\nverdict: HEALTHY`` never starts a line of its own)."""
    print(for_display_line(line))


def _report(directory: Path) -> int:
    from sbxcheck.report import load_report
    from sbxcheck.report.present import counts_line

    report = load_report(directory / "results.json" if directory.is_dir() else directory)
    _say(f"inventory: {report.inventory.source}  ({report.started_at} → {report.finished_at})")
    _say(counts_line(report.summary, len(report.not_run)))
    first = {"failed": 0, "error": 1, "waived": 2, "skipped": 3}  # what needs a look comes first, passed last
    for rec in sorted(report.checks, key=lambda r: first.get(r.outcome.value, 4)):
        cls = rec.classification.value if rec.classification else ""
        _say(f"  {rec.outcome.value:7} {cls:18} {rec.nodeid}")
    for inc in report.incidents:
        _say(f"incident {inc.id} [{inc.classification.value}] {inc.summary}")
        _say(f"  next step: {inc.recommendation}")
    from sbxcheck.report.waivers import waiver_lines

    for line, _ in waiver_lines(report.model_dump(mode="json")):
        _say(line)
    failing = report.summary.get("failed", 0) + report.summary.get("error", 0)
    return 1 if failing else 0


def _history(directory: Path, keep: int | None) -> int:
    """Print the history summary; exit 0 when the last run passed, 1 when not, 2 when there is none."""
    from sbxcheck.report.history import DEFAULT_KEEP, HistoryStore, analyse, history_lines

    if not directory.is_dir():
        print(f"sbxcheck history: {directory} is not a directory", file=sys.stderr)
        return 2
    if keep is not None and keep < 1:
        print(f"sbxcheck history: --keep must be at least 1, got {keep}", file=sys.stderr)
        return 2
    store = HistoryStore(directory, keep or max(DEFAULT_KEEP, len(HistoryStore(directory).entries())))
    runs, warnings = store.load()
    view = analyse(runs[-keep:] if keep else runs, warnings)
    for line in history_lines(view):
        _say(line)
    if not view.runs:
        return 2
    return 0 if view.runs[-1].verdict == "passed" else 1


def _until(text: str, now: dt.datetime) -> str:
    """``--until``: a date or date-time as written, or ``+Nd`` (N days from now, as a date)."""
    days = re.fullmatch(r"\+?(\d{1,3})d", text.strip())
    return (now + dt.timedelta(days=int(days.group(1)))).date().isoformat() if days else text


def _waive(args: argparse.Namespace) -> int:
    """Append a waiver to the waivers file, validated first (exit 0), else one line saying why (exit 2)."""
    from sbxcheck.waivers import WAIVERS_FILENAME, append_waiver, table_problems

    now = dt.datetime.now(dt.UTC)
    env = os.environ.get("SBXCHECK_WAIVERS", "").strip()
    path = args.file or (Path(env).expanduser() if env else Path(WAIVERS_FILENAME))
    table = {"match": args.nodeid, "reason": args.reason, "until": _until(args.until, now)}
    table |= {k: v for k in ("cause", "owner", "link") if (v := getattr(args, k)) is not None}
    waiver, problems = table_problems(table, now)
    if waiver is None:
        print(f"sbxcheck waive: {for_display_line('; '.join(problems))}; {path} not changed", file=sys.stderr)
        return 2
    try:
        index = append_waiver(path, waiver, now=now)
    except SbxError as exc:
        print(f"sbxcheck waive: {for_display_line(exc.message)}", file=sys.stderr)
        return 2
    from sbxcheck.report.waivers import days_left_text

    left = days_left_text((waiver.expires_at - now).total_seconds() / 86400)
    _say(f"sbxcheck waive: added waiver #{index} to {path}: {waiver.match} until {waiver.until_text} ({left})")
    _say(
        f"  a run reads it with --sbx-waivers={path.resolve()}"
        + (" (or as sbxcheck-waivers.toml in pytest's rootdir)" if path.name == WAIVERS_FILENAME else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
