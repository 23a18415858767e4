"""Bounded stopping: the deadline a stop works within, and the report of what it had to leave undone.

A long-running process (``zkcoord broker``, ``zkcoord consume`` in every protocol) told to stop ends within its
shutdown timeout whatever ZooKeeper does (refusing connections, paused, gone).  In order:

1. stop fetching (nothing is read or handed out any more: safe without ZooKeeper, S6);
2. what needs ZooKeeper -- the final commit, releasing owned partitions, leaving the group, deleting the
   registration -- each ZooKeeper call waiting at most until :attr:`StopBudget.zookeeper`;
3. close the session, waiting at most until :attr:`StopBudget.session` (a client whose server is gone is abandoned,
   not waited for: ``ZkClient.stop``);
4. exit, by :attr:`StopBudget.deadline` (the command line's watchdog forces it then, should anything overrun; the
   process is gone at most :data:`EXIT_GRACE_S` after it, whatever its interpreter's exit does).

What could not be done is collected in a :class:`StopReport`: one line for the user, one ``shutdown.incomplete``
journal event, and the exit status :data:`EXIT_INCOMPLETE` instead of :data:`EXIT_CLEAN`.  Nothing skipped is unsafe:
offsets not committed are delivered again to the partition's next owner (at least once, S3); a member, owner or
broker znode not deleted stays until ZooKeeper expires the session, and until then nobody else is given what it
holds, while this process fetches nothing any more (S2).

Everything here is plain data and arithmetic on a monotonic clock: thread-safe to read, no I/O except
:meth:`StopReport.journal`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from zkcoord.errors import ConfigurationError
from zkcoord.runtime.journal import Journal

#: How long the supervisors around zkcoord wait after SIGTERM before SIGKILL: Docker Compose's default, and the
#: project's own (:meth:`zkcoord.testbed.procs.ChildProcess.terminate`, the benchmark driver's workers).  Every default
#: below keeps its :func:`hard_bound` under it, so that an orderly stop is never cut short by SIGKILL.
KILL_GRACE_S = 10.0

#: The watchdog's margin: a stopping process has exited at most this long after its deadline (the forced exit's
#: journal line, or an interpreter exit that hung, is cut short then).
EXIT_GRACE_S = 0.25

#: ``--shutdown-timeout`` defaults (seconds).  Kafka's ``close()`` waits up to 30 s; these are shorter so that an
#: orderly stop finishes before the supervisors around zkcoord give up on it (:data:`KILL_GRACE_S`).  A broker has
#: less to do (its coordinator work is not handed over: the next coordinator waits for its session anyway), so it
#: gets less.
DEFAULT_BROKER_TIMEOUT_S = 5.0
DEFAULT_CONSUMER_TIMEOUT_S = 8.0
MIN_TIMEOUT_S = 0.5
MAX_TIMEOUT_S = 600.0

#: Exit statuses of a stopped process (docs/consumer.md, docs/architecture.md).
EXIT_CLEAN = 0
#: The stop ended within its deadline but skipped something (see the ``shutdown.incomplete`` event).
EXIT_INCOMPLETE = 3
#: ZooKeeper refused the process a write its role needs (``--zk-auth``; the ``zk.refused`` event): it stopped by
#: itself, through the same bounded stop (docs/security.md, "Refused while running").
EXIT_REFUSED = 4
#: A second SIGTERM/SIGINT exits at once with ``128 + signal`` (130 for SIGINT, 143 for SIGTERM), as a shell does.
EXIT_SIGNAL_BASE = 128

# What a stop may have to skip, and what follows from it (the report's and the journal's vocabulary).
COMMIT = "commit"
#: the final commit was sent but not answered by the deadline: it may land later (a paused ZooKeeper that resumes
#: applies it) or never
COMMIT_UNKNOWN = "commit-unknown"
RELEASE = "release"
DEREGISTER = "deregister"
SESSION = "session-close"
UNFINISHED = "unfinished"

CONSEQUENCES = {
    COMMIT: "offsets not committed: records consumed since the last commit are delivered again",
    COMMIT_UNKNOWN: "offsets may not have been committed (sent, unanswered by the deadline: it may still land): "
    "records consumed since the last commit may be delivered again",
    RELEASE: "owner znodes left until the session expires",
    DEREGISTER: "registration left until the session expires (the group or cluster reacts then)",
    SESSION: "session not closed: its ephemeral znodes stay until ZooKeeper expires it",
    UNFINISHED: "the stop overran its deadline and was cut short",
}


def validate_timeout(seconds: float) -> None:
    """:raises ConfigurationError: ``seconds`` is outside ``MIN_TIMEOUT_S..MAX_TIMEOUT_S``."""
    if not MIN_TIMEOUT_S <= seconds <= MAX_TIMEOUT_S:
        raise ConfigurationError(
            f"shutdown timeout must be within {MIN_TIMEOUT_S:g}..{MAX_TIMEOUT_S:g} s, got {seconds:g}"
        )


def hard_bound(timeout_s: float) -> float:
    """How long after the stop was asked for a process with ``timeout_s`` has exited at the latest (the watchdog's
    guarantee): a supervisor must wait at least this long before SIGKILL."""
    return timeout_s + EXIT_GRACE_S


@dataclass(frozen=True, slots=True)
class Deadline:
    """A moment on a monotonic clock (``at``, in ``clock``'s seconds).  Immutable: any thread."""

    at: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        """The moment ``seconds`` from now on ``clock``."""
        return cls(clock() + seconds, clock)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - self.clock())

    def expired(self) -> bool:
        """Whether the moment has come (``remaining()`` is 0)."""
        return self.clock() >= self.at

    def earlier(self, seconds: float) -> Deadline:
        """The moment ``seconds`` before this one, on the same clock (may be in the past)."""
        return Deadline(self.at - seconds, self.clock)


@dataclass(frozen=True, slots=True)
class StopBudget:
    """The three deadlines of one stop, all measured from when it was asked for.

    ``zookeeper``: the steps that need ZooKeeper end (every call is bounded by it); ``session``: closing the session
    ends; ``deadline``: the process has exited.  The last quarter of the timeout (at most 1 s) is kept for the
    close and the exit, of which the last tenth (at most 0.3 s) for the exit alone.
    """

    timeout_s: float
    started: float
    zookeeper: Deadline
    session: Deadline
    deadline: Deadline

    @classmethod
    def start(cls, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> StopBudget:
        deadline = Deadline.after(timeout_s, clock)
        return cls(
            timeout_s=timeout_s,
            started=clock(),
            zookeeper=deadline.earlier(min(1.0, timeout_s / 4)),
            session=deadline.earlier(min(0.3, timeout_s / 10)),
            deadline=deadline,
        )

    def elapsed(self) -> float:
        """Seconds since the stop was asked for (the ``elapsed_ms`` of ``shutdown.incomplete``)."""
        return self.deadline.clock() - self.started


@dataclass
class StopReport:
    """What one stop left undone: step -> why (the error met).  Filled by the stopping code, from any thread."""

    skipped: dict[str, str] = field(default_factory=dict)
    #: partitions whose consumed position was not committed (``commit`` skipped)
    uncommitted: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def skip(self, step: str, why: object, *, uncommitted: int = 0) -> None:
        if step not in CONSEQUENCES:
            raise ValueError(f"unknown stop step {step!r}")
        with self._lock:
            self.skipped.setdefault(step, str(why))
            self.uncommitted += uncommitted

    def merge(self, other: StopReport) -> None:
        """Add what ``other`` skipped (a process stopping several consumers reports them as one); ``other`` is read
        under its own lock, then this one's taken: never both at once."""
        with other._lock:
            items = dict(other.skipped)
            uncommitted = other.uncommitted
        with self._lock:
            for step, why in items.items():
                self.skipped.setdefault(step, why)
            self.uncommitted += uncommitted

    @property
    def complete(self) -> bool:
        return not self.skipped

    @property
    def exit_code(self) -> int:
        return EXIT_CLEAN if self.complete else EXIT_INCOMPLETE

    def summary(self, timeout_s: float) -> str:
        """One line for the user: what was skipped, what follows from it, and why."""
        with self._lock:
            items = dict(self.skipped)
        if not items:
            return "stopped cleanly"
        what = "; ".join(CONSEQUENCES[step] for step in items)
        why = next(iter(items.values()))
        return f"stop incomplete within {timeout_s:g} s ({why}): {what}"

    def journal(self, journal: Journal, budget: StopBudget, **who: object) -> None:
        """Emit ``shutdown.incomplete`` (nothing when complete).  ``who``: the process's identity fields."""
        with self._lock:
            items = dict(self.skipped)
            uncommitted = self.uncommitted
        if not items:
            return
        journal.emit(
            "shutdown.incomplete",
            **who,
            skipped=sorted(items),
            reason=next(iter(items.values())),
            uncommitted=uncommitted,
            timeout_s=budget.timeout_s,
            elapsed_ms=round(budget.elapsed() * 1000),
        )
