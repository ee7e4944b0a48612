"""Let a create or destroy step finish when the operator presses Ctrl-C once.

A mount, a teardown or a mission cancel cut off half-way leaves the very mess the ledger exists
to prevent: a VM without a run id, a key never revoked. While such a step runs, the first SIGINT
or SIGTERM is noted and announced on stderr; the step goes on. A second one raises
KeyboardInterrupt at once (the ledger still says what is left). Outside the main thread, where
Python cannot install signal handlers, the guard does nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def signal_name(signum: int | None) -> str:
    """``SIGTERM``, ``SIGINT`` (Ctrl-C); ``interrupt`` when none is known."""
    if signum is None:
        return "interrupt"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class InterruptGuard:
    """What happened while a guarded step ran."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.noted: int | None = None  # the first signal received, if any
        self.abandoned = False  # a second signal cut the step short

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.noted is not None:
            self.abandoned = True
            raise KeyboardInterrupt(f"signal {signum} again during {self.step}")
        self.noted = signum
        message = (
            f"\nsbxcheck: {signal.Signals(signum).name} received during {self.step}; letting it finish "
            "so nothing is left half-made. Interrupt again to abandon it (the ledger keeps what is left).\n"
        )
        with contextlib.suppress(OSError):
            os.write(2, message.encode())


@contextlib.contextmanager
def finish_before_interrupt(step: str, *, reraise: bool) -> Iterator[InterruptGuard]:
    """Run the block with the first SIGINT/SIGTERM deferred.

    With ``reraise``, a deferred interrupt becomes KeyboardInterrupt once the block is done (the
    session then stops as it would have); otherwise the caller reads ``guard.noted``.
    """
    guard = InterruptGuard(step)
    previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in _SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                previous[signum] = signal.signal(signum, guard._handle)
    completed = False
    try:
        yield guard
        completed = True
    finally:
        for restored, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(restored, handler if handler is not None else signal.SIG_DFL)
        if guard.noted is not None:
            finished = "finished after the interrupt" if completed else "failed"
            ending = "was abandoned" if guard.abandoned else finished
            with contextlib.suppress(OSError):
                os.write(2, f"sbxcheck: {step} {ending}.\n".encode())
    if reraise and guard.noted is not None:
        raise KeyboardInterrupt(f"signal {guard.noted} during {step}")
