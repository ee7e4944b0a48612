"""The DGX's reachability follows tailscaled on agent-core, as on the real tailnet.

While tailscaled on agent-core is not active (or the DGX itself is down), the DGX's SSH port refuses
and its remote node is offline; once ``systemctl enable --now tailscaled`` has run there, the DGX
answers SSH again and its heartbeats resume. A daemon thread reads agent-core's state files every
``interval_s`` and swaps the DGX's SSH mode; :meth:`DgxRoute.stop` ends it (bounded join).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sbxcheck.sim.hosts import HostHome
from sbxcheck.sim.sshd import SimSshServer

log = logging.getLogger(__name__)


class DgxRoute:
    """Keep the DGX's SSH mode ("ok" / "refuse") in step with agent-core's tailscaled."""

    def __init__(
        self,
        server: SimSshServer,
        agent_core: HostHome,
        dgx: HostHome,
        port: int,
        *,
        dgx_down: bool,
        on_change: Callable[[bool], None],
        interval_s: float = 0.2,
    ) -> None:
        self._server, self._core, self._dgx, self._port = server, agent_core, dgx, port
        self._dgx_down = dgx_down
        self._on_change = on_change
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._up = self._route_up()
        self._thread = threading.Thread(target=self._watch, name="sim-dgx-route", daemon=True)

    @property
    def mode(self) -> str:
        return "ok" if self._up else "refuse"

    def _route_up(self) -> bool:
        return not self._dgx_down and self._core.unit_state()[1] == "active"

    def start(self) -> None:
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self._interval_s):
            up = self._route_up()
            if up == self._up:
                continue
            try:
                self._server.remove_host(self._dgx.name)
                self._server.add_host(
                    self._dgx.sim_host(user="exedev", mode="ok" if up else "refuse"), self._port
                )
            except Exception as exc:  # the sim keeps serving; the next pass tries again
                log.warning("sim: could not switch the DGX route: %s", exc)
                continue
            self._up = up
            self._on_change(up)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
