"""Partition assignors as pure deterministic functions (no I/O, no ZooKeeper, no state).

Thread level (``consumer -> {topic: thread_count}`` in, ``topic -> partition -> thread id`` out), what the
coordinator and the ``zk-client`` consumer run:

* :mod:`.classic`: Kafka 0.8.2's ``range`` and ``roundrobin``, and the thread-id vocabulary (:func:`thread_id`,
  :func:`consumer_of`, :func:`threads_of`, :func:`shares`, :func:`moved_partitions`);
* :mod:`.threads`: KIP-848's assignors on threads -- :func:`uniform_assign` (the assignor of incremental
  rebalances) and :func:`server_range_assign` -- balancing per member, then spreading over the member's threads;
* :mod:`.registry`: :data:`ASSIGNORS` by name (``sticky`` is a documented alias of ``uniform``).

Member level (``member -> topics`` in, ``member -> topic -> partitions`` out), KIP-848's server-side assignors:

* :mod:`.members`: the vocabulary and the input checks;
* :mod:`.uniform`: :func:`uniform`, dispatching to :mod:`.homogeneous` or :mod:`.heterogeneous`;
* :mod:`.racks`: :class:`Racks`, what the uniform assignor prefers racks by (and where it does);
* :mod:`.incremental`: :class:`UniformGroup`, one join or leave computed from the change;
* :mod:`.server_range`: :func:`server_range`.

Import from this package; the modules are its parts.
"""

from __future__ import annotations

from zkcoord.protocol.assignors.classic import (
    Assignment,
    Assignor,
    consumer_of,
    consumers_per_topic,
    moved_partitions,
    range_assign,
    roundrobin_assign,
    shares,
    thread_id,
    threads_of,
)
from zkcoord.protocol.assignors.incremental import UniformGroup
from zkcoord.protocol.assignors.members import GroupAssignment, Holdings
from zkcoord.protocol.assignors.racks import PartitionRacks, Racks
from zkcoord.protocol.assignors.registry import (
    ASSIGNORS,
    SERVER_ASSIGNORS,
    ServerAssignor,
    get_assignor,
    get_server_assignor,
)
from zkcoord.protocol.assignors.server_range import server_range
from zkcoord.protocol.assignors.threads import server_range_assign, uniform_assign
from zkcoord.protocol.assignors.uniform import uniform

__all__ = [
    "ASSIGNORS",
    "SERVER_ASSIGNORS",
    "Assignment",
    "Assignor",
    "GroupAssignment",
    "Holdings",
    "PartitionRacks",
    "Racks",
    "ServerAssignor",
    "UniformGroup",
    "consumer_of",
    "consumers_per_topic",
    "get_assignor",
    "get_server_assignor",
    "moved_partitions",
    "range_assign",
    "roundrobin_assign",
    "server_range",
    "server_range_assign",
    "shares",
    "thread_id",
    "threads_of",
    "uniform",
    "uniform_assign",
]
