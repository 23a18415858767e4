"""The legacy protocol (``--protocol zk-client``): Kafka 0.8.2's client-side rebalance, beside the coordinator.

Every member watches its group and its topics in ZooKeeper, computes the whole assignment with Kafka's assignors,
and claims its own part with ephemeral owner znodes under ``/consumers/<group>``.  It exists so the two protocols
can be run side by side, compared on the same journal checks, and migrated between.  See
``docs/legacy-protocol.md`` for the protocol, what is faithful to 0.8.2 and what is not.

Modules by role: :mod:`~zkcoord.consumer.legacy.client` (the consumer), :mod:`~zkcoord.consumer.legacy.rebalance` (its
rebalance thread), :mod:`~zkcoord.consumer.legacy.registry` (its ZooKeeper operations),
:mod:`~zkcoord.consumer.legacy.assignment` (the ownership decision, pure), :mod:`~zkcoord.consumer.legacy.watches`
(triggers), :mod:`~zkcoord.layout.legacy_paths`,
:mod:`~zkcoord.consumer.legacy.config`, :mod:`~zkcoord.consumer.legacy.events` (journal events).
"""

from zkcoord.consumer.legacy.client import LegacyConsumer
from zkcoord.consumer.legacy.config import LegacyConfig
from zkcoord.consumer.legacy.events import LEGACY_EVENTS, PROTOCOL

__all__ = ["LEGACY_EVENTS", "PROTOCOL", "LegacyConfig", "LegacyConsumer"]
