"""The legacy protocol (``--protocol zk-client``): Kafka 0.8.2's client-side rebalance, beside the coordinator.

Every member watches its group and its topics in ZooKeeper, computes the whole assignment with Kafka's assignors,
and claims its own part with ephemeral owner znodes under ``/consumers/<group>``.  It exists so the two protocols
can be run side by side, compared on the same journal checks, and migrated between.  See
``docs/legacy-protocol.md`` for the protocol, what is faithful to 0.8.2 and what is not.

Modules by role: :mod:`~consumer.legacy.client` (the consumer), :mod:`~consumer.legacy.rebalance` (its rebalance
thread), :mod:`~consumer.legacy.registry` (its ZooKeeper operations), :mod:`~consumer.legacy.assignment` (the
ownership decision, pure), :mod:`~consumer.legacy.watches` (triggers), :mod:`~zkcoord.legacy_paths`,
:mod:`~consumer.legacy.config`, :mod:`~consumer.legacy.events` (journal events).
"""

from consumer.legacy.client import LegacyConsumer
from consumer.legacy.config import LegacyConfig
from consumer.legacy.events import LEGACY_EVENTS, PROTOCOL

__all__ = ["LEGACY_EVENTS", "PROTOCOL", "LegacyConfig", "LegacyConsumer"]
