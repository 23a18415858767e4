"""What the command thread leaves for the application's thread: stops to finish, assignments and losses to announce.

Kafka's contract (``ConsumerRebalanceListener``): rebalance callbacks run on the application's thread, inside
``poll()``, between batches, and the rebalance waits for them.  Here the command thread applies a stop-fetcher at
once -- fetching of the revoked partitions stops there and then (S2 and the lease do not change) -- but leaves the
rest of it *parked* (:class:`ParkedStop`): the application's next ``poll()`` commits what the commit policy calls for,
runs ``on_partitions_revoked`` and posts ``revoke-done``; only then does the command thread write the stop's
transaction (the hand-over's owner znodes, the acknowledgement) and release the partitions.  Assignments and losses
are announced the same way (:class:`Announcement`), in the order they happened.

Threads: the command thread calls :meth:`Handoff.park`, :meth:`Handoff.announce`, :meth:`Handoff.cancel`; the
application's thread (the one that calls ``poll()`` or ``close()``) calls :meth:`Handoff.next_due` and the poll
timer's methods; the heartbeat thread calls :meth:`Handoff.overdue`.  One lock guards everything; nothing here calls
out while holding it.  Pure: ``threading`` and the clock only.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from zkcoord.consumer.records import TopicPartition
from zkcoord.layout.commands import Command


@dataclass(slots=True)
class ParkedStop:
    """A stop-fetcher applied up to its end: fetching stopped, the claims still held (so that a commit inside
    ``on_partitions_revoked`` passes the owner check), not acknowledged."""

    name: str
    path: str
    command: Command
    #: the partitions revoked (the callback's argument)
    partitions: list[TopicPartition]
    #: the position of each, as ``poll()`` left it: the offset of the first record not handed out
    positions: dict[TopicPartition, int]
    #: partition -> its new owner's thread, written in the stop's transaction (a hand-over)
    handover: dict[TopicPartition, str]
    #: an eager stop (everything; the callback runs even with nothing revoked, as Kafka's eager protocol does)
    eager: bool
    #: when the command thread parked it (its clock)
    parked_at: float
    #: partition -> the thread that fetched it (``Consumer.assignment()`` shows it until the callback returned)
    threads: dict[TopicPartition, str] = field(default_factory=dict)
    #: the application's thread has taken it (its callback runs or ran): a loss no longer announces its partitions
    taken: bool = False
    #: the session ended before it was finished: the application hears a loss instead
    cancelled: bool = False
    #: positions the auto-commit before the callback found committed already: their last commit's only question
    #: (is the offset znode still there?) is a check in the stop's own transaction, not a request before it
    verify: dict[TopicPartition, int] = field(default_factory=dict)


class Change(Enum):
    """What an :class:`Announcement` tells the application."""

    ASSIGNED = "assigned"
    #: partitions stopped outside a stop-fetcher (a start that found partitions no longer ours)
    REVOKED = "revoked"
    #: partitions taken away without a chance to commit (session lost, poll interval exceeded)
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Announcement:
    """``applied`` (an assignment's): set by the command thread once the fetcher holds the partitions; the callback
    waits for it, so that a ``seek()`` inside ``on_partitions_assigned`` finds them assigned (announced first, fetched
    second: see :meth:`zkcoord.consumer.starting.Starter._claim_and_fetch`)."""

    change: Change
    partitions: list[TopicPartition]
    applied: threading.Event | None = None


Due = ParkedStop | Announcement


@dataclass
class Handoff:
    """The queue of what the application's thread must do next, the wake-up of its ``poll()``, and the poll timer
    (KIP-62).  See the module docstring for threads."""

    clock: Callable[[], float]
    #: makes a ``poll()`` blocked on data return (the fetcher's wakeup); set by the consumer before use
    wake: Callable[[], None] = lambda: None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _due: deque[Due] = field(default_factory=deque)
    _woken: bool = False
    #: held by the command thread while it takes partitions out of the fetcher and parks them, and by ``commit()``
    #: while it reads the fetcher's positions and the parked stops' (so a partition is always in one of the two)
    moving: threading.Lock = field(default_factory=threading.Lock)
    #: when ``poll()`` was last entered or stopped waiting for data; whether it waits for data now
    _poll_mark: float | None = None
    _waiting: bool = False
    #: the member left the group for exceeding its poll interval: the next ``poll()`` asks to register again
    rejoin_due: bool = False

    # --- the command thread -----------------------------------------------------------------------------------

    def park(self, stop: ParkedStop) -> None:
        self._put(stop)

    def announce(
        self, change: Change, partitions: list[TopicPartition], applied: threading.Event | None = None
    ) -> None:
        self._put(Announcement(change, sorted(partitions), applied))

    def _put(self, item: Due) -> None:
        with self._lock:
            self._due.append(item)
            self._woken = True
        self.wake()

    def cancel(self, stop: ParkedStop) -> list[TopicPartition]:
        """The session ended while ``stop`` was parked: it will not be finished.  Return its partitions unless the
        application's thread has taken it already (then it has heard of them)."""
        with self._lock:
            stop.cancelled = True
            return [] if stop.taken else list(stop.partitions)

    # --- the application's thread ---------------------------------------------------------------------------

    def next_due(self, *, announcements_only: bool = False) -> Due | None:
        """Take the next thing to do, in order (``announcements_only``: only announcements, up to the first parked
        stop: the records just taken may belong to an assignment, and no stop may run before the application has
        processed them).  A parked stop is marked taken."""
        with self._lock:
            while self._due:
                head = self._due[0]
                if isinstance(head, ParkedStop):
                    if head.cancelled:
                        self._due.popleft()
                        continue
                    if announcements_only:
                        return None
                    head.taken = True
                return self._due.popleft()
            return None

    def discard_announcements(self) -> None:
        """Drop what is only to be announced, keep parked stops (``close()``: the consumer is leaving)."""
        with self._lock:
            self._due = deque(item for item in self._due if isinstance(item, ParkedStop))

    def parked(self) -> list[ParkedStop]:
        """The stops waiting for the application, not cancelled: their partitions are still ours until it ran their
        callback (a commit covers them, ``assignment()`` shows them)."""
        with self._lock:
            return [item for item in self._due if isinstance(item, ParkedStop) and not item.cancelled]

    def pending(self) -> bool:
        with self._lock:
            return bool(self._due)

    def take_woken(self) -> bool:
        """Whether something was posted since the last call (and clear it)."""
        with self._lock:
            woken, self._woken = self._woken, False
            return woken

    def entered_poll(self) -> None:
        with self._lock:
            self._poll_mark = self.clock()

    def waiting(self, now_waiting: bool) -> None:
        """``poll()`` starts (True) or stops (False) waiting for data: time spent waiting is not time away."""
        with self._lock:
            self._waiting = now_waiting
            self._poll_mark = self.clock()

    # --- the heartbeat thread -------------------------------------------------------------------------------

    def overdue(self, interval_s: float) -> float | None:
        """Seconds since the application last called ``poll()`` if that is more than ``interval_s`` (KIP-62's
        ``max.poll.interval.ms``), else None.  Time blocked inside ``poll()`` waiting for data does not count; time
        in the application's own code, its callbacks included, does.  None before the first ``poll()``."""
        with self._lock:
            if self._waiting or self._poll_mark is None:
                return None
            away = self.clock() - self._poll_mark
            return away if away > interval_s else None

    def forget_poll(self) -> None:
        """The member left for exceeding its interval: the timer starts again at the next ``poll()``."""
        with self._lock:
            self._poll_mark = None
