"""The legacy consumer's rebalance thread: Kafka 0.8.2's watcher executor, ``syncedRebalance`` and ``rebalance``.

One thread per consumer runs every rebalance, every session re-registration and the periodic auto-commit, so
they never interleave.  It sleeps until :class:`~zkcoord.consumer.legacy.watches.Signals` has something, then:

1. connection states: ``LOST`` marks the session expired; once ``CONNECTED`` again, Kafka's ``handleNewSession``:
   forget the owned partitions (uncommitted), register again, rebalance;
2. triggers: one :meth:`Rebalancer.synced_rebalance` for all of them (KAFKA-265);
3. auto-commit, every ``auto_commit_interval_s`` (Kafka's ``autoCommit`` scheduler).

``synced_rebalance`` makes up to ``rebalance_max_retries`` attempts with ``rebalance_backoff_s`` after each failed
one; after the last it journals ``legacy.rebalance.failed`` and the consumer stays registered, owning nothing,
until the next trigger.  One attempt (:meth:`Rebalancer._attempt`) is Kafka's ``rebalance(cluster)``:

1. read the own registration (missing: fail) and ``/brokers/ids`` (empty: watch it, succeed without change);
2. stop every fetcher; with auto-commit, commit the consumed positions *while still owning* the partitions;
   call ``on_partitions_revoked``; delete the owner znodes;
3. read all members and topics, compute the whole assignment, keep this consumer's part;
4. read the committed offsets of that part;
5. claim each partition with an ephemeral owner znode; any conflict: delete the ones just created, fail;
6. only now start the fetchers, from the committed offsets (the start policy where there are none); call
   ``on_partitions_assigned``.

Safety: fetchers start only after every claim of the attempt succeeded (step 6 after 5) and stop before any claim
is released (step 2), so while the session lives no partition is fetched by two consumers at once.  A session that
expires unnoticed breaks this, as it did in Kafka: see ``docs/legacy-protocol.md``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from zkcoord.consumer.config import ConsumerConfig
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.consumer.legacy.assignment import decide
from zkcoord.consumer.legacy.config import LegacyConfig
from zkcoord.consumer.legacy.events import EventLog, PartitionsCallback
from zkcoord.consumer.legacy.registry import AttemptFailedError, LegacyRegistry
from zkcoord.consumer.legacy.watches import Signals, Watches
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import ZkCoordError, ZkError
from zkcoord.layout.registrations import Pattern
from zkcoord.zk import ConnState, ZkClient

log = logging.getLogger(__name__)


@dataclass
class Ownership:
    """Kafka's ``topicRegistry``: the partitions this consumer has claimed, and the consumed positions of those
    whose fetchers are stopped but which are not released yet (what a commit then writes).

    Guarded by :attr:`lock`, re-entrant because the rebalance thread holds it while calling
    ``on_partitions_revoked``, which may call :meth:`LegacyConsumer.commit`.
    """

    owned: dict[TopicPartition, str] = field(default_factory=dict)
    stopped: dict[TopicPartition, int] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)


class LegacyHost(Protocol):
    """What the rebalancer needs of its consumer (:class:`zkcoord.consumer.legacy.client.LegacyConsumer` is one):
    its settings, ZooKeeper client, registry, watches, signals, ownership and fetcher, and the steps it shares with
    ``close()``.  Declared here so that this module does not depend on the consumer that owns it."""

    config: ConsumerConfig
    legacy: LegacyConfig
    consumer_id: str
    events: EventLog
    clock: Callable[[], float]
    zk: ZkClient
    registry: LegacyRegistry
    signals: Signals
    watches: Watches
    ownership: Ownership
    fetcher: FetchManager

    def register(self) -> None: ...

    def commit_owned(self) -> dict[TopicPartition, int]: ...

    def commit_quietly(self) -> None: ...

    def start_positions(self, committed: Mapping[TopicPartition, int | None]) -> dict[TopicPartition, int]: ...

    def call_back(self, callback: PartitionsCallback, partitions: list[TopicPartition]) -> None: ...


@dataclass(frozen=True, slots=True)
class RebalanceRecord:
    """The last completed rebalance as this consumer saw it (first trigger -> fetchers started)."""

    attempts: int
    latency_ms: float
    finished_at: float
    partitions: int


class Rebalancer:
    """Runs on the consumer's rebalance thread; see the module docstring.  Not for use by other threads, except
    the counters (:attr:`rebalances`, :attr:`failures`, :attr:`last`), which are read-only snapshots."""

    def __init__(
        self, consumer: LegacyHost, on_revoked: PartitionsCallback | None, on_assigned: PartitionsCallback | None
    ) -> None:
        self.c = consumer
        self.on_revoked = on_revoked
        self.on_assigned = on_assigned
        self.rebalances = 0
        self.failures = 0
        self.last: RebalanceRecord | None = None
        self.expired = False

    # --- the loop ---------------------------------------------------------------------------------------------

    def run(self) -> None:
        c = self.c
        signals = c.signals
        interval = c.config.auto_commit_interval_s
        next_commit = c.clock() + interval
        while True:
            signals.wait(max(0.0, next_commit - c.clock()) if c.config.auto_commit else 1.0)
            if signals.closed():
                return
            try:
                self._handle_states()
                reasons, since = signals.take_triggers()
                if reasons:
                    self.synced_rebalance(reasons, since if since is not None else c.clock())
            except ZkError as e:
                # Registering again after an expiry failed (ZooKeeper unavailable): try again after the backoff.
                log.warning("consumer %s: %s", c.consumer_id, e)
                if signals.sleep(c.legacy.rebalance_backoff_s):
                    return
                signals.trigger("retry after error")
            if c.config.auto_commit and c.clock() >= next_commit:
                next_commit = c.clock() + interval
                if not self.expired:
                    c.commit_quietly()

    def _handle_states(self) -> None:
        c = self.c
        for state in c.signals.take_states():
            c.events.journal.emit("zk.state", state=state.value, session=f"{c.zk.session_id:#x}")
            if state is ConnState.LOST:
                self.expired = True
        if self.expired and c.zk.state is ConnState.CONNECTED:
            self._new_session()

    def _new_session(self) -> None:
        """Kafka's ``handleNewSession``: ``resetState()``, register again, rebalance.

        The fetchers are left running, as Kafka left them, until the rebalance stops them; nothing is committed for
        the forgotten partitions (the next owner may already have them).
        """
        c = self.c
        with c.ownership.lock:
            forgotten = len(c.ownership.owned)
            c.ownership.owned.clear()
            c.ownership.stopped.clear()
            c.registry.reset()
        c.events.emit("legacy.session.expired", partitions=forgotten)
        c.register()
        self.expired = False
        c.signals.trigger("session expired")

    # --- syncedRebalance --------------------------------------------------------------------------------------

    def synced_rebalance(self, reasons: list[str], since: float) -> bool:
        """Up to ``rebalance_max_retries`` attempts, ``rebalance_backoff_s`` apart; whether one succeeded.

        Stops early (``False``) when the consumer closes.  After the last failed attempt it sleeps the backoff
        too, as Kafka's loop does, then journals ``legacy.rebalance.failed``.
        """
        c = self.c
        retries = c.legacy.rebalance_max_retries
        backoff = c.legacy.rebalance_backoff_s
        trigger = ", ".join(reasons)
        reason = ""
        for attempt in range(1, retries + 1):
            if c.signals.closed():
                return False
            self._handle_states()  # a new session is registered before the attempt reads its own registration
            c.events.emit("legacy.rebalance.started", attempt=attempt, trigger=trigger)
            try:
                members, partitions, outcome = self._attempt(attempt)
            except AttemptFailedError as e:
                reason = e.reason
            except ZkCoordError as e:  # ZooKeeper trouble, a refusing assignor, an unreadable log
                reason = f"{type(e).__name__}: {e}"
            else:
                latency = (c.clock() - since) * 1000
                self.rebalances += 1
                self.last = RebalanceRecord(attempt, latency, c.clock(), partitions)
                c.events.emit(
                    "legacy.rebalance.completed",
                    attempt=attempt,
                    partitions=partitions,
                    members=members,
                    latency_ms=round(latency, 3),
                    outcome=outcome,
                )
                return True
            self._abandon()
            if c.signals.closed():
                return False  # closing, not retrying: close() commits and releases what is left
            log.info("consumer %s: rebalance attempt %d failed: %s", c.consumer_id, attempt, reason)
            if attempt < retries:
                c.events.emit("legacy.rebalance.retrying", attempt=attempt, reason=reason, backoff_s=backoff)
            if c.signals.sleep(backoff):
                return False
        self.failures += 1
        c.events.emit("legacy.rebalance.failed", retries=retries, reason=reason)
        log.warning("consumer %s can't rebalance after %d retries: %s", c.consumer_id, retries, reason)
        return False

    def _abandon(self) -> None:
        """After a failed attempt: fetchers are not running (stopped in step 2, not started); drop the claims
        this attempt made.  Best effort: claims left behind are retried by the next attempt's release."""
        c = self.c
        try:
            c.registry.release()
        except ZkError as e:
            log.info("consumer %s: could not release claims yet: %s", c.consumer_id, e)

    # --- rebalance(cluster) -----------------------------------------------------------------------------------

    def _attempt(self, attempt: int) -> tuple[int, int, str]:
        """One attempt; returns ``(members, partitions owned, outcome)``.

        :raises AttemptFailedError: a conflict, a member that vanished mid-read, the own registration missing,
            or the consumer closing.
        :raises ZkCoordError: any other failure (ZooKeeper, the assignor, the partition log).
        """
        c = self.c
        own = c.registry.own_registration()
        if not c.registry.brokers():
            # KAFKA-969: nothing to consume from; watch for brokers and leave everything as it is.
            c.watches.watch_brokers()
            return 0, len(c.ownership.owned), "no brokers"
        self._stop_and_release()
        view = c.registry.read_group()
        for path, why in view.rejected:
            c.events.journal.emit("input.rejected", what="legacy group znode", path=path, reason=why)
        decision = decide(c.consumer_id, view, c.legacy.assignor)
        own_topics = set(decision.subscriptions.get(c.consumer_id, {}))
        if own.pattern is Pattern.STATIC:
            own_topics.update(own.subscription)  # watched even before they exist, as Kafka did
        c.watches.watch_topics(own_topics)
        committed, problems = c.registry.read_offsets(decision.mine)
        for problem in problems:
            c.events.journal.emit("input.rejected", what="committed offset", path="", reason=problem)
        if c.signals.closed():
            raise AttemptFailedError("shutting down")
        conflicts = c.registry.claim(decision.mine)
        for tp, holder in sorted(conflicts.items()):
            c.events.emit(
                "legacy.rebalance.conflict",
                attempt=attempt,
                topic=tp.topic,
                partition=tp.partition,
                thread=decision.mine[tp],
                owner=holder,
            )
        if conflicts:
            first = min(conflicts)
            raise AttemptFailedError(
                f"{len(conflicts)} of {len(decision.mine)} partitions still owned by others "
                f"(first: {first} by {conflicts[first] or 'a vanished owner'})"
            )
        if c.signals.closed():
            raise AttemptFailedError("shutting down")
        starts = c.start_positions(committed)
        with c.ownership.lock:
            try:
                c.fetcher.assign({tp: (starts[tp], thread) for tp, thread in decision.mine.items()})
            except RuntimeError as e:  # closed under us (close() gave up waiting for this thread)
                raise AttemptFailedError(f"shutting down ({e})") from e
            c.ownership.owned.update(decision.mine)
        if decision.mine and self.on_assigned is not None:
            c.call_back(self.on_assigned, sorted(decision.mine))
        return len(view.members), len(decision.mine), "assigned"

    def _stop_and_release(self) -> None:
        """Step 2: stop fetching, commit while still the owner, tell the application, then release.

        :raises ZkError: the commit or a release failed; partitions not released stay owned (and are committed and
            released by the next attempt).
        """
        c = self.c
        with c.ownership.lock:
            positions = c.fetcher.revoke("rebalance")
            owned = c.ownership.owned
            c.ownership.stopped.update({tp: p for tp, p in positions.items() if tp in owned})
            if c.config.auto_commit and owned:
                c.commit_owned()
            revoked = sorted(set(positions) | set(owned))
            if revoked and self.on_revoked is not None:
                c.call_back(self.on_revoked, revoked)
            try:
                c.registry.release()
            finally:
                kept = {tp: owned[tp] for tp in owned if tp in c.registry.held}
                c.ownership.owned = kept
                c.ownership.stopped = {tp: p for tp, p in c.ownership.stopped.items() if tp in kept}
