"""The consumer's lease on its own ZooKeeper session (safety property S6: a cut-off consumer stops).

Safety argument
---------------
ZooKeeper expires a session when the server has heard nothing from the client for the (negotiated) session
timeout.  The server measures that on its own clock from the last request or ping it received, and its expiry
queue rounds deadlines *up* to the next tick, never down.  A request the client sent at ``sent_at`` (read on the
client's monotonic clock) cannot reach the server before ``sent_at``.  So once the reply to that request arrives,
we know the server heard us at some instant at or after ``sent_at``, and the session cannot expire before
``sent_at + session_timeout``.  Only after it has expired can the coordinator see the consumer's ephemeral znode
vanish and give its partitions to another thread.

The lease is that bound, shortened: it runs until ``sent_at + duration`` with ``duration`` a fraction of the
session timeout (:func:`lease_duration`).  The consumer reads no log and hands out no record once the lease has
run out (the fetch manager's ``gate``), so a consumer that is paused or cut off from ZooKeeper has stopped before
anyone else can start on its partitions.  The margin ``session_timeout - duration`` absorbs what the bound leaves
out: the two clocks need not run at exactly the same rate; a thread that checked :meth:`Lease.valid` may be
descheduled for a while before it acts on the answer; a pause (SIGSTOP, swapping) right after a check delays the
action further.  The lease shortens that last window but cannot close it: a process can be stopped for any length
of time between a check and its use.  What such a late process can still do is bounded elsewhere: its offset
commits are fenced by the partition's owner znode (S3), so it cannot move an offset it no longer owns.

Renewals only ever move the deadline forward, and only from evidence gathered after the last invalidation: after
SUSPENDED or LOST (:meth:`Lease.invalidate`) a reply to a request sent *before* the invalidation says nothing
about the session as it is now (after LOST it is about a session that no longer exists).

Threads: :meth:`Lease.renew` and :meth:`Lease.invalidate` are called from ZooKeeper callback threads,
:meth:`Lease.valid` from fetchers and ``poll()``; all are thread-safe and never block for longer than a
short lock (``valid`` takes none).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

_NEVER = -math.inf


def lease_duration(session_timeout_s: float, fraction: float = 0.5) -> float:
    """The lease to hold for a session of ``session_timeout_s`` seconds: ``fraction`` of it.

    Use the timeout the server *negotiated* (kazoo reports it once connected; the server clamps the requested
    value into ``[2, 20]`` ticks), not the one requested.  The rest of the timeout is the safety margin: it must
    cover the difference between the client's and the server's clock rates, the scheduling delay between a
    lease check and the action that depends on it, and the time one fetch or one ``poll()`` takes after its check.
    Half the timeout (the default) leaves seconds for that at the usual timeouts of 6-30 s; a smaller fraction
    is safer and makes a consumer stop sooner on a brief disconnection.

    :raises ValueError: ``session_timeout_s`` is not positive, or ``fraction`` is not in ``(0, 1)``.
    """
    if not session_timeout_s > 0:
        raise ValueError(f"session timeout must be positive, got {session_timeout_s}")
    if not 0 < fraction < 1:
        raise ValueError(f"lease fraction must be between 0 and 1 (exclusive), got {fraction}")
    return session_timeout_s * fraction


class Lease:
    """A deadline, renewed by acknowledged ZooKeeper round trips, after which the consumer must not act.

    Starts invalid: nothing has been heard from the server yet.  See the module docstring for why it is safe.

    :param duration_s: how long a round trip keeps the lease, counted from when it was *sent*
        (:func:`lease_duration`).
    :param clock: a monotonic clock in seconds; callers stamp ``sent_at`` with :meth:`now` (the same clock).
    :raises ValueError: ``duration_s`` is not positive.
    """

    def __init__(self, duration_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not duration_s > 0:
            raise ValueError(f"lease duration must be positive, got {duration_s}")
        self.duration_s = duration_s
        self._clock = clock
        self._lock = threading.Lock()
        self._deadline = _NEVER
        self._sent_at = _NEVER  # sent_at of the round trip the deadline comes from
        self._invalidated_at = _NEVER

    def now(self) -> float:
        """The lease's clock: stamp a request with it just before sending, and pass that to :meth:`renew`."""
        return self._clock()

    def renew(self, sent_at: float) -> bool:
        """A round trip sent at ``sent_at`` was acknowledged: hold the lease until ``sent_at + duration_s``.

        Ignored (returns False) when ``sent_at`` is not later than the round trip the lease already counts from
        (replies can arrive out of order; the deadline never moves back), or not later than the last
        :meth:`invalidate` (a request sent before it proves nothing about the session afterwards).

        :returns: whether the deadline moved.
        :raises ValueError: ``sent_at`` is in the future of :meth:`now` (stamped with another clock).
        """
        now = self._clock()
        if sent_at > now:
            raise ValueError(f"sent_at {sent_at} is later than now ({now}): stamp requests with Lease.now()")
        with self._lock:
            if sent_at <= self._sent_at or sent_at <= self._invalidated_at:
                return False
            self._sent_at = sent_at
            self._deadline = sent_at + self.duration_s
            return True

    def resize(self, duration_s: float) -> None:
        """Hold each renewal for ``duration_s`` from now on (the server granted another session timeout than the
        one asked for).  A shorter lease also cuts the current deadline short.

        :raises ValueError: ``duration_s`` is not positive.
        """
        if not duration_s > 0:
            raise ValueError(f"lease duration must be positive, got {duration_s}")
        with self._lock:
            self.duration_s = duration_s
            self._deadline = min(self._deadline, self._sent_at + duration_s)

    def invalidate(self) -> None:
        """End the lease now (on SUSPENDED or LOST): :meth:`valid` is False until a round trip sent after this
        call is acknowledged.  Idempotent.
        """
        with self._lock:
            self._invalidated_at = self._clock()
            # Ends now, or when it ran out if that was earlier: the deadline stays a real instant (callers report it).
            self._deadline = min(self._deadline, self._invalidated_at)

    def valid(self) -> bool:
        """Whether the lease still holds: ``now < deadline``.  Never blocks; suitable as a fetch gate."""
        return self._clock() < self._deadline

    @property
    def deadline(self) -> float:
        """When the lease runs (or ran) out, on the lease's clock: after :meth:`invalidate`, the earlier of the
        invalidation and the previous deadline; ``-inf`` only if it was never renewed.
        """
        return self._deadline

    @property
    def sent_at(self) -> float:
        """When the round trip that the lease counts from was sent; ``-inf`` if none."""
        return self._sent_at

    def remaining(self) -> float:
        """Seconds until the lease runs out; 0.0 when it is not valid."""
        return max(0.0, self._deadline - self._clock())

    def __repr__(self) -> str:
        return f"<Lease {'valid' if self.valid() else 'expired'}, {self.remaining():.3f}s left>"


def wall_ms_at(mono: float, clock: Callable[[], float], wall_ns: Callable[[], int], *, up: bool) -> int:
    """Wall-clock milliseconds at ``clock`` time ``mono``: rounded up for a lease deadline, down for a moment records
    were handed out, so records handed out before the deadline are never journalled after it (S2's check compares
    the two).  The offset between the clocks is taken from one ``wall_ns`` reading between two ``clock`` ones (their
    midpoint; read again, up to 3 times, while the two are over 100 µs apart: a thread switch between the readings
    would shift the result by its length)."""
    for _ in range(3):
        before = clock()
        wall = wall_ns()
        after = clock()
        if after - before <= 100e-6:
            break
    ns = wall - round(((before + after) / 2 - mono) * 1e9)  # integers: a float of ~1.8e18 ns is too coarse
    return -(-ns // 1_000_000) if up else ns // 1_000_000
