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
from typing import Any

from zkcoord.consumer import Consumer, ConsumerConfig, ConsumerRecord, TopicPartition
from zkcoord.errors import ConfigurationError, ZkCoordError, ZkError
from zkcoord.layout.region import Contribution, ResetRequest, offsets_to_json
from zkcoord.region import states
from zkcoord.region.config import QUEUE_FACTOR, RegionConfig
from zkcoord.region.errors import CheckpointRefusedError, RegionError
from zkcoord.region.gate import Application, Gate, Reply
from zkcoord.region.metrics import RegionStats
from zkcoord.region.rebalance import RebalanceSide
from zkcoord.region.shared import RegionMismatchError, SharedData
from zkcoord.region.states import ClientState
from zkcoord.region.store import LocalStore
from zkcoord.runtime.journal import Journal
from zkcoord.runtime.shutdown import StopBudget, StopReport
from zkcoord.zk import ConnState, ZkClient, ZkConfig

log = logging.getLogger(__name__)


#: a reset request that could not be written is tried again this often, until written or the reset came
REQUEST_RETRY_S = 1.0


class ConsistentRegion(RebalanceSide):
    """See the module docstring.  Not reusable after :meth:`close`."""

    def __init__(
        self,
        consumer_config: ConsumerConfig,
        config: RegionConfig,
        app: Application,
        *,
        journal: Journal | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        """``on_fatal(message)`` (the event thread) is called when the member cannot go on: the application's
        ``restore`` raised (a malformed stored state), or the event thread hit an error no boundary translates; the
        event is journalled first (``region.failed``).  The caller stops the member (the CLI: one ``Error:`` line,
        exit 1)."""
        if consumer_config.auto_commit:
            raise ConfigurationError("a region member commits at each drain: turn auto-commit off")
        if consumer_config.migrating:  # the bridge fetches some claims later, unannounced: never sought, never merged
            raise ConfigurationError("a region member cannot be a migrating consumer: finish the migration first")
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
        self.events: queue.Queue[tuple[str, Any, Reply]] = queue.Queue()
        self.messages: queue.Queue[tuple[int, ConsumerRecord]] = queue.Queue(
            QUEUE_FACTOR * consumer_config.max_poll_records
        )
        self.gate = Gate()  # what the process thread and the event thread share: offset manager, epoch, hold
        self.on_fatal = on_fatal
        self.failure: str | None = None  # why the member cannot go on (on_fatal was called)
        self._owed: ResetRequest | None = None  # a reset request not written yet (ZooKeeper failed): tried again
        self._next_request_try = 0.0
        self._rejoin_at: float | None = None  # a failed rejoin (a new session's name) is tried again then
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
            # The order first: a reset written after this read names us only if it came after our join, and is then
            # above ``last_order`` (read after the join, it could be one aimed at us that we would skip).
            order, _ = self.shared.order()
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
        self.gate.wake()
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
        Polling and processing stay stopped until :meth:`checkpoint` (or a reset): no rebalance callback runs in
        between, so no revocation lands between the drain and the checkpoint.  :raises RegionError: the commit failed
        (for any partition) or a reset is pending."""
        result: dict[TopicPartition, int] = self._call("drain", None, timeout)
        return result

    def checkpoint(self, seq: int, state: Any, timeout: float = 30.0) -> None:
        """Save checkpoint ``seq``: this member's name, the members' names, its offsets (those :meth:`drain`, which
        must come first, committed) and the application's ``state`` (JSON-able, taken after the drain: processing is
        held), in the local store, and its contribution to the merge in ZooKeeper; then polling and processing go on.

        :raises CheckpointRefusedError: a reset is pending (``region.checkpoint_refused``): nothing is written.
        :raises RegionError: not drained first, or the store or ZooKeeper failed."""
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
        """Retire checkpoint ``seq``: its merge in ZooKeeper and the local copies up to it (the driver retires only
        below its last complete checkpoint: the ones below ``seq`` never completed or were retired already)."""
        self._call("retire", seq, timeout)

    def request_reset(self, reason: str) -> None:
        """Await a reset (queues cleared, processing stopped) and ask the driver for one.  Any thread."""
        self.events.put(("pending", reason, Reply()))

    def _call(self, kind: str, arg: Any, timeout: float) -> Any:
        if threading.current_thread() in self._threads:
            raise RuntimeError(f"{kind}() called from the region's own thread")
        reply = Reply()
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
        try:
            while not self._stopping.is_set():
                self._event_step(handlers)
        except Exception as e:  # noqa: BLE001 -- a bug no boundary translates: said, never a silent dead thread
            self._fatal(f"region member {self.config.member}: the event thread failed: {e!r}"[:300])

    def _event_step(self, handlers: dict[str, Callable[[Any], Any]]) -> None:
        if self._owed is not None and self.clock() >= self._next_request_try:
            self._send_request()
        if self._rejoin_at is not None and self.clock() >= self._rejoin_at:
            self._rejoin(None)
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
            except Exception as e:  # a bug: the caller hears a failure, not a success, then the thread's supervisor
                reply.error = RegionError(f"{kind} failed: {e!r}"[:300])
                raise
            finally:
                reply.done.set()
            return
        if self._may_poll():
            self._poll_once()

    def _fatal(self, message: str) -> None:
        """The member cannot go on: journalled (``region.failed``), then ``on_fatal``."""
        if self.failure is not None:
            return
        self.failure = message
        log.error("%s", message)
        self._emit("region.failed", reason=message)
        if self.on_fatal is not None:
            self.on_fatal(message)

    def _may_poll(self) -> bool:
        """Poll (for records, and for the rebalance callbacks that run inside poll) unless drained (the seed: a drain
        stops polling until the checkpoint or a reset), while there is room for one more poll's records in the
        message queue and the throttle after a reset allows."""
        if self.gate.held:
            return False
        room = self.messages.maxsize - self.messages.qsize() >= self.consumer.config.max_poll_records
        return room and self.clock() >= self._next_poll

    def _poll_once(self) -> None:
        active = self._state is not ClientState.CR_RESET_PENDING and not self.gate.held
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
        epoch = self.gate.epoch
        for record in records:
            self.messages.put((epoch, record))  # the room was checked: never blocks

    def _drain(self) -> dict[TopicPartition, int]:
        started = self.clock()
        if self._state is ClientState.CR_RESET_PENDING:
            raise RegionError("cannot drain: a reset of the region is pending")
        self.gate.hold()
        self.consumer.pause()
        positions = self.gate.snapshot()
        try:
            self.consumer.commit(positions)  # one request; a refusal of any partition fails the drain
        except ZkCoordError as e:
            self.gate.release()
            self._to_pending(f"drain commit failed: {e}")
            raise RegionError(f"drain failed, the region must reset: {e}") from e
        self.stats.drained((self.clock() - started) * 1000)
        return positions

    def _checkpoint(self, seq: int, state: Any) -> None:
        if self._state is ClientState.CR_RESET_PENDING:
            # Between the drain and now a reset became pending (a lost session, a failed process): the offsets may no
            # longer match the state, and a contribution would let a merge complete that a reset must not trust.
            self.gate.release()
            self._emit("region.checkpoint_refused", checkpoint=seq, reason="a reset of the region is pending")
            raise CheckpointRefusedError(f"checkpoint {seq} refused: a reset of the region is pending")
        if not self.gate.held:  # the state given was taken while processing went on: it may lag the positions
            raise RegionError(f"checkpoint {seq}: call drain() first and take the state while processing is held")
        try:
            positions = self.gate.snapshot()
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
            self.gate.release()

    def _reset(self, seq: int | None) -> None:
        self._to_pending(f"reset to {'the initial state' if seq is None else f'checkpoint {seq}'}", request=False)
        self.gate.hold()
        merged: dict[TopicPartition, int] | None = None
        restored: Any = None
        if seq is not None:
            try:
                found = self.shared.wait_merge(seq, self.config.merge_wait_s(self.consumer.config.max_poll_interval_s))
                # Not a contributor (new since, or under a new name): no state of ours is counted in the checkpoint,
                # and it is not in our store; we start empty, with the merge's offsets as everyone's.
                mine = self.config.member in found.contributors
                restored = self.store.load(seq).get("state") if mine else None
            except ZkCoordError as e:
                self.gate.release()  # still pending: nothing is queued or handed out, and polling runs the callbacks
                raise RegionError(f"reset to checkpoint {seq} failed: {e}") from e
            merged = {TopicPartition(t, p): off for (t, p), off in found.offsets.items()}
        self._merged = merged
        try:
            wanted = {tp: self._target(tp) for tp in self.consumer.fetcher.assignment()}
        except ZkCoordError as e:  # a control variable unreadable: still pending, and polling must go on (callbacks)
            self.gate.release()
            raise RegionError(f"reset: a partition's start not known: {e}") from e
        # Only what the seek moved: a partition stopped meanwhile is sought when it is assigned again.
        targets = {tp: wanted[tp] for tp in self.consumer.fetcher.seek(wanted, "region-reset")}
        with self.gate.lock:
            self.gate.positions = dict(targets)
        try:
            self.app.restore(restored)
        except Exception as e:
            what = "the initial state" if seq is None else f"checkpoint {seq}"
            self._emit("region.restore_failed", checkpoint=seq, error=repr(e)[:300])
            self._fatal(f"region member {self.config.member}: restoring {what} failed: {e!r}"[:300])
            raise RegionError(f"restoring {what} failed: {e!r}"[:300]) from e
        self._set_state(ClientState.RESET_COMPLETE)
        self._count_assignment()
        self._owed, self._next_request_try = None, 0.0  # served
        self._fetched = False
        self._throttle_end = self.clock() + self.config.throttle_s
        self.gate.release()
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
            self.events.put(("rejoin", None, Reply()))

    def _rejoin(self, _arg: object) -> None:
        """Pending first (nothing is processed while the name is not ours), then the name; a failed join is tried
        again every ``REQUEST_RETRY_S`` (``region.request_failed``)."""
        self._to_pending("the region's session expired", request=False)
        try:
            self.members = self.shared.join(self.consumer.consumer_id, self.consumer.config.session_timeout_s * 2)
        except ZkCoordError as e:
            self._emit("region.request_failed", reason="taking the member's name again", error=str(e)[:200])
            self._rejoin_at = self.clock() + REQUEST_RETRY_S
            return
        self._rejoin_at = None
        self._emit("region.joined", members=self.members)
        self._owed = ResetRequest(self.last_order, "the region's session expired")
        self._send_request()

    def _retire(self, seq: int) -> None:
        self.shared.retire(seq)
        self.store.retire_through(seq)  # and the local copies of checkpoints below it that never completed
        self._emit("region.retired", checkpoint=seq)

    def _to_pending(self, reason: str, *, request: bool = True) -> None:
        """CR_RESET_PENDING: queued records dropped, polling stopped, assignments not sought, a reset requested
        (``request``: unless the reset is the driver's order already)."""
        self.gate.invalidate(self.messages)
        if self._state is ClientState.CR_RESET_PENDING:
            return
        self._set_state(ClientState.CR_RESET_PENDING)
        self._emit("region.reset_pending", reason=reason)
        if request:
            self._owed = ResetRequest(self.last_order, reason[:200])
            self._send_request()

    def _send_request(self) -> None:
        """Write the owed reset request; when ZooKeeper refuses, ``region.request_failed`` and it is tried again
        every ``REQUEST_RETRY_S`` (event thread) until written or a reset is carried out."""
        owed = self._owed
        if owed is None:
            return
        try:
            self.shared.request_reset(owed)
        except ZkError as e:
            if self._next_request_try == 0.0:  # the first failure of this request is said; the retries are not
                self._emit("region.request_failed", reason=owed.reason, error=str(e)[:200])
            self._next_request_try = self.clock() + REQUEST_RETRY_S
            return
        self._owed, self._next_request_try = None, 0.0

    def _set_state(self, new: ClientState) -> None:
        self._state = states.check(self._state, new)
        self.stats.state = new

    # --- the process thread ---------------------------------------------------------------------------------------

    def _process_loop(self) -> None:
        self.gate.process_loop(self.messages, self.app, self._stopping, self.request_reset, self.config.member)

    def _emit(self, event: str, **fields: Any) -> None:
        self.journal.emit(event, group=self.group, region=self.config.region, member=self.config.member, **fields)
