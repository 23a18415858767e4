"""The coordinator: election, the four watchers, the rebalance request queue, and its one worker thread.

Hosted by every broker (:class:`Coordinator` is a :class:`~zkcoord.broker.BrokerService`); exactly one broker at a
time holds a coordinator *term* (:mod:`zkcoord.coordinator.election`).  The seed's fields map as follows:

==========================  ===========================================================================
seed (002)                  here
==========================  ===========================================================================
``coordinatorElector``      :func:`~zkcoord.coordinator.election.try_elect` + a data watch on the znode
``groupsBeingRebalanced``   ``_pending`` (requested, not started) and ``Rebalancer.active`` (running)
``consumerGroupsPerTopic``  ``_subs`` (member registrations per group), queried by :meth:`_interested`
``groupsWithWildcardTopics`` the wildcard registrations inside ``_subs``
``rebalanceRequestQ``       ``_order`` (FIFO of requested groups)
``requestHandler``          the ``coordinator-<id>`` worker thread
==========================  ===========================================================================

Threads: kazoo's connection thread (state listener) and watch thread (watch callbacks) only put events on
``_events``; the worker thread does every ZooKeeper call.  Watches are scoped to a term: a callback of an old term
returns False, which ends the kazoo watch.

Roles (:class:`Role`)::

    FOLLOWER --won the election--> COORDINATOR --fenced | session lost | stop()--> FOLLOWER / STOPPED
       ^  \\--coordinator znode gone or left over (seat.py) / new session--> (try the election again)
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from zkcoord.coordinator.attempt import Begun
from zkcoord.coordinator.commands import PhaseWriter
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.election import Fence, Term
from zkcoord.coordinator.plan import matches
from zkcoord.coordinator.rebalancer import Rebalancer
from zkcoord.coordinator.seat import Seat, Verdict
from zkcoord.coordinator.snapshot import Listing, forget_member, listing, read_groups
from zkcoord.data.topics import follow_partition_count
from zkcoord.errors import FencedError, ZkCoordError, ZkError
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.runtime.faults import fault_point
from zkcoord.runtime.journal import Journal
from zkcoord.zk import ConnState, Stat, WatchEvent, WatchKind, ZkClient

log = logging.getLogger(__name__)


class Role(Enum):
    FOLLOWER = "follower"
    COORDINATOR = "coordinator"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class _Event:
    kind: str
    term: int = 0
    group: str = ""
    name: str = ""
    data: Any = None


class Coordinator:
    """The consumer-group coordinator service of one broker.  ``start``/``stop`` are called by the broker."""

    name = "coordinator"

    def __init__(
        self,
        broker_id: int,
        config: CoordinatorConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.broker_id = broker_id
        self.config = config or CoordinatorConfig()
        self.clock = clock
        self.wall_ms = wall_ms
        self.role = Role.FOLLOWER
        self.term: Term | None = None
        self.rebalancer: Rebalancer | None = None
        self.elected = threading.Event()
        self._zk: ZkClient | None = None
        self._seat: Seat | None = None
        self._journal = Journal(None, "coordinator")
        self._events: queue.Queue[_Event] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._term_no = 0
        self._suspended = False
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = 0
        # per-term state
        self._topics: dict[str, int] = {}
        self._subs: dict[str, list[MemberRegistration]] = {}
        self._groups: set[str] = set()
        self._groups_listed = False
        self._legacy_watched: set[str] = set()  # migrating groups whose zk-client ids are watched (this term)
        self._pending: dict[str, tuple[str, float]] = {}
        self._order: deque[str] = deque()
        #: each group's member ids as last listed (with the one-shot watch of ``_members_watch``)
        self._member_ids: dict[str, Listing] = {}
        #: groups whose members watch fired (a change, or a reset by a connection loss): to list and watch again
        self._relist: set[str] = set()
        self._members_watch: Callable[[WatchEvent], None] | None = None

    # --- BrokerService ------------------------------------------------------------------------------------------

    def start(self, zk: ZkClient, journal: Journal) -> None:
        self._zk = zk
        self._journal = journal
        self._seat = Seat(zk, self.broker_id, journal, wake=lambda _event: self._events.put(_Event("elect")))
        zk.add_listener(lambda state: self._events.put(_Event("state", data=state)))
        # The watch first: the worker's first election attempt then happens with it in place, so a broker that
        # journals coordinator.standby is sure to hear of the coordinator's end.
        zk.watch_data(paths.COORDINATOR, self._on_coordinator_node)
        self._worker = threading.Thread(target=self._run, name=f"coordinator-{self.broker_id}", daemon=True)
        self._worker.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Resign and end the worker, waiting ``timeout`` s at most (the broker bounds its ZooKeeper calls)."""
        if self._worker is not None:
            self._events.put(_Event("stop"))
            self._worker.join(timeout=timeout)
        self.role = Role.STOPPED

    @property
    def zk(self) -> ZkClient:
        if self._zk is None:
            raise RuntimeError("coordinator not started")
        return self._zk

    # --- callbacks (kazoo threads: enqueue only) ------------------------------------------------------------------

    def _on_coordinator_node(self, data: bytes | None, stat: Stat | None) -> None:
        # Every change, not only a deletion: a node replaced in one transaction is never seen absent (seat.py).
        self._events.put(_Event("seat", data=(data, stat)))

    def _watch_children(self, kind: str, path: str, group: str = "", name: str = "") -> None:
        term = self._term_no

        def callback(children: list[str]) -> bool | None:
            if term != self._term_no:
                return False  # the term ended: stop this kazoo watch
            self._events.put(_Event(kind, term, group, name, list(children)))
            return None

        self.zk.watch_children(path, callback)  # type: ignore[arg-type]

    def _new_watch(self, kind: str) -> Callable[[WatchEvent], None]:
        """A one-shot watch callback for this term: on every group's ``ids`` (``members``), on every command written
        (``ack``).  One object per kind, so that kazoo keeps one watcher per path however often it is re-read."""
        term = self._term_no

        def callback(event: WatchEvent) -> None:
            if term == self._term_no:
                self._events.put(_Event(kind, term, name=event.path, data=event if kind == "ack" else event.kind))

        return callback

    def _watch_topic(self, topic: str) -> None:
        term = self._term_no

        def callback(data: bytes | None, _stat: Stat | None) -> bool | None:
            if term != self._term_no:
                return False
            self._events.put(_Event("topic", term, name=topic, data=data))
            return None

        self.zk.watch_data(paths.topic(topic), callback)  # type: ignore[arg-type]

    # --- worker -------------------------------------------------------------------------------------------------

    #: events handled in one turn of the worker before it lists changed groups and starts queued rebalances
    DRAIN = 1000

    def _run(self) -> None:
        """The worker: handle every queued event (up to :attr:`DRAIN`), fire due timers, list the groups whose
        members changed (one pipelined burst for all of them), then start queued rebalances."""
        self._events.put(_Event("elect"))
        while True:
            timeout = None
            if self._timers:
                timeout = max(0.0, self._timers[0][0] - self.clock())
            events: list[_Event] = []
            with contextlib.suppress(queue.Empty):
                events.append(self._events.get(timeout=timeout))
                while len(events) < self.DRAIN:
                    events.append(self._events.get_nowait())
            for event in events:
                if event.kind == "stop":
                    self._resign("broker stopping")
                    return
                self._step(self._dispatch, event)
            self._step(self._fire_timers)
            self._step(self._refresh_members)
            self._step(self._pump)

    def _step(self, action: Callable[..., None], event: _Event | None = None) -> None:
        """Run one step of the worker; a fence ends the term, a ZooKeeper error retries a little later."""
        try:
            if event is None:
                action()
            else:
                action(event)
        except FencedError as e:
            self._resign(f"fenced: {e}")
            self._schedule(0.0, self._elect)  # which hands back our node if it is still there (seat.py)
        except ZkError as e:
            # Connection trouble mid-step: the state listener drives recovery.  The event is handled again a
            # little later (dropped then if its term has ended), so no watch notification is lost; groups still
            # to be listed or examined stay queued, and the timer wakes the worker to try again.
            log.warning("coordinator %d: %s", self.broker_id, e)
            self._schedule(0.5, self._redeliver(event))
        except ZkCoordError as e:
            # Anything else the project raises (bad data no codec expected, ...): this step is abandoned and said
            # so; the worker goes on, so the term and every other group are unaffected (S7).
            log.warning("coordinator %d: step failed: %s", self.broker_id, e)
            self._journal.emit(
                "input.rejected", what="coordinator step", path=event.kind if event else "", reason=str(e)
            )

    def _redeliver(self, event: _Event | None) -> Callable[[], None]:
        def again() -> None:
            if event is not None and event.kind not in ("state", "elect"):
                self._events.put(event)

        return again

    def _dispatch(self, event: _Event) -> None:
        if event.kind == "state":
            self._on_state(event.data)
            return
        if event.kind == "elect":
            self._elect()
            return
        if event.kind == "seat":
            self._on_seat(*event.data)
            return
        if self.role is not Role.COORDINATOR or event.term != self._term_no:
            return  # an event of an earlier term, or while following
        if event.kind == "topics":
            self._on_topics(event.data)
        elif event.kind == "topic":
            self._on_topic(event.name, event.data)
        elif event.kind == "groups":
            self._on_groups(event.data)
        elif event.kind == "members":
            self._on_members_watch(event.name, event.data)
        elif event.kind == "legacy-members":
            self.request(event.group, "zk-client membership change")
        elif event.kind == "ack" and self.rebalancer is not None:
            self.rebalancer.on_ack(event.data)

    def _schedule(self, delay: float, action: Callable[[], None]) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (self.clock() + delay, self._timer_seq, action))

    def _fire_timers(self) -> None:
        now = self.clock()
        while self._timers and self._timers[0][0] <= now:
            _, _, action = heapq.heappop(self._timers)
            action()

    # --- connection states and election -------------------------------------------------------------------------

    def _on_state(self, state: ConnState) -> None:
        # (The hosting broker journals the connection states; one line per change is enough.)
        if state is ConnState.SUSPENDED:
            # Stop issuing commands until we know whether the session survived (Curator's advice).
            self._suspended = True
        elif state is ConnState.LOST:
            self._suspended = True
            if self.role is Role.COORDINATOR and not self.config.unsafe_no_fencing:
                self._resign("session lost")
        else:
            self._suspended = False
            if self.role is Role.COORDINATOR and self.rebalancer is not None:
                new_session = self.term is not None and self.zk.session_id != self.term.session_id
                if new_session and not self.config.unsafe_no_fencing:
                    self._resign("new session")
                else:
                    # Unfenced (the demo's contrast), a coordinator never learns it was deposed: it carries on in
                    # its new session, which is exactly the trap of kazoo's Election recipe.
                    self.rebalancer.on_reconnected()
            if self.role is Role.FOLLOWER:
                self._elect()

    def _on_seat(self, data: bytes | None, stat: Stat | None) -> None:
        """The coordinator znode changed: resign if our term's node was tampered with, elect if it has no holder."""
        assert self._seat is not None  # noqa: S101 (set by start, before the watch)
        verdict = self._seat.judge(self.term if self.role is Role.COORDINATOR else None, data, stat)
        if verdict is Verdict.RESIGN:
            self._resign("fenced: /consumers/coordinator was changed or replaced by hand")
        if verdict is not Verdict.NOTHING:
            self._elect()

    def _elect(self) -> None:
        """Try the election (worker); seat.py deletes a left-over node first and reports what blocks the election."""
        if self.role is not Role.FOLLOWER or self._suspended or self._seat is None:
            return
        seat = self._seat
        term, retry_s = seat.attempt(self.wall_ms())
        if retry_s is not None:
            attempt = seat.attempts  # moot once another attempt was made meanwhile (a watch, a new session)
            self._schedule(retry_s, lambda: self._elect() if seat.attempts == attempt else None)
        if term is not None:
            self._become_coordinator(term)

    def _become_coordinator(self, term: Term) -> None:
        self._term_no += 1
        self._members_watch = self._new_watch("members")
        self.term = term
        self.role = Role.COORDINATOR
        self._journal.emit(
            "coordinator.elected", broker=self.broker_id, epoch=term.epoch, session=f"{term.session_id:#x}"
        )
        log.info("broker %d is the coordinator, epoch %d", self.broker_id, term.epoch)
        fault_point("coordinator.elected", self._journal)
        fence = Fence(self.zk, term, unsafe=self.config.unsafe_no_fencing)
        self.rebalancer = Rebalancer(
            self.zk,
            PhaseWriter(fence, self.config.batch_size),
            self.config,
            self._journal,
            schedule=self._schedule_group,
            topics=lambda: self._topics,
            ack_watch=self._new_watch("ack"),
            member_watch=self._members_watch,
            clock=self.clock,
            wall_ms=self.wall_ms,
        )
        self._startup(fence)
        self.elected.set()
        self._schedule(self.config.metrics_interval_s, self._emit_metrics)

    def _startup(self, fence: Fence) -> None:
        """Seed section A: sync, read topics and groups, request every group, register the watchers."""
        zk = self.zk
        zk.sync(paths.CONSUMERS)
        for path in paths.COMMON_PATHS:
            fence.ensure(path)
        self._watch_children("topics", paths.BROKER_TOPICS)
        self._watch_children("groups", paths.GROUPS)

    def _resign(self, reason: str) -> None:
        if self.role is not Role.COORDINATOR:
            return
        epoch = self.term.epoch if self.term else None
        self._journal.emit("coordinator.resigned", broker=self.broker_id, epoch=epoch, reason=reason)
        log.warning("broker %d resigns as coordinator (epoch %s): %s", self.broker_id, epoch, reason)
        # handleNewSession: forget everything of the term; its watches end at their next call.
        self._term_no += 1
        self.role = Role.FOLLOWER
        self.term = None
        self.rebalancer = None
        self.elected.clear()
        self._timers.clear()
        self._topics.clear()
        self._subs.clear()
        self._groups.clear()
        self._groups_listed = False
        self._legacy_watched.clear()
        self._pending.clear()
        self._order.clear()
        self._member_ids.clear()
        self._relist.clear()
        self._members_watch = None

    # --- watchers (seed section C) ------------------------------------------------------------------------------

    def _on_topics(self, children: list[str]) -> None:
        # Read the partition counts of new topics now, before any group is planned against them: a count of 0
        # would make the necessity check strip every partition of the topic from its groups (and put them back
        # once the data watch reported the real count).
        new = sorted(set(children) - set(self._topics))
        topic_paths = [paths.topic(t) for t in new]
        for topic, got in zip(new, self.zk.get_many(topic_paths), strict=True):
            count = self._topics[topic] = 0 if got is None else self._follow(topic, 0, got[0])
            self._watch_topic(topic)
            if count and self._groups_listed:
                for group in self._interested(topic):
                    self.request(group, f"new topic: {topic}")
        for topic in set(self._topics) - set(children):
            self._on_topic(topic, None)

    def _follow(self, topic: str, known: int, data: bytes) -> int:
        change = follow_partition_count(known, data, paths.topic(topic))  # never fewer than known
        if change.refused is not None:
            self._journal.emit("input.rejected", what="topic", path=paths.topic(topic), reason=change.refused)
        return change.count

    def _on_topic(self, topic: str, data: bytes | None) -> None:
        if data is None:  # deleted: its groups rebalance without it now, not at their next change
            for group in self._interested(topic) if self._topics.pop(topic, 0) else []:
                self.request(group, f"topic deleted: {topic}")
            return
        count = self._follow(topic, self._topics.get(topic, 0), data)
        if count == self._topics.get(topic):
            return
        trigger = "partitions added" if self._topics.get(topic) else "new topic"
        self._topics[topic] = count
        for group in self._interested(topic):
            self.request(group, f"{trigger}: {topic}")

    def _interested(self, topic: str) -> list[str]:
        out = []
        for group, regs in self._subs.items():
            for reg in regs:
                hit = topic in reg.subscription if reg.pattern is Pattern.STATIC else matches(reg, topic)
                if hit:
                    out.append(group)
                    break
        return sorted(out)

    def _on_groups(self, children: list[str]) -> None:
        """New groups: list (and watch) their members in one burst, then queue each for examination."""
        new = sorted(set(children) - self._groups)
        if new:
            self._list_members(new)
        trigger = "new group" if self._groups_listed else "coordinator startup"
        for group in new:
            self._groups.add(group)
            self.request(group, trigger)
        self._groups_listed = True

    def _list_members(self, groups: list[str]) -> dict[str, Listing]:
        """List ``groups``' members in one pipelined burst, each listing re-arming the one-shot members watch.

        A group without an ``ids`` node gets one (a fenced write) and is listed again, so it is watched too.
        :raises ZkError: the burst failed (the caller's event is handled again later).
        """
        watch = self._members_watch
        if watch is None:  # not coordinating
            return {}
        listings = self.zk.children_stat_many([paths.group_ids(g) for g in groups], watch=watch)
        out: dict[str, Listing] = {}
        missing = []
        for group, got in zip(groups, listings, strict=True):
            if got is None:
                missing.append(group)
            else:
                out[group] = listing(got)
        fence = self.rebalancer.writer.fence if self.rebalancer else None
        if missing and fence is not None:
            for group in missing:
                fence.ensure(paths.group_ids(group))
            again = self.zk.children_stat_many([paths.group_ids(g) for g in missing], watch=watch)
            out.update((g, listing(c)) for g, c in zip(missing, again, strict=True) if c is not None)
        # Only a listing made under an armed watch stands for the group's members until the watch fires.
        for group in groups:
            if group in out:
                self._member_ids[group] = out[group]
            else:
                self._member_ids.pop(group, None)
        return out

    def _on_members_watch(self, path: str, kind: WatchKind) -> None:
        """A group's members watch fired: list the group again (with the other groups of this turn)."""
        group = paths.group_of_ids(path) or paths.group_of_member(path)  # a watched registration too
        if self.rebalancer is not None:
            forget_member(self.rebalancer.members, path)  # changed in place, perhaps: read it again
        if group is None or group not in self._groups:
            return
        self._relist.add(group)

    def _refresh_members(self) -> None:
        """List (and watch again) every group whose members watch fired, in one burst; each is handled as a
        membership change (after a reset too: see below)."""
        if not self._relist or self.role is not Role.COORDINATOR or self._suspended:
            return
        groups = sorted(self._relist)
        listings = self._list_members(groups)
        for group in groups:
            # A watch that was only reset (a connection loss) is handled as a change too: a member may have
            # re-registered under the same id meanwhile (a new incarnation, same names), which the necessity check
            # sees and a comparison of names would not.  The examination is cheap (members and state).
            children = listings.get(group, ([], -1))[0]
            self._on_members(group, children)
            self._relist.discard(group)  # only once handled: a failed step leaves the group to be listed again

    def _on_members(self, group: str, children: list[str]) -> None:
        """Membership changed (seed C): abort an attempt a member of which left, and queue the group.  (Its member
        registrations, which route topic changes, are refreshed when the group is examined.)"""
        if self.rebalancer is not None and self.rebalancer.on_members(group, children):
            self.request(group, "member left mid-rebalance")
            return
        self.request(group, "membership change")

    # --- the request queue --------------------------------------------------------------------------------------

    def request(self, group: str, trigger: str) -> None:
        """Ask for a rebalance of ``group`` (worker thread).  A group already requested is not queued twice."""
        if group in self._pending:
            return
        self._pending[group] = (trigger, self.clock())
        self._order.append(group)
        self._journal.emit("rebalance.requested", group=group, trigger=trigger)

    def _schedule_group(self, delay: float, group: str, token: int) -> None:
        rebalancer = self.rebalancer

        def fire() -> None:
            if self.rebalancer is not rebalancer or rebalancer is None:
                return
            if token == -1:
                self.request(group, "retry")
            else:
                rebalancer.on_timer(group, token)

        self._schedule(delay, fire)

    def _pump(self) -> None:
        """Examine queued groups while there is room: up to ``examine_batch`` idle groups are read together
        (pipelined across groups), then each is planned and, if needed, its rebalance started.  A group already
        mid-rebalance waits for its turn; one needing a rebalance when there is no room goes back to the front of
        the queue.  If more could run, a zero-delay timer brings the worker back after the events queued meanwhile.
        """
        rebalancer = self.rebalancer
        if self.role is not Role.COORDINATOR or rebalancer is None or self._suspended:
            return
        if len(rebalancer.active) >= self.config.max_concurrent:
            return
        batch = self._take_batch(rebalancer)
        if not batch:
            return
        reads = read_groups(
            self.zk, batch, self._member_ids, rebalancer.registries, rebalancer.members, watch=self._members_watch
        )
        deferred: list[str] = []
        todo = deque(batch)
        try:
            while todo:
                group = todo[0]
                trigger, requested_at = self._pending[group]
                room = len(rebalancer.active) < self.config.max_concurrent
                begun = rebalancer.begin(group, trigger, requested_at, reads[group], room=room)
                todo.popleft()
                if begun is Begun.DEFERRED:
                    deferred.append(group)
                    continue
                del self._pending[group]
                if group in rebalancer.registrations:
                    self._subs[group] = rebalancer.registrations[group]
                if group in rebalancer.migrating and group not in self._legacy_watched:
                    # A migrating group's zk-client members change its assignment too (docs/migration.md).
                    self._legacy_watched.add(group)
                    self._watch_children("legacy-members", legacy_paths.ids(group), group=group)
        finally:
            # Whatever was not examined (no room, or a step raised) keeps its place at the front of the queue.
            self._order.extendleft(reversed([*deferred, *todo]))
        if len(deferred) < len(batch) and self._order and len(rebalancer.active) < self.config.max_concurrent:
            self._schedule(0.0, lambda: None)

    def _take_batch(self, rebalancer: Rebalancer) -> list[str]:
        """Take up to ``examine_batch`` idle groups off the queue, in order."""
        batch: list[str] = []
        for _ in range(len(self._order)):
            if len(batch) >= self.config.examine_batch:
                break
            group = self._order.popleft()
            if rebalancer.idle(group):
                batch.append(group)
            else:
                self._order.append(group)  # runs again after the current attempt: exactly one more
        return batch

    def _emit_metrics(self) -> None:
        if self.rebalancer is None:
            return
        self._journal.emit("coordinator.metrics", epoch=self.term.epoch if self.term else None, **self.metrics())
        self._schedule(self.config.metrics_interval_s, self._emit_metrics)

    # --- introspection (any thread; for tests and the CLI) -------------------------------------------------------

    def metrics(self) -> Mapping[str, object]:
        rebalancer = self.rebalancer
        if rebalancer is None:
            return {}
        by_state: dict[str, int] = {}
        for state in rebalancer.group_state.values():
            by_state[state] = by_state.get(state, 0) + 1
        return rebalancer.metrics.snapshot(by_state)
