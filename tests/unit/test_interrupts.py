"""The first Ctrl-C lets a create/destroy step finish; the second one abandons it."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from sbxcheck.plugin.interrupts import finish_before_interrupt


def _signal_self(signum: int = signal.SIGINT) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs in the main thread between bytecodes


def test_first_interrupt_is_deferred_and_announced(capfd: pytest.CaptureFixture[str]) -> None:
    steps = []
    with finish_before_interrupt("teardown", reraise=False) as guard:
        _signal_self()
        steps.append("went on")
    assert steps == ["went on"]
    assert guard.noted == signal.SIGINT and not guard.abandoned
    err = capfd.readouterr().err
    assert "SIGINT received during teardown; letting it finish" in err
    assert "sbxcheck: teardown finished after the interrupt." in err


def test_sigterm_is_deferred_too() -> None:
    with finish_before_interrupt("teardown", reraise=False) as guard:
        _signal_self(signal.SIGTERM)
    assert guard.noted == signal.SIGTERM


def test_second_interrupt_abandons_the_step(capfd: pytest.CaptureFixture[str]) -> None:
    reached = []
    with pytest.raises(KeyboardInterrupt), finish_before_interrupt("mount", reraise=False) as guard:
        _signal_self()
        _signal_self()
        reached.append("after the second")
    assert reached == [] and guard.abandoned
    assert "sbxcheck: mount was abandoned." in capfd.readouterr().err


def test_reraise_stops_the_session_once_the_step_is_done() -> None:
    done = []
    with (
        pytest.raises(KeyboardInterrupt, match="during the mount"),
        finish_before_interrupt("the mount", reraise=True),
    ):
        _signal_self()
        done.append("mounted")
    assert done == ["mounted"]


def test_no_interrupt_no_noise(capfd: pytest.CaptureFixture[str]) -> None:
    with finish_before_interrupt("teardown", reraise=True) as guard:
        pass
    assert guard.noted is None and capfd.readouterr().err == ""


def test_handlers_are_restored() -> None:
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    with finish_before_interrupt("teardown", reraise=False):
        assert signal.getsignal(signal.SIGINT) != before[0]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_outside_the_main_thread_it_does_nothing() -> None:
    seen: list[object] = []

    def worker() -> None:
        with finish_before_interrupt("teardown", reraise=True) as guard:
            seen.append(signal.getsignal(signal.SIGINT))
        seen.append(guard.noted)

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(5)
    assert seen == [before, None]
