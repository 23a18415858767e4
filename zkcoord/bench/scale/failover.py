"""The coordinator at scale: forming 1 000 groups of 10 000 consumers, then a coordinator failover at that size.

    zkcoord bench scale [--size small|medium|large] [--groups 1000] [--consumers 10000] [--processes 4]
        [--partitions 4] [--session-timeout 4] [--consumer-session-timeout 10] [--zk-no-fsync] [--zk-heap-mb 1024]
        [--failovers 3] [--profile] [--out bench-results/scale.json] [--keep DIR]

Everything is real and started here: one ZooKeeper (:class:`~zkcoord.zkserver.ZkServer`, ``forceSync`` on unless
``--zk-no-fsync``), two brokers as processes (``python -m zkcoord broker``, each hosting a coordinator, journals in the
run directory), one topic of ``--partitions`` partitions (:class:`~zkcoord.data.topics.TopicAdmin`), and ``--processes``
swarm processes (:mod:`zkcoord.bench.scale.swarm`) sharing the groups and consumers (``consumers / groups`` per group,
static subscription, 1 thread each; one session per consumer).

**Formation.**  From the swarms' start until every session is registered (their ready files), and until every
group's ``state`` is STABLE with all its members (polled with pipelined reads); the old coordinator's journal gives
how many rebalances that took.

**Failover.**  The coordinator broker is SIGKILLed.  Its session expires on the server after the session timeout and
its ephemeral ``/consumers/coordinator`` is deleted: a watch records that instant (*expiry*).  The standby broker wins
the election (``coordinator.elected`` in its journal) and re-examines every group; a group counts as re-examined at
its first ``rebalance.skipped`` or ``rebalance.completed`` event of the new term.  Reported: expiry -> elected,
elected -> every group re-examined, the total (the issue's goal: under 10 s), how many groups needed an actual
rebalance, and when the new coordinator went idle (its last rebalance event: it may examine a group more than once).
At the end every group's state is checked again (STABLE, all members).  Journal ``mono`` stamps and this process's
``time.monotonic_ns()`` are the same system-wide clock (CLOCK_MONOTONIC), so the intervals span processes.

With ``--profile`` the standby broker is sampled by py-spy (``--idle``: waiting on ZooKeeper counts, so the samples
add up to wall time) from before the kill until it is idle; the collapsed stacks are kept in the run directory and
summarised by :mod:`zkcoord.bench.scale.profile`.

The table goes to stdout; the rows to ``--out`` (default ``bench-results/scale.json``), keyed by configuration,
so a small and a full run sit side by side.  Every wait has a deadline; every process is stopped in ``finally``.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from zkcoord.bench.scale.children import Profiler, SwarmProcess
from zkcoord.bench.scale.observe import (
    JournalTail,
    formation_summary,
    group_states,
    journal_of,
    quiet_since,
    stable_count,
    wait_for,
)
from zkcoord.bench.scale.params import GOAL_S, PROFILE_RATE, STARTUP, TOPIC, Params, Result, say, seconds
from zkcoord.bench.scale.probe import examine_one_at_a_time, examine_pipelined, per_request_us, round_trip_ms
from zkcoord.bench.scale.profile import report
from zkcoord.bench.scale.report import save, table
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import CodecError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.testbed.procs import ChildProcess, ProcessError
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver import ZkServer, ZkServerConfig

__all__ = ["Params", "Result", "ScaleRun", "bench_scale"]


class ScaleRun:
    """One run: the cluster, the swarms, formation, failover.  :meth:`run` cleans up every process it started."""

    def __init__(self, params: Params, run_dir: Path) -> None:
        self.params = params
        self.run_dir = run_dir
        self.journal_dir = run_dir / "journal"
        self.groups = params.group_names()
        self.result = Result(key=params.key(), params=asdict(params))
        self.brokers: dict[int, ChildProcess] = {}
        self.swarms: list[SwarmProcess] = []
        self.swarm_stats: list[dict[str, Any]] = []
        self.hosts = ""
        self._stack = ExitStack()
        self._admin: ZkClient | None = None

    @property
    def admin(self) -> ZkClient:
        assert self._admin is not None
        return self._admin

    def run(self) -> Result:
        with self._stack:
            self._start_cluster()
            self._form()
            for i in range(self.params.failovers):
                if i:
                    self._restart_standby()
                self.result.failovers.append(self._failover(i))
            self._probe()
            self._collect_swarm_stats()
        return self.result

    # --- set-up ---

    def _start_cluster(self) -> None:
        p = self.params
        zk_server = ZkServer(ZkServerConfig(heap_mb=p.zk_heap_mb, fsync=p.zk_fsync))
        self._stack.enter_context(zk_server)
        self.hosts = zk_server.connect_string
        say(f"ZooKeeper on {self.hosts} (heap {p.zk_heap_mb} MB, fsync {'on' if p.zk_fsync else 'off'})")
        config = ZkConfig.from_string(self.hosts, session_timeout_s=30.0)
        self._admin = self._stack.enter_context(ZkClient(config, name="bench"))
        self._stack.callback(self._stop_swarms)  # runs before the brokers' and ZooKeeper's clean-up
        self._start_broker(1)
        wait_for(lambda: self.coordinator() is not None, 30, "broker 1 to be elected coordinator")
        self._start_broker(2)
        wait_for(lambda: len(TopicAdmin(self.admin).live_brokers()) == 2, 30, "both brokers registered")
        TopicAdmin(self.admin).create(TOPIC, p.partitions)
        say(f"brokers 1 (coordinator) and 2 up; topic {TOPIC} with {p.partitions} partitions")

    def _start_broker(self, broker_id: int) -> None:
        args = ["broker", "--id", str(broker_id), "--zk", self.hosts, "--host", "scale"]
        args += ["--session-timeout", f"{self.params.session_timeout_s:g}", "--journal", str(self.journal_dir)]
        child = ChildProcess(args, self.run_dir / f"broker-{broker_id}.log")
        self._stack.callback(child.terminate)
        self.brokers[broker_id] = child.start()

    def coordinator(self) -> CoordinatorInfo | None:
        try:
            return CoordinatorInfo.decode(self.admin.get(paths.COORDINATOR)[0])
        except (ZkError, CodecError):  # absent or not written yet
            return None

    def journal(self, broker_id: int) -> JournalTail:
        return JournalTail(journal_of(self.journal_dir, broker_id, self.brokers[broker_id].pid))

    def _check_swarms(self) -> None:
        for s in self.swarms:
            s.check()

    def _stop_swarms(self) -> None:
        for s in self.swarms:
            s.terminate()
        for s in self.swarms:
            with contextlib.suppress(OSError, ValueError):
                self.swarm_stats.append(json.loads(s.stats_file.read_text()))
        self.swarms.clear()

    # --- formation ---

    def _profile(self, broker_id: int, phase: str) -> Profiler | None:
        if not self.params.profile:
            return None
        output = self.run_dir / f"broker-{broker_id}.{phase}.pyspy.txt"
        profiler = Profiler(self.brokers[broker_id].pid, output, PROFILE_RATE).start()
        self._stack.callback(profiler.stop)
        self.result.profile_files[phase] = str(output)
        return profiler

    def _form(self) -> None:
        p = self.params
        info = self.coordinator()
        assert info is not None
        profiler = self._profile(info.broker_id, "formation")
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        for i in range(p.processes):
            first, last = i * p.groups // p.processes, (i + 1) * p.groups // p.processes - 1
            swarm = SwarmProcess(i, params=p, first=first, last=last, hosts=self.hosts, run_dir=self.run_dir)
            self.swarms.append(swarm.start())
        say(f"{p.processes} swarm processes: {p.consumers} sessions in {p.groups} groups")
        wait_for(
            lambda: all(s.ready_file.exists() for s in self.swarms),
            p.form_timeout_s,
            "every session registered",
            progress=lambda: f"{sum(s.ready_file.exists() for s in self.swarms)}/{len(self.swarms)} swarms ready",
            check=self._check_swarms,
            interval=0.02,
        )
        registered_s = time.monotonic() - t0
        say(f"every session registered after {registered_s:.2f} s")
        stable = [0]

        def all_stable() -> bool:
            stable[0] = stable_count(self.admin, self.groups, p.per_group)
            return stable[0] == len(self.groups)

        wait_for(
            all_stable,
            p.form_timeout_s,
            "every group stable",
            interval=0.5,
            progress=lambda: f"{stable[0]}/{len(self.groups)} groups stable",
            check=self._check_swarms,
        )
        stable_s = time.monotonic() - t0
        say(f"every group stable after {stable_s:.2f} s")
        tail = self.journal(info.broker_id)
        wait_for(lambda: quiet_since(tail) > 2.0, 120, "the coordinator to go idle", interval=0.2)
        if profiler is not None:
            profiler.stop()
        self.result.formation = {
            "loadavg_1min_at_start": round(load, 2),
            "sessions_registered_s": round(registered_s, 3),
            "groups_stable_s": round(stable_s, 3),
            **formation_summary(tail.events),
        }

    # --- failover ---

    def _restart_standby(self) -> None:
        """Start the broker killed last time again: it becomes the standby of the next failover."""
        dead = next(b for b, child in self.brokers.items() if not child.alive())
        self._start_broker(dead)
        wait_for(lambda: len(TopicAdmin(self.admin).live_brokers()) == 2, 60, f"broker {dead} registered again")
        tail = self.journal(dead)

        def standby() -> bool:
            tail.poll()
            return any(e.get("ev") == "coordinator.standby" for e in tail.events)

        wait_for(standby, 60, f"broker {dead} standing by (its watch on /consumers/coordinator set)")
        say(f"broker {dead} restarted as the standby")

    def _failover(self, index: int) -> dict[str, Any]:
        p = self.params
        info = self.coordinator()
        assert info is not None
        old_id, old_epoch = info.broker_id, info.epoch
        new_id = 2 if old_id == 1 else 1
        tail = self.journal(new_id)
        tail.poll()
        deleted_at: list[int] = []
        deleted = threading.Event()

        def on_change(event: Any) -> None:
            if event.type == "DELETED":
                deleted_at.append(time.monotonic_ns())
                deleted.set()

        self.admin.exists(paths.COORDINATOR, watch=on_change)
        profiler = self._profile(new_id, "failover") if index == 0 else None
        say(f"failover {index + 1}: SIGKILL broker {old_id} (coordinator of epoch {old_epoch}); {new_id} takes over")
        load = os.getloadavg()[0]
        killed_at = time.monotonic_ns()
        self.brokers[old_id].signal(signal.SIGKILL)
        self.brokers[old_id].wait(10)
        if not deleted.wait(p.session_timeout_s * 2 + 10):
            raise ProcessError("the old coordinator's znode was not deleted (session not expired)")
        expired_at = deleted_at[0]
        say(f"old session expired {(expired_at - killed_at) / 1e9:.2f} s after the kill")

        def elected() -> dict[str, Any] | None:
            tail.poll()
            wanted = old_epoch + 1
            return next((e for e in tail.events if e["ev"] == "coordinator.elected" and e["epoch"] == wanted), None)

        wait_for(lambda: elected() is not None, 60, f"broker {new_id} to be elected")
        elected_event = elected()
        assert elected_event is not None
        elected_at = int(elected_event["mono"])
        first_seen: dict[str, int] = {}

        def examined() -> bool:
            for e in tail.poll():
                if e["ev"] in ("rebalance.skipped", "rebalance.completed") and e["group"] not in first_seen:
                    first_seen[e["group"]] = int(e["mono"])
            return len(first_seen) == len(self.groups)

        wait_for(
            examined,
            p.failover_timeout_s,
            "every group re-examined",
            interval=0.02,
            progress=lambda: f"{len(first_seen)}/{len(self.groups)} groups re-examined",
        )
        say(f"every group re-examined {(max(first_seen.values()) - expired_at) / 1e9:.2f} s after the expiry")

        def settled() -> bool:
            tail.poll()
            started = {e["group"] for e in tail.events if e["ev"] == "rebalance.started"}
            ended = {e["group"] for e in tail.events if e["ev"] in ("rebalance.completed", "rebalance.failed")}
            return started <= ended and quiet_since(tail) > 3.0

        wait_for(settled, p.failover_timeout_s, "the new coordinator to go idle", interval=0.2)
        if profiler is not None:
            profiler.stop()
        term = [e for e in tail.events if int(e["mono"]) >= elected_at]
        return {
            "old_coordinator": old_id,
            "new_coordinator": new_id,
            "epoch": old_epoch + 1,
            "loadavg_1min_at_kill": round(load, 2),
            "kill_to_expiry_s": seconds(expired_at - killed_at),
            "expiry_to_elected_s": seconds(elected_at - expired_at),
            **self._term_summary(term, elected_at, expired_at, first_seen),
        }

    def _term_summary(
        self, term: list[dict[str, Any]], elected_at: int, expired_at: int, first_seen: dict[str, int]
    ) -> dict[str, Any]:
        work = [e for e in term if e["ev"] in ("rebalance.skipped", "rebalance.completed")]
        startup = [int(e["mono"]) for e in term if e["ev"] == "rebalance.requested" and e["trigger"] == STARTUP]
        started = [e for e in term if e["ev"] == "rebalance.started"]
        rebalanced = sorted({e["group"] for e in started})
        # A group is stable again at its first examination if it needed nothing, else at its last completion.
        last_done = {e["group"]: int(e["mono"]) for e in term if e["ev"] == "rebalance.completed"}
        stable_again_at = max(last_done.get(g, first_seen[g]) for g in self.groups)
        all_examined_at = max(first_seen.values())
        per_group = self.params.per_group
        states = group_states(self.admin, self.groups)
        not_stable = [
            g for g, s in states.items() if s is None or s.phase is not GroupPhase.STABLE or len(s.members) != per_group
        ]
        return {
            "elected_to_groups_listed_s": seconds(max(startup) - elected_at) if startup else None,
            "elected_to_first_examined_s": seconds(min(first_seen.values()) - elected_at),
            "elected_to_all_examined_s": seconds(all_examined_at - elected_at),
            "expiry_to_all_examined_s": seconds(all_examined_at - expired_at),
            "expiry_to_stable_again_s": seconds(stable_again_at - expired_at),
            "expiry_to_idle_s": seconds(max(int(e["mono"]) for e in work) - expired_at),
            "examinations": len(work),
            "examinations_first_pass": sum(1 for e in work if e.get("trigger") == STARTUP),
            "groups_rebalanced": len(rebalanced),
            "rebalances_completed": len(last_done) and sum(1 for e in term if e["ev"] == "rebalance.completed"),
            "rebalance_reasons": dict(Counter(str(e["reason"]) for e in started).most_common()),
            "rebalance_partitions_planned": {
                str(k): v for k, v in sorted(Counter(int(e["partitions"]) for e in started).items())
            },
            "rebalanced_sample": rebalanced[:10],
            "groups_not_stable_at_end": len(not_stable),
            "goal_s": GOAL_S,
            "goal_met": (stable_again_at - expired_at) / 1e9 < GOAL_S,
        }

    def _probe(self) -> None:
        """Unit costs on the same loaded cluster (every session still up), from this process."""
        topics = {TOPIC: self.params.partitions}
        rtt = round_trip_ms(self.admin)
        members = [paths.member(g, c) for g in self.groups for c in self.admin.get_children(paths.group_ids(g))]
        kazoo_us, asyncio_us = per_request_us(self.admin, ("127.0.0.1", int(self.hosts.rsplit(":", 1)[1])), "", members)
        one = examine_one_at_a_time(self.admin, self.groups, topics)
        piped = examine_pipelined(self.admin, self.groups, topics)
        if self.params.profile:  # where the CPU of an examination goes (cProfile: deterministic, this thread only)
            profiler = cProfile.Profile()
            profiler.runcall(examine_one_at_a_time, self.admin, self.groups, topics)
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
            path = self.run_dir / "probe.cprofile.txt"
            path.write_text(out.getvalue())
            self.result.profile_files["probe (cProfile)"] = str(path)
        self.result.probe = {
            "round_trip_ms": rtt,
            "pipelined_reads": len(members),
            "kazoo_us_per_pipelined_read": kazoo_us,
            "asyncio_us_per_pipelined_read": asyncio_us,
            "examine_one_at_a_time_s": round(one.seconds, 3),
            "examine_one_at_a_time_ms_per_group": round(one.seconds * 1000 / len(self.groups), 3),
            "examine_pipelined_s": round(piped.seconds, 3),
            "necessary_one_at_a_time": one.necessary,
            "necessary_pipelined": piped.necessary,
        }
        say(f"probe: {self.result.probe}")

    def _collect_swarm_stats(self) -> None:
        self._stop_swarms()
        new_epochs = {int(f["epoch"]) for f in self.result.failovers}
        counters: Counter[str] = Counter()
        by_epoch: Counter[int] = Counter()
        for doc in self.swarm_stats:
            counters.update(doc["counters"])
            for member in doc["members"].values():
                by_epoch.update(s[2] for s in member["seen"] if s[2] in new_epochs)
        for failover in self.result.failovers:
            failover["commands_consumers_got"] = by_epoch.get(int(failover["epoch"]), 0)
        self.result.swarm = {"counters": dict(counters)}


@contextlib.contextmanager
def run_directory(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    path = Path(tempfile.mkdtemp(prefix="zkcoord-scale-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def bench_scale(params: Params, out: Path, keep: Path | None = None) -> dict[str, Any]:
    """Run the benchmark (blocks for the whole run), print its table, add its row to ``out`` and return the document.

    Every process it starts is stopped before it returns or raises.  The run directory is ``keep`` if given (kept),
    else a temporary one (removed; kept when profiling, since the profile outlives the run).
    """
    if keep is None and params.profile:
        keep = Path(tempfile.mkdtemp(prefix="zkcoord-scale-"))
    with run_directory(keep) as run_dir:
        say(f"run directory {run_dir}")
        result = ScaleRun(params, run_dir).run()
        print(table(result))
        for phase, profile in result.profile_files.items():
            print(f"\n--- where the time went: {phase} ---")
            path = Path(profile)
            print(path.read_text() if phase.startswith("probe") else report(path, rate=PROFILE_RATE))
    document = save(result, out)
    print(f"\nwrote {out}")
    return document
