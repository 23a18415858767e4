"""The coordinator's role and the items of its worker's queue: the leaf the worker (:mod:`.core`) and its helpers
(:mod:`.term`, :mod:`.watchers`) share."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Role(Enum):
    FOLLOWER = "follower"
    COORDINATOR = "coordinator"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Event:
    """One item of the worker's queue, put by a kazoo callback (or ``start``/``stop``).

    ``kind`` names the handler (:meth:`Coordinator._dispatch <zkcoord.coordinator.core.Coordinator._dispatch>`);
    ``term`` is the term number the watch belongs to (an event of an ended term is dropped).
    """

    kind: str
    term: int = 0
    group: str = ""
    name: str = ""
    data: Any = None
