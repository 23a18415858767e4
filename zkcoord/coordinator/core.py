"""The coordinator: election, the four watchers, the rebalance request queue, and its one worker thread.

Hosted by every broker (:class:`Coordinator` is a :class:`~zkcoord.broker.BrokerService`); exactly one broker at a
time holds a coordinator *term* (:mod:`zkcoord.coordinator.election`).  The seed's fields map as follows:

==========================  ===========================================================================
seed (002)                  here
==========================  ===========================================================================
``coordinatorElector``      :func:`~zkcoord.coordinator.election.try_elect` + a data watch on the znode
``groupsBeingRebalanced``   ``_pending`` (requested, not started) and ``Rebalancer.active`` (running)
``consumerGroupsPerTopic``  ``Watchers.subs`` (member registrations per group), queried by ``Watchers._interested``
``groupsWithWildcardTopics`` the wildcard registrations inside ``Watchers.subs``
``rebalanceRequestQ``       ``_order`` (FIFO of requested groups)
``requestHandler``          the ``coordinator-<id>`` worker thread
==========================  ===========================================================================

This module is the worker and its queues: the events (``_events``), the timers, and the rebalance requests
(``_pending``, ``_order``, examined in batches).  Two helpers owned by the :class:`Coordinator`, on the same worker
thread, do the rest: :class:`~zkcoord.coordinator.term.TermKeeper` (connection states, election, taking over,
resigning) and :class:`~zkcoord.coordinator.watchers.Watchers` (topics, groups, members: what the term watches).

Threads: kazoo's connection thread (state listener) and watch thread (watch callbacks) only put events on
``_events``; the worker thread does every ZooKeeper call.  Watches are scoped to a term: a callback of an old term
returns False, which ends the kazoo watch.

Roles (:class:`~zkcoord.coordinator.events.Role`)::

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

from zkcoord.coordinator.attempt import Begun
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.election import Term
from zkcoord.coordinator.events import Event, Role
from zkcoord.coordinator.metrics import GROUP_STATES, CoordinatorCollector, CoordinatorView, Metrics
from zkcoord.coordinator.rebalancer import Rebalancer
from zkcoord.coordinator.seat import Seat
from zkcoord.coordinator.snapshot import read_groups
from zkcoord.coordinator.term import TermKeeper
from zkcoord.coordinator.watchers import Watchers
from zkcoord.errors import AccessRefusedError, FencedError, ZkCoordError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.acl import group_of
from zkcoord.runtime.journal import Journal
from zkcoord.zk import ZkClient

log = logging.getLogger(__name__)


class Coordinator:
    """The consumer-group coordinator service of one broker.  ``start``/``stop`` are called by the broker.

    Satisfies :class:`~zkcoord.coordinator.term.TermHost` and :class:`~zkcoord.coordinator.watchers.WatcherHost`:
    its helpers read and change the state below, always on the worker thread.
    """

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
        #: the current term's number: every term-scoped watch compares it (on kazoo's threads too)
        self.term_no = 0
        #: a connection is suspended or lost: no election and no command until it is back
        self.suspended = False
        self.seat: Seat | None = None
        #: what this broker's coordinator counted since it started, across its terms
        self.metrics = Metrics()
        self._zk: ZkClient | None = None
        self._journal = Journal(None, "coordinator")
        self._events: queue.Queue[Event] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = 0
        self._crashes = 0
        self._last_crash = -float("inf")
        # the request queue (per term)
        self._pending: dict[str, tuple[str, float]] = {}
        self._order: deque[str] = deque()
        self.watchers = Watchers(self)
        self.terms = TermKeeper(self, self.watchers)

    # --- BrokerService ------------------------------------------------------------------------------------------

    def start(self, zk: ZkClient, journal: Journal) -> None:
        self._zk = zk
        self._journal = journal
        self.seat = Seat(zk, self.broker_id, journal, wake=lambda _event: self.post(Event("elect")))
        zk.add_listener(lambda state: self.post(Event("state", data=state)))
        zk.refusals.add(self._on_refused)
        # The watch first: the worker's first election attempt then happens with it in place, so a broker that
        # journals coordinator.standby is sure to hear of the coordinator's end.
        zk.watch_data(paths.COORDINATOR, self.watchers.on_coordinator_node)
        self._worker = threading.Thread(target=self._run, name=f"coordinator-{self.broker_id}", daemon=True)
        self._worker.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Resign and end the worker, waiting ``timeout`` s at most (the broker bounds its ZooKeeper calls)."""
        if self._worker is not None:
            self.post(Event("stop"))
            self._worker.join(timeout=timeout)
        self.role = Role.STOPPED

    @property
    def zk(self) -> ZkClient:
        if self._zk is None:
            raise RuntimeError("coordinator not started")
        return self._zk

    @property
    def journal(self) -> Journal:
        return self._journal

    def _on_refused(self, error: AccessRefusedError) -> None:
        """ZooKeeper refused a write (the refused thread: the worker, for any group's znode).  One group's znode:
        that group is not retried until it changes (docs/security.md, "Refused while running"); the broker journals
        every refusal, and stops on any other."""
        group, rebalancer = group_of(error.path), self.rebalancer
        if group is not None and rebalancer is not None:
            rebalancer.refused.add(group)

    def post(self, event: Event) -> None:
        """Put ``event`` on the worker's queue (any thread: kazoo's callbacks only do this)."""
        self._events.put(event)

    # --- worker -------------------------------------------------------------------------------------------------

    #: events handled in one turn of the worker before it lists changed groups and starts queued rebalances
    DRAIN = 1000

    def _run(self) -> None:
        """The worker: handle every queued event (up to :attr:`DRAIN`), fire due timers, read the group configs
        that changed, list the groups whose members changed (one pipelined burst for all of them), then start queued
        rebalances."""
        self.post(Event("elect"))
        while True:
            timeout = None
            if self._timers:
                timeout = max(0.0, self._timers[0][0] - self.clock())
            events: list[Event] = []
            with contextlib.suppress(queue.Empty):
                events.append(self._events.get(timeout=timeout))
                while len(events) < self.DRAIN:
                    events.append(self._events.get_nowait())
            for event in events:
                if event.kind == "stop":
                    self.terms.resign("broker stopping")
                    return
                self._step(self._dispatch, event)
            self._step(self._fire_timers)
            self._step(self._refresh_configs)
            self._step(self._refresh_members)
            self._step(self._pump)
            self._step(self._flush)

    def _step(self, action: Callable[..., None], event: Event | None = None) -> None:
        """Run one step of the worker; a fence ends the term, a ZooKeeper error retries a little later."""
        try:
            if event is None:
                action()
            else:
                action(event)
        except AccessRefusedError as e:
            # Not retried: the same identity is refused again.  Journalled (zk.refused) by the broker's listener, which
            # stops the broker unless the znode was one group's (then that group waits for its next change).
            log.warning("coordinator %d: %s", self.broker_id, e)
        except FencedError as e:
            self.metrics.fenced_writes += 1
            self.terms.resign(f"fenced: {e}")
            self.schedule(0.0, self.terms.elect)  # which hands back our node if it is still there (seat.py)
        except ZkError as e:
            # Connection trouble mid-step: the state listener drives recovery.  The event is handled again a
            # little later (dropped then if its term has ended), so no watch notification is lost; groups still
            # to be listed or examined stay queued, and the timer wakes the worker to try again.
            log.warning("coordinator %d: %s", self.broker_id, e)
            self.schedule(0.5, self._redeliver(event))
        except ZkCoordError as e:
            # Anything else the project raises (bad data no codec expected, ...): this step is abandoned and said
            # so; the worker goes on, so the term and every other group are unaffected (S7).
            log.warning("coordinator %d: step failed: %s", self.broker_id, e)
            self._journal.emit(
                "input.rejected", what="coordinator step", path=event.kind if event else "", reason=str(e)
            )
        except Exception as e:  # noqa: BLE001 -- the worker's supervisor: the reason is below
            self._crashed(action, event, e)

    #: the longest wait before a term ended by a crashed step is tried again (the waits double from 0.5 s)
    CRASH_BACKOFF_MAX_S = 30.0
    #: a crash this long after the previous one starts the backoff again from its first wait
    CRASH_FORGET_S = 300.0

    def _crashed(self, action: Callable[..., None], event: Event | None, error: Exception) -> None:
        """A step raised what no boundary translates (a bug, not a condition of ZooKeeper or of the data).

        Without this the worker thread would end while the broker lives on holding the coordinator's seat: no group
        would ever be rebalanced again and no standby could take over (the liveness rule of PRODUCT.md).  The term's
        memory may be half-updated, so it is not trusted: the term ends (``coordinator.resigned``) and a new one,
        rebuilt from ZooKeeper like any successor's, is tried after a backoff that doubles while crashes repeat, so a
        bug that recurs on the same data costs a journal line per attempt, not a busy loop.  The seat is handed back
        at once (its znode deleted), so a standby broker takes over during the backoff.  Safety does not depend
        on this: every write of the ended term is fenced by its epoch.  Worker thread."""
        now = self.clock()
        if now - self._last_crash > self.CRASH_FORGET_S:
            self._crashes = 0
        self._crashes, self._last_crash = self._crashes + 1, now
        delay = min(self.CRASH_BACKOFF_MAX_S, 0.5 * 2 ** (self._crashes - 1))
        step = getattr(action, "__name__", repr(action)).lstrip("_")
        log.error("coordinator %d: step %s crashed; the term ends", self.broker_id, step, exc_info=error)
        self._journal.emit(
            "coordinator.crashed",
            broker=self.broker_id,
            step=step,
            on=event.kind if event else "",
            error=f"{type(error).__name__}: {error}",
            retry_in_s=delay,
        )
        self.terms.resign(f"crashed in {step}: {type(error).__name__}")
        self.terms.elect_not_before = now + delay  # the seat's watch must not elect us back before the backoff
        if self.seat is not None:  # the seat too: a standby takes over now, not after our backoff (up to 30 s)
            self.seat.hand_back()
        self.schedule(delay, self.terms.elect)

    def _redeliver(self, event: Event | None) -> Callable[[], None]:
        def again() -> None:
            if event is not None and event.kind not in ("state", "elect"):
                self.post(event)

        return again

    def _dispatch(self, event: Event) -> None:
        if event.kind == "state":
            self.terms.on_state(event.data)
            return
        if event.kind == "elect":
            self.terms.elect()
            return
        if event.kind == "seat":
            self.terms.on_seat(*event.data)
            return
        if self.role is not Role.COORDINATOR or event.term != self.term_no:
            return  # an event of an earlier term, or while following
        if event.kind in ("topics", "topic", "brokers"):
            self.watchers.on_cluster(event)
        elif event.kind == "groups":
            self.watchers.on_groups(event.data)
        elif event.kind == "members":
            self.watchers.on_members_watch(event.name, event.data)
        elif event.kind == "legacy-members":
            self.request(event.group, "zk-client membership change")
        elif event.kind == "configs":
            self.watchers.configs.on_listing_watch()
        elif event.kind == "config":
            self.watchers.configs.on_config_watch(event.name)
        elif event.kind == "ack" and self.rebalancer is not None:
            self.rebalancer.on_ack(event.data)

    def schedule(self, delay: float, action: Callable[[], None]) -> None:
        """Run ``action`` on the worker ``delay`` s from now (worker thread; dropped when the term ends)."""
        self._timer_seq += 1
        heapq.heappush(self._timers, (self.clock() + delay, self._timer_seq, action))

    def _fire_timers(self) -> None:
        now = self.clock()
        while self._timers and self._timers[0][0] <= now:
            _, _, action = heapq.heappop(self._timers)
            action()

    def _refresh_configs(self) -> None:
        if self.role is Role.COORDINATOR and not self.suspended:
            self.watchers.configs.refresh()

    def _refresh_members(self) -> None:
        if self.role is Role.COORDINATOR and not self.suspended:
            self.watchers.refresh_members()

    def _flush(self) -> None:
        if self.role is Role.COORDINATOR and self.rebalancer is not None and not self.suspended:
            self.rebalancer.flush()

    def forget_term(self) -> None:
        """The term ended (worker): its watches end at their next call; drop its timers, requests and views."""
        self.term_no += 1
        self._timers.clear()
        self.watchers.reset()
        self._pending.clear()
        self._order.clear()

    # --- the request queue --------------------------------------------------------------------------------------

    def request(self, group: str, trigger: str) -> None:
        """Ask for a rebalance of ``group`` (worker thread).  A group already requested is not queued twice; a group
        ZooKeeper refused a write of is not retried, only examined again when it changes (members, config, topics)."""
        if group in self._pending:
            return
        if self.rebalancer is not None and group in self.rebalancer.refused:
            if trigger == "retry":
                return
            self.rebalancer.refused.discard(group)
        self._pending[group] = (trigger, self.clock())
        self._order.append(group)
        self._journal.emit("rebalance.requested", group=group, trigger=trigger)

    def schedule_group(self, delay: float, group: str, token: int) -> None:
        rebalancer = self.rebalancer

        def fire() -> None:
            if self.rebalancer is not rebalancer or rebalancer is None:
                return
            if token == -1:
                self.request(group, "retry")
            else:
                rebalancer.on_timer(group, token)

        self.schedule(delay, fire)

    def _pump(self) -> None:
        """Examine queued groups while there is room: up to ``examine_batch`` idle groups are read together
        (pipelined across groups), then each is planned and, if needed, its rebalance started.  A group already
        mid-rebalance waits for its turn; one needing a rebalance when there is no room goes back to the front of
        the queue.  If more could run, a zero-delay timer brings the worker back after the events queued meanwhile.
        """
        rebalancer = self.rebalancer
        if self.role is not Role.COORDINATOR or rebalancer is None or self.suspended:
            return
        if len(rebalancer.active) >= self.config.max_concurrent:
            return
        batch = self._take_batch(rebalancer)
        if not batch:
            return
        watchers = self.watchers
        reads = read_groups(
            self.zk, batch, watchers.member_ids, rebalancer.registries, rebalancer.members, watch=watchers.members_watch
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
                watchers.examined(group, rebalancer)
        finally:
            # Whatever was not examined (no room, or a step raised) keeps its place at the front of the queue.
            self._order.extendleft(reversed([*deferred, *todo]))
        if len(deferred) < len(batch) and self._order and len(rebalancer.active) < self.config.max_concurrent:
            self.schedule(0.0, lambda: None)

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

    def emit_metrics(self) -> None:
        if self.rebalancer is None:
            return
        epoch = self.term.epoch if self.term else None
        self._journal.emit("coordinator.metrics", epoch=epoch, **self.journal_metrics())
        self.schedule(self.config.metrics_interval_s, self.emit_metrics)

    # --- introspection (any thread; for tests, the CLI and the metrics endpoint) -------------------------------------

    def journal_metrics(self) -> Mapping[str, object]:
        """The ``coordinator.metrics`` journal event's fields ({} while not coordinating)."""
        view = self.view()
        return self.metrics.snapshot(view.groups_by_state) if view.active else {}

    def collector(self) -> CoordinatorCollector:
        """The Prometheus collector of this coordinator, for the registry its process serves."""
        return CoordinatorCollector(self.metrics, self.view)

    def view(self) -> CoordinatorView:
        """What the metrics show of this coordinator now.  Any thread: the worker replaces ``term`` and
        ``rebalancer`` whole, and the views' dicts are copied in one step (no Python code runs while CPython copies
        them, so the worker cannot change them half-way)."""
        rebalancer, term, seat = self.rebalancer, self.term, self.seat
        active = self.role is Role.COORDINATOR and rebalancer is not None and term is not None
        by_state = dict.fromkeys(GROUP_STATES, 0)
        members = rebalancing = queued = 0
        if active and rebalancer is not None:
            for state in list(rebalancer.group_state.values()):
                by_state[state] = by_state.get(state, 0) + 1
            members = sum(len(ids) for ids, _, _ in list(self.watchers.member_ids.values()))
            rebalancing, queued = len(rebalancer.active), len(self._pending)
        epoch = term.epoch if active and term is not None else seat.known if seat is not None else 0
        return CoordinatorView(active, epoch, by_state, members, rebalancing, queued)
