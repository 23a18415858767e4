"""The scenario runner: start a whole run as real processes, inject faults on a seeded schedule, drain, stop.

A run is: ZooKeeper (one server, a 3-server ensemble, or an external one), 3 brokers, one producer per topic at a
steady rate, consumers in two groups (a static subscription, and a ``white_list`` over a topic family, one of whose
consumers reaches ZooKeeper through a TCP proxy so that it can be cut off), then the scenario's faults, spread over
the duration in a seeded order, while the producers keep writing (or, with the random nemesis, a schedule drawn from
the seed over every fault kind, some two at once: :mod:`~zkcoord.testbed.scenario.nemesis`).  At the end the
producers stop, the groups drain, and everything is stopped; the journals in ``<run-dir>/journal`` are the evidence
the verdict is computed from.

Runs on the caller's thread (the random nemesis runs its faults on threads of its own); every wait has a deadline.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from zkcoord.errors import ConfigurationError
from zkcoord.testbed.procs import ProcessError, wait_until
from zkcoord.testbed.scenario.cluster import RunCluster, Workload
from zkcoord.testbed.scenario.faults import FAULTS, STEPS
from zkcoord.testbed.scenario.nemesis import draw_schedule, run_schedule
from zkcoord.testbed.scenario.strategy import OLD, STRATEGY_STEPS, check_switch
from zkcoord.testbed.scenario.upgrade import UPGRADE_STEPS

Say = Callable[[str], None]

NEMESES = ("fixed", "random")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    #: fault kinds; the first ``fixed`` run in this order, the rest in a seeded random order
    faults: tuple[str, ...]
    fixed: int = 1
    #: the static group starts under the zk-client protocol (the migration scenario)
    legacy_static: bool = False
    #: the static group is rolled onto KIP-848's consumer protocol (the kip848-migration scenario): every classic
    #: member must be gone at the end, and in a safe run the consumer protocol must have taken the group over
    to_consumer_protocol: bool = False
    #: the static group runs the classic protocol on ``range`` and is rolled onto ``roundrobin,range`` (the
    #: classic-switch scenario): its strategy must switch once, at the right moment
    classic_static: bool = False


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "default",
            "every fault kind once: the zombie coordinator first (the interleaving the --unsafe contrast breaks), "
            "then the others in a seeded order",
            tuple(FAULTS),
        ),
        Scenario("zombie", "only the zombie coordinator: paused between stop and start, resumed after a takeover",
                 ("coordinator-zombie",)),
        Scenario("consumers", "consumer faults: pause, kill, join, leave, network cut",
                 ("consumer-pause", "consumer-kill", "consumer-join", "consumer-leave", "network-cut"), fixed=0),
        Scenario("zookeeper", "ZooKeeper restarted (or its leader killed with --ensemble), then a network cut",
                 ("zk-restart", "network-cut"), fixed=0),
        Scenario("calm", "no faults: the workload alone, for a baseline", ()),
        Scenario("migration",
                 "live migration: the static group starts under zk-client (Kafka 0.8.2) and its consumers are rolled "
                 "onto the coordinator one at a time with --migrating, while producing; the --unsafe contrast rolls "
                 "them without --migrating (a naive migration)",
                 ("migrate-consumer",) * Workload().static_consumers, fixed=0, legacy_static=True),
        Scenario("kip848-migration",
                 "the static group, run by the coordinator's eager protocol, rolled onto KIP-848's consumer protocol "
                 "one member at a time while producing: a member killed mid-roll, the coordinator paused past its "
                 "session mid-roll, and killed mid-reconciliation right after the switch; the --unsafe contrast "
                 "rolls the same way with the fences off, where the coordinator never uses the consumer protocol "
                 "(classic eager throughout) and the zombie and the kill land in classic rebalances",
                 ("upgrade-consumer", "member-kill", "upgrade-zombie", "upgrade-failover"), fixed=4,
                 to_consumer_protocol=True),
        Scenario("classic-switch",
                 "the static group runs the classic protocol (seed 001: a leader member assigns) on range; its members "
                 "are restarted one at a time with --assignors roundrobin,range while producing: the group keeps "
                 "range until every member supports roundrobin, then switches in one rebalance (the verdict checks "
                 "the journal's strategy per generation); the --unsafe contrast runs the coordinator without its "
                 "fences, which never runs the classic protocol (it assigns the group itself)",
                 ("upgrade-strategy",) * Workload().static_consumers, fixed=Workload().static_consumers,
                 classic_static=True),
    )
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One run.  Validates itself; raises :class:`ConfigurationError`."""

    run_dir: Path
    scenario: str = "default"
    duration_s: float = 40.0
    seed: int = 1
    ensemble: bool = False
    zk: str | None = None
    unsafe: bool = False
    workload: Workload = field(default_factory=Workload)
    #: ``fixed``: the scenario's faults, one at a time, in a seeded order; ``random``: a schedule drawn from the seed
    #: over every fault kind, two at once in some steps (:mod:`~zkcoord.testbed.scenario.nemesis`)
    nemesis: str = "fixed"

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ConfigurationError(f"unknown scenario {self.scenario!r}; see zkcoord demo --list")
        if self.nemesis not in NEMESES:
            raise ConfigurationError(f"unknown nemesis {self.nemesis!r}: one of {', '.join(NEMESES)}")
        if self.nemesis == "random" and self.scenario != "default":
            raise ConfigurationError("the random nemesis draws from every fault kind: it takes no --scenario")
        if not 5 <= self.duration_s <= 24 * 3600:
            raise ConfigurationError(f"duration must be within 5 s .. 24 h, got {self.duration_s}")


@dataclass
class RunResult:
    run_dir: Path
    unsafe: bool
    faults: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    produced: int = 0
    consumed: int = 0
    rebalances: int = 0
    seconds: float = 0.0
    #: the random nemesis's schedule in brief (seed, steps, faults drawn, steps with two faults drawn and how many
    #: of them really overlapped); empty for the fixed nemesis
    nemesis: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "nemesis": self.nemesis,
            "run_dir": str(self.run_dir),
            "unsafe": self.unsafe,
            "faults": dict(self.faults),
            "problems": self.problems,
            "produced": self.produced,
            "consumed": self.consumed,
            "rebalances": self.rebalances,
            "seconds": round(self.seconds, 1),
        }


class JournalTail:
    """Counts events as they are appended (new complete lines only): the runner's live progress."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[Path, int] = {}
        self.produced = 0
        self.consumed = 0
        self.rebalances = 0
        self.faults: Counter[str] = Counter()
        #: groups a coordinator took over for the consumer protocol (``kip848.rebuilt``)
        self.rebuilt: set[str] = set()

    def poll(self) -> None:
        for path in self.directory.glob("*.jsonl"):
            start = self._offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(start)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            self._offsets[path] = start + end
            for line in chunk[:end].splitlines():
                self._count(line)

    def _count(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return
        kind = event.get("ev")
        if kind == "produce.batch":
            self.produced += int(event.get("count", 0))
        elif kind == "records.consumed":
            self.consumed += int(event.get("count", 0))
        elif kind == "rebalance.completed":
            self.rebalances += 1
        elif kind == "fault.injected":
            self.faults[str(event.get("fault"))] += 1
        elif kind == "kip848.rebuilt":
            self.rebuilt.add(str(event.get("group")))


def run_scenario(config: RunConfig, say: Say = print) -> RunResult:
    """Run ``config`` to the end; return its counts.  The verdict is computed from the journals afterwards."""
    scenario = SCENARIOS[config.scenario]
    rng = random.Random(config.seed)
    order = list(scenario.faults[: scenario.fixed])
    rest = list(scenario.faults[scenario.fixed :])
    rng.shuffle(rest)
    order += rest
    started = time.monotonic()
    result = RunResult(config.run_dir, config.unsafe)
    cluster = RunCluster(config.run_dir, config.workload, config.unsafe, config.ensemble, config.zk)
    tail = JournalTail(cluster.journal_dir)
    label = "unsafe" if config.unsafe else "safe"

    def progress(phase: str) -> None:
        tail.poll()
        say(
            f"[{label} {time.monotonic() - started:5.1f}s] {phase}: produced {tail.produced}, consumed "
            f"{tail.consumed}, rebalances {tail.rebalances}, faults {sum(tail.faults.values())}"
        )

    try:
        connect = cluster.start_zookeeper()
        say(f"[{label}] ZooKeeper at {connect}; run directory {config.run_dir}")
        _start_workload(cluster, scenario)
        cluster.start_producers()
        if config.nemesis == "random":
            schedule = draw_schedule(config.seed, config.duration_s)
            for line in schedule.describe():
                say(f"[{label}] {line}")
            progress(f"running the random nemesis for {config.duration_s:g}s with {schedule.faults} faults")
            # The schedule's times count from the first record produced (starting the cluster takes a while).
            producing = time.monotonic()
            log = run_schedule(
                cluster,
                schedule,
                started=producing,
                say=lambda line: say(f"[{label}] {line}"),
                problems=result.problems,
                pace=lambda offset: _wait_until_time(producing, offset, lambda: progress("producing")),
            )
            _wait_until_time(producing, config.duration_s, lambda: progress("producing"))
            result.nemesis = {
                "seed": config.seed,
                "steps": len(schedule.steps),
                "faults": schedule.faults,
                "overlapping": schedule.overlapping,
                "overlapped": log.overlapped(),
            }
        else:
            progress(f"running scenario {scenario.name!r} for {config.duration_s:g}s with {len(order)} faults")
            _run_in_order(
                cluster,
                order,
                duration_s=config.duration_s,
                started=started,
                rng=rng,
                label=label,
                say=say,
                result=result,
                progress=progress,
            )
        _wait_until_time(started, config.duration_s, lambda: progress("producing"))
        cluster.stop_producers()
        progress("producers stopped; draining")
        _drain(cluster, timeout=15.0 if config.unsafe else 45.0, result=result)
        progress("drained")
        _check_scenario(cluster, scenario, tail, result)
    finally:
        cluster.close()
    tail.poll()
    result.faults = tail.faults
    result.produced, result.consumed, result.rebalances = tail.produced, tail.consumed, tail.rebalances
    result.seconds = time.monotonic() - started
    (config.run_dir / "run.json").write_text(json.dumps(result.to_json(), indent=2))
    return result


def _run_in_order(
    cluster: RunCluster,
    order: list[str],
    *,
    duration_s: float,
    started: float,
    rng: random.Random,
    label: str,
    say: Say,
    result: RunResult,
    progress: Callable[[str], None],
) -> None:
    """The fixed nemesis: the faults one at a time, spread evenly over the duration."""
    slot = duration_s / (len(order) + 1)
    for i, kind in enumerate(order):
        _wait_until_time(started, slot * (i + 1), lambda: progress("producing"))
        progress(f"fault {i + 1}/{len(order)}: {kind}")
        try:
            detail = {**FAULTS, **STEPS, **UPGRADE_STEPS, **STRATEGY_STEPS}[kind].run(cluster, rng, say)
        except ProcessError as e:
            result.problems.append(f"{kind}: {e}")
            say(f"[{label}] fault {kind} did not settle: {e}")
            continue
        say(f"[{label}] fault {kind} done: {detail}")


def _start_workload(cluster: RunCluster, scenario: Scenario) -> None:
    """Brokers, topics and both groups, stable before anything is produced."""
    for broker_id in (1, 2, 3):
        cluster.start_broker(broker_id)
    wait_until(lambda: cluster.coordinator() is not None, 30, "a coordinator")
    cluster.create_topics()
    w = cluster.workload
    for i in range(w.static_consumers):
        if scenario.legacy_static:
            cluster.start_consumer(w.static_group, kind="zk-client")
        elif scenario.classic_static:
            cluster.start_consumer(w.static_group, via_proxy=(i == 0), kind="classic-range", extra=OLD)
        else:
            cluster.start_consumer(w.static_group, via_proxy=(i == 0))
    for _ in range(w.wildcard_consumers):
        cluster.start_consumer(w.wildcard_group)
    # The start, not a fault: on a machine loaded past 40 (a 20-seed run beside other work) starting the consumers'
    # interpreters alone took most of a minute, and a seed ended in an error before its first fault.
    cluster.wait_all_stable(180)


def _check_scenario(cluster: RunCluster, scenario: Scenario, tail: JournalTail, result: RunResult) -> None:
    """What the scenario must have achieved besides the safety the verdict checks."""
    if scenario.legacy_static:
        left = [m for m in cluster.live_members(cluster.workload.static_group) if m.kind == "zk-client"]
        if left:
            result.problems.append(f"migration unfinished: {len(left)} zk-client consumers left")
    if scenario.to_consumer_protocol:
        _check_upgraded(cluster, tail, result)
    if scenario.classic_static and not cluster.unsafe:
        result.problems.extend(check_switch(cluster.journal_dir, cluster.workload.static_group))


def _check_upgraded(cluster: RunCluster, tail: JournalTail, result: RunResult) -> None:
    """The static group rolled onto the consumer protocol: no classic member left and, fences on, the coordinator
    ran it by the consumer protocol (fences off it never does: the contrast runs classic eager throughout)."""
    group = cluster.workload.static_group
    left = [m for m in cluster.live_members(group) if m.kind == "coordinator"]
    if left:
        result.problems.append(f"upgrade unfinished: {len(left)} classic members left in {group}")
    tail.poll()
    if not cluster.unsafe and group not in tail.rebuilt:
        result.problems.append(f"the consumer protocol never took {group} over (no kip848.rebuilt)")


def _wait_until_time(started: float, offset: float, tick: Callable[[], None]) -> None:
    last = time.monotonic()
    while (now := time.monotonic()) < started + offset:
        if now - last >= 5:
            tick()
            last = now
        time.sleep(min(0.25, started + offset - now))  # pacing the schedule: time itself is the condition


def _drain(cluster: RunCluster, timeout: float, result: RunResult) -> None:
    def drained() -> bool:
        return all(cluster.lag(group) == 0 for group in cluster.groups())

    try:
        wait_until(drained, timeout, "every group to consume everything", interval=0.25)
    except ProcessError as e:
        result.problems.append(str(e))
