"""Coordinator election and the epoch fence (S1).

Election (seed sections A and B, fenced as in Kafka's KAFKA-6082): in ONE ZooKeeper transaction the winner creates
the ephemeral ``/consumers/coordinator`` and bumps the persistent ``/consumers/coordinator_epoch`` conditionally on
the version it read.  Exactly one broker can win a given epoch; the epoch znode's new version identifies the term.

Fence: every write of a term is a transaction that first checks

* ``/consumers/coordinator_epoch`` at the term's version: a later election bumped it, so the check fails;
* ``/consumers/coordinator`` at version 0: if our ephemeral is gone (session expired) and nobody has been elected
  yet, the check fails on NoNode.  We never change that node's data, so its version stays 0.

A failed check raises :class:`~zkcoord.errors.FencedError` and the coordinator resigns at once.  Checking the
version of the ephemeral node alone would be no fence: a new coordinator's node also starts at version 0.  What a
broker does with a coordinator znode left behind (by its own ended term, or a persistent one) is
:mod:`zkcoord.coordinator.seat`.

Epochs only grow (S5), even when the epoch znode is lost or unreadable: :func:`read_epoch` then takes the highest
epoch on record elsewhere (its version, the group states, what the broker has seen), so a consumer that saw the last
epoch accepts the next coordinator's commands.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from zkcoord import paths
from zkcoord.errors import (
    BadVersionError,
    CodecError,
    EpochExhaustedError,
    FencedError,
    NodeExistsError,
    NoNodeError,
    ZkUnavailableError,
)
from zkcoord.journal import Journal
from zkcoord.zk import Transaction, ZkClient
from zkcoord.znodes import CoordinatorInfo, GroupState, decode_int, encode_int

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Term:
    """One coordinator term: the epoch won and the epoch znode's version that fences its writes."""

    broker_id: int
    epoch: int
    epoch_version: int
    session_id: int


class Fence:
    """Builds and commits the fenced transactions of one term.  Used from the coordinator's worker thread only.

    ``unsafe`` switches the fence off (the demo's contrast mode): transactions then carry no checks at all.
    """

    def __init__(self, zk: ZkClient, term: Term, *, unsafe: bool = False) -> None:
        self.zk = zk
        self.term = term
        self.unsafe = unsafe

    def transaction(self) -> Transaction:
        txn = self.zk.transaction()
        if not self.unsafe:
            txn.check(paths.COORDINATOR_EPOCH, self.term.epoch_version)
            txn.check(paths.COORDINATOR, 0)
        return txn

    def ensure(self, path: str) -> None:
        """Create an empty persistent node (and its missing parents) if absent, as fenced writes (every write of a
        term is fenced).  :raises FencedError, ZkError:"""
        if self.zk.exists(path) is not None:
            return
        parent = path.rsplit("/", 1)[0]
        if parent and self.zk.exists(parent) is None:
            self.ensure(parent)
        txn = self.transaction()
        txn.create(path)
        with contextlib.suppress(NodeExistsError):
            self.commit(txn)

    def commit(self, txn: Transaction, timeout: float | None = None) -> list[Any]:
        """Commit a transaction from :meth:`transaction`.

        :raises FencedError: the term is over (a newer coordinator exists, or our session's node is gone).
        :raises ZkError: another operation failed; :class:`ZkUnavailableError` if the outcome is unknown.
        """
        try:
            return txn.commit(timeout=timeout)
        except (BadVersionError, NoNodeError) as e:
            if e.path in (paths.COORDINATOR_EPOCH, paths.COORDINATOR):
                raise FencedError(
                    f"coordinator epoch {self.term.epoch} is fenced: {e.path} changed (a newer coordinator exists)",
                    e.path,
                ) from e
            raise


#: The largest epoch there can be (a Java long, what Kafka's tools and the Spark pipeline read): a value above it in
#: the epoch znode is malformed; an election that would need an epoch above it refuses (EpochExhaustedError).
MAX_EPOCH = 2**63 - 1


def read_epoch(zk: ZkClient, journal: Journal, known: int = 0) -> tuple[int, int]:
    """Return ``(highest, version)``: the highest coordinator epoch on record, which the next term must exceed, and
    the version of ``/consumers/coordinator_epoch`` (created at 0 if absent) to bump conditionally.

    ``known`` is the highest epoch the caller has seen (its own terms, coordinator znodes it watched).  The znode's
    value is taken as it is when it is a valid epoch, positive, and not below its own version (elections move value
    and version in lockstep, a repair only puts the value ahead) nor below ``known``.  Otherwise (malformed, out of
    range, missing and so recreated at 0, lowered) it cannot be trusted: epochs only grow even when the znode that
    held the last one is lost (S5), so the highest epoch is taken from every record that carries one -- the value if
    valid, the version, ``known`` and every group's state (each command a consumer has seen was written with its
    group's state, under the same epoch) -- and the repair is journalled.  Blocks for a few round trips (a pipelined
    burst of reads when the states are scanned).  :raises ZkError:
    """
    ensure_epoch_znode(zk)
    data, stat = zk.get(paths.COORDINATOR_EPOCH)
    value: int | None = None
    try:
        value = decode_epoch(data)
    except CodecError as e:
        journal.emit("input.rejected", what="coordinator epoch", path=paths.COORDINATOR_EPOCH, reason=e.reason)
    if value is not None and value > 0 and value >= stat.version and value >= known:
        return value, stat.version
    recorded = highest_recorded_epoch(zk)
    highest = max(value or 0, stat.version, known, recorded)
    if highest != value:
        journal.emit(
            "coordinator.epoch_repaired",
            found=data[:40].decode("ascii", "replace"),
            version=stat.version,
            known=known,
            recorded=recorded,
            epoch=highest,
        )
    return highest, stat.version


def decode_epoch(data: bytes) -> int:
    """The epoch znode's value.  :raises CodecError: not a decimal integer in ``0..MAX_EPOCH``."""
    value = decode_int("coordinator epoch", data, paths.COORDINATOR_EPOCH)
    if value > MAX_EPOCH:
        raise CodecError(
            "coordinator epoch", f"{value} is above the largest epoch {MAX_EPOCH}", paths.COORDINATOR_EPOCH
        )
    return value


def ensure_epoch_znode(zk: ZkClient) -> None:
    """Create ``/consumers/coordinator_epoch`` at 0 if it is absent.  :raises ZkError:"""
    zk.ensure_path(paths.CONSUMERS)
    with contextlib.suppress(NodeExistsError):
        zk.create(paths.COORDINATOR_EPOCH, encode_int(0))


def highest_recorded_epoch(zk: ZkClient) -> int:
    """The highest coordinator epoch in any group's state (0 if none): one listing and one pipelined burst of reads.

    A state that cannot be read or holds an epoch above :data:`MAX_EPOCH` is skipped (its group's examination
    reports it).  :raises ZkError:
    """
    try:
        groups = zk.get_children(paths.GROUPS)
    except NoNodeError:
        return 0
    highest = 0
    for got in zk.get_many([paths.group_state(g) for g in groups]):
        if got is None:
            continue
        try:
            epoch = GroupState.decode(got[0]).epoch
        except CodecError:
            continue
        if epoch <= MAX_EPOCH:
            highest = max(highest, epoch)
    return highest


def try_elect(zk: ZkClient, broker_id: int, journal: Journal, now_ms: int, known: int = 0) -> Term | None:
    """Try once to become coordinator.  Returns the won :class:`Term`, or None if the znode exists (held by a
    session, or left behind: the caller judges it, :mod:`zkcoord.coordinator.seat`).

    The new epoch is one above :func:`read_epoch`'s highest (``known``: the highest epoch the caller has seen).
    Blocks for a few round trips.  :raises ZkError: on connection problems (the caller retries on its next
    trigger); an unknown outcome after a connection loss is resolved by reading back, never by guessing.
    :raises EpochExhaustedError: the highest epoch on record is :data:`MAX_EPOCH`.
    """
    for _ in range(10):  # lost races on the epoch version; each loss means someone else progressed
        epoch, version = read_epoch(zk, journal, known)
        if epoch >= MAX_EPOCH:
            raise EpochExhaustedError(f"the coordinator epoch on record is {epoch}, the largest there can be")
        new_epoch = epoch + 1
        txn = zk.transaction()
        txn.create(paths.COORDINATOR, CoordinatorInfo(broker_id, new_epoch, now_ms).encode(), ephemeral=True)
        txn.set_data(paths.COORDINATOR_EPOCH, encode_int(new_epoch), version)
        try:
            txn.commit()
        except NodeExistsError:
            return None
        except BadVersionError:
            continue
        except ZkUnavailableError:
            return _resolve_unknown_outcome(zk, broker_id, new_epoch)
        return Term(broker_id, new_epoch, version + 1, zk.session_id)
    return None


def _resolve_unknown_outcome(zk: ZkClient, broker_id: int, epoch: int) -> Term | None:
    """After a connection loss during the election transaction, find out whether it committed."""

    def read() -> Term | None:
        try:
            data, stat = zk.get(paths.COORDINATOR)
        except NoNodeError:
            return None
        if stat.ephemeralOwner != zk.session_id:
            return None
        info = CoordinatorInfo.decode(data, paths.COORDINATOR)
        if info.broker_id != broker_id or info.epoch != epoch:
            return None  # ours, but not what we wrote: the seat hands it back (seat.py)
        _, epoch_stat = zk.get(paths.COORDINATOR_EPOCH)
        return Term(broker_id, epoch, epoch_stat.version, zk.session_id)

    result: Term | None = zk.retry(read, deadline_s=zk.config.session_timeout_s)
    return result


def read_coordinator(zk: ZkClient) -> CoordinatorInfo | None:
    """The current coordinator, or None.  :raises CodecError: if its znode is malformed."""
    try:
        data, _ = zk.get(paths.COORDINATOR)
    except NoNodeError:
        return None
    return CoordinatorInfo.decode(data, paths.COORDINATOR)
