"""The region client's state machine (seed 003), as a table: ``docs/regions.md`` shows the same table.

* ``SUBSCRIBED``: subscribed, no reset carried out yet (a member fetches and processes in it; a revocation before
  anything was fetched is ignored, one after makes the region reset).
* ``CR_RESET_PENDING``: a reset of the region is awaited (queues cleared, polling stopped, assignments not sought).
* ``RESET_COMPLETE``: reset done; fetching and processing go on (a revocation once something was fetched makes the
  region reset again).

Pure.
"""

from __future__ import annotations

from enum import Enum

from zkcoord.errors import ZkCoordError


class ClientState(Enum):
    SUBSCRIBED = "SUBSCRIBED"
    CR_RESET_PENDING = "CR_RESET_PENDING"
    RESET_COMPLETE = "RESET_COMPLETE"


#: from -> the states it may go to, and why
TRANSITIONS: dict[ClientState, dict[ClientState, str]] = {
    ClientState.SUBSCRIBED: {
        ClientState.CR_RESET_PENDING: "a revocation after fetching, an order, a restart into a running region",
    },
    ClientState.CR_RESET_PENDING: {
        ClientState.RESET_COMPLETE: "the reset carried out: partitions sought, state restored",
    },
    ClientState.RESET_COMPLETE: {
        ClientState.CR_RESET_PENDING: "a revocation after fetching, a reset ordered, a failed drain or process",
    },
}
# Every reset passes through CR_RESET_PENDING (queues cleared, processing held: the seed's reset processing), so
# neither SUBSCRIBED -> RESET_COMPLETE nor RESET_COMPLETE -> RESET_COMPLETE is ever taken: not legal either.


class IllegalTransitionError(ZkCoordError):
    """A state change the table does not allow: a bug of the region client, never the application's input."""

    def __init__(self, old: ClientState, new: ClientState) -> None:
        super().__init__(f"illegal region client transition {old.value} -> {new.value}")


def check(old: ClientState, new: ClientState) -> ClientState:
    """``new`` if the table allows ``old -> new``.  :raises IllegalTransitionError:"""
    if new not in TRANSITIONS[old]:
        raise IllegalTransitionError(old, new)
    return new
