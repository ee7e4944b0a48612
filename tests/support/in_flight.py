"""Calls in flight at once, counted so that a test proves concurrency (or its bound) without a race."""

from __future__ import annotations

import threading
import time


class InFlight:
    """Counts calls running at once and their peak.

    With ``await_peak`` each call, once in, waits (at most ``wait_s``) until that many have been in
    at once before it goes on: a loaded machine that starts threads later than a fixed sleep lasts
    still shows the concurrency, and code that runs calls one after another still shows a peak of 1
    (after one wait runs out, later calls do not wait). A bound that does not hold shows more.
    """

    def __init__(self, await_peak: int = 0, wait_s: float = 10.0) -> None:
        self.await_peak = await_peak
        self.wait_s = wait_s
        self.running = 0
        self.peak = 0
        self._changed = threading.Condition()

    def hold(self, seconds: float) -> None:
        """One call: in, the wait for the peak (if any), ``seconds`` of work, out."""
        with self._changed:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self._changed.notify_all()
            if not self._changed.wait_for(lambda: self.peak >= self.await_peak, timeout=self.wait_s):
                self.await_peak = 0  # not concurrent: the rest need not wait too
        try:
            time.sleep(seconds)
        finally:
            with self._changed:
                self.running -= 1
                self._changed.notify_all()

    def wait_running(self, count: int, timeout_s: float = 10.0) -> bool:
        """Whether ``count`` calls are in at once within ``timeout_s``."""
        with self._changed:
            return self._changed.wait_for(lambda: self.running >= count, timeout=timeout_s)
