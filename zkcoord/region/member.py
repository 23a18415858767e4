"""A consistent region's member (seed 003): :class:`ConsistentRegion`, over a :class:`~zkcoord.consumer.Consumer`.

Usage::

    region = ConsistentRegion(consumer_config, RegionConfig("r1", "m1", store_dir), app).start()
    offsets = region.drain(); region.checkpoint(7, app.snapshot())   # a driver asks for these (region.orders)
    region.reset(7)                                                  # or region.reset_to_initial()
    region.retire(6)
    region.close()

Threads (the seed's):

* ``region-evt``: the event thread owns the consumer: it polls, runs the rebalance callbacks (inside ``poll()``),
  commits, seeks, and carries out the events other threads put on its queue (drain, checkpoint, reset, retire).  The
  public methods put an event and block until the event thread answered it (they must not be called from the event
  or the process thread).
* ``region-proc``: the process thread takes records from the message queue (``100 x max_poll_records``) and hands
  each to ``app.process`` unless it precedes the partition's position in the offset manager (``positions``: the next
  offset to process per assigned partition), then moves the position past it.
* the consumer's own threads, and the region's ZooKeeper session (its name under ``members/`` lives with it).

Contract with the application (:class:`Application`): ``process`` runs on the process thread only, never while a
drain holds processing or a reset runs; ``restore`` runs on the event thread while processing is held; the state given
to :meth:`checkpoint` is the application's after the records :meth:`drain` counted and no more.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from zkcoord.consumer import Consumer, ConsumerConfig, ConsumerRecord, TopicPartition
from zkcoord.errors import ConfigurationError, ZkCoordError, ZkError
from zkcoord.layout.region import Contribution, ResetRequest, offsets_to_json
from zkcoord.region import states
from zkcoord.region.config import QUEUE_FACTOR, RegionConfig
from zkcoord.region.metrics import RegionStats
from zkcoord.region.positions import start_offset
from zkcoord.region.shared import RegionMismatchError, SharedData
from zkcoord.region.states import ClientState
from zkcoord.region.store import LocalStore
from zkcoord.runtime.journal import Journal
from zkcoord.runtime.shutdown import StopBudget, StopReport
from zkcoord.zk import ConnState, ZkClient, ZkConfig

log = logging.getLogger(__name__)


class Application(Protocol):
    def process(self, record: ConsumerRecord) -> None: ...
    def restore(self, state: Any) -> None: ...  # None: the initial (empty) state


class RegionError(ZkCoordError):
    """A region operation failed (the message says which and why); the region awaits a reset."""


class ConsistentRegion:
    """See the module docstring.  Not reusable after :meth:`close`."""

    def __init__(
        self,
        consumer_config: ConsumerConfig,
        config: RegionConfig,
        app: Application,
        *,
        journal: Journal | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if consumer_config.auto_commit:
            raise ConfigurationError("a region member commits at each drain: turn auto-commit off")
        self.config = config
        self.app = app
        self.clock = clock
        self.journal = journal or Journal(None, "consumer")
        self.consumer = Consumer(
            consumer_config,
            journal=self.journal,
            on_partitions_revoked=self._on_revoked,
            on_partitions_assigned=self._on_assigned,
            on_partitions_lost=self._on_revoked,
        )
        self.group = consumer_config.group
        self.zk = ZkClient(
            ZkConfig.from_string(
                consumer_config.zk, session_timeout_s=consumer_config.session_timeout_s, auth=consumer_config.zk_auth
            ),
            name=f"region-{config.member}",
        )
        self.shared = SharedData(self.zk, self.group, config.region, config.member)
        self.store = LocalStore(config.store_dir, config.region, config.member)
        self.stats = RegionStats()
        self.events: queue.Queue[tuple[str, Any, _Reply]] = queue.Queue()
        self.messages: queue.Queue[tuple[int, ConsumerRecord]] = queue.Queue(
            QUEUE_FACTOR * consumer_config.max_poll_records
        )
        # Guards what the process thread and the event thread share: the offset manager, the epoch, the hold.
        self._lock = threading.Condition()
        self.positions: dict[TopicPartition, int] = {}  # the offset manager
        self._epoch = 0  # bumped by a reset or a revocation: queued records of an older epoch are dropped
        self._held = False  # drained: the process thread takes nothing until the checkpoint (or a reset) ends it
        self._busy = False  # the process thread is inside app.process
        self._state = ClientState.SUBSCRIBED
        self._fetched = False  # records were handed out since the subscription or the last reset
        self._merged: dict[TopicPartition, int] | None = None  # the last reset's merged offsets (None: initial)
        self._sought_now: set[TopicPartition] = set()  # sought by a callback of the poll() in progress
        self._delivered_before = 0  # the fetcher's delivered count when that poll() began
        self._throttle_end = 0.0  # polling is throttled until then (after a reset)
        self._next_poll = 0.0
        self._stopping = threading.Event()
        self._session_lost = False
        self._threads: list[threading.Thread] = []
        self.last_order = 0  # the id of the last driver order carried out (region.orders sets it)
        self.members: list[str] = []

    # --- lifecycle ----------------------------------------------------------------------------------------------

    @property
    def state(self) -> ClientState:
        return self._state

    def start(self) -> ConsistentRegion:
        """Join the region (refused, in one line, if the group is another region's), then start the consumer and
        the two threads.  A member that starts into a region that already has orders awaits a reset.

        :raises RegionMismatchError: :raises MemberNameInUseError: :raises ZkError:
        """
        self.zk.start()
        try:
            self.members = self.shared.join(self.consumer.consumer_id, self.consumer.config.session_timeout_s * 2)
        except RegionMismatchError as e:
            self.journal.emit(
                "region.refused", group=self.group, region=self.config.region, member=self.config.member,
                group_region=e.group_region,
            )  # fmt: skip
            self.zk.stop()
            raise
        except ZkCoordError:
            self.zk.stop()
            raise
        self._emit("region.joined", members=self.members)
        self.zk.add_listener(self._on_zk_state)
        order, _ = self.shared.order()
        if order is not None:  # a restart into a running region: its state is the region's, after a reset only
            self.last_order = order.id
            self._to_pending(f"started into a running region (last order {order.id})")
        self.consumer.start()
        for name, target in (("region-evt", self._event_loop), ("region-proc", self._process_loop)):
            thread = threading.Thread(target=target, name=f"{name}-{self.config.member}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self, budget: StopBudget | None = None) -> StopReport:
        """Stop both threads, close the consumer within ``budget`` (nothing is committed but what drains committed:
        the next owner starts where the last checkpoint put it) and leave the region.  Returns the consumer's stop
        report.  Idempotent."""
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()
        for thread in self._threads:
            thread.join(timeout=2)
        report = self.consumer.close(budget=budget)
        with contextlib.suppress(ZkError):
            self.shared.leave()
        self.zk.stop(timeout=1.0)
        return report

    def __enter__(self) -> ConsistentRegion:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the region's operations (any thread but the region's own) -----------------------------------------------

    def drain(self, timeout: float = 30.0) -> dict[TopicPartition, int]:
        """Stop polling and processing, and commit the offset manager's positions in one request; returns them.
        Processing stays held until :meth:`checkpoint` (or a reset).  :raises RegionError: the commit failed (for
        any partition) or a reset is pending."""
        result: dict[TopicPartition, int] = self._call("drain", None, timeout)
        return result

    def checkpoint(self, seq: int, state: Any, timeout: float = 30.0) -> None:
        """Save checkpoint ``seq``: this member's name, the members' names, its offsets (drained first if
        :meth:`drain` was not called) and the application's ``state`` (JSON-able), in the local store, and its
        contribution to the merge in ZooKeeper; then processing goes on.  :raises RegionError:"""
        self._call("checkpoint", (seq, state), timeout)

    def reset(self, seq: int | None, timeout: float | None = None) -> None:
        """Reset to merged checkpoint ``seq`` (``None``: the initial state): wait for its merge (N distinct
        contributions, notified by a watch; at most ``config.merge_wait_s``), seek the assigned partitions to it,
        restore the application's state, go to ``RESET_COMPLETE``.  :raises RegionError: the merge did not complete,
        or the checkpoint is not in the local store (the region stays ``CR_RESET_PENDING``)."""
        wait = self.config.merge_wait_s(self.consumer.config.max_poll_interval_s)
        self._call("reset", seq, timeout if timeout is not None else wait + 30.0)

    def reset_to_initial(self, timeout: float = 30.0) -> None:
        self.reset(None, timeout)

    def retire(self, seq: int, timeout: float = 30.0) -> None:
        """Retire checkpoint ``seq``: its merge in ZooKeeper and its local copy."""
        self._call("retire", seq, timeout)

    def request_reset(self, reason: str) -> None:
        """Await a reset (queues cleared, processing stopped) and ask the driver for one.  Any thread."""
        self.events.put(("pending", reason, _Reply()))

    def _call(self, kind: str, arg: Any, timeout: float) -> Any:
        if threading.current_thread() in self._threads:
            raise RuntimeError(f"{kind}() called from the region's own thread")
        reply = _Reply()
        self.events.put((kind, arg, reply))
        if not reply.done.wait(timeout):
            raise RegionError(f"{kind} did not finish within {timeout:.1f} s")
        if reply.error is not None:
            raise reply.error
        return reply.value

    # --- the event thread -----------------------------------------------------------------------------------------

    def _event_loop(self) -> None:
        handlers: dict[str, Callable[[Any], Any]] = {
            "drain": lambda _a: self._drain(),
            "checkpoint": lambda a: self._checkpoint(*a),
            "reset": self._reset,
            "retire": self._retire,
            "pending": self._to_pending,
            "rejoin": self._rejoin,
        }
        while not self._stopping.is_set():
            try:
                kind, arg, reply = self.events.get(timeout=0 if self._may_poll() else self.config.poll_timeout_s)
            except queue.Empty:
                pass
            else:
                try:
                    reply.value = handlers[kind](arg)
                except ZkCoordError as e:
                    reply.error = e
                except OSError as e:  # the local store
                    reply.error = RegionError(f"{kind}: {e}")
                reply.done.set()
                continue
            if self._may_poll():
                self._poll_once()

    def _may_poll(self) -> bool:
        """Poll (for records, and for the rebalance callbacks that run inside poll) while there is room for one more
        poll's records in the message queue and the throttle after a reset allows."""
        room = self.messages.maxsize - self.messages.qsize() >= self.consumer.config.max_poll_records
        return room and self.clock() >= self._next_poll

    def _poll_once(self) -> None:
        active = self._state is not ClientState.CR_RESET_PENDING and not self._held
        if active:
            self.consumer.resume()
        else:
            self.consumer.pause()  # callbacks still run inside poll(); no record is handed out
        # A callback of this poll that runs after its records were taken (zkcoord.consumer.polling) seeks partitions
        # whose records in this batch predate the seek: the delivered count tells the two cases apart.
        self._delivered_before = self.consumer.fetcher.stats().records_delivered
        try:
            records = self.consumer.poll(self.config.poll_timeout_s)
        except ZkCoordError as e:  # a callback's failure, or the consumer refused: the region resets
            log.warning("region %s: poll failed: %s", self.config.member, e)
            self._to_pending(f"poll failed: {e}")
            return
        if self._sought_now:  # taken before a callback of this poll sought them: stale, fetched again from the seek
            records = [r for r in records if r.topic_partition not in self._sought_now]
            self._sought_now = set()
        if not records or self._state is ClientState.CR_RESET_PENDING:
            return
        self._fetched = True
        if self.clock() < self._throttle_end:  # throttled after a reset: one poll per throttle_poll_s
            self._next_poll = self.clock() + self.config.throttle_poll_s
        epoch = self._epoch
        for record in records:
            self.messages.put((epoch, record))  # the room was checked: never blocks

    def _drain(self) -> dict[TopicPartition, int]:
        started = self.clock()
        if self._state is ClientState.CR_RESET_PENDING:
            raise RegionError("cannot drain: a reset of the region is pending")
        self._hold()
        self.consumer.pause()
        with self._lock:
            positions = dict(self.positions)
        try:
            self.consumer.commit(positions)  # one request; a refusal of any partition fails the drain
        except ZkCoordError as e:
            self._release()
            self._to_pending(f"drain commit failed: {e}")
            raise RegionError(f"drain failed, the region must reset: {e}") from e
        self.stats.drained((self.clock() - started) * 1000)
        return positions

    def _checkpoint(self, seq: int, state: Any) -> None:
        if not self._held:
            self._drain()
        try:
            with self._lock:
                positions = dict(self.positions)
            members = self.shared.members()
            offsets = {(tp.topic, tp.partition): off for tp, off in positions.items()}
            self.store.save(
                seq,
                {"member": self.config.member, "members": members, "seq": seq,
                 "offsets": offsets_to_json(offsets), "state": state},
            )  # fmt: skip
            self.shared.contribute(Contribution(self.config.member, tuple(members), seq, offsets))
            self._emit(
                "region.checkpoint", checkpoint=seq, members=members, offsets=offsets_to_json(offsets), state=state
            )
        finally:
            self._release()

    def _reset(self, seq: int | None) -> None:
        self._to_pending(f"reset to {'the initial state' if seq is None else f'checkpoint {seq}'}", request=False)
        self._hold()
        merged: dict[TopicPartition, int] | None = None
        restored: Any = None
        if seq is not None:
            try:
                found = self.shared.wait_merge(seq, self.config.merge_wait_s(self.consumer.config.max_poll_interval_s))
                restored = self.store.load(seq).get("state")
            except ZkCoordError as e:
                raise RegionError(f"reset to checkpoint {seq} failed: {e}") from e
            merged = {TopicPartition(t, p): off for (t, p), off in found.offsets.items()}
        self._merged = merged
        targets = {tp: self._target(tp) for tp in self.consumer.fetcher.assignment()}
        self.consumer.fetcher.seek(targets, "region-reset")
        with self._lock:
            self.positions = dict(targets)
        self.app.restore(restored)
        self._set_state(ClientState.RESET_COMPLETE)
        self._fetched = False
        self._throttle_end = self.clock() + self.config.throttle_s
        self._release()
        self._emit(
            "region.reset",
            checkpoint=seq,
            offsets=offsets_to_json({(t.topic, t.partition): o for t, o in targets.items()}),
        )

    def _on_zk_state(self, state: ConnState) -> None:
        """kazoo's connection thread: only enqueue.  A new session after the region's expired (our name under
        ``members/`` went with it): take the name again and ask for a reset (the others may have been reset
        without us)."""
        if state is ConnState.LOST and not self._stopping.is_set():
            self._session_lost = True
        elif state is ConnState.CONNECTED and self._session_lost:
            self._session_lost = False
            self.events.put(("rejoin", None, _Reply()))

    def _rejoin(self, _arg: object) -> None:
        self.members = self.shared.join(self.consumer.consumer_id, self.consumer.config.session_timeout_s * 2)
        self._emit("region.joined", members=self.members)
        self._to_pending("the region's session expired")
        self.shared.request_reset(ResetRequest(self.last_order, "the region's session expired"))

    def _retire(self, seq: int) -> None:
        self.shared.retire(seq)
        self.store.retire(seq)
        self._emit("region.retired", checkpoint=seq)

    def _to_pending(self, reason: str, *, request: bool = True) -> None:
        """CR_RESET_PENDING: queued records dropped, polling stopped, assignments not sought, a reset requested
        (``request``: unless the reset is the driver's order already)."""
        with self._lock:
            self._epoch += 1
            while True:
                try:
                    self.messages.get_nowait()
                except queue.Empty:
                    break
        if self._state is ClientState.CR_RESET_PENDING:
            return
        self._set_state(ClientState.CR_RESET_PENDING)
        self._emit("region.reset_pending", reason=reason)
        if not request:
            return
        try:
            self.shared.request_reset(ResetRequest(self.last_order, reason[:200]))
        except ZkError as e:  # the driver also resets on the membership change a lost session makes
            log.warning("region %s: reset request not written: %s", self.config.member, e)

    def _set_state(self, new: ClientState) -> None:
        self._state = states.check(self._state, new)
        self.stats.state = new

    def _target(self, tp: TopicPartition) -> int:
        """Where an assigned partition is sought: the last reset's merged offset, else its control variable (created
        from the start position when absent)."""
        if self._merged is not None and tp in self._merged:
            return self._merged[tp]
        key = (tp.topic, tp.partition)
        return self.shared.initial_or_create(
            key, lambda: start_offset(self.config, self.consumer.config.data_dir, self.zk, self.group, key)
        )

    # --- the rebalance callbacks (event thread, inside poll) -----------------------------------------------------

    def _on_revoked(self, partitions: list[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self.positions.pop(tp, None)
        self._count_assignment()
        if not partitions or self._state is ClientState.CR_RESET_PENDING:
            return
        if not self._fetched:  # right after the subscription or a reset: nothing of theirs was processed
            log.info("region %s: revocation of %d partitions ignored", self.config.member, len(partitions))
            return
        self._to_pending(f"{len(partitions)} partitions revoked after fetching")

    def _on_assigned(self, partitions: list[TopicPartition]) -> None:
        self._count_assignment()
        if not partitions or self._state is ClientState.CR_RESET_PENDING:
            return  # sought by the reset
        try:
            targets = {tp: self._target(tp) for tp in partitions}
        except ZkCoordError as e:
            self._to_pending(f"assigned partitions not sought: {e}")
            return
        self.consumer.fetcher.seek(targets, "region-assign")
        with self._lock:
            self.positions.update(targets)
        if self.consumer.fetcher.stats().records_delivered > self._delivered_before:
            self._sought_now |= set(targets)

    def _count_assignment(self) -> None:
        assigned = self.consumer.fetcher.assignment()
        self.stats.assigned(len(assigned), len({tp.topic for tp in assigned}))

    # --- the process thread ---------------------------------------------------------------------------------------

    def _process_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                epoch, record = self.messages.get(timeout=0.1)
            except queue.Empty:
                continue
            tp = record.topic_partition
            with self._lock:
                while self._held and not self._stopping.is_set():
                    self._lock.wait()
                position = self.positions.get(tp)
                if epoch != self._epoch or position is None or record.offset < position:
                    continue  # of an older epoch, a partition no longer ours, or processed already
                self._busy = True
            try:
                self.app.process(record)
            except Exception as e:  # noqa: BLE001 -- the application's code: its state is in doubt, the region resets
                log.warning("region %s: processing %s@%d failed: %r", self.config.member, tp, record.offset, e)
                self.request_reset(f"processing failed: {e!r}"[:200])
            else:
                with self._lock:
                    self.positions[tp] = record.offset + 1
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()

    def _hold(self) -> None:
        with self._lock:
            self._held = True
            while self._busy:
                self._lock.wait()

    def _release(self) -> None:
        with self._lock:
            self._held = False
            self._lock.notify_all()

    def _emit(self, event: str, **fields: Any) -> None:
        self.journal.emit(event, group=self.group, region=self.config.region, member=self.config.member, **fields)


class _Reply:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
