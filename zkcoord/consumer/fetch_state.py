"""The fetch manager's state and the two policies that act on it: which read comes next, which records a poll takes.

:class:`FetchCore` is shared by :class:`zkcoord.consumer.fetcher.FetchManager`, its fetcher threads and ``poll()``.  One
lock guards all of it; methods marked "lock held" expect the caller to hold :attr:`FetchCore.lock`, the others
take it.  Nothing here starts a thread, reads a log or calls a user callback (``gate`` aside, see the manager).

Wake-ups.  ``poll()`` waits on :attr:`FetchCore.data_ready`, :meth:`FetchManager.pause` on
:attr:`FetchCore.reads_done`, and each fetcher on a condition of its own (:attr:`Fetcher.cond`, same lock).  Every
change that can make a read due wakes every fetcher (:meth:`FetchCore.wake_fetchers`), and a fetcher computes its
wait from what it saw: until the earliest idle partition's timer, or until woken.  A fetcher that finds another
fetcher's partition first in line wakes that one directly: the owner may have looked before that partition's timer
ran out, and must not sleep through its turn (without this, two fetchers can each wait for the other forever).
"""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.data.partlog import Record
from zkcoord.data.partlog.layout import PathLike


class LogReader(Protocol):
    """What a fetcher needs from a partition reader (:class:`zkcoord.data.partlog.PartitionReader` has it).

    One reader is used by one fetcher thread only; it need not be thread-safe.
    """

    @property
    def start_offset(self) -> int: ...

    def read(self, offset: int, max_records: int = ..., max_bytes: int = ...) -> list[Record]: ...

    def end_offset(self) -> int: ...

    def high_water(self) -> int: ...

    def close(self) -> None: ...


#: Makes the reader of ``<data_dir>/<topic>-<partition>``: ``factory(data_dir, topic, partition)``.
ReaderFactory = Callable[[PathLike, str, int], LogReader]


class RecordBuffer:
    """Records fetched but not yet handed out, in offset order: a queue of fetched chunks.

    Chunks are kept as the lists the fetcher built, and :meth:`take` slices them, so handing out ``n`` records
    costs a slice, not ``n`` queue operations.
    """

    __slots__ = ("_chunks", "_head", "count")

    def __init__(self) -> None:
        self._chunks: deque[list[ConsumerRecord]] = deque()
        self._head = 0  # records of _chunks[0] already taken
        self.count = 0

    def append(self, records: list[ConsumerRecord]) -> None:
        if records:
            self._chunks.append(records)
            self.count += len(records)

    def take(self, limit: int) -> list[ConsumerRecord]:
        """Remove and return up to ``limit`` records from the front."""
        out: list[ConsumerRecord] = []
        while limit > 0 and self._chunks:
            chunk = self._chunks[0]
            end = min(len(chunk), self._head + limit)
            out += chunk[self._head : end]
            limit -= end - self._head
            if end == len(chunk):
                self._chunks.popleft()
                self._head = 0
            else:
                self._head = end
        self.count -= len(out)
        return out

    def clear(self) -> int:
        """Drop every record; return how many there were."""
        dropped = self.count
        self._chunks.clear()
        self._head = 0
        self.count = 0
        return dropped


@dataclass(eq=False)
class PartitionFetch:
    """One assigned partition.

    Invariant (lock held, no read of it in flight): the buffer holds exactly the records
    ``[consumed, fetch_position)``; ``consumed`` is the position to commit.
    """

    tp: TopicPartition
    thread_id: str
    consumed: int  # the next offset the application has not been given
    fetch_position: int  # the next offset to read from the log
    buffer: RecordBuffer = field(default_factory=RecordBuffer)
    in_flight: bool = False
    idle_until: float = -math.inf  # read nothing new: not read again before this (manager clock)
    failed: BaseException | None = None  # a read failed: not read again until resume() or the next assign()
    range_checked: bool = False  # the position was seen to lie within the log since the last (re)start


@dataclass(eq=False)
class Fetcher:
    """The fetcher thread of one consumer thread id, and the flags the manager steers it with."""

    thread_id: str
    cond: threading.Condition  # on the core's lock: this fetcher waits on it
    thread: threading.Thread | None = None
    busy: bool = False  # a read of one of its partitions is in flight
    stopping: bool = False
    dead: bool = False  # its thread ended with an unexpected error; resume() starts another


@dataclass(frozen=True)
class Grant:
    """Permission for one read: ``room`` records of ``state`` from ``offset``, valid while ``epoch`` is current."""

    state: PartitionFetch
    fetcher: Fetcher
    offset: int
    room: int
    epoch: int
    check_range: bool


@dataclass(frozen=True)
class FetchStats:
    """Counters since the manager was made (a snapshot).

    ``records_fetched == records_delivered + records_dropped + retained`` always holds.
    """

    records_delivered: int  #: handed to the application by poll()
    records_fetched: int  #: read from the logs into the buffers
    records_dropped: int  #: fetched, then dropped undelivered by revoke() or pause()
    fetches: int  #: reads of a log (including reads that found nothing new)
    retained: int  #: fetched and not yet delivered, now
    delivered_by_partition: Mapping[TopicPartition, int]  #: records_delivered per partition


class FetchCore:
    """Shared state, guarded by :attr:`lock`.  See :mod:`zkcoord.consumer.fetcher` for the rules it implements."""

    def __init__(
        self,
        *,
        max_poll: int,
        max_buffered: int,
        idle_wait: float,
        clock: Callable[[], float],
        gate: Callable[[], bool],
    ) -> None:
        self.max_poll = max_poll
        self.max_buffered = max_buffered
        self.idle_wait = idle_wait
        self.clock = clock
        self.gate = gate
        self.lock = threading.Lock()
        self.data_ready = threading.Condition(self.lock)  # poll() waits on it
        self.reads_done = threading.Condition(self.lock)  # notified whenever a read ends
        self.states: dict[TopicPartition, PartitionFetch] = {}
        self.order: list[TopicPartition] = []  # poll()'s round-robin order
        self.poll_next = 0  # index in ``order`` where the next poll() starts
        self.rotation: deque[TopicPartition] = deque()  # fetch order: the partition read last is at the back
        self.fetchers: dict[str, Fetcher] = {}
        self.epoch = 0  # bumped by assign/revoke/pause: a read granted in an older epoch is discarded
        self.retained = 0
        self.reserved = 0  # room granted to reads in progress
        self.in_flight = 0
        self.paused = False
        self.closed = False
        self.wakeup = False
        self.delivered = 0
        self.fetched = 0
        self.dropped = 0
        self.fetches = 0
        self.delivered_by_partition: Counter[TopicPartition] = Counter()

    # --- assignment (lock held) -------------------------------------------------------------------------------

    def new_fetcher(self, thread_id: str) -> Fetcher:
        return Fetcher(thread_id, threading.Condition(self.lock))

    def wake_fetchers(self) -> None:
        """Something may have become due: every fetcher looks again.  Lock held."""
        for fetcher in self.fetchers.values():
            fetcher.cond.notify()

    def install(self, states: dict[TopicPartition, PartitionFetch], fetchers: dict[str, Fetcher]) -> None:
        """Make ``states`` (in poll order) the assignment.  Lock held; nothing is assigned."""
        self.states, self.fetchers = states, fetchers
        self.order = list(states)
        self.rotation = deque(states)
        self.poll_next = 0
        self.epoch += 1

    def add(self, states: dict[TopicPartition, PartitionFetch], fetchers: dict[str, Fetcher]) -> None:
        """Add ``states`` (none assigned yet) and new ``fetchers`` to the assignment.  Lock held.

        The epoch stays: reads granted for the partitions already assigned remain valid.
        """
        self.states.update(states)
        self.fetchers.update(fetchers)
        self.order.extend(states)
        self.rotation.extend(states)
        self.wake_fetchers()

    def clear(self) -> tuple[list[PartitionFetch], list[Fetcher]]:
        """Forget the assignment: drop what is buffered, tell every fetcher to stop.  Lock held."""
        states, fetchers = list(self.states.values()), list(self.fetchers.values())
        for state in states:
            self.drop(state)
        for fetcher in fetchers:
            fetcher.stopping = True
            fetcher.cond.notify()
        self.states, self.order, self.fetchers = {}, [], {}
        self.rotation.clear()
        self.poll_next = 0
        self.epoch += 1
        return states, fetchers

    def remove(self, tps: Iterable[TopicPartition]) -> tuple[list[PartitionFetch], list[Fetcher]]:
        """Forget some partitions of the assignment (an incremental revoke).  Lock held.

        Drops what they buffered and takes them out of the poll and fetch orders; a read of one of them still in
        flight is discarded when it ends (:meth:`publish`: the state is no longer assigned), which the caller
        waits for on :attr:`reads_done`.  The other partitions' buffers and reads are untouched (the epoch stays).
        Fetchers left with no partition are told to stop and returned, for the caller to join.
        """
        removed = [self.states.pop(tp) for tp in sorted(set(tps)) if tp in self.states]
        if not removed:
            return [], []
        gone = {state.tp for state in removed}
        for state in removed:
            self.drop(state)
        upcoming = self.order[self.poll_next :] + self.order[: self.poll_next]
        self.order = [tp for tp in self.order if tp not in gone]
        following = next((tp for tp in upcoming if tp not in gone), None)
        self.poll_next = self.order.index(following) if following is not None else 0
        self.rotation = deque(tp for tp in self.rotation if tp not in gone)
        used = {state.thread_id for state in self.states.values()}
        idle = [fetcher for tid, fetcher in self.fetchers.items() if tid not in used]
        for fetcher in idle:
            fetcher.stopping = True
            fetcher.cond.notify()
            del self.fetchers[fetcher.thread_id]
        self.wake_fetchers()
        return removed, idle

    def drop(self, state: PartitionFetch) -> None:
        """Forget what ``state`` buffered and fetch it again from its consumed position.  Lock held."""
        dropped = state.buffer.clear()
        self.retained -= dropped
        self.dropped += dropped
        state.fetch_position = state.consumed
        state.idle_until = -math.inf

    # --- poll() -----------------------------------------------------------------------------------------------

    def poll(self, limit: int, deadline: float) -> tuple[list[ConsumerRecord], float]:
        """Wait until records may be handed out, then :meth:`take` them; ``[]`` at the deadline, on wakeup or
        close.  Takes the lock.  Also returns when they were handed out: the clock read just *before* the gate
        let them out (so never after a deadline the gate enforces), under the lock (so never before a partition
        they come from was added, nor after one was removed).
        """
        with self.lock:
            if self.closed:
                raise RuntimeError("the fetch manager is closed")
            while True:
                now = self.clock()
                gated = self.paused or not self.gate()
                if self.retained and not gated:
                    return self.take(limit), now
                if self.wakeup or self.closed:
                    self.wakeup = False
                    return [], now
                remaining = deadline - self.clock()
                if remaining <= 0:
                    return [], now
                if gated and not self.paused:
                    remaining = min(remaining, self.idle_wait)  # the gate opens without telling us: look again
                self.data_ready.wait(None if remaining == math.inf else remaining)  # wait(inf) overflows

    def take(self, limit: int) -> list[ConsumerRecord]:
        """KIP-41's greedy round robin: all that is buffered from the partition after the one the last call ended
        on, then the next, up to ``limit``; the next call starts after the partition this one ended on.  Lock held.
        """
        out: list[ConsumerRecord] = []
        count = len(self.order)
        ended = None
        for i in range(count):
            index = (self.poll_next + i) % count
            state = self.states[self.order[index]]
            if not state.buffer.count:
                continue
            taken = state.buffer.take(limit - len(out))
            state.consumed = taken[-1].offset + 1
            self.delivered_by_partition[state.tp] += len(taken)
            out += taken
            ended = index
            if len(out) == limit:
                break
        if ended is not None:
            self.poll_next = (ended + 1) % count
        self.retained -= len(out)
        self.delivered += len(out)
        self.wake_fetchers()  # room for prefetching
        return out

    # --- fetchers ---------------------------------------------------------------------------------------------

    def next_grant(self, fetcher: Fetcher) -> Grant | None:
        """Block until ``fetcher`` may do a read; None when it must stop.  Takes the lock; checks the gate just
        before granting (S6: no read once the lease is gone).
        """
        with self.lock:
            while not fetcher.stopping:
                timeout: float | None = None
                if self.paused:
                    pass  # resume() notifies
                elif not self.gate():
                    timeout = self.idle_wait  # the gate opens without telling us: look again
                else:
                    grant, timeout = self.pick(fetcher)
                    if grant is not None:
                        return grant
                fetcher.cond.wait(timeout)
            return None

    def pick(self, fetcher: Fetcher) -> tuple[Grant | None, float | None]:
        """The next read in the rotation if it is ``fetcher``'s, else how long to wait (None: until woken).

        Lock held.  If the first partition due belongs to another fetcher, that one is woken to take it (see the
        module docstring) and this one waits for the outcome.
        """
        if self.retained + self.reserved >= self.max_poll:
            return None, None  # heuristic 1: enough for the next poll(); poll() notifies when it takes some
        now = self.clock()
        wake = math.inf
        for tp in self.rotation:
            state = self.states[tp]
            owner = self.fetchers[state.thread_id]
            if state.in_flight or state.failed is not None or owner.busy or owner.dead:
                continue
            if state.buffer.count >= self.max_buffered:
                continue
            if state.idle_until > now:
                wake = min(wake, state.idle_until)
                continue
            if owner is not fetcher:
                owner.cond.notify()
                break
            room = min(self.max_buffered - state.buffer.count, self.max_poll)
            state.in_flight = fetcher.busy = True
            self.reserved += room
            self.in_flight += 1
            self.rotation.remove(tp)  # to the back: the others come first next time
            self.rotation.append(tp)
            return Grant(state, fetcher, state.fetch_position, room, self.epoch, not state.range_checked), None
        # (A timer seen before breaking off is kept too: cheap insurance against a missed wake-up.)
        return None, None if wake == math.inf else wake - now

    def _end_read(self, grant: Grant) -> bool:
        """The bookkeeping of a granted read that ended (lock held); whether it still counts: no revoke or pause
        meanwhile, which rewound the positions."""
        state = grant.state
        self.reserved -= grant.room
        self.in_flight -= 1
        self.fetches += 1
        state.in_flight = grant.fetcher.busy = False
        self.reads_done.notify_all()
        self.wake_fetchers()
        return grant.epoch == self.epoch and self.states.get(state.tp) is state

    def publish(self, grant: Grant, records: list[ConsumerRecord], error: BaseException | None) -> bool:
        """Record the outcome of a granted read; whether it still counted (no revoke or pause meanwhile, which
        rewound the positions).  Takes the lock.
        """
        state = grant.state
        with self.lock:
            if not self._end_read(grant):
                return False  # revoked (all, or this partition) or paused meanwhile
            if error is not None:
                state.failed = error
            elif records:
                state.buffer.append(records)
                state.fetch_position = records[-1].offset + 1
                state.range_checked = True
                self.retained += len(records)
                self.fetched += len(records)
                self.data_ready.notify_all()
            else:
                state.range_checked = True
                state.idle_until = self.clock() + self.idle_wait
            return True

    def publish_reset(self, grant: Grant, to: int) -> bool:
        """Record that the granted read found its position out of range and the reset policy moved it to ``to``:
        what the partition buffered is dropped and it is fetched from ``to``, whose range is checked again.
        Whether it still counted (as :meth:`publish`).  Takes the lock.
        """
        state = grant.state
        with self.lock:
            if not self._end_read(grant):
                return False
            self.drop(state)
            state.consumed = state.fetch_position = to
            state.range_checked = False
            return True

    def fail_fetcher(self, fetcher: Fetcher, exc: BaseException) -> list[PartitionFetch]:
        """Mark ``fetcher`` dead and its partitions failed; return those newly failed.  Takes the lock."""
        with self.lock:
            fetcher.dead = True
            fetcher.busy = False
            states = [s for s in self.states.values() if s.thread_id == fetcher.thread_id and s.failed is None]
            for state in states:
                state.failed = exc
            self.wake_fetchers()
            return states

    def stats(self) -> FetchStats:
        with self.lock:
            return FetchStats(
                records_delivered=self.delivered,
                records_fetched=self.fetched,
                records_dropped=self.dropped,
                fetches=self.fetches,
                retained=self.retained,
                delivered_by_partition=dict(self.delivered_by_partition),
            )
