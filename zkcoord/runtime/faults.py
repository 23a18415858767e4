"""Named fault points: places in the code where a scenario can stop a process exactly, every time.

A fault point is a call ``fault_point("coordinator.before_start", journal)`` at a dangerous moment (for example
after the coordinator has every stop acknowledgement and before it sends a start).  Normally it does nothing.  When
the environment variable ``ZKCOORD_FAULTS`` names it, the process acts there:

``ZKCOORD_FAULTS="coordinator.before_start=pause"``
    the process journals ``fault.injected`` and sends itself SIGSTOP; whoever runs the scenario waits as long as it
    likes (past the session timeout, while another coordinator takes over) and resumes it with SIGCONT.
``...=kill``
    the process journals and SIGKILLs itself (a crash at exactly that point).

Add ``@N`` to act only on the N-th hit (``coordinator.before_start=pause@2``).  Several points are separated by
commas.  A point fires at most once per process, so a resumed process carries on normally.

A scenario can also arm a point while the process runs: with ``ZKCOORD_FAULT_DIR`` set, a file
``<dir>/<pid>.arm`` holding ``POINT=ACTION`` arms that point for the next hit; the process renames the file to
``<pid>.fired`` before it acts, so an armed fault fires exactly once.  (A stat per fault point: they sit on rare
protocol steps, never on a hot path.)
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from zkcoord.errors import ConfigurationError
from zkcoord.runtime.journal import Journal

ENV = "ZKCOORD_FAULTS"

#: Every fault point in the code, with where it is.  ``parse`` refuses names not listed here, so a typo in a
#: scenario fails loudly instead of never firing.
POINTS: dict[str, str] = {
    "coordinator.elected": "a broker has just won the election, before it reads any group",
    "coordinator.before_stop": "a rebalance is planned, before any stop-fetcher is written",
    "coordinator.before_start": "every stop-fetcher is acknowledged, before any start-fetcher is written",
    "coordinator.before_stable": "every start-fetcher is acknowledged, before the group is marked stable",
    "coordinator.mid_handover": "a hand-over's stop- and start-fetchers are written, before any is acknowledged",
    "coordinator.mid_reconcile": "a consumer-protocol (KIP-848) round's revocations are written, before any is "
    "acknowledged",
    "consumer.classic_before_sync": "a classic-protocol leader computed its group's assignment, before it writes it",
    "consumer.after_revoke": "a consumer's on_partitions_revoked returned inside poll(), before its stop is finished",
    "admin.before_reset": "`group reset-offsets --execute` has read and planned, before its transaction is sent",
}

_ACTIONS = ("pause", "kill")


@dataclass(frozen=True, slots=True)
class FaultSpec:
    point: str
    action: str
    hit: int = 1


def parse(text: str) -> dict[str, FaultSpec]:
    """Parse a ``ZKCOORD_FAULTS`` value; raise :class:`ConfigurationError` on anything unknown or malformed."""
    specs: dict[str, FaultSpec] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        point, eq, rest = item.partition("=")
        action, at, nth = rest.partition("@")
        if not eq or point not in POINTS or action not in _ACTIONS:
            known = ", ".join(sorted(POINTS))
            raise ConfigurationError(f"bad fault spec {item!r}: expected POINT=pause|kill[@N], points: {known}")
        if at and (not nth.isdigit() or int(nth) < 1):
            raise ConfigurationError(f"bad fault spec {item!r}: @N needs a positive whole number")
        specs[point] = FaultSpec(point, action, int(nth) if at else 1)
    return specs


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, FaultSpec] | None = None
        self._hits: dict[str, int] = {}

    def specs(self) -> dict[str, FaultSpec]:
        if self._specs is None:
            self._specs = parse(os.environ.get(ENV, ""))
        return self._specs

    def hit(self, point: str) -> FaultSpec | None:
        with self._lock:
            spec = self.specs().get(point)
            if spec is None:
                return None
            self._hits[point] = self._hits.get(point, 0) + 1
            return spec if self._hits[point] == spec.hit else None


_registry = _Registry()

DIR_ENV = "ZKCOORD_FAULT_DIR"


def arm(directory: Path, pid: int, point: str, action: str, *more: str) -> None:
    """Arm ``point`` (and ``more`` points: whichever is hit first fires, once) in process ``pid`` (which runs with
    ``ZKCOORD_FAULT_DIR=directory``) for its next hit."""
    spec = ",".join(f"{p}={action}" for p in (point, *more))
    parse(spec)  # validate
    tmp = directory / f"{pid}.arm.tmp"
    tmp.write_text(spec)
    tmp.replace(directory / f"{pid}.arm")  # atomic: the process never reads half a spec


def disarm(directory: Path, pid: int) -> bool:
    """Withdraw what :func:`arm` armed in ``pid`` if it has not fired yet; return whether it was still armed (False:
    it fired, or is firing now, or nothing was armed).  For a scenario whose wait for the fault timed out: an armed
    point left behind would fire at some later hit, with nobody there to resume the process or restart it."""
    try:
        (directory / f"{pid}.arm").unlink()
    except FileNotFoundError:
        return False
    return True


def _armed(point: str) -> FaultSpec | None:
    directory = os.environ.get(DIR_ENV)
    if not directory:
        return None
    armed = Path(directory) / f"{os.getpid()}.arm"
    try:
        spec = parse(armed.read_text()).get(point)
    except (OSError, ConfigurationError):
        return None
    if spec is None:
        return None
    try:
        armed.replace(armed.with_suffix(".fired"))
    except OSError:
        return None  # someone else consumed it
    return spec


def fault_point(point: str, journal: Journal) -> None:
    """Act here if ``ZKCOORD_FAULTS`` or an armed file says so (see the module docstring); else return at once."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; add it to zkcoord.runtime.faults.POINTS")
    spec = _registry.hit(point) or _armed(point)
    if spec is None:
        return
    journal.emit("fault.injected", fault=f"point:{spec.action}", target=journal.role, detail=point)
    # Signal this thread, not the process: a process-directed signal is delivered to the main thread first, and
    # the calling thread could run on for a moment (long enough to send the very write the fault must precede).
    # A thread-directed SIGSTOP/SIGKILL takes effect as this thread returns from the system call.
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP if spec.action == "pause" else signal.SIGKILL)
