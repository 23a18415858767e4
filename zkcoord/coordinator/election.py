"""Coordinator election and the epoch fence (S1).

Election (seed sections A and B, fenced as in Kafka's KAFKA-6082): in ONE ZooKeeper transaction the winner creates
the ephemeral ``/consumers/coordinator``, bumps the persistent ``/consumers/coordinator_epoch`` conditionally on the
version it read, creates the persistent term node ``/consumers/coordinator_terms/<new epoch>`` and deletes every
other term node.  Exactly one broker can win a given epoch.

Fence: every write of a term is a transaction that first checks

* ``/consumers/coordinator_epoch`` at the term's version: a later election bumped it, so the check fails;
* ``/consumers/coordinator`` at version 0: if our ephemeral is gone (session expired) and nobody has been elected
  yet, the check fails on NoNode.  We never change that node's data, so its version stays 0;
* our term node at version 0: the next election deleted it, so the check fails on NoNode.

The third check is the one that holds whatever happened to the epoch znode: a deleted epoch znode is recreated at
version 0, so later elections hand out its versions again, and a deposed coordinator's first two checks can pass
again (every coordinator's node is at version 0).  A term node's name is its epoch, and epochs only grow (below), so
no election ever recreates a deposed term's node.  A failed check raises :class:`~zkcoord.errors.FencedError` and
the coordinator resigns at once.  What a broker does with a coordinator znode left behind (by its own ended term, or
a persistent one) is :mod:`zkcoord.coordinator.seat`.

Epochs only grow (S5), even when the epoch znode is lost, unreadable or lowered: :func:`read_epoch` takes the highest
epoch on record anywhere (the znode's value and version, the term nodes' names, the group states, what the broker has
seen), so a consumer that saw the last epoch accepts the next coordinator's commands.  The fence rests on that: it
holds as long as one record of the deposed term's epoch (or a later one) survives.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

from zkcoord.errors import (
    BadVersionError,
    CodecError,
    EpochExhaustedError,
    FencedError,
    NodeExistsError,
    NoNodeError,
    ZkUnavailableError,
)
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupState
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.layout.znodes import decode_int, encode_int
from zkcoord.runtime.journal import Journal
from zkcoord.zk import Transaction, ZkClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Term:
    """One coordinator term: the epoch won and the epoch znode's version that fence its writes (with the term's node,
    :attr:`node`, and the coordinator znode)."""

    broker_id: int
    epoch: int
    epoch_version: int
    session_id: int

    @property
    def node(self) -> str:
        """The term's node, ``/consumers/coordinator_terms/<epoch>``, created by the election that won it."""
        return paths.coordinator_term(self.epoch)


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
            txn.check(self.term.node, 0)
        return txn

    def guards(self, path: str | None) -> bool:
        """Whether ``path`` (of a failed ``check``) is one of this fence's checks: the term is over."""
        return not self.unsafe and path in (paths.COORDINATOR_EPOCH, paths.COORDINATOR, self.term.node)

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
            if self.guards(e.path):
                raise FencedError(
                    f"coordinator epoch {self.term.epoch} is fenced: {e.path} changed (a newer coordinator exists)",
                    e.path,
                ) from e
            raise


#: The largest epoch there can be (a Java long, what Kafka's tools and the Spark pipeline read): a value above it in
#: the epoch znode is malformed; an election that would need an epoch above it refuses (EpochExhaustedError).
MAX_EPOCH = 2**63 - 1


class EpochRecord(NamedTuple):
    """What :func:`read_epoch` found: the highest epoch on record, the epoch znode's version and data, the term nodes,
    and the highest epoch in the term nodes' names and the group states."""

    highest: int
    version: int
    terms: list[str]
    found: bytes
    recorded: int

    def repaired(self) -> bool:
        """Whether the epoch znode's data is not the highest epoch on record (the winner writes the highest)."""
        try:
            return decode_epoch(self.found) != self.highest
        except CodecError:
            return True


def read_epoch(zk: ZkClient, journal: Journal, known: int = 0) -> EpochRecord:
    """Return the highest coordinator epoch on record, which the next term must exceed, the version of
    ``/consumers/coordinator_epoch`` (created at 0 if absent) to bump conditionally, and the children of
    ``/consumers/coordinator_terms`` (created if absent) that the election deletes.

    The highest epoch is that of every record that carries one, whatever the epoch znode says: its value (if a
    valid epoch), its version (elections move value and version in lockstep; a repair puts the value ahead), the
    term nodes' names, ``known`` (the highest epoch the caller has seen: its own terms, coordinator znodes it
    watched) and every group's state (each command a consumer has seen was written with its group's state, under
    the same epoch).  No single record is trusted alone: a value lowered by hand after an earlier repair is still at
    or above its version, and a restarted broker knows nothing, yet consumers saw the higher epoch (S5).  The reads
    are not one snapshot: an election meanwhile bumps the version read first, so the caller's transaction fails.
    Elections are rare: the cost is a few round trips and one pipelined burst of reads of the group states.
    Journals a malformed value (``input.rejected``).  :raises ZkError:
    """
    ensure_epoch_znode(zk)
    data, stat = zk.get(paths.COORDINATOR_EPOCH)
    value: int | None = None
    try:
        value = decode_epoch(data)
    except CodecError as e:
        journal.emit("input.rejected", what="coordinator epoch", path=paths.COORDINATOR_EPOCH, reason=e.reason)
    zk.ensure_path(paths.COORDINATOR_TERMS)
    terms = zk.get_children(paths.COORDINATOR_TERMS)
    recorded = max(highest_recorded_epoch(zk), *(_term_epoch(name) for name in terms), 0)
    return EpochRecord(max(value or 0, stat.version, known, recorded), stat.version, terms, data, recorded)


def _journal_repair(journal: Journal, record: EpochRecord, known: int) -> None:
    """Say that an election won on a repaired epoch (only the winner: a loser's reads may straddle the winner's)."""
    if record.repaired():
        journal.emit(
            "coordinator.epoch_repaired",
            found=record.found[:40].decode("ascii", "replace"),
            version=record.version,
            known=known,
            recorded=record.recorded,
            epoch=record.highest,
        )


def _term_epoch(name: str) -> int:
    """The epoch a term node's name records (0 for a name that is no epoch: such a node is deleted, not read)."""
    if not name.isdigit() or not name.isascii():
        return 0
    epoch = int(name)
    return epoch if epoch <= MAX_EPOCH else 0


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

    The new epoch is one above :func:`read_epoch`'s highest (``known``: the highest epoch the caller has seen).  The
    transaction also creates the new term's node and deletes every term node listed just before: the epoch znode's
    version check (and the create of the coordinator znode) already serialise elections, so a node that changed
    meanwhile can only be one made by hand -- a delete or create then fails on it and the round is tried again.
    Blocks for a few round trips.  :raises ZkError: on connection problems (the caller retries on its next
    trigger); an unknown outcome after a connection loss is resolved by reading back, never by guessing.
    :raises NotEmptyError: a term node has children (made by hand: only a person can say what they are).
    :raises EpochExhaustedError: the highest epoch on record is :data:`MAX_EPOCH`.
    """
    for _ in range(10):  # lost races; each loss means someone else progressed (or changed a term node by hand)
        record = read_epoch(zk, journal, known)
        epoch, version, terms = record.highest, record.version, record.terms
        if epoch >= MAX_EPOCH:
            raise EpochExhaustedError(f"the coordinator epoch on record is {epoch}, the largest there can be")
        new_epoch = epoch + 1
        info = CoordinatorInfo(broker_id, new_epoch, now_ms).encode()
        txn = zk.transaction()
        txn.create(paths.COORDINATOR, info, ephemeral=True)
        txn.set_data(paths.COORDINATOR_EPOCH, encode_int(new_epoch), version)
        txn.create(paths.coordinator_term(new_epoch), info)
        for name in terms:  # (a term's node is never reused: its name is an epoch, and new_epoch is above them all)
            txn.delete(f"{paths.COORDINATOR_TERMS}/{name}")
        try:
            txn.commit()
        except NodeExistsError as e:
            if e.path == paths.COORDINATOR:
                return None
            continue
        except (BadVersionError, NoNodeError):
            continue
        except ZkUnavailableError:
            term = _resolve_unknown_outcome(zk, broker_id, new_epoch, version + 1)
            if term is not None:
                _journal_repair(journal, record, known)
            return term
        _journal_repair(journal, record, known)
        return Term(broker_id, new_epoch, version + 1, zk.session_id)
    return None


def _resolve_unknown_outcome(zk: ZkClient, broker_id: int, epoch: int, epoch_version: int) -> Term | None:
    """After a connection loss during the election transaction, find out whether it committed: our session then owns
    the coordinator znode with our data.  The term is the one that transaction made (``epoch_version``): a change
    since then fails its fence at its first write, as it would have had the reply arrived."""

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
        return Term(broker_id, epoch, epoch_version, zk.session_id)

    result: Term | None = zk.retry(read, deadline_s=zk.config.session_timeout_s)
    return result


def read_coordinator(zk: ZkClient) -> CoordinatorInfo | None:
    """The current coordinator, or None.  :raises CodecError: if its znode is malformed."""
    try:
        data, _ = zk.get(paths.COORDINATOR)
    except NoNodeError:
        return None
    return CoordinatorInfo.decode(data, paths.COORDINATOR)
