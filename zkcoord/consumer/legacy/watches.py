"""The legacy consumer's triggers: Kafka 0.8.2's watches, and the inbox that coalesces them (KAFKA-265).

Watch callbacks and the session listener run on kazoo's threads.  They only record into :class:`Signals` (a short
lock, a notify) and never call ZooKeeper; the consumer's one rebalance thread takes whatever accumulated, so a
burst of notifications -- ten members starting at once -- costs one rebalance, not ten.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from zkcoord.layout import legacy_paths as paths
from zkcoord.layout import paths as common
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.protocol.subscriptions import matches
from zkcoord.zk import ConnState, Stat, ZkClient


class Signals:
    """The rebalance thread's inbox: rebalance triggers, connection states, and the request to close.

    ``trigger`` and ``session`` may be called from any thread and return at once.  Triggers coalesce: reasons
    recorded before the rebalance thread takes them are handed over together, with the time of the first.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._reasons: dict[str, None] = {}  # an ordered set
        self._since: float | None = None
        self._states: list[ConnState] = []
        self._closed = False

    def closed(self) -> bool:
        """Whether :meth:`close` was called (a method, so type checkers never take it as a constant)."""
        return self._closed

    def trigger(self, reason: str) -> None:
        """Ask for a rebalance (Kafka's ``isWatcherTriggered = true`` and signal)."""
        with self._cond:
            if self._since is None:
                self._since = self._clock()
            self._reasons[reason] = None
            self._cond.notify_all()

    def session(self, state: ConnState) -> None:
        """Record a connection-state change (the ``ZkClient`` listener)."""
        with self._cond:
            self._states.append(state)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait(self, timeout: float) -> None:
        """Block until something is recorded, the inbox is closed, or ``timeout`` seconds pass."""
        with self._cond:
            if not (self._reasons or self._states or self._closed):
                self._cond.wait(max(0.0, timeout))

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` (the rebalance backoff) unless closed first; return whether it is closed."""
        with self._cond:
            return self._cond.wait_for(lambda: self._closed, timeout=max(0.0, seconds))

    def take_states(self) -> list[ConnState]:
        with self._cond:
            states, self._states = self._states, []
            return states

    def take_triggers(self) -> tuple[list[str], float | None]:
        """The reasons recorded since the last call, and when the first of them was recorded."""
        with self._cond:
            reasons, since = list(self._reasons), self._since
            self._reasons, self._since = {}, None
            return reasons, since


class Watches:
    """Kafka 0.8.2's consumer watches, each turned into a :meth:`Signals.trigger`.

    * children of ``/consumers/<g>/ids``: a member joined or left (``loadBalancerListener``);
    * data of ``/brokers/topics/<t>`` for each topic this consumer subscribes to: partitions were added
      (``topicPartitionChangeListener``, KAFKA-1030/1075);
    * with a wildcard subscription, children of ``/brokers/topics``: the set of matching topics changed
      (``ZookeeperTopicEventWatcher``);
    * children of ``/brokers/ids``, only once a rebalance has found no broker (KAFKA-969).

    The first call of each watch reports the current state and is not a trigger.  kazoo re-arms them after a
    reconnect or a session expiry.  Set them up from the rebalance thread (or before it starts): each reads
    ZooKeeper once, synchronously.  Watches are never removed; one on a topic no longer subscribed is ignored.
    """

    def __init__(self, zk: ZkClient, group: str, registration: MemberRegistration, signals: Signals) -> None:
        self.zk = zk
        self.group = group
        self.registration = registration
        self.signals = signals
        self._topics: set[str] = set()
        self._interest: frozenset[str] = frozenset()
        self._brokers = False
        self._lock = threading.Lock()

    def watch_members(self) -> None:
        """Watch the group's members.  ``/consumers/<g>/ids`` must exist."""
        first = [True]

        def changed(_children: list[str]) -> None:
            if first[0]:
                first[0] = False
                return
            self.signals.trigger("members changed")

        self.zk.watch_children(paths.ids(self.group), changed)

    def watch_topics(self, topics: Iterable[str]) -> None:
        """Make ``topics`` the subscribed topics whose data is watched (those not watched yet get a watch)."""
        wanted = frozenset(topics)
        self._interest = wanted
        with self._lock:
            new = sorted(wanted - self._topics)
            self._topics.update(new)
        for topic in new:
            self._watch_topic(topic)

    def _watch_topic(self, topic: str) -> None:
        first = [True]

        def changed(_data: bytes | None, _stat: Stat | None) -> None:
            if first[0]:
                first[0] = False
                return
            if topic in self._interest:
                self.signals.trigger(f"topic {topic} changed")

        self.zk.watch_data(common.topic(topic), changed)

    def watch_topic_list(self) -> None:
        """With a wildcard subscription, watch which topics exist; a change of the matching set is a trigger."""
        if self.registration.pattern is Pattern.STATIC:
            return
        seen: list[frozenset[str] | None] = [None]

        def changed(children: list[str]) -> None:
            matching = frozenset(t for t in children if matches(self.registration, t))
            before, seen[0] = seen[0], matching
            if before is not None and matching != before:
                self.signals.trigger("matching topics changed")

        self.zk.watch_children(common.BROKER_TOPICS, changed)

    def watch_brokers(self) -> None:
        """Watch ``/brokers/ids`` (once): the first broker to appear triggers a rebalance."""
        with self._lock:
            if self._brokers:
                return
            self._brokers = True

        def changed(children: list[str]) -> None:
            if children:
                self.signals.trigger("brokers appeared")

        self.zk.watch_children(common.BROKER_IDS, changed)
