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

The run's surroundings (directories, ZooKeeper, broker, topics, workers) are
:mod:`~zkcoord.bench.rebalance.environment`'s; reading the journals and waiting on the groups,
:mod:`~zkcoord.bench.rebalance.waits`'s.

The ZooKeeper floor (:mod:`~zkcoord.bench.rebalance.zkfloor`) is measured on the same server first, before any
consumer runs, and again with each protocol's groups formed and idle.  Latencies are reported as multiples of it.

Those are the ``join-leave`` scenario.  The ``rolling-restart`` scenario (:mod:`~zkcoord.bench.rebalance.rolling`)
runs after the ``consumer`` protocol's: a group of static members (instance ids) restarted one after the other.
"""

from __future__ import annotations

import os
import platform
import sys
import time
import uuid
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any

from zkcoord import __version__
from zkcoord.bench.common import BenchError, default_out
from zkcoord.bench.rebalance.cluster import CpuMeter, WorkerProcess, stop_all
from zkcoord.bench.rebalance.config import JOIN_LEAVE, ROLLING_RESTART, BenchConfig, Progress
from zkcoord.bench.rebalance.environment import BenchEnvironment
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
from zkcoord.bench.rebalance.rolling import RollingRestart
from zkcoord.bench.rebalance.sessions import read_sessions
from zkcoord.bench.rebalance.timeline import (
    CLASSIC,
    CONSUMER,
    COORDINATOR,
    INCREMENTAL,
    LEGACY,
    GroupTracker,
    JournalTail,
)
from zkcoord.bench.rebalance.waits import JournalWaits
from zkcoord.bench.rebalance.zkfloor import Floor, measure_floor, read_counters
from zkcoord.errors import ZkCoordError
from zkcoord.layout import legacy_paths, paths
from zkcoord.zk import ZkClient, ZkConfig

SCHEMA_VERSION = 1
DEFAULT_OUT = default_out("rebalance")
SHORT = {COORDINATOR: "co", INCREMENTAL: "in", CLASSIC: "cl", CONSUMER: "cs", LEGACY: "zk"}


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
        self.cpu = CpuMeter()
        self.env = BenchEnvironment(config, progress, self.cpu)
        self.waits = JournalWaits(config, progress)
        self.loadavg_start = [round(x, 2) for x in os.getloadavg()]
        self.admin: ZkClient | None = None
        #: consumer id -> its ZooKeeper session id; the coordinator's session (for the requests by role)
        self.sids: dict[str, int] = {}
        self.coordinator_sid: int | None = None

    @property
    def trackers(self) -> dict[str, GroupTracker]:
        """The groups of the protocol being run (empty between protocols)."""
        return self.waits.trackers

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
        rolling: dict[str, Any] | None = None
        with ExitStack() as stack:
            env = self.env
            env.prepare_dirs(stack)
            env.start_zookeeper(stack)
            admin = ZkClient(ZkConfig.from_string(env.hosts, session_timeout_s=cfg.session_timeout_s), name="bench")
            admin.start()
            stack.callback(admin.stop)
            self.admin = admin
            self.waits.tail = JournalTail(env.journal_dir)
            self.say(f"floor: warming the server up, then {cfg.floor_samples} writes and watched writes...")
            floor = measure_floor(env.hosts, cfg.floor_samples, server_pid=env.zk_pid)
            self.say(
                f"floor: write {floor.write:.2f} ms, write seen through a watch {floor.watch:.2f} ms "
                f"(medians of {floor.samples})"
            )
            env.start_broker(stack, admin)
            coordinator = admin.exists(paths.COORDINATOR)
            self.coordinator_sid = coordinator.ephemeralOwner if coordinator is not None else None
            env.create_topics(admin, self.topics)
            for protocol in cfg.protocols:
                if JOIN_LEAVE in cfg.scenarios:
                    runs.append(self._run_protocol(protocol))
                if protocol == CONSUMER and ROLLING_RESTART in cfg.scenarios:
                    rolling = RollingRestart(self).run()
        return self._document(runs, floor, time.monotonic() - began, rolling)

    # --- one protocol -------------------------------------------------------------------------------------------

    def _run_protocol(self, protocol: str) -> ProtocolRun:
        cfg = self.config
        count = cfg.worker_count
        result = ProtocolRun(protocol, count)
        tag = f"[{protocol}]"
        workers: list[WorkerProcess] = []
        self.waits.trackers = {
            f"{self.prefix}-{SHORT[protocol]}{g}": GroupTracker(
                f"{self.prefix}-{SHORT[protocol]}{g}", protocol, self.topics[g], cfg.partitions
            )
            for g in range(cfg.groups)
        }
        try:
            workers = self.env.start_workers(protocol, count, SHORT[protocol])
            self.cpu.set("workers", [w.pid for w in workers])
            self.say(
                f"{tag} {count} worker processes; forming {cfg.groups} group(s) of {cfg.consumers} consumers "
                f"over {cfg.partitions} partitions..."
            )
            started = time.monotonic()
            result.formed = self._form(workers)
            result.form_s = round(time.monotonic() - started, 2)
            result.formation = formation_counts(self.trackers.values())
            self.learn_sessions({c: t.name for t in self.trackers.values() for c in t.members})
            counts = ", ".join(f"{v} {k}" for k, v in result.formation.items() if v)
            if result.formed:
                self.say(f"{tag} formed in {result.form_s:.1f} s ({counts})")
            else:
                unsettled = "; ".join(f"{t.name}: {t.progress()}" for t in self.trackers.values() if not t.settled())
                result.error = f"the group(s) did not settle after forming, in {result.form_s:g} s ({unsettled})"
                self.say(f"{tag} {result.error}; the trials run anyway (each change triggers every member again)")
            result.floor_loaded = measure_floor(self.env.hosts, max(10, cfg.floor_samples // 2), warmup=5)
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
            self.waits.trackers = {}
            self.waits.wait_quiet_journal(1.0, 20.0)
        return result

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
        self.waits.arm()
        return self.waits.wait_settled(deadline, report_every=10.0)

    # --- one change ---------------------------------------------------------------------------------------------

    def reading(self) -> Reading:
        """The server's counters, the processes' CPU times and the server's per-session counters, now."""
        counters = read_counters(*self.env.mntr_at)
        return Reading(counters, self.cpu.read(), read_sessions(*self.env.mntr_at, at=counters.at))

    def learn_sessions(self, consumers: dict[str, str]) -> None:
        """Note the session of each consumer (id -> group) from its registration's owner (one pipelined read)."""
        if self.admin is None or not consumers:
            return
        ids = sorted(consumers)
        registrations = [self._registration(consumers[c], c) for c in ids]
        for consumer_id, got in zip(ids, self.admin.get_many(registrations), strict=True):
            if got is not None and got[1].ephemeralOwner:
                self.sids[consumer_id] = got[1].ephemeralOwner

    def _registration(self, group: str, consumer_id: str) -> str:
        tracker = self.trackers.get(group)
        if tracker is not None and tracker.protocol == LEGACY:
            return legacy_paths.member(group, consumer_id)  # Kafka 0.8's /consumers/<group>/ids
        return paths.member(group, consumer_id)

    def roles(self, subjects: set[str], members: set[str]) -> dict[str, set[int]]:
        """The sessions of each role of a change: the coordinator, its subjects, the groups' other members."""

        def sids(consumers: set[str]) -> set[int]:
            return {self.sids[c] for c in consumers if c in self.sids}

        coordinator = {self.coordinator_sid} if self.coordinator_sid is not None else set()
        return {"coordinator": coordinator, "subject": sids(subjects), "members": sids(members - subjects)}

    def _change(
        self, kind: str, trial: int, workers: list[WorkerProcess], joined: dict[str, tuple[WorkerProcess, str]]
    ) -> list[Change]:
        """One consumer joins (or the one that joined leaves) every group at once; measure each group's change."""
        cfg = self.config
        quiet, before = self.waits.background(self.reading)
        snapshots = {}
        for name, tracker in self.trackers.items():
            tracker.disarm()
            snapshots[name] = (tracker.snapshot(), len(tracker.members))
        start_ms = now_ms()
        deadline = time.monotonic() + cfg.change_timeout_s
        subjects = self._join(trial, workers, deadline) if kind == "join" else self._leave(joined, deadline)
        if kind == "join":
            joined.update(subjects)
        self.waits.arm()
        self.waits.wait_settled(deadline)
        after = self.reading()
        if kind == "join":  # (read after the window: these reads are not the change's)
            self.learn_sessions({c: name for name, (_, c) in subjects.items()})
        members = {c for t in self.trackers.values() for c in t.members}
        roles = self.roles({c for _, c in subjects.values()}, members)
        usage = usage_of(quiet, before, after, len(self.trackers), roles)
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

    # --- the document -------------------------------------------------------------------------------------------

    def _document(
        self, runs: list[ProtocolRun], floor: Floor, seconds: float, rolling: dict[str, Any] | None
    ) -> dict[str, Any]:
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
                "zookeeper": {"hosts": self.env.hosts, "started": cfg.zk is None, "version": self.env.zk_version},
                "broker": self.env.broker_id,
                "coordinator_broker": self.env.coordinator_broker,
                "run_dir": str(self.env.root) if cfg.run_dir is not None else None,
            },
            "config": {
                "protocols": list(cfg.protocols),
                "scenarios": list(cfg.scenarios),
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
            "rolling_restart": rolling,
        }


__all__ = ["DEFAULT_OUT", "BenchConfig", "BenchError", "Change", "RebalanceBench"]
