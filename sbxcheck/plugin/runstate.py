"""What one pytest process has learnt and done so far: the run-scoped state beside the session's resources.

The plugin makes one :class:`RunState` per process in ``pytest_configure`` (``config.stash``, read with
:func:`sbxcheck.plugin.stash.run_state`) and hands it to what reads or writes it: the hooks, the
result collector, the fixtures, the session's resources. The resources themselves (clients, pools,
ledger, the embedded fleet) are :class:`~sbxcheck.plugin.session.SbxSession`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sbxcheck.plugin.interrupts import finish_before_interrupt, signal_name

if TYPE_CHECKING:  # annotations only: every pytest run makes a RunState, an unrelated one imports nothing heavy
    from sbxcheck.errors import SbxError
    from sbxcheck.lifecycle.following import WaitingState
    from sbxcheck.lifecycle.mounts import Mounted
    from sbxcheck.plugin.gateruns import GateRun

_T = TypeVar("_T")

#: Told what is waited on while an item waits for missions (the progress line), ``None`` when it is over.
OnWait = Callable[["WaitingState | None", float], None]


@dataclass
class RunState:
    """The run-scoped state of one pytest process (the controller's, or an xdist worker's)."""

    run_ids: list[str] = field(default_factory=list)  # the runs the gate covers (named, then mounted); []: all
    wanted_routes: set[str] | None = None  # the routes the selected items need dispatched; None: every one
    wanted_canaries: set[str] | None = None
    on_wait: OnWait | None = None  # handed to the mission dispatcher when it is made
    mounts: list[Mounted] = field(default_factory=list)  # what this process mounted, in order
    mounts_finished: bool = False  # the teardown policy was applied (once)
    mount_error: str | None = None  # why the mounts could not even start (one gate item says it)
    ledger_problem: SbxError | None = None  # why the ledger could not be read (one error item says it)
    cleanup: list[dict[str, Any]] = field(default_factory=list)  # what the end of the run released or failed to
    interrupted_during: list[str] = field(default_factory=list)  # teardown steps an interrupt arrived in
    gate_runs: list[GateRun] | None = None  # resolved once (again after a mount); see SbxSession.gate_runs

    @classmethod
    def starting(cls, named_run_ids: Sequence[str], mounted_run_ids: Sequence[str] = ()) -> RunState:
        """A fresh state: the runs named on the command line, then those the xdist controller mounted."""
        return cls(run_ids=[*named_run_ids, *(r for r in mounted_run_ids if r not in named_run_ids)])

    def add_mount(self, mounted: Mounted) -> None:
        """Record a mount; its run joins the gated runs (resolved again on the next look)."""
        self.mounts.append(mounted)
        if mounted.run_id and mounted.run_id not in self.run_ids:
            self.run_ids.append(mounted.run_id)
        self.gate_runs = None

    def finish_step(self, step: str, action: Callable[[], _T]) -> _T | None:
        """Run a teardown step so a first interrupt lets it finish (noted in ``interrupted_during``);
        None when a second one abandoned it."""
        with finish_before_interrupt(step, reraise=False) as guard:
            try:
                result = action()
            except KeyboardInterrupt:
                self.interrupted_during.append(
                    f"{step}: abandoned at the second {signal_name(guard.noted)} (see the ledger)"
                )
                return None
        if guard.noted is not None:
            self.interrupted_during.append(f"{step}: it finished after the {signal_name(guard.noted)}")
        return result
