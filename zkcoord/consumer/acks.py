"""Acknowledging a command: deleting it and recording it in its channel, in one transaction.

The coordinator counts a command's deletion as its member's acknowledgement only if the channel records that command
(or a later one) as acknowledged (``zkcoord.coordinator.acks``): a command deleted by anything else -- by hand, or
by a non-atomic delete of the whole channel, which removes the children a round trip before the channel -- is lost,
not acknowledged.  So every deletion of a command by its consumer is this transaction: delete the command, then set
the channel's data to the command's name (:func:`zkcoord.layout.commands.encode_acknowledged`).

The two go in one transaction for a reason: the delete succeeding proves the channel is the one the command was
written into, so the record never lands in a channel deleted and created again since (where sequence numbers start
over, and an old record would acknowledge new commands).  Commands are handled in sequence order, so the record is
the highest acknowledged so far; a retry after a lost reply writes the same record again (or finds the command gone:
it landed).

Only a command the consumer applied is recorded.  One it refused (malformed, stale, forged, meant for another
registration) is deleted without a record: the coordinator that wrote it, if any, takes it for lost and retries,
and a hand that deletes a real command and then writes a forged later one cannot make the forgery's refusal record
the real one as acknowledged (the record names "this command or a later one").

Threads: whichever thread acknowledges (the command thread; the commit path under its lock).
"""

from __future__ import annotations

import contextlib

from zkcoord.errors import NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.carried_offsets import CarriedOffsets
from zkcoord.layout.commands import assignment_zxid, encode_acknowledged
from zkcoord.layout.kip848 import AssignmentAck
from zkcoord.zk import Transaction, ZkClient


def assignment_ack(
    command: str, *, record: bool = True, offsets: CarriedOffsets | None = None
) -> tuple[str, bytes] | None:
    """For a consumer-protocol assignment (``command`` is ``assignment/<c>/assignment-<zxid>``,
    :mod:`zkcoord.consumer.assignment`): its acknowledgement znode and what to write there -- the zxid of the write
    handled, ``refused`` unless ``record``, and a stop's ``offsets`` (the committed offsets of what it gives up, with
    their offset znodes' versions: the coordinator carries them to the next owner); None for a command of a
    channel."""
    parent, _, name = command.rpartition("/")
    parsed = paths.member_record_of(parent, "assignment")
    zxid = assignment_zxid(name)
    if parsed is None or zxid < 0:
        return None
    carried = dict(offsets or {}) if record else {}
    return paths.ack(*parsed), AssignmentAck(zxid, refused=not record, offsets=carried).encode()


def ack_znode(command: str) -> str | None:
    """The acknowledgement znode (``ack/<c>``) of a consumer-protocol assignment ``command``; None for a channel's."""
    ack = assignment_ack(command)
    return None if ack is None else ack[0]


def add_acknowledgement(
    txn: Transaction, command: str, *, record: bool = True, offsets: CarriedOffsets | None = None
) -> None:
    """Add to ``txn`` the acknowledgement of ``command`` (its path): its delete, then its channel's record of it
    (unless not ``record``: a refused command is only deleted).  The transaction fails with
    :class:`~zkcoord.errors.NoNodeError` for ``command`` if it is gone already.  A consumer-protocol assignment is
    acknowledged by one write of its acknowledgement znode instead (:func:`assignment_ack`; it exists: the command
    thread created it before applying the assignment), carrying ``offsets`` (:func:`assignment_ack`)."""
    ack = assignment_ack(command, record=record, offsets=offsets)
    if ack is not None:
        txn.set_data(*ack)
        return
    txn.delete(command)
    channel, _, name = command.rpartition("/")
    recorded = encode_acknowledged(name) if record else None
    if recorded is not None:
        txn.set_data(channel, recorded)


def acknowledge(zk: ZkClient, command: str, *, record: bool = True, offsets: CarriedOffsets | None = None) -> None:
    """Acknowledge ``command`` alone (one transaction); already gone is fine.  ``record`` and ``offsets``: see
    :func:`add_acknowledgement`.

    :raises ZkError: on I/O failure (the outcome may be unknown: acknowledging again is idempotent).
    """
    ack = assignment_ack(command, record=record, offsets=offsets)
    if ack is not None:
        try:
            zk.set(*ack)
        except NoNodeError:
            zk.create(ack[0], ack[1], makepath=True)
        return
    txn = zk.transaction()
    add_acknowledgement(txn, command, record=record)
    with contextlib.suppress(NoNodeError):
        txn.commit()
