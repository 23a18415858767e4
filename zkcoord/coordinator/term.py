"""The coordinator's term: connection states, the election, taking over, and resigning.

:class:`TermKeeper` is owned by the :class:`~zkcoord.coordinator.core.Coordinator` and changes the owner's term state
(:class:`TermHost`: its role, term, rebalancer, term number); the election itself is :mod:`.election` (the epoch,
the fence) and :mod:`.seat` (the coordinator znode and what blocks the election).

Threads: every method runs on the coordinator's worker thread (the connection states and the coordinator znode's
changes reach it as queued events).  ``elect`` and ``become_coordinator`` call ZooKeeper; nothing else here blocks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from zkcoord.coordinator.commands import PhaseWriter
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.election import Fence, Term
from zkcoord.coordinator.events import Role
from zkcoord.coordinator.metrics import Metrics
from zkcoord.coordinator.rebalancer import Rebalancer
from zkcoord.coordinator.seat import Seat, Verdict
from zkcoord.coordinator.watchers import Watchers
from zkcoord.layout import paths
from zkcoord.runtime.faults import fault_point
from zkcoord.runtime.journal import Journal
from zkcoord.zk import ConnState, Stat, ZkClient

log = logging.getLogger(__name__)


class TermHost(Protocol):
    """What the term keeper reads and changes of the coordinator that owns it."""

    broker_id: int
    config: CoordinatorConfig
    clock: Callable[[], float]
    wall_ms: Callable[[], int]
    role: Role
    term: Term | None
    rebalancer: Rebalancer | None
    #: set while coordinating (tests and the CLI wait on it)
    elected: threading.Event
    #: the current term's number: every term-scoped watch compares it (on kazoo's threads too)
    term_no: int
    #: a connection is suspended or lost: no election and no command until it is back
    suspended: bool
    seat: Seat | None
    #: the coordinator's counters, which outlive its terms
    metrics: Metrics

    @property
    def zk(self) -> ZkClient: ...

    @property
    def journal(self) -> Journal: ...

    def schedule(self, delay: float, action: Callable[[], None]) -> None:
        """Run ``action`` on the worker ``delay`` s from now."""

    def schedule_group(self, delay: float, group: str, token: int) -> None:
        """The rebalancer's timer (:data:`~zkcoord.coordinator.rebalancer.Schedule`)."""

    def emit_metrics(self) -> None:
        """Journal the metrics now, then every ``metrics_interval_s`` while coordinating."""

    def forget_term(self) -> None:
        """End the term's number, and drop its timers, its queued requests and what its watchers saw."""


class TermKeeper:
    """Elects, takes over and resigns on behalf of its owner (see the module's roles diagram in :mod:`.core`)."""

    def __init__(self, host: TermHost, watchers: Watchers) -> None:
        self._host = host
        self._watchers = watchers
        #: no election of ours before this (host clock): the backoff after a crashed term, during which a standby may
        #: take the seat we handed back
        self.elect_not_before = 0.0

    def on_state(self, state: ConnState) -> None:
        """A connection state change: suspend, resign on a lost or new session (fenced), or elect when back."""
        host = self._host
        # (The hosting broker journals the connection states; one line per change is enough.)
        if state is ConnState.SUSPENDED:
            # Stop issuing commands until we know whether the session survived (Curator's advice).
            host.suspended = True
        elif state is ConnState.LOST:
            host.suspended = True
            if host.role is Role.COORDINATOR and not host.config.unsafe_no_fencing:
                self.resign("session lost")
        else:
            host.suspended = False
            if host.role is Role.COORDINATOR and host.rebalancer is not None:
                new_session = host.term is not None and host.zk.session_id != host.term.session_id
                if new_session and not host.config.unsafe_no_fencing:
                    self.resign("new session")
                else:
                    # Unfenced (the demo's contrast), a coordinator never learns it was deposed: it carries on in
                    # its new session, which is exactly the trap of kazoo's Election recipe.
                    host.rebalancer.on_reconnected()
            if host.role is Role.FOLLOWER:
                self.elect()

    def on_seat(self, data: bytes | None, stat: Stat | None) -> None:
        """The coordinator znode changed: resign if our term's node was tampered with, elect if it has no holder."""
        host = self._host
        assert host.seat is not None  # noqa: S101 (set by start, before the watch)
        verdict = host.seat.judge(host.term if host.role is Role.COORDINATOR else None, data, stat)
        if verdict is Verdict.RESIGN:
            self.resign("fenced: /consumers/coordinator was changed or replaced by hand")
        if verdict is not Verdict.NOTHING:
            self.elect()

    def elect(self) -> None:
        """Try the election; seat.py deletes a left-over node first and reports what blocks the election."""
        host = self._host
        if host.role is not Role.FOLLOWER or host.suspended or host.seat is None:
            return
        if host.clock() < self.elect_not_before:
            return  # the crash supervisor's timer elects then
        seat = host.seat
        term, retry_s = seat.attempt(host.wall_ms())
        if retry_s is not None:
            attempt = seat.attempts  # moot once another attempt was made meanwhile (a watch, a new session)
            host.schedule(retry_s, lambda: self.elect() if seat.attempts == attempt else None)
        if term is not None:
            self._become_coordinator(term)

    def _become_coordinator(self, term: Term) -> None:
        host, watchers = self._host, self._watchers
        host.term_no += 1
        watchers.begin_term()
        host.term = term
        host.role = Role.COORDINATOR
        host.metrics.elections += 1
        journal = host.journal
        journal.emit("coordinator.elected", broker=host.broker_id, epoch=term.epoch, session=f"{term.session_id:#x}")
        log.info("broker %d is the coordinator, epoch %d", host.broker_id, term.epoch)
        fault_point("coordinator.elected", journal)
        fence = Fence(host.zk, term, unsafe=host.config.unsafe_no_fencing)
        host.rebalancer = Rebalancer(
            host.zk,
            PhaseWriter(fence, host.config.batch_size),
            host.config,
            journal,
            schedule=host.schedule_group,
            topics=lambda: watchers.topics,
            partition_racks=lambda: watchers.partition_racks,
            group_config=watchers.configs.get,
            ack_watch=watchers.new_watch("ack"),
            member_watch=watchers.members_watch,
            metrics=host.metrics,
            clock=host.clock,
            wall_ms=host.wall_ms,
        )
        self._startup(fence)
        host.elected.set()
        host.schedule(host.config.metrics_interval_s, host.emit_metrics)

    def _startup(self, fence: Fence) -> None:
        """Seed section A: sync, read topics and groups, request every group, register the watchers.  The groups'
        configs are read first, so that no group is planned without its own."""
        zk = self._host.zk
        zk.sync(paths.CONSUMERS)
        for path in paths.COMMON_PATHS:
            fence.ensure(path)
        self._watchers.configs.load()
        self._watchers.watch_roots()

    def resign(self, reason: str) -> None:
        """End our term (if we hold one): journal why, and forget everything of it."""
        host = self._host
        if host.role is not Role.COORDINATOR:
            return
        epoch = host.term.epoch if host.term else None
        host.journal.emit("coordinator.resigned", broker=host.broker_id, epoch=epoch, reason=reason)
        log.warning("broker %d resigns as coordinator (epoch %s): %s", host.broker_id, epoch, reason)
        # handleNewSession: forget everything of the term; its watches end at their next call.
        host.forget_term()
        host.role = Role.FOLLOWER
        host.term = None
        host.rebalancer = None
        host.elected.clear()
