"""Writing a rebalance phase: commands, ownership and the group's state, in fenced, pipelined transactions.

One phase (stop or start) of a group is a list of operations: a command (persistent-sequential znode) per member,
and for the start phase the ownership-registry changes.  They are cut into batches of ``batch_size`` operations;
each batch is one ZooKeeper transaction that

1. checks the fence (epoch version, coordinator znode, term node: :class:`~zkcoord.coordinator.election.Fence`);
2. writes the group state with ``sent = i + 1``, conditional on the version the previous batch left: batches are
   chained, so batch ``i + 1`` can only commit after batch ``i`` (a prefix property);
3. applies its operations.

All batches are sent at once (pipelined: one round trip of latency for the whole phase, not one per member).  If
the connection is lost the outcome of some batches is unknown; the state's ``sent`` counter, read back after the
reconnect, says exactly how many committed, and only the rest are sent again: no command is lost or duplicated.

Command names carry the epoch, generation and phase (``cmd-<epoch>-<generation>-<stop|start>-<sequence>``), so an
acknowledgement (the consumer deletes its command) is recognised from a channel listing alone.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Literal

from zkcoord.coordinator.election import Fence
from zkcoord.errors import (
    BadVersionError,
    CodecError,
    FencedError,
    NoNodeError,
    ZkError,
    ZkSessionExpiredError,
    ZkUnavailableError,
)
from zkcoord.layout import paths
from zkcoord.layout.commands import CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.zk import Transaction

log = logging.getLogger(__name__)

OpKind = Literal["create", "create_seq", "set", "delete"]


@dataclass(frozen=True, slots=True)
class Op:
    kind: OpKind
    path: str
    data: bytes = b""


def generation_prefix(epoch: int, generation: int) -> str:
    """Name prefix of every command of one generation under one epoch: ``cmd-7-12-``."""
    return f"{paths.COMMAND_PREFIX}{epoch}-{generation}-"


def command_prefix(epoch: int, generation: int, option: CommandOption) -> str:
    """Name prefix of the commands of one phase: ``cmd-7-12-stop-``; ZooKeeper appends the sequence number."""
    short = "stop" if option is CommandOption.STOP_FETCHER else "start"
    return f"{generation_prefix(epoch, generation)}{short}-"


class PhaseWriteError(ZkError):
    """A batch of a phase failed.  ``landed`` batches committed before it; ``uncertain`` if the outcome is unknown."""

    def __init__(self, message: str, landed: int, *, uncertain: bool, path: str | None = None) -> None:
        super().__init__(message, path)
        self.landed = landed
        self.uncertain = uncertain
        self.retriable = uncertain


class PhaseWriter:
    """Writes phases through one term's :class:`Fence`.  Worker thread only."""

    def __init__(self, fence: Fence, batch_size: int) -> None:
        self.fence = fence
        self.batch_size = batch_size

    def batches(self, ops: list[Op]) -> list[list[Op]]:
        size = self.batch_size
        return [ops[i : i + size] for i in range(0, len(ops), size)] or [[]]

    def write(
        self,
        group: str,
        state: GroupState,
        state_version: int,
        ops: list[Op],
        start: int = 0,
        *,
        versions: dict[str, int] | None = None,
    ) -> tuple[int, list[tuple[str, int]]]:
        """Write batches ``start..`` of ``ops`` with ``state``; return the state znode's final version and the
        sequential znodes (the commands) created, in the order of ``ops``, then each batch's consumer-protocol
        assignments written (:func:`~zkcoord.layout.paths.assignment`): each as ``(path, zxid)``, the zxid of the
        transaction that created it (so its ``czxid``: a channel created after it is another channel than the one
        it was written into, :mod:`~zkcoord.coordinator.acks`).  ``versions``, if given, is filled with the version
        each znode ``ops`` set or created was left at (and loses each one they deleted), from the transactions' own
        results.

        ``state_version`` is the state znode's current version (-1: it does not exist yet).

        :raises FencedError: the term is over.
        :raises PhaseWriteError: a batch failed (``uncertain`` after a connection loss: read the state back).
        """
        zk = self.fence.zk
        state_path = paths.group_state(group)
        batches = self.batches(ops)
        txns = []
        version = state_version
        for i in range(start, len(batches)):
            txn = self.fence.transaction()
            data = dataclasses.replace(state, sent=i + 1).encode()
            if version < 0:
                # Created, then set in the same transaction: a set's result carries the transaction's zxid.
                txn.create(state_path, data)
                version = 0
            txn.set_data(state_path, data, version)
            version += 1
            for op in batches[i]:
                _add(txn, op)
            txns.append(txn)
        created: list[tuple[str, int]] = []
        for offset, result in enumerate(zk.commit_many(txns)):
            if isinstance(result, FencedError):
                raise result
            batch = batches[start + offset]
            if isinstance(result, list) and batch:
                # The fence's own operations come first in each transaction, then the state's set; the batch's
                # operations are the tail.
                tail, zxid = result[-len(batch) :], result[-len(batch) - 1].mzxid
                created += [(str(r), zxid) for op, r in zip(batch, tail, strict=True) if op.kind == "create_seq"]
                # A consumer-protocol assignment is rewritten in place: the zxid names the write.
                created += [(op.path, zxid) for op in batch if op.kind != "delete" and _assignment(op.path)]
                if versions is not None:
                    _versions(versions, batch, tail)
            if isinstance(result, ZkError):
                landed = start + offset
                fenced = self._as_fenced(result)
                if fenced is not None:
                    raise fenced from result
                # Unknown outcome: the connection was lost.  Without fencing (the demo's contrast) a coordinator also
                # carries on after its session expired, as kazoo's Election recipe would let it: it resends later.
                uncertain = isinstance(result, ZkUnavailableError) or (
                    self.fence.unsafe and isinstance(result, ZkSessionExpiredError)
                )
                raise PhaseWriteError(
                    f"group {group}: batch {landed + 1} of {len(batches)} failed: {result}",
                    landed,
                    uncertain=uncertain,
                    path=result.path,
                ) from result
        return version, created

    def persist_failure(self, group: str, generation: int | None, reason: str, now_ms: int) -> None:
        """Mark ``group``'s state FAILED with ``reason`` (a rebalance out of retries), keeping the rest of it.

        Best effort: an unreadable state is left alone, and a failed write is logged (the journal and the log
        carry the failure either way).  :raises FencedError: the term is over.
        """
        zk, state_path = self.fence.zk, paths.group_state(group)
        try:
            data, stat = zk.get(state_path)
            state = GroupState.decode(data, state_path)
        except (ZkError, CodecError):
            return
        failed = dataclasses.replace(
            state,  # a migrating group stays one (legacy): its zk-client members are still there
            generation=generation or state.generation,
            phase=GroupPhase.FAILED,
            epoch=self.fence.term.epoch,
            updated_ms=now_ms,
            error=reason[:500],
            sent=0,
        )
        txn = self.fence.transaction()
        txn.set_data(state_path, failed.encode(), stat.version)
        try:
            self.fence.commit(txn)
        except FencedError:
            raise
        except ZkError as e:
            log.warning("group %s: could not persist the failure: %s", group, e)

    def _as_fenced(self, error: ZkError) -> FencedError | None:
        # Only a failed check is a fence; a connection loss is reported against the first path too, but says nothing.
        if not isinstance(error, BadVersionError | NoNodeError):
            return None
        if self.fence.guards(error.path):
            return FencedError(f"coordinator epoch {self.fence.term.epoch} is fenced ({error})", error.path)
        return None


def _versions(versions: dict[str, int], batch: list[Op], results: list[Any]) -> None:
    """Record in ``versions`` what one landed transaction left each znode of ``batch`` at (its ``results``)."""
    for op, result in zip(batch, results, strict=True):
        if op.kind == "set":
            versions[op.path] = result.version
        elif op.kind == "create":
            versions[op.path] = 0
        elif op.kind == "delete":
            versions.pop(op.path, None)


def _assignment(path: str) -> bool:
    return paths.member_record_of(path, "assignment") is not None


def _add(txn: Transaction, op: Op) -> None:
    if op.kind == "create":
        txn.create(op.path, op.data)
    elif op.kind == "create_seq":
        txn.create(op.path, op.data, sequence=True)
    elif op.kind == "set":
        txn.set_data(op.path, op.data)
    else:
        txn.delete(op.path)
