"""A home on this machine run as the SSH transport runs a VM, without SSH: ``$SHELL -c NEUTRAL_LINE``
with the framed command on stdin (transports/framing.py), the result read between its markers."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from sbxcheck.transports.framing import frame_command, neutral_start, new_frame, unframe
from sbxcheck.transports.ssh import CommandResult


class LocalVm:
    """Satisfies the checks' RemoteShell: each command as sshd would start it for the VM user."""

    alias = "local-vm"

    def __init__(self, home: Path, *, shell: str = "/bin/sh", env: Mapping[str, str] | None = None) -> None:
        self.home = home
        self.shell = shell
        self.env = {
            "HOME": str(home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "USER": "exedev",
            "LOGNAME": "exedev",
            "SHELL": shell,
            **(env or {}),
        }

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        frame = new_frame()
        line, head = neutral_start(frame_command(command, frame))
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        started = time.monotonic()
        proc = subprocess.run(
            [self.shell, "-c", line],
            input=head + data,
            cwd=self.home,
            env=self.env,
            capture_output=True,
            timeout=timeout or 60,
        )
        out = unframe(proc.stdout.decode("utf-8", "replace"), frame, with_status=True)
        err = unframe(proc.stderr.decode("utf-8", "replace"), frame)
        status = out.exit_code if out.complete and out.exit_code is not None else proc.returncode
        return CommandResult(status, out.text, err.text, time.monotonic() - started, framed=out.complete)
