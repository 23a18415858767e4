"""Coordinator election and the epoch fence (S1).

Election (seed sections A and B, fenced as in Kafka's KAFKA-6082): in ONE ZooKeeper transaction the winner creates
the ephemeral ``/consumers/coordinator`` and bumps the persistent ``/consumers/coordinator_epoch`` conditionally on
the version it read.  Exactly one broker can win a given epoch; the epoch znode's new version identifies the term.

Fence: every write of a term is a transaction that first checks

* ``/consumers/coordinator_epoch`` at the term's version: a later election bumped it, so the check fails;
* ``/consumers/coordinator`` at version 0: if our ephemeral is gone (session expired) and nobody has been elected
  yet, the check fails on NoNode.  We never change that node's data, so its version stays 0.

A failed check raises :class:`~zkcoord.errors.FencedError` and the coordinator resigns at once.  Checking the
version of the ephemeral node alone would be no fence: a new coordinator's node also starts at version 0.
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
    FencedError,
    NodeExistsError,
    NoNodeError,
    ZkUnavailableError,
)
from zkcoord.journal import Journal
from zkcoord.zk import Transaction, ZkClient
from zkcoord.znodes import CoordinatorInfo, decode_int, encode_int

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


def read_epoch(zk: ZkClient, journal: Journal) -> tuple[int, int]:
    """Return ``(epoch, version)`` of ``/consumers/coordinator_epoch``, creating it at 0 if absent.

    A malformed value is journalled and replaced by the version (which only coordinators advance, in lockstep with
    the epoch), so a bad write cannot wedge elections (S7).
    """
    zk.ensure_path(paths.CONSUMERS)
    with contextlib.suppress(NodeExistsError):
        zk.create(paths.COORDINATOR_EPOCH, encode_int(0))
    data, stat = zk.get(paths.COORDINATOR_EPOCH)
    try:
        epoch = decode_int("coordinator epoch", data, paths.COORDINATOR_EPOCH)
    except CodecError as e:
        journal.emit("input.rejected", what="coordinator epoch", path=paths.COORDINATOR_EPOCH, reason=str(e))
        epoch = stat.version
    return max(epoch, stat.version), stat.version


def try_elect(zk: ZkClient, broker_id: int, journal: Journal, now_ms: int) -> Term | None:
    """Try once to become coordinator.  Returns the won :class:`Term`, or None if another broker holds the role.

    Blocks for a few round trips.  :raises ZkError: on connection problems (the caller retries on its next
    trigger); an unknown outcome after a connection loss is resolved by reading back, never by guessing.
    """
    for _ in range(10):  # lost races on the epoch version; each loss means someone else progressed
        epoch, version = read_epoch(zk, journal)
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
        info = CoordinatorInfo.decode(data, paths.COORDINATOR)
        if stat.ephemeralOwner != zk.session_id or info.broker_id != broker_id or info.epoch != epoch:
            return None
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
