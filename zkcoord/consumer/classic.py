"""The classic protocol's leader (seed 001, issue 17): a member that computes its group's assignment.

Every classic member watches its group's join record (``classic/join``, :class:`~zkcoord.layout.classic.JoinRecord`);
the watch only enqueues a ``classic-join`` event, with the data and version it saw, for the command thread.  The
member the record names as leader -- for its current registration (the record's incarnation is ours), for a
generation it has not answered yet -- computes the assignment with the generation's strategy over every member's
metadata (:mod:`zkcoord.consumer.assignors`), and writes it as the sync record (its SyncGroup) in one transaction
with a check of the join record's version.  That check is the fence: once the coordinator has moved on to a newer
generation (it rewrites the join record), a stale leader's write fails as a whole and is journalled
(``classic.sync_refused``) -- it never lands.

An assignor that raises, or returns something that is not an assignment, is the leader's error, not the consumer's
crash: the sync record then carries the error (Kafka forwards an assignment failure to the coordinator too),
``classic.assignor_failed`` is journalled, and the coordinator fails the generation and retries it with another
leader.  Whether the assignment is *valid* (every partition once, only to current subscribers) is the coordinator's
check, not the leader's: the coordinator trusts no member.

The leader only computes; partitions move through the coordinator's stop-fetcher and start-fetcher commands as in
every eager rebalance.  Threads: the command thread only (:meth:`ClassicLeader.on_join`).  The assignor runs on a
thread of its own, which the command thread waits for no longer than the join record's rebalance timeout: past it
the coordinator retries the generation without this leader anyway, so the leader gives up (``classic.assignor_failed``)
and its commands are obeyed again.  A user's assignor that never returns is left running (a daemon thread: Python
cannot stop it), its result ignored; one that raises anything, even ``SystemExit``, fails on that thread only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from zkcoord.consumer.assignors import load_assignor
from zkcoord.consumer.core import ConsumerCore
from zkcoord.errors import AssignorError, BadVersionError, CodecError, ConfigurationError, NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.classic import JoinRecord, SyncRecord
from zkcoord.protocol.classic_group import as_assignment
from zkcoord.runtime.faults import fault_point

log = logging.getLogger(__name__)

#: the largest sync record a leader writes: ZooKeeper refuses a request past ``jute.maxbuffer`` (1 MB by default) by
#: dropping the connection, so a bigger one would drop the leader's session's connection at every retry, forever
MAX_SYNC_BYTES = 900_000
#: how long a leader waits for its assignor when the join record does not say (the coordinator's default timeout)
DEFAULT_TIMEOUT_S = 10.0


def bounded(work: Callable[[], object], timeout_s: float, name: str) -> object:
    """``work()`` run on a daemon thread of its own, waited for at most ``timeout_s`` (command thread).

    :raises AssignorError: it raised (anything, ``SystemExit`` included: on its own thread, where nothing else
        dies), or did not return in time (it is left running; what it returns later is dropped).
    """
    box: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            box.append((True, work()))
        except BaseException as e:  # noqa: BLE001 -- contained: a user's assignor may raise anything, even SystemExit
            box.append((False, e))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not box:
        raise AssignorError(f"the assignor did not return within {timeout_s:g} s (the rebalance timeout)")
    ok, result = box[0]
    if ok:
        return result
    if isinstance(result, AssignorError | ConfigurationError):
        raise AssignorError(str(result))
    raise AssignorError(f"the assignor raised {type(result).__name__}: {result}")


class ClassicLeader:
    """What a classic member does with its group's join records (command thread)."""

    def __init__(self, core: ConsumerCore) -> None:
        self.c = core
        #: the newest generation this member answered as leader (a join record seen again is not answered twice)
        self.answered = 0

    def watch(self) -> None:
        """Watch the group's join record (any thread; the callback only enqueues)."""
        self.c.zk.watch_data(
            paths.classic_join(self.c.config.group),
            lambda data, stat: self.c.events.put(("classic-join", None if stat is None else (data, stat.version))),
        )

    def on_join(self, seen: object) -> None:
        """The join record changed: answer it if it names us leader.

        :raises ZkError: the sync record could not be written for a reason other than the fence (the event is
            redelivered and the record read again).
        """
        if not isinstance(seen, tuple) or not seen[0]:
            return
        data, version = seen
        path = paths.classic_join(self.c.config.group)
        try:
            record = JoinRecord.decode(data, path)
        except CodecError as e:
            self.c.journal.emit("input.rejected", what="classic join record", path=path, reason=str(e))
            return
        if record.leader != self.c.consumer_id or record.generation <= self.answered:
            return
        if record.leader_incarnation != self.c.incarnation:
            return  # meant for our previous registration: the coordinator will see it gone, or time out
        sync = self.compute(record)
        fault_point("consumer.classic_before_sync", self.c.journal)
        txn = self.c.zk.transaction()
        txn.check(path, version)
        txn.set_data(paths.classic_sync(self.c.config.group), sync.encode())
        try:
            txn.commit()
        except (BadVersionError, NoNodeError):
            self.answered = record.generation
            self.c.journal.emit(
                "classic.sync_refused",
                group=self.c.config.group,
                consumer=self.c.consumer_id,
                generation=record.generation,
                reason="the coordinator has moved on to a newer generation: this leader's assignment is stale",
            )
            return
        self.answered = record.generation
        self.c.journal.emit(
            "classic.sync_written",
            group=self.c.config.group,
            consumer=self.c.consumer_id,
            generation=record.generation,
            strategy=record.strategy,
            compute_ms=round(sync.compute_ms, 3),
            members=len(record.members),
            partitions=sum(len(p) for p in sync.assignment.values()),
            **({"error": sync.error} if sync.error else {}),
        )

    def compute(self, record: JoinRecord) -> SyncRecord:
        """The assignment of ``record``'s generation by its strategy, or the assignor's error (never raises)."""
        subscriptions = {cid: dict(m.subscription) for cid, m in record.members.items()}
        started = time.perf_counter()
        partitions, current = dict(record.partitions), record.current
        timeout_s = record.rebalance_timeout_ms / 1000 or DEFAULT_TIMEOUT_S
        try:
            result = bounded(
                lambda: as_assignment(load_assignor(record.strategy)(subscriptions, partitions, current)),
                timeout_s,
                f"classic-assignor-{record.generation}",
            )
            assignment, error = as_assignment(result), ""
        except AssignorError as e:
            assignment, error = {}, str(e)
        size = len(SyncRecord(record.generation, self.c.consumer_id, record.strategy, assignment).encode())
        if size > MAX_SYNC_BYTES:
            assignment, error = {}, f"the assignment is {size} bytes encoded, past the {MAX_SYNC_BYTES} a znode takes"
        compute_ms = (time.perf_counter() - started) * 1000
        if error:
            log.warning("consumer %s: assignor %s failed: %s", self.c.consumer_id, record.strategy, error)
            self.c.journal.emit(
                "classic.assignor_failed",
                group=self.c.config.group,
                consumer=self.c.consumer_id,
                generation=record.generation,
                strategy=record.strategy,
                error=error[:500],
            )
        return SyncRecord(record.generation, self.c.consumer_id, record.strategy, assignment, compute_ms, error)
