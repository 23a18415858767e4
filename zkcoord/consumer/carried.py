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

The same goes for the **committed offset** a partition starts from: the revoker's acknowledgement carries it with
its offset znode's version as its stop's transaction left it (:func:`carried_out`), the coordinator hands it on in
the start, and the new owner checks that version in the same transaction instead of reading the offset; every later
write of the offset znode moves the version, so a check that passes says the carried offset is still the committed
one, and one that fails sends the partition back to the read (``docs/protocol.md``, the assignment channel).

Acknowledging before fetching starts is what the coordinator's rule allows: an acknowledged start reports owning its
partitions, and the member applies no later command before it has started them.  Command thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from typing import Any

from zkcoord.consumer.acks import add_acknowledgement
from zkcoord.consumer.owner_repair import Claim
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import BadVersionError, NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.carried_offsets import MAX_VERSION
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


def check_carried(
    zk: ZkClient,
    group: str,
    versions: Mapping[TopicPartition, int],
    ack: str | None,
    offsets: Mapping[TopicPartition, tuple[int, int]] | None = None,
) -> bool:
    """Check every owner znode of ``versions`` at its version, every offset znode of ``offsets`` at the version
    carried with its committed offset, and acknowledge ``ack`` (a start's command path, or None), in one
    transaction; True if it landed, False if a check (or the acknowledgement's znode) failed and nothing landed.

    :raises ZkError: on other I/O failure (the outcome may be unknown: the start is applied again, and checking
    and acknowledging again is idempotent).
    """
    txn = zk.transaction()
    for tp, version in sorted(versions.items()):
        txn.check(paths.owner(group, tp.topic, tp.partition), version)
    for tp, (_, version) in sorted((offsets or {}).items()):
        txn.check(paths.offset(group, tp.topic, tp.partition), version)
    if ack is not None:
        add_acknowledgement(txn, ack)
    try:
        txn.commit()
    except (BadVersionError, NoNodeError):
        return False
    return True


def carried_out(
    claims: Mapping[TopicPartition, Claim],
    releasing: Set[TopicPartition],
    todo: Mapping[TopicPartition, int],
) -> dict[str, dict[int, tuple[int, int]]]:
    """What a stop's acknowledgement carries for the next owner: the committed offsets of ``releasing`` (of our
    ``claims``) with the versions their offset znodes are at once the stop's transaction lands, which writes
    ``todo``: a set moves a known version by one, a create leaves 0; a partition not written keeps the value and
    the version its claim last committed or read *together* (never a position the application only expected to be
    committed: an ``on_partitions_revoked`` may have committed another value since, at the version we know).  A
    partition whose version we do not know is left out: the next owner reads it; a wrong version only fails the
    next owner's check, which then reads.  Version 0 is carried (unlike an owner znode's, which the coordinator
    deletes and creates again as generations pass): an offset znode is deleted only by ``group delete`` and
    ``group reset-offsets``, which refuse a group with members, or by the members themselves, which write the value
    they carry."""
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for tp in sorted(releasing):
        c = claims.get(tp)
        if c is None:
            continue
        version: int | None
        if tp in todo:
            offset: int | None = todo[tp]
            base = c.offset_version
            version = 0 if not c.offset_exists else None if base is None else base + 1
        else:
            offset = c.committed
            version = c.offset_version if c.offset_exists else None
        if offset is not None and version is not None and 0 <= version <= MAX_VERSION:
            out.setdefault(tp.topic, {})[tp.partition] = (offset, version)
    return out


def version_of(results: list[Any], at: int) -> int | None:
    """The version a transaction's write at index ``at`` left its znode at (a set: its stat's; a create: 0)."""
    if not 0 <= at < len(results):
        return None
    result = results[at]
    version = getattr(result, "version", None)
    if isinstance(version, int):
        return version
    return 0 if isinstance(result, str) else None
