"""A consumer-protocol start's carried owner znode versions: claiming a partition without reading its owner znode.

The coordinator writes a member's start and the owner znodes of what it grants in one fenced transaction, so it knows
the version that transaction leaves each owner znode at, and the start carries it (``versions``,
:class:`~zkcoord.layout.commands.Command`).  The member's claim on a partition is that version: every commit checks it
(:mod:`zkcoord.consumer.offsets`).  Reading the owner znode at the start served two ends, both kept here:

* **the version the commits check** -- the carried one, checked once before anything is fetched: in the transaction
  that acknowledges the start, a ``check`` of each carried version.  If any fails (the owner znode was rewritten,
  deleted, or the coordinator's prediction was off), the transaction fails whole -- nothing acknowledged -- and every
  carried partition is read and judged as without a carried version.  Nothing is fetched on a version not checked.
* **that the owner znode names our thread** (a start naming another thread is not fetched, S2) -- carried versions
  are used only for partitions the group's state vouches for (its target, at the start's own epoch and generation,
  gives them to the thread the start names: ``zkcoord.consumer.vouch``).  The coordinator writes an owner znode only
  in transactions that write the state, so at the version it carried the znode names that thread; a later write by
  the coordinator would need our stop first, which we have not acknowledged.  A partition the state does not vouch
  for (it moved on to a newer generation) is read, as before.  The one case a version check cannot tell from a read
  -- an owner znode deleted and created again by hand up to the same version -- is the one every commit's check has
  always accepted (``zkcoord.consumer.offsets``' docstring).

Acknowledging before fetching starts is what the coordinator's rule allows: an acknowledged start reports owning its
partitions, and the member applies no later command before it has started them.  Command thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set

from zkcoord.consumer.acks import add_acknowledgement
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import BadVersionError, NoNodeError
from zkcoord.layout import paths
from zkcoord.zk import ZkClient


def carry(
    carried: Mapping[TopicPartition, int] | None,
    ownership: Mapping[TopicPartition, str],
    vouched: Set[TopicPartition],
    wait: Callable[..., None] | None,
) -> dict[TopicPartition, int]:
    """Of the ``carried`` versions, those a claim may check instead of reading: for partitions of ``ownership`` the
    state vouches for (``vouched``), at a version the coordinator's create-then-set leaves (1 or more: a version-0
    claim needs its znode's ``czxid``, which only a read gives), and not for a hand-over's wait (``wait``)."""
    if not carried or wait is not None:
        return {}
    return {tp: v for tp, v in carried.items() if tp in ownership and tp in vouched and v >= 1}


def check_carried(zk: ZkClient, group: str, versions: Mapping[TopicPartition, int], ack: str | None) -> bool:
    """Check every owner znode of ``versions`` at its version, and acknowledge ``ack`` (a start's command path, or
    None), in one transaction; True if it landed, False if a check (or the acknowledgement's znode) failed and
    nothing landed.

    :raises ZkError: on other I/O failure (the outcome may be unknown: the start is applied again, and checking
    and acknowledging again is idempotent).
    """
    txn = zk.transaction()
    for tp, version in sorted(versions.items()):
        txn.check(paths.owner(group, tp.topic, tp.partition), version)
    if ack is not None:
        add_acknowledgement(txn, ack)
    try:
        txn.commit()
    except (BadVersionError, NoNodeError):
        return False
    return True
