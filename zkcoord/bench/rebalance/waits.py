"""Waiting on a ``zkcoord bench rebalance`` run's journals: read them as they grow into each group's
:class:`~zkcoord.bench.rebalance.timeline.GroupTracker`, and wait until the groups are settled, quiet, or stuck.

:class:`JournalWaits` is owned by :class:`zkcoord.bench.rebalance.run.RebalanceBench` and used on the driver's one
thread; every wait polls the journals every :data:`POLL_S` and ends by its deadline.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TypeVar

from zkcoord.bench.common import BenchError
from zkcoord.bench.rebalance.config import BenchConfig, Progress
from zkcoord.bench.rebalance.timeline import COORDINATED, LEGACY, GroupTracker, JournalTail

#: how long a group must stay without new events to count as quiet (before a change, and after one settled)
QUIET_S = 0.3
#: how often the driver reads the journals
POLL_S = 0.05
#: the quiet window before each change in which the background request rate is measured
BACKGROUND_S = 0.5

T = TypeVar("T")
#: ``zkcoord broker``'s default ``--rebalance-timeout``: the longest a coordinator phase waits in silence
COORDINATOR_PHASE_TIMEOUT_S = 10.0


class JournalWaits:
    """The groups being measured (:attr:`trackers`, replaced for each protocol), when each last journalled, and the
    waits on them."""

    def __init__(self, config: BenchConfig, say: Progress) -> None:
        self.config = config
        self.say = say
        self.tail: JournalTail | None = None
        self.trackers: dict[str, GroupTracker] = {}
        self.last_event_at: dict[str, float] = {}

    @property
    def journal(self) -> JournalTail:
        """The run's journals, read incrementally.  :raises BenchError: not set up yet."""
        if self.tail is None:
            raise BenchError("the run's journal directory is not set up yet")
        return self.tail

    def pump(self) -> int:
        """Read what the journals gained into the trackers of their groups; return how many events were theirs."""
        n = 0
        now = time.monotonic()
        for event in self.journal.read():
            group = event.group
            tracker = self.trackers.get(group) if group is not None else None
            if tracker is not None:
                tracker.apply(event)
                self.last_event_at[tracker.name] = now
                n += 1
        return n

    def quiet_for(self, seconds: float) -> bool:
        """Whether no tracked group has journalled anything for ``seconds``."""
        now = time.monotonic()
        return all(now - self.last_event_at.get(name, 0.0) >= seconds for name in self.trackers)

    def arm(self) -> None:
        """A change was triggered: arm every tracker, and count each group's silence from now."""
        now = time.monotonic()
        for name, tracker in self.trackers.items():
            tracker.arm()
            self.last_event_at[name] = now

    def stuck_s(self) -> float:
        """How long a group may stay silent while not settled before it counts as stuck: nothing happens in it until
        the next trigger (a zk-client member that used up its retries, a coordinator rebalance that failed).  The
        longest silence of a live rebalance is a zk-client backoff, or a coordinator phase waiting for its timeout."""
        protocols = {t.protocol for t in self.trackers.values()}
        legacy = self.config.legacy_backoff_s + 5.0 if LEGACY in protocols else 0.0
        coordinated = COORDINATOR_PHASE_TIMEOUT_S + 2.0 if protocols & set(COORDINATED) else 0.0
        return max(legacy, coordinated)

    def wait_settled(self, deadline: float, report_every: float | None = None) -> bool:
        """Until every group is settled and has been quiet for :data:`QUIET_S`; False at ``deadline``, or as soon as
        a group not settled has been silent for :meth:`stuck_s`."""
        next_report = time.monotonic() + (report_every or math.inf)
        stuck = self.stuck_s()
        while True:
            self.pump()
            settled = all(t.settled() for t in self.trackers.values())
            if settled and self.quiet_for(QUIET_S):
                return True
            now = time.monotonic()
            if now >= deadline or (not settled and self.quiet_for(stuck)):
                return False
            if now >= next_report:
                next_report = now + (report_every or math.inf)
                for t in self.trackers.values():
                    self.say(f"  {t.name}: {t.progress()}")
            time.sleep(POLL_S)

    def until(self, done: Callable[[], bool], deadline: float) -> bool:
        """Read the journals until ``done()`` (checked after each read), every :data:`POLL_S` (journal files give
        no notification); False at ``deadline`` (monotonic seconds)."""
        while True:
            self.pump()
            if done():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)

    def wait_quiet(self, seconds: float, timeout: float) -> None:
        """Until every tracked group has been quiet for ``seconds``, at most ``timeout``."""
        self.until(lambda: self.quiet_for(seconds), time.monotonic() + timeout)

    def background(self, reading: Callable[[], T]) -> tuple[T, T]:
        """The readings that bracket the background window before a change: once the groups are quiet, one reading,
        then another :data:`BACKGROUND_S` later (the request rate of a quiet cluster is a rate over time: a window,
        not a condition to wait for).  The change's own usage subtracts that rate."""
        self.wait_quiet(QUIET_S, 30.0)
        quiet = reading()
        time.sleep(BACKGROUND_S)
        self.pump()
        return quiet, reading()

    def wait_quiet_journal(self, seconds: float, timeout: float) -> None:
        """After a protocol's workers stopped: until no process journals anything for ``seconds`` (the coordinator
        rebalancing groups whose members left), at most ``timeout``."""
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < seconds:
            if self.journal.read():
                last = time.monotonic()
            time.sleep(0.05)
