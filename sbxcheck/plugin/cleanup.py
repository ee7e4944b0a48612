"""The end of a session, as the report sees it: what cleanup did, what is left, what never ran.

Helpers of the plugin's result collector: cleanup lines (teardowns, mission cancels) for the report,
the session's ledger entries still open, xdist node ids without their group, and the worker hook
that cancels a worker's missions before it reports back (so the controller's report includes them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from sbxcheck.errors import SbxError

if TYPE_CHECKING:  # kept light: the plugin imports this module on every run
    from sbxcheck.lifecycle.mounts import Mounted
    from sbxcheck.plugin.runstate import RunState
    from sbxcheck.plugin.session import SbxSession


class WorkerCleanup:
    """On an xdist worker: cancel its missions before it reports back, and hand the results over."""

    def __init__(self, session: Callable[[], SbxSession | None], state: RunState) -> None:
        self.session = session  # None until an sbxcheck item made one
        self.state = state

    @pytest.hookimpl(tryfirst=True)  # before xdist sends workerfinished with the worker output
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        sbx = self.session()
        if sbx is None:
            return
        sbx.control_plane.close_missions(self.state)
        workeroutput = getattr(session.config, "workeroutput", None)
        if isinstance(workeroutput, dict):
            workeroutput["sbxcheck_cleanup"] = list(self.state.cleanup)


def left_open(session: SbxSession) -> list[dict[str, Any]]:
    """This session's ledger entries still open: what it leaves behind (kept, failed, abandoned)."""
    if not session.ledger_mounts.in_use:
        return []
    try:
        entries = session.ledger().open_entries()
    except SbxError:
        return []
    return [
        {"kind": e.kind, "ident": e.ident, "state": e.state, "why": e.why or "", "ledger_entry": e.id}
        for e in entries
        if e.session == session.session_tag
    ]


def strip_group(nodeid: str) -> str:
    """A node id without the ``@group`` suffix xdist's loadgroup adds."""
    head, sep, _ = nodeid.rpartition("@")
    return head if sep and head.endswith("]") else nodeid


def param_id(nodeid: str) -> str:
    """The parameter id of a node id (``test_x[demo-abc]`` → ``demo-abc``), or ""."""
    _, sep, tail = nodeid.partition("[")
    return tail[:-1] if sep and tail.endswith("]") else ""


def mount_cleanup(mounted: Mounted) -> dict[str, Any]:
    """A mount's end as a cleanup line: torn down and kept-by-policy are fine, the rest is not."""
    return {
        "kind": "mount",
        "ident": mounted.run_id or mounted.name,
        "action": mounted.action,
        "ok": mounted.action in ("torn-down", "kept"),
        "why": mounted.why,
    }
