"""The simulated sandboxed.sh control plane (:mod:`.missions` holds the double; :mod:`.ops` issue 21's
operator surface)."""

from __future__ import annotations

from sbxcheck.sim.controlplane.missions import (
    CONTROLPLANE_FAULTS,
    NIL_UUID,
    PATH_SHAPED_ID,
    ControlPlaneDouble,
)

__all__ = ["CONTROLPLANE_FAULTS", "NIL_UUID", "PATH_SHAPED_ID", "ControlPlaneDouble"]
