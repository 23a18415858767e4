"""The consumer-group coordinator (seed 002): election, watchers, rebalance queue, fenced command channels.

Start at :mod:`zkcoord.coordinator.core`; the protocol is written down in ``docs/protocol.md``.
"""

from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core import Coordinator
from zkcoord.coordinator.events import Role

__all__ = ["Coordinator", "CoordinatorConfig", "Role"]
