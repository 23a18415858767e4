"""The assignors by name: the thread-level ones the coordinator and the ``zk-client`` consumer run, and KIP-848's
member-level server-side ones."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from zkcoord.errors import ConfigurationError
from zkcoord.protocol.assignors.classic import Assignor, range_assign, roundrobin_assign
from zkcoord.protocol.assignors.members import GroupAssignment, MemberSubscriptions
from zkcoord.protocol.assignors.server_range import server_range
from zkcoord.protocol.assignors.threads import uniform_assign
from zkcoord.protocol.assignors.uniform import uniform

#: The thread-level assignors by name: Kafka 0.8.2's two (``partition.assignment.strategy``) and KIP-848's uniform.
#: ``sticky`` is an alias of ``uniform``, kept because ``zkcoord broker --assignor sticky`` accepted it when it named
#: this project's earlier per-topic incremental assignor, which uniform replaced.  Called with two arguments,
#: uniform has no previous owners; the incremental rebalance calls :func:`uniform_assign` itself, with them.
ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "uniform": uniform_assign,
    "sticky": uniform_assign,
}

#: A member-level server-side assignor: ``(member -> topics, topic -> partition count) -> member -> holdings``.
ServerAssignor = Callable[[MemberSubscriptions, Mapping[str, int]], GroupAssignment]

#: KIP-848's server-side assignors, in the order of Kafka's ``group.consumer.assignors`` default: the first is the
#: default.  Kafka's names; ``range`` here is the server-side range (member level), not Kafka 0.8's.
SERVER_ASSIGNORS: dict[str, ServerAssignor] = {"uniform": uniform, "range": server_range}


def get_assignor(name: str) -> Assignor:
    """The thread-level assignor called ``name``: ``"range"``, ``"roundrobin"``, ``"uniform"`` (or its alias
    ``"sticky"``).

    Unlike Kafka 0.8.2's ``PartitionAssignor.createInstance``, which silently falls back to range for any other
    string, an unknown name is an error.

    :raises ConfigurationError: ``name`` is not a key of :data:`ASSIGNORS`.
    """
    try:
        return ASSIGNORS[name]
    except KeyError:
        known = ", ".join(sorted(ASSIGNORS))
        raise ConfigurationError(f"unknown partition assignment strategy {name!r} (known: {known})") from None


def get_server_assignor(name: str) -> ServerAssignor:
    """KIP-848's server-side assignor called ``name`` (``"uniform"`` or ``"range"``).

    :raises ConfigurationError: ``name`` is not a key of :data:`SERVER_ASSIGNORS` (Kafka: UNSUPPORTED_ASSIGNOR).
    """
    try:
        return SERVER_ASSIGNORS[name]
    except KeyError:
        known = ", ".join(SERVER_ASSIGNORS)
        raise ConfigurationError(f"unsupported assignor {name!r} (supported: {known})") from None
