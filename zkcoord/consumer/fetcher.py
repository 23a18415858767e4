"""The consumer's data plane: fetcher threads reading partition logs, and ``poll()`` (KIP-41) handing records out.

:class:`FetchManager` knows nothing of ZooKeeper.  The consumer tells it what to fetch (:meth:`~FetchManager.assign`,
from the positions it commits), when to stop (:meth:`~FetchManager.revoke`, which returns the positions to commit),
and when its lease is gone (:meth:`~FetchManager.pause` and the ``gate``).

Threads
    * The application calls :meth:`~FetchManager.poll` and :meth:`~FetchManager.wakeup` (any thread; ``poll`` is
      the only call that blocks waiting for data).
    * The consumer's control thread calls :meth:`~FetchManager.assign`, :meth:`~FetchManager.revoke`,
      :meth:`~FetchManager.pause`, :meth:`~FetchManager.resume`, :meth:`~FetchManager.close`; they are serialised
      against each other, and ``revoke``, ``pause`` and ``close`` wait for reads in progress to finish.
    * One fetcher thread per consumer thread id (Kafka's "streams") reads that thread's partitions, one read at a time
      (its loop and error policy: :mod:`zkcoord.consumer.fetch_thread`).  It runs ``on_error`` and ``on_fetched``; the
      control calls run ``on_started`` and ``on_stopped`` on the caller's thread.  A callback must not call the control
      methods (they raise :class:`RuntimeError` when called from a callback) and should return quickly; an exception
      it raises is logged, never propagated.
    * ``gate`` is called with the manager's lock held, before every read and before ``poll`` hands anything out:
      it must be quick, must not block, raise or call the manager (``Lease.valid`` is the intended gate).

Fetching (seed 004, heuristic 1)
    A read is granted only while the records retained (fetched, not yet handed out, plus those of reads in
    progress) are fewer than ``max_poll_records``, and a partition is read only while it holds fewer than
    ``max_buffered_records``; one read takes at most ``min(max_poll_records, room left in the partition)``
    records.  So at most ``2 * max_poll_records - 1`` records are retained in all, and at most
    ``max_buffered_records`` per partition.  Reads are granted in a rotation over all assigned partitions, and a
    partition just read goes to the back, so a partition with a backlog cannot starve the others on the fetch
    side either (the Java consumer gets the same from ``movePartitionToEnd``).  A partition that had nothing new
    is not read again for ``idle_wait_s``; a read that fails stalls its partition until :meth:`~FetchManager.resume`
    or the next :meth:`~FetchManager.assign`, and is reported through ``on_error``.

Positions out of range (``auto.offset.reset``, :mod:`zkcoord.protocol.offset_reset`)
    A partition's range is checked when its fetching (re)starts (a read that finds nothing looks at the log's
    start and high water) and whenever the log says a read starts below its start.  A position outside
    ``[start, high water]`` is handled by ``offset_reset``: ``earliest``/``latest`` move the position there (what was
    buffered is dropped) and fetching goes on; ``none`` stalls the partition as a failed read does.  Either way
    ``on_reset`` reports it (on the fetcher thread).  Other partitions are not disturbed.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Self

from zkcoord.consumer.fetch_state import FetchCore, FetchStats, LogReader, PartitionFetch, ReaderFactory
from zkcoord.consumer.fetch_thread import (
    ErrorCallback,
    FetchedCallback,
    FetchThreads,
    OutOfRange,
    ResetCallback,
    call,
    log_error,
)
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.data.partlog import PartitionReader
from zkcoord.data.partlog.layout import PathLike
from zkcoord.errors import ConfigurationError
from zkcoord.protocol.offset_reset import OffsetReset, check_policy

__all__ = ["FetchManager", "FetchStats", "LogReader", "OutOfRange", "ReaderFactory"]


#: ``on_started(tp, offset, thread_id)``: fetching of ``tp`` for ``thread_id`` begins at ``offset``.
StartedCallback = Callable[[TopicPartition, int, str], None]
#: ``on_stopped(tp, consumed_position, thread_id, reason)``: it ended; ``consumed_position`` is what to commit.
StoppedCallback = Callable[[TopicPartition, int, str, str], None]


def _always_open() -> bool:
    return True


class FetchManager:
    """Fetches assigned partitions in background threads and hands their records out through :meth:`poll`.

    Nothing starts in the constructor: :meth:`start` (or ``with``), then :meth:`assign`.  Thread-safe; see the
    module docstring for which thread calls what.

    :param data_dir: the partition logs' directory.
    :param max_poll_records: the most records one :meth:`poll` returns; also the prefetch threshold.
    :param max_buffered_records: the most records retained per partition (default ``2 * max_poll_records``).
    :param fetch_max_bytes: the most bytes one read takes from a log (a batch larger than that is still read).
    :param idle_wait_s: how long a partition that had nothing new waits before it is read again; also how often a
        closed ``gate`` is looked at again.
    :param clock: a monotonic clock in seconds, advancing with real time (deadlines and idle waits use it).
    :param gate: fetchers read and :meth:`poll` hands out records only while it returns True (S6).
    :param reader_factory: makes a partition's reader (tests wrap :class:`~zkcoord.data.partlog.PartitionReader`).
    :param offset_reset: what to do with a position out of range (module docstring); ``none`` (the default here;
        consumers pass their configured policy) stalls the partition.
    :param on_reset: told of every position found out of range (fetcher thread).
    :raises ConfigurationError: a limit is not positive, or the policy is unknown.
    """

    def __init__(
        self,
        data_dir: PathLike,
        *,
        max_poll_records: int = 500,
        max_buffered_records: int | None = None,
        fetch_max_bytes: int = 1 << 20,
        idle_wait_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
        on_started: StartedCallback | None = None,
        on_stopped: StoppedCallback | None = None,
        on_error: ErrorCallback | None = None,
        on_fetched: FetchedCallback | None = None,
        gate: Callable[[], bool] = _always_open,
        reader_factory: ReaderFactory = PartitionReader,
        offset_reset: OffsetReset = "none",
        on_reset: ResetCallback | None = None,
    ) -> None:
        max_buffered = 2 * max_poll_records if max_buffered_records is None else max_buffered_records
        for name, value in (
            ("max_poll_records", max_poll_records),
            ("max_buffered_records", max_buffered),
            ("fetch_max_bytes", fetch_max_bytes),
            ("idle_wait_s", idle_wait_s),
        ):
            if not value > 0:
                raise ConfigurationError(f"{name} must be positive, got {value}")
        self._data_dir = data_dir
        self._clock = clock
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._reader_factory = reader_factory
        self._core = FetchCore(
            max_poll=max_poll_records, max_buffered=max_buffered, idle_wait=idle_wait_s, clock=clock, gate=gate
        )
        # Serialises the control calls, which call back and join threads, so it is never held by a fetcher or
        # by poll(); ``_control_owner`` and ``_in_fetcher`` make a callback's call fail instead of deadlocking.
        self._control = threading.Lock()
        self._control_owner: int | None = None
        self._in_fetcher = threading.local()
        self._started = False
        self._threads = FetchThreads(
            self._core,
            data_dir=data_dir,
            fetch_max_bytes=fetch_max_bytes,
            reader_factory=reader_factory,
            offset_reset=check_policy(offset_reset),
            on_error=on_error or log_error,
            on_fetched=on_fetched,
            on_reset=on_reset,
            in_fetcher=self._in_fetcher,
        )

    @property
    def max_poll_records(self) -> int:
        return self._core.max_poll

    @property
    def max_buffered_records(self) -> int:
        return self._core.max_buffered

    # --- lifecycle --------------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Allow :meth:`assign` (threads start with an assignment, one per consumer thread id).

        :raises RuntimeError: the manager is closed.
        """
        with self._controlling():
            if self._core.closed:
                raise RuntimeError("the fetch manager is closed")
            self._started = True
        return self

    def close(self) -> dict[TopicPartition, int]:
        """Revoke everything (reason ``"closed"``), join every fetcher thread, and wake any :meth:`poll`.

        Idempotent.  A :meth:`poll` blocked now returns ``[]``; a later one raises :class:`RuntimeError`.

        :returns: the consumed positions of what was assigned, as :meth:`revoke`.
        """
        with self._controlling():
            positions = self._revoke("closed")
            with self._core.lock:
                self._core.closed = True
                self._core.data_ready.notify_all()
        return positions

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- control: assign, revoke, pause, resume ---------------------------------------------------------------

    def assign(self, positions: Mapping[TopicPartition, tuple[int, str]]) -> None:
        """Start fetching each partition from its offset, for the consumer thread id given with it.

        Calls ``on_started(tp, offset, thread_id)`` for each partition before its fetcher can read (not while
        paused: then :meth:`resume` does), then starts one fetcher thread per thread id.  Does not block.

        :raises RuntimeError: partitions are still assigned (call :meth:`revoke` first), the manager is not
            started or is closed, or the call comes from a callback.
        :raises ValueError: an offset is negative or a thread id is empty.
        """
        self._add(positions, extend=False)

    def extend(self, positions: Mapping[TopicPartition, tuple[int, str]]) -> None:
        """Start fetching more partitions beside those assigned, as :meth:`assign` does (a migrating consumer
        gets a partition once its previous owner let go of it).  Reads in progress are not disturbed.

        :raises RuntimeError: as :meth:`assign`, except that partitions may be assigned already.
        :raises ValueError: as :meth:`assign`, or a partition is assigned already.
        """
        self._add(positions, extend=True)

    def _add(self, positions: Mapping[TopicPartition, tuple[int, str]], *, extend: bool) -> None:
        states: dict[TopicPartition, PartitionFetch] = {}
        for tp, (offset, thread_id) in sorted(positions.items()):
            if offset < 0 or not thread_id:
                raise ValueError(f"cannot fetch {tp} from offset {offset} for thread {thread_id!r}")
            states[TopicPartition(*tp)] = PartitionFetch(TopicPartition(*tp), thread_id, offset, offset)
        with self._controlling():
            self._add_held(states, extend=extend)

    def _add_held(self, states: dict[TopicPartition, PartitionFetch], *, extend: bool) -> None:
        """:meth:`_add` with the control lock held."""
        core = self._core
        with core.lock:
            if core.closed or not self._started:
                raise RuntimeError("the fetch manager is " + ("closed" if core.closed else "not started"))
            if core.states and not extend:
                raise RuntimeError(f"{len(core.states)} partitions are assigned: revoke() them first")
            if again := sorted(set(states) & set(core.states)):
                raise ValueError(f"already assigned: {', '.join(map(str, again))}")
            paused = core.paused
            known = set(core.fetchers)
        if not paused:
            for state in states.values():
                self._call_started(state)
        wanted = sorted({s.thread_id for s in states.values()} - known)
        fetchers = {tid: core.new_fetcher(tid) for tid in wanted}
        with core.lock:
            if extend:
                core.add(states, fetchers)
            else:
                core.install(states, fetchers)
        for fetcher in fetchers.values():
            self._threads.start(fetcher)

    def revoke(self, reason: str) -> dict[TopicPartition, int]:
        """Stop fetching every partition, synchronously, and return the positions to commit.

        When this returns, every fetcher thread has been joined (none reads these partitions again), records
        fetched but not handed out are dropped (no :meth:`poll` returns them), and ``on_stopped(tp, position,
        thread_id, reason)`` has been called for each partition that :meth:`pause` had not stopped already.
        Records a :meth:`poll` took before this call count as handed out: they are in the returned positions.
        Blocks while a read in progress finishes.  Idempotent (``{}`` when nothing is assigned).  Leaves the
        manager paused if it was.

        :returns: for each partition, the offset of the first record the application has *not* been given (S3).
        :raises RuntimeError: the call comes from a callback.
        """
        with self._controlling():
            return self._revoke(reason)

    def revoke_some(self, tps: Iterable[TopicPartition], reason: str) -> dict[TopicPartition, int]:
        """Stop fetching some partitions, synchronously, as :meth:`revoke` does for all of them (an incremental
        rebalance takes away only what moves); the other partitions go on being fetched and polled undisturbed.

        When this returns no read of these partitions is in progress or will be done again, what they buffered is
        dropped, and ``on_stopped`` has been called for each (unless paused).  Partitions not assigned are ignored.

        :returns: the positions to commit of the partitions that were assigned.
        :raises RuntimeError: the call comes from a callback.
        """
        core = self._core
        with self._controlling():
            with core.lock:
                removed, idle = core.remove(tps)
                stopped = not core.paused
                while any(state.in_flight for state in removed):
                    core.reads_done.wait()
            for fetcher in idle:
                if fetcher.thread is not None:
                    fetcher.thread.join()
            if stopped:
                for state in removed:
                    self._call_stopped(state, reason)
            return {state.tp: state.consumed for state in removed}

    def seek(self, offsets: Mapping[TopicPartition, int], reason: str = "seek") -> dict[TopicPartition, int]:
        """Move assigned partitions to new positions (Kafka's ``seek``): each is stopped as :meth:`revoke_some` stops
        it (what it buffered is dropped, ``on_stopped`` with ``reason``) and started again at its offset for the same
        thread id (``on_started``), in one control call, so no rebalance's revoke or assign comes between the two.
        Partitions not assigned are ignored.  Blocks while a read of one of them finishes.

        :returns: the consumed positions the moved partitions had.
        :raises ValueError: an offset is negative.
        :raises RuntimeError: the call comes from a callback, or the manager is closed.
        """
        if bad := sorted(str(tp) for tp, off in offsets.items() if off < 0):
            raise ValueError(f"cannot seek to a negative offset: {', '.join(bad)}")
        core = self._core
        with self._controlling():
            with core.lock:
                threads = {tp: core.states[tp].thread_id for tp in offsets if tp in core.states}
                removed, idle = core.remove(threads)
                stopped = not core.paused
                while any(state.in_flight for state in removed):
                    core.reads_done.wait()
            for fetcher in idle:
                if fetcher.thread is not None:
                    fetcher.thread.join()
            if stopped:
                for state in removed:
                    self._call_stopped(state, reason)
            moved = {tp: PartitionFetch(tp, thread, offsets[tp], offsets[tp]) for tp, thread in threads.items()}
            if moved:
                self._add_held(moved, extend=True)
            return {state.tp: state.consumed for state in removed}

    def pause(self, reason: str) -> None:
        """Stop reading and handing out records without giving up the assignment (the lease is in doubt, S6).

        Drops the records not handed out, rewinds each partition's fetch position to its consumed position (so
        nothing is lost), waits for reads in progress to finish, then calls ``on_stopped`` for each partition.
        Until :meth:`resume`, fetchers read nothing and :meth:`poll` returns nothing, also across
        :meth:`revoke` and :meth:`assign`.  Idempotent.

        :raises RuntimeError: the call comes from a callback.
        """
        core = self._core
        with self._controlling():
            with core.lock:
                if core.paused:
                    return
                core.paused = True
                core.epoch += 1  # reads in progress are discarded
                states = list(core.states.values())
                for state in states:
                    core.drop(state)
                while core.in_flight:
                    core.reads_done.wait()
            for state in states:
                self._call_stopped(state, reason)

    def resume(self) -> None:
        """Undo :meth:`pause`: call ``on_started`` from each consumed position, then fetch again from there.

        Partitions whose reads had failed are tried again.  Idempotent.

        :raises RuntimeError: the call comes from a callback.
        """
        core = self._core
        with self._controlling():
            with core.lock:
                if not core.paused:
                    return
                states = list(core.states.values())
            # Nothing moves while paused (no read, no poll), so these are the positions fetching resumes from.
            for state in states:
                self._call_started(state)
            with core.lock:
                core.paused = False
                for state in states:
                    state.failed = None
                    state.range_checked = False
                    state.idle_until = -math.inf
                dead = [f for f in core.fetchers.values() if f.dead]
                core.wake_fetchers()
            for fetcher in dead:  # a fetcher that died of a bug gets another chance, like its partitions
                self._threads.start(fetcher)

    # --- the application's side ------------------------------------------------------------------------------

    def poll(self, timeout_s: float, max_records: int | None = None) -> list[ConsumerRecord]:
        """Return up to ``max_records`` (at most ``max_poll_records``) records, waiting up to ``timeout_s``.

        KIP-41's greedy round robin: take as many records as are buffered from the partition after the one the
        previous call ended on, then from the next, until the limit; the next call starts after the partition
        this one ended on.  Records of one partition come in offset order, and its consumed position moves past
        what is returned.  Blocks until records are available, ``timeout_s`` has passed, :meth:`wakeup` is called
        or the manager is closed; returns ``[]`` in the last three cases.  Returns nothing while the manager is
        paused or the gate is closed (S6).

        :raises ValueError: ``max_records`` is not positive.
        :raises RuntimeError: the manager is closed.
        """
        return self.poll_timed(timeout_s, max_records)[0]

    def poll_timed(self, timeout_s: float, max_records: int | None = None) -> tuple[list[ConsumerRecord], float]:
        """:meth:`poll`, and when the records were handed out (this manager's clock, read under its lock just
        before the gate let them out)."""
        limit = self._core.max_poll if max_records is None else min(max_records, self._core.max_poll)
        if limit < 1:
            raise ValueError(f"max_records must be positive, got {max_records}")
        return self._core.poll(limit, self._clock() + max(0.0, timeout_s))

    def wakeup(self) -> None:
        """Make a blocked :meth:`poll` return now (with ``[]``), or the next one not wait.  Any thread."""
        with self._core.lock:
            self._core.wakeup = True
            self._core.data_ready.notify_all()

    # --- introspection ----------------------------------------------------------------------------------------

    def positions(self) -> dict[TopicPartition, int]:
        """The consumed position of each assigned partition: the next offset :meth:`poll` will return from it."""
        with self._core.lock:
            return {tp: state.consumed for tp, state in self._core.states.items()}

    def assignment(self) -> dict[TopicPartition, str]:
        """Each assigned partition's consumer thread id."""
        with self._core.lock:
            return {tp: state.thread_id for tp, state in self._core.states.items()}

    def failed(self) -> dict[TopicPartition, BaseException]:
        """The assigned partitions whose last read failed, with the error."""
        with self._core.lock:
            return {tp: state.failed for tp, state in self._core.states.items() if state.failed is not None}

    @property
    def paused(self) -> bool:
        return self._core.paused

    def retained(self) -> int:
        """Records fetched and not yet handed out, in all."""
        with self._core.lock:
            return self._core.retained

    def buffered(self) -> dict[TopicPartition, int]:
        """Records fetched and not yet handed out, per assigned partition."""
        with self._core.lock:
            return {tp: state.buffer.count for tp, state in self._core.states.items()}

    def lag(self, tp: TopicPartition) -> int:
        """Records of an assigned partition's log that the application has not been given yet.

        Reads the end of the log (a short read, on the caller's thread, with a reader of its own).

        :raises KeyError: ``tp`` is not assigned.
        :raises LogError: the end of the log could not be read.
        """
        with self._core.lock:
            consumed = self._core.states[tp].consumed
        reader = self._reader_factory(self._data_dir, tp.topic, tp.partition)
        try:
            end = reader.end_offset()
        finally:
            reader.close()
        return max(0, end - consumed)

    def stats(self) -> FetchStats:
        """A snapshot of the counters (for metrics)."""
        return self._core.stats()

    # --- internals --------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _controlling(self) -> Iterator[None]:
        """Hold the control lock; refuse a call from a callback, which would deadlock on it or on a join."""
        if getattr(self._in_fetcher, "active", False) or self._control_owner == threading.get_ident():
            raise RuntimeError("FetchManager control methods must not be called from its callbacks")
        with self._control:
            self._control_owner = threading.get_ident()
            try:
                yield
            finally:
                self._control_owner = None

    def _revoke(self, reason: str) -> dict[TopicPartition, int]:
        with self._core.lock:
            states, fetchers = self._core.clear()
            stopped = not self._core.paused  # else pause() has reported these stops already
        for fetcher in fetchers:
            if fetcher.thread is not None:
                fetcher.thread.join()  # lets a read in progress finish; its records are then discarded
        if stopped:
            for state in states:
                self._call_stopped(state, reason)
        return {state.tp: state.consumed for state in states}

    def _call_started(self, state: PartitionFetch) -> None:
        if self._on_started is not None:
            call(self._on_started, state.tp, state.consumed, state.thread_id)

    def _call_stopped(self, state: PartitionFetch, reason: str) -> None:
        if self._on_stopped is not None:
            call(self._on_stopped, state.tp, state.consumed, state.thread_id, reason)
