"""The random nemesis (``zkcoord demo --nemesis random``): a fault schedule drawn from a seed, with faults that
overlap, and its execution.

A :class:`Schedule` is a pure function of ``(seed, duration)`` (:func:`draw_schedule`): a few steps at random
times, each one fault kind of :data:`~zkcoord.testbed.scenario.faults.FAULTS` and, for at least one step (about
half of them), a second kind started a moment after the first while the first is still in progress -- a coordinator
paused during a consumer kill, ZooKeeper restarted during the rebalance a join causes.  The two faults of a step
never work on the same part of the system (:data:`RESOURCES`: the coordinator, ZooKeeper, the proxied consumer, the
other consumers), so that neither undoes the other.  Each fault draws its victims from its own generator, seeded
by the schedule, so the schedule (and so a failing seed) is reproducible from its number; what a victim's pid is,
and the exact instants, depend on the run.

:func:`run_schedule` runs the steps on the caller's thread, each fault of a step on its own thread (the two faults
of a step must be in progress at once; a fault blocks on its waits), and joins them with a deadline before the next
step.  It writes the drawn schedule and what happened (when each fault started and ended) to
``<run-dir>/nemesis.json``.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from zkcoord.errors import ConfigurationError, ZkCoordError
from zkcoord.testbed.scenario.cluster import RunCluster
from zkcoord.testbed.scenario.faults import FAULTS, Skipped

Say = Callable[[str], None]

#: The part of the system each fault kind works on; the two faults of a step work on different parts.  Kinds not
#: named work on the consumers (other than the proxied one).
RESOURCES: dict[str, str] = {
    "coordinator-zombie": "coordinator",
    "coordinator-kill": "coordinator",
    "zk-restart": "zookeeper",
    "network-cut": "proxied consumer",
}
#: One step per this many seconds of the run (at least one).
STEP_EVERY_S = 30.0
#: The chance that a step has a second, overlapping fault (one step of every schedule has one regardless).
OVERLAP_P = 0.5
#: The second fault of a step starts this long (drawn uniformly) after the first.
OVERLAP_AFTER_S = (0.3, 3.0)
#: How long a step's faults may take together before the run gives up waiting for them (each wait in a fault has
#: its own, shorter, deadline: this one only guards against a fault that never returns).
STEP_DEADLINE_S = 400.0
#: Most seeds ``--seeds A..B`` may name (each is a pair of runs of minutes).
MAX_SEEDS = 1000
MAX_SEED = 2**32 - 1


def resource(kind: str) -> str:
    return RESOURCES.get(kind, "consumers")


@dataclass(frozen=True, slots=True)
class Step:
    """Start ``kind`` not before ``at_s`` seconds into the run; ``overlap`` (if any) ``overlap_after_s`` later."""

    at_s: float
    kind: str
    #: the seed of the generator the step's faults draw their victims from (the second fault's is ``seed + 1``)
    seed: int
    overlap: str | None = None
    overlap_after_s: float = 0.0

    def what(self) -> str:
        if self.overlap is None:
            return self.kind
        return f"{self.kind}, and {self.overlap_after_s:.1f}s later, during it, {self.overlap}"

    def describe(self) -> str:
        return f"t+{self.at_s:5.1f}s  {self.what()}"


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    duration_s: float
    steps: tuple[Step, ...]

    @property
    def faults(self) -> int:
        return sum(1 + (s.overlap is not None) for s in self.steps)

    @property
    def overlapping(self) -> int:
        """Steps with two faults at once."""
        return sum(s.overlap is not None for s in self.steps)

    def describe(self) -> list[str]:
        head = f"random nemesis, seed {self.seed}, {self.duration_s:g}s: {len(self.steps)} steps, {self.faults} faults"
        return [head, *(f"  {s.describe()}" for s in self.steps)]

    def to_json(self) -> dict[str, object]:
        return {"seed": self.seed, "duration_s": self.duration_s, "steps": [asdict(s) for s in self.steps]}


def draw_schedule(seed: int, duration_s: float, kinds: Sequence[str] = tuple(FAULTS)) -> Schedule:
    """The schedule of ``seed`` for a run of ``duration_s`` seconds: a pure function of its arguments (a generator
    seeded by a string is the same in every process, whatever ``PYTHONHASHSEED``).  Raises
    :class:`ConfigurationError` for a seed outside ``0..2**32-1`` or no kind to draw from."""
    if not 0 <= seed <= MAX_SEED:
        raise ConfigurationError(f"a seed is an integer within 0..{MAX_SEED}, got {seed}")
    if not kinds:
        raise ConfigurationError("the random nemesis needs at least one fault kind")
    rng = random.Random(f"zkcoord-nemesis-{seed}")
    count = max(1, int(duration_s // STEP_EVERY_S))
    # Steps start in the first three quarters of the run: the last one still has time to settle before the end.
    starts = sorted(round(rng.uniform(2.0, max(2.0, duration_s * 0.75)), 1) for _ in range(count))
    forced = rng.randrange(count)
    steps = []
    for i, at in enumerate(starts):
        kind = rng.choice(list(kinds))
        overlap: str | None = None
        after = 0.0
        partners = [k for k in kinds if resource(k) != resource(kind)]
        if partners and (i == forced or rng.random() < OVERLAP_P):
            overlap = rng.choice(partners)
            after = round(rng.uniform(*OVERLAP_AFTER_S), 1)
        steps.append(Step(at, kind, rng.getrandbits(31), overlap, after))
    return Schedule(seed, duration_s, tuple(steps))


#: A seed as written: ASCII digits only (``int()`` would also take ``1_0`` for 10, or other scripts' digits).
_DIGITS = re.compile(r"[0-9]+")


def parse_seeds(text: str) -> range:
    """``"7"`` or ``"A..B"`` (inclusive) as a range of seeds; raises :class:`ConfigurationError` on anything else."""
    lo, sep, hi = text.strip().partition("..")
    if not _DIGITS.fullmatch(lo) or (sep and not _DIGITS.fullmatch(hi)):
        raise ConfigurationError(f"--seeds takes N or A..B (integers from 0), got {text!r}")
    first = int(lo)
    last = int(hi) if sep else first
    if not 0 <= first <= last <= MAX_SEED:
        raise ConfigurationError(f"--seeds A..B needs 0 <= A <= B <= {MAX_SEED}, got {text!r}")
    if last - first + 1 > MAX_SEEDS:
        raise ConfigurationError(f"--seeds names at most {MAX_SEEDS} seeds, got {last - first + 1}")
    return range(first, last + 1)


def parse_seed(text: str) -> int:
    """One seed, ``0..2**32-1``; raises :class:`ConfigurationError` otherwise."""
    if not _DIGITS.fullmatch(text.strip()):
        raise ConfigurationError(f"--seed takes an integer within 0..{MAX_SEED}, got {text!r}")
    seed = int(text.strip())
    if not 0 <= seed <= MAX_SEED:
        raise ConfigurationError(f"--seed must be within 0..{MAX_SEED}, got {seed}")
    return seed


@dataclass
class _Span:
    """One fault as it ran: offsets in seconds from the run's start."""

    kind: str
    step: int
    started_s: float = 0.0
    ended_s: float = 0.0
    detail: str = ""
    error: str | None = None
    #: the fault found nothing to inject into (:class:`~zkcoord.testbed.scenario.faults.Skipped`): ``detail`` says why
    skipped: bool = False


@dataclass
class NemesisLog:
    """What :func:`run_schedule` did; written to ``nemesis.json``."""

    schedule: Schedule
    spans: list[_Span] = field(default_factory=list)

    def overlapped(self) -> int:
        """Steps whose two faults really were in progress at once: both injected (neither skipped) and the second
        started before the first ended."""
        by_step: dict[int, list[_Span]] = {}
        for s in self.spans:
            by_step.setdefault(s.step, []).append(s)
        return sum(
            len(v) == 2 and not (v[0].skipped or v[1].skipped) and v[1].started_s < v[0].ended_s
            for v in by_step.values()
        )

    def skipped(self) -> list[str]:
        """The faults that found nothing to inject into, as ``kind: why``."""
        return [f"{s.kind}: {s.detail}" for s in self.spans if s.skipped]

    def write(self, path: Path) -> None:
        path.write_text(
            json.dumps(
                {
                    "schedule": self.schedule.to_json(),
                    "described": self.schedule.describe(),
                    "ran": [asdict(s) for s in self.spans],
                    "overlapped": self.overlapped(),
                    "skipped": self.skipped(),
                },
                indent=2,
            )
        )


def run_schedule(
    cluster: RunCluster,
    schedule: Schedule,
    *,
    started: float,
    say: Say,
    problems: list[str],
    pace: Callable[[float], None],
) -> NemesisLog:
    """Run ``schedule`` against ``cluster``; ``started`` is the schedule's ``time.monotonic()`` origin, ``pace(offset)``
    blocks until that offset (printing progress).  A fault that fails with a :class:`ZkCoordError` (a wait timed out,
    say) is added to ``problems`` and the schedule goes on; any other exception is re-raised here, after the step's
    threads are joined.  Blocks for the steps' duration."""
    log = NemesisLog(schedule)
    (cluster.run_dir / "nemesis.json").parent.mkdir(parents=True, exist_ok=True)
    log.write(cluster.run_dir / "nemesis.json")  # the drawn schedule is there from the start
    for i, step in enumerate(schedule.steps):
        pace(step.at_s)
        say(f"nemesis step {i + 1}/{len(schedule.steps)}: {step.what()}")
        faults = [(step.kind, 0.0, step.seed)]
        if step.overlap is not None:
            faults.append((step.overlap, step.overlap_after_s, step.seed + 1))
        threads: list[threading.Thread] = []
        crashed: list[BaseException] = []
        for kind, after, seed in faults:
            if after:
                pace(time.monotonic() - started + after)
            span = _Span(kind, i)
            log.spans.append(span)
            thread = threading.Thread(
                target=_run_fault,
                args=(cluster, kind),
                kwargs={
                    "rng": random.Random(seed),
                    "span": span,
                    "started": started,
                    "say": say,
                    "problems": problems,
                    "crashed": crashed,
                },
                name=f"nemesis-{kind}",
                daemon=True,  # a fault that never returns must not keep the demo alive after its deadline
            )
            thread.start()
            threads.append(thread)
        deadline = time.monotonic() + STEP_DEADLINE_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                problems.append(f"nemesis step {i + 1}: {thread.name} still running after {STEP_DEADLINE_S:g}s")
        log.write(cluster.run_dir / "nemesis.json")
        if crashed:
            raise crashed[0]
    return log


def _run_fault(
    cluster: RunCluster,
    kind: str,
    *,
    rng: random.Random,
    span: _Span,
    started: float,
    say: Say,
    problems: list[str],
    crashed: list[BaseException],
) -> None:
    """A fault thread's body: run one fault, note when it started and ended and what it did."""
    span.started_s = round(time.monotonic() - started, 2)
    try:
        detail = FAULTS[kind].run(cluster, rng, say)
        span.detail, span.skipped = str(detail), isinstance(detail, Skipped)
        say(f"fault {kind} {'skipped' if span.skipped else 'done'}: {span.detail}")
    except ZkCoordError as e:  # a wait timed out, ZooKeeper refused: the run goes on, the problem is reported
        span.error = str(e)
        problems.append(f"{kind}: {e}")
        say(f"fault {kind} did not settle: {e}")
    except Exception as e:  # noqa: BLE001  # a bug: handed to the runner's thread, which re-raises it
        span.error = repr(e)
        crashed.append(e)
    finally:
        span.ended_s = round(time.monotonic() - started, 2)
