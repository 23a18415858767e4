"""``zkcoord bench rebalance``: the same membership changes under each consumer protocol, measured end to end.

One run: one ZooKeeper (started here on a free port with a temporary data dir, or ``--zk``), one broker process
hosting the coordinator (``python -m zkcoord broker``), a topic of ``partitions`` partitions per group (each
partition holding ``max_poll_records`` records, so a fetcher fills its buffer with one read and then idles), and,
for each protocol in turn, worker processes (:mod:`~zkcoord.bench.rebalance.worker`) hosting the consumers, each
consumer its own ZooKeeper session.  For each protocol: every group is formed with ``consumers`` members and waited
on until settled; then ``trials`` times one consumer joins every group at once, and once the groups are settled it
leaves again.  Each membership change of each group is one measurement (:class:`Change`):

* **latency**: from the trigger (the joining consumer's ``consumer.registered``, the leaving one's
  ``consumer.deregistered``) to the first moment at which the group is settled
  (:class:`~zkcoord.bench.rebalance.timeline.GroupTracker`): every member fetches exactly its new share.  That moment is
  the timestamp of the last ``fetch.started`` / start-fetcher ``command.applied`` / ``legacy.rebalance.completed``
  that was still missing;
* **stop-the-world**: the longest interval in which no partition of the group was fetched, and the longest gap of
  any one partition (:func:`~zkcoord.bench.rebalance.timeline.outage`), between the command to the worker and the end;
* **ZooKeeper requests**: the server's request counters (``mntr``) from just before the command to after the group
  settled and stayed quiet, less the background rate measured in a quiet window just before, per group changed;
* **conflicts and retries**: the change's ``legacy.rebalance.conflict`` / ``legacy.rebalance.retrying`` /
  ``legacy.rebalance.failed`` events, and the coordinator's ``rebalance.retrying`` / ``rebalance.aborted`` /
  ``rebalance.failed``.

The ZooKeeper floor (:mod:`~zkcoord.bench.rebalance.zkfloor`) is measured on the same server first, before any
consumer runs, and again with each protocol's groups formed and idle.  Latencies are reported as multiples of it.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from zkcoord import __version__
from zkcoord.bench.common import BenchError, default_out
from zkcoord.bench.rebalance.cluster import CpuMeter, WorkerProcess, child_env, stop_all
from zkcoord.bench.rebalance.config import BenchConfig
from zkcoord.bench.rebalance.measures import (
    Change,
    ProtocolRun,
    Reading,
    comparison,
    describe,
    formation_counts,
    measure,
    summarize,
    usage_of,
)
from zkcoord.bench.rebalance.timeline import COORDINATED, COORDINATOR, INCREMENTAL, LEGACY, GroupTracker, JournalTail
from zkcoord.bench.rebalance.zkfloor import Floor, measure_floor, mntr_address, read_counters
from zkcoord.data.partlog import PartitionWriter, WriterConfig
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import NoNodeError, ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver import ZkServer, ZkServerConfig, mntr

SCHEMA_VERSION = 1
DEFAULT_OUT = default_out("rebalance")
#: how long a group must stay without new events to count as quiet (before a change, and after one settled)
QUIET_S = 0.3
#: the quiet window before each change in which the background request rate is measured
BACKGROUND_S = 0.5
#: how often the driver reads the journals
POLL_S = 0.05
SHORT = {COORDINATOR: "co", INCREMENTAL: "in", LEGACY: "zk"}
#: ``zkcoord broker``'s default ``--rebalance-timeout``: the longest a coordinator phase waits in silence
COORDINATOR_PHASE_TIMEOUT_S = 10.0

Progress = Callable[[str], None]


# --- the run ----------------------------------------------------------------------------------------------------


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class RebalanceBench:
    """One run of the benchmark; :meth:`run` returns the JSON document (see ``docs/benchmarks.md``)."""

    def __init__(self, config: BenchConfig, progress: Progress = print) -> None:
        self.config = config
        self.say = progress
        self.run_id = uuid.uuid4().hex[:6]
        self.prefix = f"bench{self.run_id}"
        self.topics = [f"{self.prefix}-t{g}" for g in range(config.groups)]
        self.root = Path()
        self.journal_dir = Path()
        self.data_dir = Path()
        self.hosts = ""
        self.mntr_at: tuple[str, int] = ("", 0)
        self.zk_pid: int | None = None  # the server's, when started here (its CPU is measured)
        self.tail: JournalTail | None = None
        self.trackers: dict[str, GroupTracker] = {}
        self.last_event_at: dict[str, float] = {}
        self.broker_id = 1
        self.coordinator_broker: int | None = None
        self.zk_version = ""
        self.cpu = CpuMeter()
        self.loadavg_start = [round(x, 2) for x in os.getloadavg()]

    # --- top level ----------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        cfg = self.config
        began = time.monotonic()
        self.loadavg_start = [round(x, 2) for x in os.getloadavg()]
        cpus = os.cpu_count() or 1
        if self.loadavg_start[0] > cpus / 2:
            self.say(
                f"warning: load average {self.loadavg_start[0]:g} on {cpus} CPUs before the run: other processes "
                "compete for the CPU (see 'others' in the CPU table)"
            )
        runs: list[ProtocolRun] = []
        with ExitStack() as stack:
            self._prepare_dirs(stack)
            self._start_zookeeper(stack)
            admin = ZkClient(ZkConfig.from_string(self.hosts, session_timeout_s=cfg.session_timeout_s), name="bench")
            admin.start()
            stack.callback(admin.stop)
            self.tail = JournalTail(self.journal_dir)
            self.say(f"floor: warming the server up, then {cfg.floor_samples} writes and watched writes...")
            floor = measure_floor(self.hosts, cfg.floor_samples, server_pid=self.zk_pid)
            self.say(
                f"floor: write {floor.write:.2f} ms, write seen through a watch {floor.watch:.2f} ms "
                f"(medians of {floor.samples})"
            )
            self._start_broker(stack, admin)
            self._create_topics(admin)
            for protocol in cfg.protocols:
                runs.append(self._run_protocol(protocol))
        return self._document(runs, floor, time.monotonic() - began)

    def _prepare_dirs(self, stack: ExitStack) -> None:
        if self.config.run_dir is not None:
            self.root = self.config.run_dir
            self.root.mkdir(parents=True, exist_ok=True)
        else:
            self.root = Path(tempfile.mkdtemp(prefix="zkcoord-bench-"))
            stack.callback(shutil.rmtree, self.root, ignore_errors=True)
        self.journal_dir = self.root / "journal"
        self.data_dir = self.root / "data"
        for d in (self.journal_dir, self.data_dir, self.root / "logs", self.root / "home"):
            d.mkdir(parents=True, exist_ok=True)
        self.say(f"run directory {self.root}" + ("" if self.config.run_dir else " (removed at the end)"))

    def _start_zookeeper(self, stack: ExitStack) -> None:
        if self.config.zk is not None:
            self.hosts = self.config.zk
            self.mntr_at = mntr_address(self.hosts)
        else:
            server = ZkServer(ZkServerConfig(port=0, data_dir=self.root / "zookeeper"))
            stack.callback(server.close)
            server.start()
            self.zk_pid = server.pid
            if server.pid is not None:
                self.cpu.set("zookeeper", [server.pid])
            self.hosts = server.connect_string
            self.mntr_at = ("127.0.0.1", server.port)
        read_counters(*self.mntr_at)  # fails early, with one line, if mntr is not allowed or lacks the counters
        self.zk_version = mntr(*self.mntr_at).get("zk_version", "").split(",")[0].split("-")[0]
        where = "existing" if self.config.zk is not None else "started"
        self.say(f"ZooKeeper {self.zk_version} at {self.hosts} ({where})")

    def _start_broker(self, stack: ExitStack, admin: ZkClient) -> None:
        cfg = self.config
        try:
            ids = [int(c) for c in admin.get_children(paths.BROKER_IDS) if c.isdigit()]
        except NoNodeError:
            ids = []
        self.broker_id = max(ids, default=0) + 1
        broker = ChildProcess(
            [
                "broker",
                "--id",
                str(self.broker_id),
                "--host",
                "bench",
                "--zk",
                self.hosts,
                "--session-timeout",
                f"{cfg.session_timeout_s:g}",
                "--journal",
                str(self.journal_dir),
            ],
            self.root / "logs" / f"broker-{self.broker_id}.log",
            env=child_env(self.root / "home"),
        )
        broker.start()
        stack.callback(broker.terminate)
        self.cpu.set("broker", [broker.pid])

        def registered() -> bool:
            if not broker.alive():
                raise BenchError(f"the broker exited: {broker.tail(2)}")
            broker_up = admin.exists(paths.broker(self.broker_id)) is not None
            return broker_up and admin.exists(paths.COORDINATOR) is not None

        wait_until(registered, 30.0, f"broker {self.broker_id} to register and a coordinator to be elected")
        data, _ = admin.get(paths.COORDINATOR)
        self.coordinator_broker = CoordinatorInfo.decode(data, paths.COORDINATOR).broker_id
        if self.coordinator_broker != self.broker_id and any(p in COORDINATED for p in cfg.protocols):
            raise BenchError(
                f"broker {self.coordinator_broker} coordinates this ZooKeeper, not the run's broker "
                f"{self.broker_id}, so its rebalances are not in the run's journal; give --zk a chroot of its own"
            )
        self.say(f"broker {self.broker_id} running and coordinating")

    def _create_topics(self, admin: ZkClient) -> None:
        cfg = self.config
        topics = TopicAdmin(admin)
        records = [(b"k%d" % i, b"v" * 8) for i in range(cfg.max_poll_records)]
        writer_config = WriterConfig(exclusive=True, fsync_on_roll=False)
        for topic in self.topics:
            topics.create(topic, cfg.partitions)
            for p in range(cfg.partitions):
                with PartitionWriter(self.data_dir, topic, p, config=writer_config) as writer:
                    writer.append_batch(records)
        self.say(
            f"{len(self.topics)} topic(s) of {cfg.partitions} partitions, {cfg.max_poll_records} records in each "
            "partition"
        )

    # --- one protocol -------------------------------------------------------------------------------------------

    def _run_protocol(self, protocol: str) -> ProtocolRun:
        cfg = self.config
        count = cfg.worker_count
        result = ProtocolRun(protocol, count)
        tag = f"[{protocol}]"
        workers: list[WorkerProcess] = []
        self.trackers = {
            f"{self.prefix}-{SHORT[protocol]}{g}": GroupTracker(
                f"{self.prefix}-{SHORT[protocol]}{g}", protocol, self.topics[g], cfg.partitions
            )
            for g in range(cfg.groups)
        }
        try:
            workers = self._start_workers(protocol, count)
            self.cpu.set("workers", [w.pid for w in workers])
            self.say(
                f"{tag} {count} worker processes; forming {cfg.groups} group(s) of {cfg.consumers} consumers "
                f"over {cfg.partitions} partitions..."
            )
            started = time.monotonic()
            result.formed = self._form(workers)
            result.form_s = round(time.monotonic() - started, 2)
            result.formation = formation_counts(self.trackers.values())
            counts = ", ".join(f"{v} {k}" for k, v in result.formation.items() if v)
            if result.formed:
                self.say(f"{tag} formed in {result.form_s:.1f} s ({counts})")
            else:
                unsettled = "; ".join(f"{t.name}: {t.progress()}" for t in self.trackers.values() if not t.settled())
                result.error = f"the group(s) did not settle after forming, in {result.form_s:g} s ({unsettled})"
                self.say(f"{tag} {result.error}; the trials run anyway (each change triggers every member again)")
            result.floor_loaded = measure_floor(self.hosts, max(10, cfg.floor_samples // 2), warmup=5)
            self.say(
                f"{tag} floor with the groups idle: write {result.floor_loaded.write:.2f} ms, "
                f"watched {result.floor_loaded.watch:.2f} ms"
            )
            for trial in range(cfg.trials):
                joined: dict[str, tuple[WorkerProcess, str]] = {}
                for kind in ("join", "leave"):
                    changes = self._change(kind, trial, workers, joined)
                    result.changes += changes
                    self.say(f"{tag} trial {trial + 1}/{cfg.trials} {describe(changes)}")
        except ZkCoordError as e:
            result.error = str(e)
            self.say(f"{tag} stopped: {e}")
            raise
        finally:
            self.say(f"{tag} stopping {len(workers)} workers...")
            stop_all(workers, timeout=30.0 + cfg.consumers * cfg.groups * 0.05)
            self.cpu.pids.pop("workers", None)
            self.trackers = {}
            self._wait_quiet_journal(1.0, 20.0)
        return result

    def _start_workers(self, protocol: str, count: int) -> list[WorkerProcess]:
        cfg = self.config
        args = [
            "--protocol",
            protocol,
            "--zk",
            self.hosts,
            "--data-dir",
            str(self.data_dir),
            "--journal",
            str(self.journal_dir),
            "--session-timeout",
            f"{cfg.session_timeout_s:g}",
            "--legacy-backoff",
            f"{cfg.legacy_backoff_s:g}",
            "--legacy-retries",
            str(cfg.legacy_retries),
            "--max-poll-records",
            str(cfg.max_poll_records),
        ]
        env = child_env(self.root / "home")
        workers: list[WorkerProcess] = []
        try:
            for i in range(count):
                log_path = self.root / "logs" / f"worker-{SHORT[protocol]}{i}.log"
                workers.append(WorkerProcess(i, args, log_path, env).start())
            for w in workers:
                w.call({"op": "ping"}, timeout=30.0)
        except BaseException:
            stop_all(workers, timeout=10.0)
            raise
        return workers

    def _form(self, workers: list[WorkerProcess]) -> bool:
        """Start every group's consumers, spread over the workers, all at once; wait until every group settled."""
        cfg = self.config
        plan: dict[int, dict[str, int]] = {}
        for g, name in enumerate(self.trackers):
            for k in range(cfg.consumers):
                w = (k + g) % len(workers)
                plan.setdefault(w, {})
                plan[w][name] = plan[w].get(name, 0) + 1
        for w, groups in plan.items():
            for name, n in groups.items():
                workers[w].send({"op": "add", "group": name, "topic": self.trackers[name].topic, "count": n})
        members: dict[str, set[str]] = {name: set() for name in self.trackers}
        deadline = time.monotonic() + cfg.form_deadline_s
        for w, groups in plan.items():
            for name in groups:
                reply = workers[w].receive(max(1.0, deadline - time.monotonic()))
                for consumer_id in reply["consumers"]:
                    members[name].add(consumer_id)
                    workers[w].consumers[consumer_id] = name
        for name, tracker in self.trackers.items():
            tracker.set_members(members[name])
        self._arm()
        return self._wait_settled(deadline, report_every=10.0)

    # --- one change ---------------------------------------------------------------------------------------------

    def _reading(self) -> Reading:
        return Reading(read_counters(*self.mntr_at), self.cpu.read())

    def _change(
        self, kind: str, trial: int, workers: list[WorkerProcess], joined: dict[str, tuple[WorkerProcess, str]]
    ) -> list[Change]:
        """One consumer joins (or the one that joined leaves) every group at once; measure each group's change."""
        cfg = self.config
        self._wait_quiet(QUIET_S, 30.0)
        quiet = self._reading()
        time.sleep(BACKGROUND_S)
        self._pump()
        before = self._reading()
        snapshots = {}
        for name, tracker in self.trackers.items():
            tracker.disarm()
            snapshots[name] = (tracker.snapshot(), len(tracker.members))
        start_ms = now_ms()
        deadline = time.monotonic() + cfg.change_timeout_s
        subjects = self._join(trial, workers, deadline) if kind == "join" else self._leave(joined, deadline)
        if kind == "join":
            joined.update(subjects)
        self._arm()
        self._wait_settled(deadline)
        after = self._reading()
        usage = usage_of(quiet, before, after, len(self.trackers))
        out = []
        for name, tracker in self.trackers.items():
            (index, initial), members_before = snapshots[name]
            change = measure(
                tracker,
                tracker.events[index:],
                initial,
                kind=kind,
                trial=trial,
                consumer_id=subjects[name][1],
                members_before=members_before,
                start_ms=start_ms,
                usage=usage,
            )
            out.append(change)
        return out

    def _join(self, trial: int, workers: list[WorkerProcess], deadline: float) -> dict[str, tuple[WorkerProcess, str]]:
        sent = []
        for g, (name, tracker) in enumerate(self.trackers.items()):
            worker = workers[(trial + g) % len(workers)]
            worker.send({"op": "add", "group": name, "topic": tracker.topic, "count": 1})
            sent.append((name, worker))
        subjects = {}
        for name, worker in sent:
            consumer_id = str(worker.receive(max(1.0, deadline - time.monotonic()))["consumers"][0])
            worker.consumers[consumer_id] = name
            subjects[name] = (worker, consumer_id)
            tracker = self.trackers[name]
            tracker.set_members(tracker.members | {consumer_id})
        return subjects

    def _leave(
        self, joined: dict[str, tuple[WorkerProcess, str]], deadline: float
    ) -> dict[str, tuple[WorkerProcess, str]]:
        subjects = {}
        for name in self.trackers:
            worker, consumer_id = joined.pop(name)
            worker.send({"op": "remove", "consumer": consumer_id})
            subjects[name] = (worker, consumer_id)
        for name, (worker, consumer_id) in subjects.items():
            worker.receive(max(1.0, deadline - time.monotonic()))
            worker.consumers.pop(consumer_id, None)
            tracker = self.trackers[name]
            tracker.set_members(tracker.members - {consumer_id})
        return subjects

    # --- waiting on the journals ----------------------------------------------------------------------------------

    @property
    def journal(self) -> JournalTail:
        if self.tail is None:
            raise BenchError("the run's journal directory is not set up yet")
        return self.tail

    def _pump(self) -> int:
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

    def _quiet_for(self, seconds: float) -> bool:
        now = time.monotonic()
        return all(now - self.last_event_at.get(name, 0.0) >= seconds for name in self.trackers)

    def _arm(self) -> None:
        now = time.monotonic()
        for name, tracker in self.trackers.items():
            tracker.arm()
            self.last_event_at[name] = now

    def _stuck_s(self) -> float:
        """How long a group may stay silent while not settled before it counts as stuck: nothing happens in it until
        the next trigger (a zk-client member that used up its retries, a coordinator rebalance that failed).  The
        longest silence of a live rebalance is a zk-client backoff, or a coordinator phase waiting for its timeout."""
        protocols = {t.protocol for t in self.trackers.values()}
        legacy = self.config.legacy_backoff_s + 5.0 if LEGACY in protocols else 0.0
        coordinated = COORDINATOR_PHASE_TIMEOUT_S + 2.0 if protocols & set(COORDINATED) else 0.0
        return max(legacy, coordinated)

    def _wait_settled(self, deadline: float, report_every: float | None = None) -> bool:
        """Until every group is settled and has been quiet for :data:`QUIET_S`; False at ``deadline``, or as soon as
        a group not settled has been silent for :meth:`_stuck_s`."""
        next_report = time.monotonic() + (report_every or math.inf)
        stuck = self._stuck_s()
        while True:
            self._pump()
            settled = all(t.settled() for t in self.trackers.values())
            if settled and self._quiet_for(QUIET_S):
                return True
            now = time.monotonic()
            if now >= deadline or (not settled and self._quiet_for(stuck)):
                return False
            if now >= next_report:
                next_report = now + (report_every or math.inf)
                for t in self.trackers.values():
                    self.say(f"  {t.name}: {t.progress()}")
            time.sleep(POLL_S)

    def _wait_quiet(self, seconds: float, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._pump()
            if self._quiet_for(seconds) or time.monotonic() >= deadline:
                return
            time.sleep(POLL_S)

    def _wait_quiet_journal(self, seconds: float, timeout: float) -> None:
        """After a protocol's workers stopped: until no process journals anything for ``seconds`` (the coordinator
        rebalancing groups whose members left), at most ``timeout``."""
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < seconds:
            if self.journal.read():
                last = time.monotonic()
            time.sleep(0.05)

    # --- the document -------------------------------------------------------------------------------------------

    def _document(self, runs: list[ProtocolRun], floor: Floor, seconds: float) -> dict[str, Any]:
        cfg = self.config
        summary = [summarize(run, cfg, floor) for run in runs]
        rows = [row for rows in summary for row in rows]
        return {
            "schema": SCHEMA_VERSION,
            "benchmark": "rebalance",
            "meta": {
                "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "seconds": round(seconds, 1),
                "zkcoord": __version__,
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "loadavg_start": self.loadavg_start,
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                "zookeeper": {"hosts": self.hosts, "started": cfg.zk is None, "version": self.zk_version},
                "broker": self.broker_id,
                "coordinator_broker": self.coordinator_broker,
                "run_dir": str(self.root) if cfg.run_dir is not None else None,
            },
            "config": {
                "protocols": list(cfg.protocols),
                "consumers": cfg.consumers,
                "partitions": cfg.partitions,
                "groups": cfg.groups,
                "trials": cfg.trials,
                "workers": cfg.worker_count,
                "session_timeout_s": cfg.session_timeout_s,
                "legacy_backoff_s": cfg.legacy_backoff_s,
                "legacy_max_retries": cfg.legacy_retries,
                "assignor": "range",
                "max_poll_records": cfg.max_poll_records,
                "records_per_partition": cfg.max_poll_records,
                "change_timeout_s": cfg.change_timeout_s,
            },
            "floor": {"quiet": floor.as_dict()},
            "protocols": [
                {
                    "protocol": run.protocol,
                    "workers": run.workers,
                    "formed": run.formed,
                    "form_s": run.form_s,
                    "formation": run.formation,
                    "error": run.error,
                    "floor_loaded": run.floor_loaded.as_dict() if run.floor_loaded else None,
                }
                for run in runs
            ],
            "summary": rows,
            "comparison": comparison(rows),
            "changes": [asdict(c) for run in runs for c in run.changes],
        }


__all__ = ["DEFAULT_OUT", "BenchConfig", "BenchError", "Change", "RebalanceBench"]
