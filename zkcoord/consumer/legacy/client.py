"""``LegacyConsumer``: a group member that rebalances itself, as Kafka 0.8.2's ``ZookeeperConsumerConnector``.

Usage (the same surface as :class:`consumer.Consumer`)::

    config = ConsumerConfig(group="billing", subscription=Subscription.static({"orders": 2}),
                            zk="127.0.0.1:2181", data_dir=Path("~/.zkcoord/data").expanduser())
    with LegacyConsumer(config, legacy=LegacyConfig(rebalance_backoff_s=0.5)) as consumer:
        while running:
            for record in consumer.poll(1.0):
                handle(record)

No coordinator is involved: every member watches the group and the topics, computes the whole assignment with
Kafka's assignors and claims its part with ephemeral owner znodes under ``/consumers/<group>``
(``docs/legacy-protocol.md``).

Threads (nothing starts before :meth:`LegacyConsumer.start`):

* the application's thread calls :meth:`~LegacyConsumer.poll`, :meth:`~LegacyConsumer.commit`,
  :meth:`~LegacyConsumer.close`;
* ``legacy-rebalance``: rebalances, session re-registration and auto-commit (:mod:`zkcoord.consumer.legacy.rebalance`);
* fetcher threads (:class:`zkcoord.consumer.fetcher.FetchManager`), with an always-open gate: Kafka 0.8 had no lease;
* kazoo's threads, whose callbacks only record into :class:`~zkcoord.consumer.legacy.watches.Signals`.

``ConsumerConfig.lease_fraction`` and ``unsafe_no_fencing`` do not apply: the legacy protocol has neither lease nor
fencing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Self

from zkcoord.consumer import shared
from zkcoord.consumer.config import ConsumerConfig, new_consumer_id
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.consumer.legacy.config import LegacyConfig
from zkcoord.consumer.legacy.events import PROTOCOL, EventLog, PartitionsCallback
from zkcoord.consumer.legacy.rebalance import Ownership, Rebalancer
from zkcoord.consumer.legacy.registry import LegacyRegistry
from zkcoord.consumer.legacy.watches import Signals, Watches
from zkcoord.consumer.metrics import ConsumerStats
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.consumer.resets import ResetReporter
from zkcoord.consumer.shared import ConsumerMetrics
from zkcoord.errors import ZkError
from zkcoord.layout.legacy_paths import check_group
from zkcoord.runtime.journal import Journal
from zkcoord.runtime.shutdown import COMMIT, DEREGISTER, RELEASE, SESSION, StopBudget, StopReport
from zkcoord.zk import ZkClient, ZkConfig

log = logging.getLogger(__name__)


class LegacyConsumer:
    """A group member running Kafka 0.8.2's client-side rebalance.  Context manager; see the module docstring.

    :param config: the settings shared with :class:`consumer.Consumer`.
    :param legacy: retries, backoff and assignor of the client-side rebalance.
    :param on_partitions_revoked: called on the rebalance thread after fetching stopped and (with auto-commit) the
        positions were committed, before the owner znodes are deleted (Kafka's ``beforeReleasingPartitions``).
        It may call :meth:`commit`.
    :param on_partitions_assigned: called on the rebalance thread once the claimed partitions are being fetched.
    :raises ConfigurationError: the group name is reserved by the coordinator protocol.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        legacy: LegacyConfig | None = None,
        journal: Journal | None = None,
        on_partitions_revoked: PartitionsCallback | None = None,
        on_partitions_assigned: PartitionsCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        check_group(config.group)
        self.config = config
        self.legacy = legacy or LegacyConfig()
        self.consumer_id = config.consumer_id or new_consumer_id(config.group)
        self.journal = journal or Journal(None, "consumer")
        self.events = EventLog(self.journal, config.group, self.consumer_id, auto_commit=config.auto_commit)
        self.clock = clock
        self.wall_ms = wall_ms
        self.zk = ZkClient(
            ZkConfig.from_string(config.zk, session_timeout_s=config.session_timeout_s), name=self.consumer_id[-8:]
        )
        self.registry = LegacyRegistry(self.zk, config.group, self.consumer_id)
        self.signals = Signals(clock)
        # The watches need the pattern and subscription only; the registration's timestamp is not used.
        self.watches = Watches(self.zk, config.group, config.subscription.registration(0), self.signals)
        self.ownership = Ownership()
        # No resets/ record: a zk-client group's tree is Kafka 0.8's /consumers/<group> (the event and log line stay).
        self.resets = ResetReporter(self.journal, config.group, self.consumer_id, None, wall_ms)
        self.fetcher = FetchManager(
            config.data_dir,
            max_poll_records=config.max_poll_records,
            clock=clock,
            on_started=self.events.fetch_started,
            on_stopped=self.events.fetch_stopped,
            gate=lambda: True,
            offset_reset=config.offset_reset,
            on_reset=self.resets.report,
        )
        self.rebalancer = Rebalancer(self, on_partitions_revoked, on_partitions_assigned)
        #: commit latency and failures for the metrics endpoint (no commands, no fence: those stay at 0)
        self.stats = ConsumerStats()
        self.registrations = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = False
        self._started_at = 0.0
        self._delivered = 0

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Connect, register, set the watches and start the rebalance thread (which runs the first rebalance).

        Blocks until registered, not until partitions are assigned.

        :raises ZkUnavailableError: ZooKeeper cannot be reached.
        :raises NodeExistsError: another live session holds this consumer id.
        """
        self._started_at = self.clock()
        self._started = True
        try:
            self.zk.start()
            self.zk.add_listener(self.signals.session)
            self.registry.ensure_paths()
            self.register()
            self.watches.watch_members()
            self.watches.watch_topic_list()
            self.fetcher.start()
        except BaseException:
            self.close()
            raise
        self.signals.trigger("started")
        self._thread = threading.Thread(
            target=self.rebalancer.run, name=f"legacy-rebalance-{self.consumer_id[-8:]}", daemon=True
        )
        self._thread.start()
        return self

    def register(self) -> None:
        """Create the ids znode (Kafka's ``registerConsumerInZK``).  Called on start and after a session expiry."""
        reg = self.config.subscription.registration(self.wall_ms())
        self.registry.register(reg, wait_s=2 * self.config.session_timeout_s, stop=self._stop)
        self.registrations += 1
        self.events.emit(
            "consumer.registered",
            pattern=reg.pattern.value,
            subscription=dict(reg.subscription),
            session=f"{self.zk.session_id:#x}",
            registrations=self.registrations,
            protocol=PROTOCOL,
        )

    def close(self, timeout: float | None = None, *, budget: StopBudget | None = None) -> StopReport:
        """Stop fetching, end the rebalance thread, commit (with auto-commit), release the partitions, deregister
        and disconnect, within ``timeout`` seconds (default ``config.shutdown_timeout_s``) or ``budget``, whatever
        ZooKeeper does.  Returns what could not be done (journalled as ``shutdown.incomplete`` too).  Idempotent: a
        second call reports nothing.  Blocks until ``budget.session`` at most.

        As Kafka's ``shutdown``: the commit lands while the partitions are still owned, so their next owner starts
        where this one stopped.  ZooKeeper calls end by ``budget.zookeeper``: while ZooKeeper is unreachable the
        commit, the release and the deregistration are skipped, the session's expiry removes the ephemerals, and what
        was consumed since the last commit is consumed again by the next owner.
        """
        report = StopReport()
        if self._stop.is_set():
            return report
        budget = budget or StopBudget.start(self.config.shutdown_timeout_s if timeout is None else timeout)
        self._stop.set()
        self.zk.bound(budget.zookeeper)
        self.fetcher.pause("closing")  # nothing is read or handed out any more, whatever a rebalance does next
        self.signals.close()
        if self._thread is not None and self._thread is not threading.current_thread():  # not from a callback
            self._thread.join(timeout=budget.zookeeper.remaining())
        registered = self.registrations > 0
        # The rebalance thread holds the lock through a rebalance; its ZooKeeper calls end by budget.zookeeper.
        if self.ownership.lock.acquire(timeout=max(0.0, budget.session.remaining())):
            try:
                revoked = self._stop_owned(report)
                if revoked and self.rebalancer.on_revoked is not None:  # as a rebalance: under the lock, before
                    self.call_back(self.rebalancer.on_revoked, revoked)  # the owner znodes are released
                if registered:
                    self._release(report)
            finally:
                self.ownership.lock.release()
        else:
            self.fetcher.close()
            why = "a rebalance was still running at the deadline"
            report.skip(COMMIT, why, uncommitted=len(self.ownership.owned))
            report.skip(RELEASE, why)
        if registered:
            self._deregister(report)
        if not self.zk.stop(timeout=budget.session.remaining()) and registered:
            report.skip(SESSION, "session not closed")
        report.journal(self.journal, budget, group=self.config.group, consumer=self.consumer_id)
        return report

    def _stop_owned(self, report: StopReport) -> list[TopicPartition]:
        """Close the fetcher and (with auto-commit) commit the owned partitions' positions; return the partitions
        to call ``on_partitions_revoked`` with.  Ownership lock held."""
        positions = self.fetcher.close()
        if not self._started:
            return []
        owned = self.ownership.owned
        self.ownership.stopped.update({tp: p for tp, p in positions.items() if tp in owned})
        if self.config.auto_commit and not self.rebalancer.expired:
            try:
                self.commit_owned()
            except ZkError as e:
                todo = {tp: p for tp, p in self.ownership.stopped.items() if tp in owned}
                if uncommitted := sum(1 for tp, p in todo.items() if self.registry.checkpointed.get(tp) != p):
                    log.warning("consumer %s: closing without the final commit: %s", self.consumer_id, e)
                    report.skip(shared.commit_step(e), e, uncommitted=uncommitted)
        return sorted(set(positions) | set(owned))

    def _release(self, report: StopReport) -> None:
        """Delete our owner znodes (Kafka's ``releasePartitionOwnership``), after the commit.  Ownership lock held."""
        try:
            self.registry.release()
        except ZkError as e:
            log.info("consumer %s: owner znodes left to the session close: %s", self.consumer_id, e)
            report.skip(RELEASE, e)
        self.ownership.owned.clear()
        self.ownership.stopped.clear()

    def _deregister(self, report: StopReport) -> None:
        try:
            self.registry.deregister()
        except ZkError as e:
            log.info("consumer %s: deregistration left to the session close: %s", self.consumer_id, e)
            report.skip(DEREGISTER, e)
        else:
            self.events.emit("consumer.deregistered")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- the application's API ----------------------------------------------------------------------------------

    def poll(self, timeout: float = 1.0) -> list[ConsumerRecord]:
        """Return at most ``max_poll_records`` records, round-robin across the owned partitions (KIP-41).

        Blocks up to ``timeout`` seconds.  Returns nothing while a rebalance has the fetchers stopped.

        :raises RuntimeError: the consumer is closed.
        """
        records = self.fetcher.poll(timeout)
        if records:
            self._delivered += len(records)
            self.events.consumed(records, self.fetcher.assignment())
        return records

    def commit(self) -> dict[TopicPartition, int]:
        """Commit the positions of everything :meth:`poll` returned from the owned partitions, synchronously.

        Unfenced, as in Kafka 0.8: a consumer whose session expired unnoticed can still overwrite an offset.
        Returns what was written (unchanged positions are not written again).

        :raises ZkError: ZooKeeper failed (positions before the failing one are committed).
        """
        return self.commit_owned()

    def assignment(self) -> dict[TopicPartition, str]:
        """The partitions being fetched, with their thread ids (empty while a rebalance runs)."""
        return self.fetcher.assignment()

    def wakeup(self) -> None:
        self.fetcher.wakeup()

    def metrics(self) -> ConsumerMetrics:
        """The coordinator consumer's metrics.  ``lease_valid`` is always True: there is no lease to lose."""
        now = self.clock()
        return shared.metrics(
            assigned=len(self.fetcher.assignment()),
            delivered=self._delivered,
            elapsed_s=now - self._started_at,
            rebalances=self.rebalancer.rebalances,
            last=self.rebalancer.last,
            now=now,
            lag=shared.lag(self.config.data_dir, self.fetcher.positions()),
            lease_valid=True,
        )

    def lag(self) -> int:
        """Records in the fetched partitions' logs beyond the consumed positions."""
        return sum(shared.lag(self.config.data_dir, self.fetcher.positions()).values())

    # --- for the rebalance thread -------------------------------------------------------------------------------

    def commit_owned(self) -> dict[TopicPartition, int]:
        """Commit the consumed positions of the owned partitions (fetching or stopped, not yet released)."""
        with self.ownership.lock:
            positions = {**self.ownership.stopped, **self.fetcher.positions()}
            todo = {tp: p for tp, p in positions.items() if tp in self.ownership.owned}
            sent = self.clock()
            try:
                written = self.registry.commit(todo)
            except ZkError:
                self.stats.commit_failures.inc()
                raise
            self.stats.committed(self.clock() - sent)
        self.events.committed(written)
        return written

    def commit_quietly(self) -> None:
        """Auto-commit: as :meth:`commit_owned`, logging a failure instead of raising it."""
        try:
            self.commit_owned()
        except ZkError as e:
            log.warning("consumer %s: auto-commit failed: %s", self.consumer_id, e)

    def start_positions(self, committed: Mapping[TopicPartition, int | None]) -> dict[TopicPartition, int]:
        """Where to start each partition: its committed offset, else the start policy (``auto.offset.reset``)."""
        return shared.start_positions(self.config.data_dir, self.config.start_from, committed)

    def call_back(self, callback: PartitionsCallback, partitions: list[TopicPartition]) -> None:
        """Call a user callback; an exception it raises is logged, never propagated into the rebalance."""
        try:
            callback(partitions)
        except Exception:
            log.exception("consumer %s: rebalance callback failed", self.consumer_id)


__all__ = ["LegacyConsumer", "Ownership"]
