"""The region scenario (``zkcoord demo --scenario region``): a consistent region under faults, judged by S8.

Real processes: ZooKeeper, three brokers, one producer journalling every record (``--journal-records``), the
region's members (``zkcoord region member``: a count and a sum per key under the region) and its driver
(``zkcoord region driver``: drain and checkpoint every second, a reset after any failure or rebalance).  The faults,
one at a time while producing: a member SIGKILLed and restarted under its name, a member SIGSTOPped past its session
and resumed, a member leaving (SIGTERM) and joining again, the coordinator SIGKILLed (another broker takes over) and
restarted, and two partitions added.  Then producing stops, the group drains (every committed offset at the log end)
and the driver completes one more checkpoint: S8's last, which must hold every record produced exactly once.

The contrast (``--unsafe``) runs the same with region-less members (``zkcoord region member --unsafe``): a reset
rewinds their positions but leaves their state as it was, so the records consumed again are counted again.

Called by :func:`zkcoord.testbed.scenario.runner.run_scenario`; blocks the calling thread.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zkcoord.data.topics import TopicAdmin
from zkcoord.runtime.journal import Journal
from zkcoord.testbed.procs import ChildProcess, ProcessError, wait_until
from zkcoord.testbed.scenario.cluster import RunCluster

Say = Callable[[str], None]

GROUP = "ledger"
TOPIC = "ledger"
PARTITIONS = 4
REGION = "1"
MEMBERS = ("m1", "m2", "m3")
#: the driver's drain-and-checkpoint period (s)
INTERVAL = 1.0

#: the faults, in this order, spread over the run (``zkcoord demo --list``)
REGION_STEPS: dict[str, str] = {
    "member-kill": "SIGKILL a region member; once the region reset without it, restart it under its name",
    "member-pause": "SIGSTOP a region member past its session, SIGCONT it once the group went on without it",
    "member-leave-join": "a region member leaves (SIGTERM, exit 0), then joins again under its name",
    "coordinator-failover": "SIGKILL the coordinator; another broker takes over; the broker is restarted",
    "partitions-added": "the region's topic grows by two partitions while producing",
}


@dataclass
class RegionRun:
    """The processes of one region run, on top of a :class:`RunCluster` (ZooKeeper, brokers, admin client)."""

    cluster: RunCluster
    unsafe: bool
    rate: int

    def __post_init__(self) -> None:
        self.members: dict[str, ChildProcess] = {}
        self.driver: ChildProcess | None = None
        self.producer: ChildProcess | None = None
        self.stores = self.cluster.run_dir / "stores"

    # --- processes -------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Brokers, the topic, the members and the driver; returns once the group is stable over every member."""
        c = self.cluster
        for broker_id in (1, 2, 3):
            c.start_broker(broker_id)
        wait_until(lambda: c.coordinator() is not None, 30, "a coordinator")
        TopicAdmin(c.admin, Journal(c.journal_dir, "topic-admin")).create(TOPIC, PARTITIONS)
        for name in MEMBERS:
            self.start_member(name)
        args = ["region", "driver", "--group", GROUP, "--region", REGION, "--members", ",".join(MEMBERS)]
        args += [
            "--interval",
            str(INTERVAL),
            "--order-timeout",
            "5",
            "--zk",
            c.connect,
            "--journal",
            str(c.journal_dir),
        ]
        self.driver = c._spawn(args, "driver")
        self.wait_stable(len(MEMBERS), 90)

    def start_member(self, name: str) -> ChildProcess:
        c = self.cluster
        args = ["region", "member", "--group", GROUP, "--topic", TOPIC, "--region", REGION, "--member-name", name]
        args += ["--store-dir", str(self.stores), "--max-poll-records", "50", *c._common()]
        args += ["--data-dir", str(c.data_dir)]
        if self.unsafe:
            args.append("--unsafe")
        proc = c._spawn(args, f"member-{name}-{c._next()}")
        self.members[name] = proc
        return proc

    def start_producer(self) -> None:
        c = self.cluster
        args = ["produce", TOPIC, "--forever", "--rate", str(self.rate), "--size", "64", "--keys", "16"]
        args += ["--journal-records", *c._common(), "--data-dir", str(c.data_dir)]
        self.producer = c._spawn(args, "producer")

    def stop_producer(self) -> None:
        if self.producer is not None:
            self.producer.signal(signal.SIGTERM)
            with contextlib.suppress(ProcessError):
                self.producer.wait(15)

    def wait_stable(self, members: int, timeout: float) -> None:
        wait_until(lambda: self.cluster.stable(GROUP, members), timeout, f"{GROUP} stable with {members} members")

    # --- faults ----------------------------------------------------------------------------------------------

    def fault(self, kind: str, victim: str, say: Say) -> str:
        """Inject one fault of :data:`REGION_STEPS` on member ``victim`` (if it takes one) and wait until the group is
        stable over every member again.  Raises :class:`ProcessError` if it does not settle in time."""
        c, n = self.cluster, len(MEMBERS)
        grace = 6 * c.workload.session_timeout_s + 30
        proc = self.members[victim]
        if kind == "member-kill":
            proc.signal(signal.SIGKILL)
            proc.wait(10)
            c.record_fault("consumer-kill", f"member-{victim}", f"SIGKILL region member {victim} (pid {proc.pid})")
            say(f"region member {victim} killed")
            self.wait_stable(n - 1, grace)
            self.start_member(victim)
        elif kind == "member-pause":
            proc.signal(signal.SIGSTOP)
            c.record_fault("consumer-pause", f"member-{victim}", f"SIGSTOP region member {victim} past its session")
            say(f"region member {victim} paused")
            try:
                self.wait_stable(n - 1, grace)
            finally:
                proc.signal(signal.SIGCONT)
                c.record_fault("consumer-resume", f"member-{victim}", "SIGCONT")
        elif kind == "member-leave-join":
            proc.signal(signal.SIGTERM)
            code = proc.wait(30)
            c.record_fault("consumer-leave", f"member-{victim}", f"SIGTERM region member {victim}: exit {code}")
            say(f"region member {victim} left (exit {code})")
            if code != 0:
                raise ProcessError(f"region member {victim} exited {code} on SIGTERM")
            self.wait_stable(n - 1, grace)
            self.start_member(victim)
            c.record_fault("consumer-join", f"member-{victim}", f"region member {victim} joined again")
        elif kind == "coordinator-failover":
            broker = c.coordinator()
            if broker is None:
                return "no coordinator"
            c.brokers[broker].signal(signal.SIGKILL)
            c.record_fault("coordinator-kill", f"broker-{broker}", "SIGKILL the coordinator")
            say(f"broker {broker} (coordinator) killed")
            wait_until(lambda: c.coordinator() not in (None, broker), grace, "a new coordinator")
            c.start_broker(broker)
        elif kind == "partitions-added":
            admin = TopicAdmin(c.admin)
            before = admin.describe(TOPIC).partitions
            admin.alter(TOPIC, before + 2)
            c.record_fault("partitions-added", TOPIC, f"{before} -> {before + 2}")
            say(f"topic {TOPIC} grew from {before} to {before + 2} partitions")
        self.wait_stable(n, grace)
        return f"{kind} {victim}"

    # --- the end ---------------------------------------------------------------------------------------------

    def finish(self, timeout: float) -> list[str]:
        """After the producer stopped: wait until every committed offset is at the log end (commits happen at drains)
        and one more checkpoint completed after that, then stop the driver and the members.  The problems met."""
        problems: list[str] = []
        c = self.cluster
        try:
            wait_until(lambda: c.lag(GROUP) == 0, timeout, f"{GROUP} to commit everything", interval=0.25)
            seen = completed(c.journal_dir)
            wait_until(lambda: completed(c.journal_dir) > seen, timeout, "a checkpoint after the drain", interval=0.1)
        except ProcessError as e:
            problems.append(str(e))
        stopping = [p for p in (self.driver, *self.members.values()) if p is not None and p.alive()]
        for proc in stopping:
            proc.signal(signal.SIGTERM)
        for proc in stopping:
            try:
                proc.wait(30)
            except ProcessError as e:
                problems.append(f"stopping: {e}")
        return problems


def completed(journal_dir: Path) -> int:
    """How many ``region.completed`` events the journal holds (the driver's: a checkpoint every member made)."""
    return sum(path.read_bytes().count(b'"ev":"region.completed"') for path in journal_dir.glob("driver*.jsonl"))


def run_region(cluster: RunCluster, *, unsafe: bool, duration_s: float, seed: int, say: Say, rate: int) -> list[str]:
    """Run the region scenario on ``cluster`` (ZooKeeper started): the workload, the faults of
    :data:`REGION_STEPS` spread over ``duration_s``, the drain and the last checkpoint.  Returns the problems met
    (faults that did not settle, a drain that did not end); the cluster's processes are stopped by its owner.
    ``unsafe``: the contrast's region-less members (the brokers keep their fences: the contrast is the region's)."""
    run = RegionRun(cluster, unsafe, rate)
    run.start()
    run.start_producer()
    started = time.monotonic()
    problems: list[str] = []
    slot = duration_s / (len(REGION_STEPS) + 1)
    for i, kind in enumerate(REGION_STEPS):
        victim = MEMBERS[(seed + i) % len(MEMBERS)]
        _sleep_until(started + slot * (i + 1))
        say(f"fault {i + 1}/{len(REGION_STEPS)}: {kind}")
        try:
            say(f"fault {kind} done: {run.fault(kind, victim, say)}")
        except ProcessError as e:
            problems.append(f"{kind}: {e}")
            say(f"fault {kind} did not settle: {e}")
    _sleep_until(started + duration_s)
    run.stop_producer()
    say("producer stopped; draining and waiting for the last checkpoint")
    problems += run.finish(timeout=60.0)
    return problems


def _sleep_until(deadline: float) -> None:
    """Pace the schedule: time itself is the condition."""
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.25))
