"""A region member's typed errors (``zkcoord.region.member``): one line each, caught by the order follower and
answered to the driver."""

from __future__ import annotations

from zkcoord.errors import ZkCoordError


class RegionError(ZkCoordError):
    """A region operation failed (the message says which and why); the region awaits a reset."""


class CheckpointRefusedError(RegionError):
    """A checkpoint asked while a reset of the region is pending: the offsets may leave out partitions whose records
    the state counts (a revocation landed since the drain), so no contribution is written."""
