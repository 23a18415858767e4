"""The consumer's state and services, below everything that acts on them.

:class:`ConsumerCore` is built by :class:`zkcoord.consumer.client.Consumer` (the public facade) and handed to the
command thread's pieces (:mod:`zkcoord.consumer.commands`, :mod:`zkcoord.consumer.handler_state`,
:mod:`zkcoord.consumer.starting`, :mod:`zkcoord.consumer.inbox`, :mod:`zkcoord.consumer.registration`,
:mod:`zkcoord.consumer.commits`): they depend on it, never on the facade, so imports go one way
(``client -> commands -> ... -> core``).

Threads, per field:

* set once in ``__init__`` and read from any thread: ``config``, ``consumer_id``, ``journal``, ``clock``, ``wall_ms``,
  ``zk``, ``lease``, ``offsets``, ``fetcher``, ``bridge``, ``events``, ``closing``, ``handoff``, ``stats``
  (thread-safe);
* written by :meth:`register` (the application's thread in ``start()``, then only the command thread), read from any
  thread: ``incarnation``, ``registered_data``, ``registered_session``, ``registrations``; the command thread also
  sets ``incarnation`` to None when our registration ends;
* :attr:`events`: any thread puts (kazoo's callbacks only enqueue), only the command thread takes
  (:meth:`next_event`).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping

from zkcoord.consumer import shared
from zkcoord.consumer.config import ConsumerConfig
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.consumer.handoff import Handoff
from zkcoord.consumer.lease import Lease
from zkcoord.consumer.metrics import ConsumerStats
from zkcoord.consumer.migration import MigrationBridge
from zkcoord.consumer.offsets import OffsetStore
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import ConsumerIdInUseError, InstanceIdInUseError, NodeExistsError
from zkcoord.layout import paths
from zkcoord.runtime.journal import Journal
from zkcoord.runtime.refusals import Refusals
from zkcoord.zk import ChildrenWatch, ConnState, Stat, WatchEvent, ZkClient

log = logging.getLogger(__name__)

#: one event for the command thread: its kind and argument (see :meth:`zkcoord.consumer.commands.CommandHandler.run`)
Event = tuple[str, object]


class ConsumerCore:
    """One consumer's identity, ZooKeeper session, stores, fetcher, registration and event queue (see the module
    docstring for which thread owns each field)."""

    def __init__(
        self,
        config: ConsumerConfig,
        consumer_id: str,
        *,
        journal: Journal,
        zk: ZkClient,
        lease: Lease,
        offsets: OffsetStore,
        fetcher: FetchManager,
        clock: Callable[[], float],
        wall_ms: Callable[[], int],
    ) -> None:
        self.config = config
        self.consumer_id = consumer_id
        self.journal = journal
        self.zk = zk
        self.lease = lease
        self.offsets = offsets
        self.fetcher = fetcher
        self.clock = clock
        self.wall_ms = wall_ms
        #: every event the command thread reacts to, in order
        self.events: queue.Queue[Event] = queue.Queue()
        #: set once ``close()`` began: nothing is handed out any more, and nothing is redelivered
        self.closing = threading.Event()
        #: what the command thread leaves for the application's thread (parked stops, announcements)
        self.handoff = Handoff(clock, wake=fetcher.wakeup)
        #: what the metrics endpoint shows besides ``Consumer.metrics()`` (commits, commands applied and refused)
        self.stats = ConsumerStats()
        #: Kafka 0.8's registry and owner znodes, for a consumer of a group migrating off zk-client (else None)
        self.bridge: MigrationBridge | None = None
        if config.migrating:
            self.bridge = MigrationBridge(
                zk, config.group, consumer_id, lambda: self.events.put(("legacy-claim", None))
            )
        self.registrations = 0
        #: the session of our latest registration: only round trips in it renew the lease
        self.registered_session = 0
        #: the children watch on our channel (ended for good if the channel was deleted: see channel_watched)
        self.channel_watch: ChildrenWatch | None = None
        #: czxid of our current registration (None while not registered): see ``Command.incarnation``
        self.incarnation: int | None = None
        #: the data of our current registration as we wrote it (what a damaged one is repaired to)
        self.registered_data: bytes | None = None
        #: ZooKeeper's refusals (--zk-auth), journalled once each; the first (``refusals.fatal``) shuts the fetcher's
        #: gate and is raised by every ``poll()`` from then on: the application closes the consumer (docs/security.md)
        self.refusals = Refusals(journal, lambda _e: fetcher.wakeup(), group=config.group, consumer=consumer_id)
        zk.refusals.add(self.refusals)

    # --- registration ---------------------------------------------------------------------------------------------

    def register(self) -> None:
        """Create our member znode (ephemeral, Kafka's JSON).  Called on start and after our registration ended
        (a session expiry, or deleted or replaced under a live session).

        A migrating consumer registers in Kafka 0.8's registry first, so that the zk-client members leave our share
        alone before the coordinator gives it to us.

        :raises ZkError: registering failed (nothing of ours changed but what the bridge wrote).
        :raises ConsumerIdInUseError: another live session holds our id (a persistent znode there is replaced).
        """
        reg = self.config.subscription.registration(
            self.wall_ms(),
            migrating=self.config.migrating,
            incremental=self.config.rebalance == "incremental",
            consumer_protocol=self.config.rebalance == "consumer",
            max_poll_interval_ms=round(self.config.max_poll_interval_s * 1000),
            instance_id=self.config.instance_id,
            rack=self.config.rack,
            assignors=self.config.assignors if self.config.rebalance == "classic" else (),
        )
        if self.config.instance_id is not None:
            self._hold_instance(self.config.instance_id)
        path = paths.member(self.config.group, self.consumer_id)
        if self.bridge is not None:
            held = self.zk.exists(path)  # before the bridge's 0.8 registration, which would otherwise be left behind
            if held is not None and held.ephemeralOwner not in (0, self.zk.session_id):
                raise ConsumerIdInUseError(self.consumer_id, held.ephemeralOwner)
            self.bridge.register(reg, self.config.session_timeout_s * 2, self.closing)
        stat: Stat | None
        try:
            stat = self.zk.create_stat(path, reg.encode(), ephemeral=True, makepath=True)
        except NodeExistsError:
            stat = self.zk.exists(path)
            if stat is None:
                raise
            if stat.ephemeralOwner not in (0, self.zk.session_id):
                # Another live session holds our id: another process runs with it.  Never take it away (the two
                # would take it from each other for ever, both fetching as the same threads).
                raise ConsumerIdInUseError(self.consumer_id, stat.ephemeralOwner) from None
            if stat.ephemeralOwner == 0:
                # A persistent znode at our id, so written by hand or by a buggy client (a consumer's registration
                # is ephemeral): replace it, conditionally on the version seen.
                self.zk.delete(path, stat.version)
                stat = self.zk.create_stat(path, reg.encode(), ephemeral=True, makepath=True)
                log.warning("consumer %s: replaced a persistent znode at our id", self.consumer_id)
        # The registration's czxid: commands carry it, and those meant for an earlier registration are refused.
        self.incarnation = stat.czxid
        self.registered_data = reg.encode()
        self.registrations += 1
        self.registered_session = self.zk.session_id
        self.journal.emit(
            "consumer.registered",
            group=self.config.group,
            consumer=self.consumer_id,
            pattern=reg.pattern.value,
            subscription=dict(reg.subscription),
            session=f"{self.zk.session_id:#x}",
            registrations=self.registrations,
            **({"migrating": True} if self.config.migrating else {}),
            **({"assignors": list(reg.assignors)} if reg.assignors else {}),
        )

    def _hold_instance(self, instance_id: str) -> None:
        """Hold our static instance id (an ephemeral ``instances/<id>`` naming us) before we register: one live member
        per instance id, whatever ZooKeeper client runs it (KIP-848's UNRELEASED_INSTANCE_ID).  Held already by our
        session: kept; a persistent znode there (written by hand): replaced.

        :raises InstanceIdInUseError: another live session holds it.
        """
        path = paths.instance(self.config.group, instance_id)
        try:
            self.zk.create_stat(path, self.consumer_id.encode(), ephemeral=True, makepath=True)
        except NodeExistsError:
            stat = self.zk.exists(path)
        else:
            return
        if stat is None:
            self.zk.create_stat(path, self.consumer_id.encode(), ephemeral=True, makepath=True)
        elif stat.ephemeralOwner == 0:
            self.zk.delete(path, stat.version)
            self.zk.create_stat(path, self.consumer_id.encode(), ephemeral=True, makepath=True)
        elif stat.ephemeralOwner != self.zk.session_id:
            raise InstanceIdInUseError(self.consumer_id, instance_id, stat.ephemeralOwner, path)

    def watch_channel(self) -> None:
        """Watch our channel's children (the command thread gets each listing).  The channel must exist; a deleted
        one ends the watch, and is created and watched again (``zkcoord.consumer.registration``)."""
        self.channel_watch = self.zk.watch_children(
            paths.channel(self.config.group, self.consumer_id), lambda children: self.events.put(("channel", children))
        )

    def channel_watched(self) -> bool:
        """Whether the children watch on our channel still reports (:meth:`ZkClient.watching`)."""
        return self.channel_watch is not None and self.zk.watching(self.channel_watch)

    def session_state(self) -> ConnState:
        return self.zk.state

    # --- the command thread's queue ---------------------------------------------------------------------------------

    def next_event(self) -> Event:
        """The next event for the command thread (blocks until there is one).  Command thread only."""
        return self.events.get()

    def redeliver_later(self, event: Event, delay: float = 0.2) -> None:
        """Put ``event`` back after ``delay`` (command thread; used after a ZooKeeper error mid-command)."""
        if not self.closing.wait(delay):
            self.events.put(event)

    def on_owner_changed(self, event: WatchEvent) -> None:
        """kazoo's thread: an owner znode watched while a hand-over is awaited changed; the command thread looks."""
        self.events.put(("owner", event.path))

    # --- positions ----------------------------------------------------------------------------------------------

    def uncommitted(self, positions: Mapping[TopicPartition, int] | None = None) -> int:
        """How many partitions' consumed positions (default: the fetcher's) differ from their committed offsets."""
        committed = self.offsets.committed()
        current = self.fetcher.positions() if positions is None else positions
        return sum(1 for tp, offset in current.items() if committed.get(tp) != offset)

    def start_positions(self, committed: Mapping[TopicPartition, int | None]) -> dict[TopicPartition, int]:
        """Where to start each partition: its committed offset, else the start policy."""
        return shared.start_positions(self.config.data_dir, self.config.start_from, committed)
