"""Everything one scenario run starts, as real processes: ZooKeeper, brokers, producers, consumers.

:class:`RunCluster` owns the processes of a run and the handles a fault needs (which broker coordinates, which
consumers belong to which group, the TCP proxy one consumer talks through).  It is used from the scenario runner's
thread and, under the random nemesis, from two fault threads at once (:mod:`~zkcoord.testbed.scenario.nemesis`): the
methods that start processes or change the membership hold one lock, the rest only read (a ZooKeeper client is
thread-safe), and :attr:`RunCluster.away` names the consumers a fault took away on purpose (paused, cut off), so that
another fault's "stable" waits for the group without them.
"""

from __future__ import annotations

import json
import signal
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from zkcoord.admin.groups import GroupStatus, describe_group
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import CodecError, ZkCoordError, ZkError
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.runtime.journal import Journal
from zkcoord.testbed.procs import ChildProcess, ProcessError, wait_until
from zkcoord.testbed.scenario.proxy import TcpProxy
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver import ZkServer, ZkServerConfig
from zkcoord.zkserver.ensemble import ZkEnsemble


@dataclass(frozen=True, slots=True)
class Workload:
    """The topics and groups of a run: a static group on one topic, a white_list group on a topic family."""

    static_topic: str = "orders"
    static_partitions: int = 8
    static_group: str = "billing"
    static_threads: int = 2
    static_consumers: int = 3
    wildcard_topics: tuple[str, ...] = ("events-a", "events-b")
    wildcard_partitions: int = 4
    wildcard_group: str = "audit"
    wildcard_regex: str = "events-.*"
    wildcard_consumers: int = 2
    rate: int = 200  # records/s per topic
    session_timeout_s: float = 3.0
    #: how the coordinator's consumers ask to be rebalanced: ``eager`` or ``incremental`` (docs/protocol.md)
    rebalance: str = "eager"

    @property
    def topics(self) -> list[str]:
        return [self.static_topic, *self.wildcard_topics]


#: How a member of the migration scenario's zk-client group rebalances: quick retries, so that a conflict with a
#: slower member costs a fraction of a second, as a tuned 0.8 deployment would have it.
LEGACY_ARGS = ("--protocol", "zk-client", "--rebalance-backoff", "0.5", "--rebalance-max-retries", "20")


@dataclass
class Member:
    group: str
    proc: ChildProcess
    via_proxy: bool = False
    #: ``coordinator`` (the coordinator's eager protocol), ``zk-client``, ``migrating`` (a coordinator consumer
    #: started with ``--migrating``), ``consumer`` (KIP-848's consumer protocol: ``--protocol consumer``), or
    #: ``classic-range`` / ``classic-roundrobin`` (the classic protocol with those strategies: the classic-switch
    #: scenario passes its flags as ``extra``)
    kind: str = "coordinator"

    @property
    def beside_zk_client(self) -> bool:
        """Whether this member belongs to a zk-client migration (the group is settled the migration's way)."""
        return self.kind in ("zk-client", "migrating")


@dataclass
class RunCluster:
    run_dir: Path
    workload: Workload
    unsafe: bool = False
    ensemble: bool = False
    external_zk: str | None = None
    stack: ExitStack = field(default_factory=ExitStack)
    brokers: dict[int, ChildProcess] = field(default_factory=dict)
    members: list[Member] = field(default_factory=list)
    producers: dict[str, ChildProcess] = field(default_factory=dict)
    proxy: TcpProxy | None = None
    zk_server: ZkServer | None = None
    zk_ensemble: ZkEnsemble | None = None
    connect: str = ""
    #: pids of consumers a fault has taken away on purpose (SIGSTOPped, cut off): alive, but not group members
    away: set[int] = field(default_factory=set)
    _serial: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.journal_dir = self.run_dir / "journal"
        self.data_dir = self.run_dir / "data"
        self.logs = self.run_dir / "logs"
        self.fault_dir = self.run_dir / "faults"
        for d in (self.journal_dir, self.data_dir, self.logs, self.fault_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.journal_dir, "scenario")

    # --- start and stop ---------------------------------------------------------------------------------------

    def start_zookeeper(self) -> str:
        if self.external_zk:
            self.connect = self.external_zk
        elif self.ensemble:
            self.zk_ensemble = self.stack.enter_context(ZkEnsemble(3, ZkServerConfig(data_dir=self.run_dir / "zk")))
            self.connect = self.zk_ensemble.connect_string
        else:
            self.zk_server = self.stack.enter_context(ZkServer(ZkServerConfig(data_dir=self.run_dir / "zk")))
            self.connect = self.zk_server.connect_string
        # The harness's own session: a just-elected ensemble on a loaded machine took more than the client's default
        # 10 s to accept it (seed 5 of a 20-seed run at load 35), so a server the run started itself gets 60 s; a
        # --zk the user gave keeps the default, so a wrong address is still one error line after 10 s.
        connect_s = 10.0 if self.external_zk else 60.0
        admin = ZkConfig.from_string(self.connect, session_timeout_s=10, connect_timeout_s=connect_s)
        self.admin = self.stack.enter_context(ZkClient(admin))
        first_host, first_port = ZkConfig.from_string(self.connect).address.hosts[0]
        self.proxy = self.stack.enter_context(TcpProxy(first_host, first_port))
        return self.connect

    def close(self) -> None:
        self.stack.close()
        self.journal.close()

    def _common(self, zk: str | None = None) -> list[str]:
        return [
            "--zk", zk or self.connect,
            "--session-timeout", str(self.workload.session_timeout_s),
            "--journal", str(self.journal_dir),
        ]  # fmt: skip

    def _spawn(self, args: list[str], name: str) -> ChildProcess:
        proc = ChildProcess(args, self.logs / f"{name}.log", env={"ZKCOORD_FAULT_DIR": str(self.fault_dir)})
        with self._lock:  # two fault threads may start processes at once: one ExitStack
            proc.start()
            self.stack.callback(proc.terminate)
        return proc

    def start_broker(self, broker_id: int) -> ChildProcess:
        args = ["broker", "--id", str(broker_id), *self._common(), "--rebalance-timeout", "8"]
        if self.unsafe:
            args.append("--unsafe")
        proc = self._spawn(args, f"broker-{broker_id}-{self._next()}")
        with self._lock:
            self.brokers[broker_id] = proc
        # A process start and its imports alone took over 30 s on a 2-core machine running other suites beside
        # the demo: the deadline is for a broker that never registers, not a slow start.
        wait_until(lambda: self._registered(broker_id), 90, f"broker {broker_id} to register")
        return proc

    def _registered(self, broker_id: int) -> bool:
        try:
            return self.admin.exists(paths.broker(broker_id)) is not None
        except ZkError:  # ZooKeeper restarting under another fault: not known to be registered yet
            return False

    def _next(self) -> int:
        with self._lock:
            self._serial += 1
            return self._serial

    def create_topics(self) -> None:
        admin = TopicAdmin(self.admin, Journal(self.journal_dir, "topic-admin"))
        admin.create(self.workload.static_topic, self.workload.static_partitions)
        for topic in self.workload.wildcard_topics:
            admin.create(topic, self.workload.wildcard_partitions)

    def start_consumer(
        self, group: str, *, via_proxy: bool = False, kind: str = "coordinator", extra: tuple[str, ...] = ()
    ) -> Member:
        """Start a consumer of ``group``: ``kind`` is ``coordinator``, ``zk-client``, ``migrating`` or ``consumer``;
        ``extra``: more ``zkcoord consume`` options.  In an unsafe run a ``migrating`` consumer is started without
        ``--migrating`` (the contrast: a naive migration), and a ``consumer`` one with ``--unsafe`` like every
        coordinator consumer (its brokers, fences off, run its group by the classic path)."""
        w = self.workload
        if group == w.static_group:
            subscription = ["--topic", f"{w.static_topic}:{w.static_threads}"]
        else:
            subscription = ["--whitelist", w.wildcard_regex, "--threads", "1"]
        zk = self.proxy.address if via_proxy and self.proxy else None
        args = ["consume", "--group", group, *subscription, *self._common(zk), "--data-dir", str(self.data_dir)]
        args += ["--auto-commit-interval", "0.5"]
        if kind == "zk-client":
            args += LEGACY_ARGS
        elif kind == "migrating" and not self.unsafe:
            args.append("--migrating")
        elif kind == "consumer":
            args += ["--protocol", "consumer"]
        if kind not in ("zk-client", "consumer") and w.rebalance == "incremental":
            args += ["--rebalance", "incremental"]
        if self.unsafe and kind != "zk-client":
            args.append("--unsafe")
        args += extra
        member = Member(group, self._spawn(args, f"consumer-{group}-{self._next()}"), via_proxy, kind)
        with self._lock:
            self.members.append(member)
        return member

    def start_producers(self) -> None:
        for topic in self.workload.topics:
            args = ["produce", topic, "--forever", "--rate", str(self.workload.rate), "--size", "64", "--keys", "16"]
            self.producers[topic] = self._spawn(
                [*args, *self._common(), "--data-dir", str(self.data_dir)], f"producer-{topic}"
            )

    def stop_producers(self) -> None:
        for proc in self.producers.values():
            proc.signal(signal.SIGTERM)
        for proc in self.producers.values():
            try:
                proc.wait(15)
            except ProcessError:  # stuck in its stop: killed, so that nothing is produced while the groups drain
                proc.signal(signal.SIGKILL)
                proc.wait(10)

    # --- what a fault needs to know ---------------------------------------------------------------------------

    def coordinator(self) -> int | None:
        try:
            data, _ = self.admin.get(paths.COORDINATOR)
            return CoordinatorInfo.decode(data).broker_id
        except (ZkError, CodecError):
            return None

    def live_members(self, group: str | None = None) -> list[Member]:
        with self._lock:
            members = list(self.members)
        return [m for m in members if m.proc.alive() and (group is None or m.group == group)]

    def present(self, group: str | None = None) -> list[Member]:
        """The live members no fault has taken away (:attr:`away`): those a settled group must count."""
        return [m for m in self.live_members(group) if m.proc.pid not in self.away]

    def owns(self, group: str, consumer_id: str) -> bool:
        """Whether the group's target gives ``consumer_id`` any partition."""
        try:
            state = GroupState.decode(self.admin.get(paths.group_state(group))[0])
        except ZkCoordError:
            return False
        prefix = f"{consumer_id}-"
        return any(thread.startswith(prefix) for parts in state.target.values() for thread in parts.values())

    def groups(self) -> list[str]:
        return [self.workload.static_group, self.workload.wildcard_group]

    def stable(self, group: str, members: int | None = None) -> bool:
        """The group's state is STABLE with ``members`` members (while it migrates from zk-client, see
        :meth:`migration_settled`).  A consumer-protocol group is stable when every member reached its target
        (the phase is ``stable``, not ``reconciling``)."""
        live = self.live_members(group)
        if any(m.beside_zk_client for m in live):
            return self.migration_settled(group, live)
        try:
            description = describe_group(self.admin, group, self.data_dir)
        except ZkCoordError:  # not there yet, or mid-change: not stable
            return False
        if description.state is not GroupStatus.STABLE or description.membership_changed:
            return False
        if description.persisted is not None and description.persisted.phase is GroupPhase.RECONCILING:
            return False
        return members is None or len(description.members) == members

    def migration_settled(self, group: str, live: list[Member]) -> bool:
        """A group with zk-client members is settled when every partition of its subscription has a Kafka 0.8
        owner znode (members of both protocols claim them before fetching) and, if it has coordinator members, the
        coordinator is STABLE over them beside the zk-client ones."""
        coordinator = sum(m.kind != "zk-client" for m in live)
        legacy = len(live) - coordinator
        try:
            # A naive migration (unsafe run) leaves the owner znodes to the zk-client members alone.
            for topic in self._subscribed(group) if legacy or not self.unsafe else ():
                count = TopicAdmin(self.admin).describe(topic).partitions
                owners = self.admin.children_many([legacy_paths.owners(group, topic)])[0] or []
                if len(owners) != count:
                    return False
            if coordinator == 0:
                return True
            state = GroupState.decode(self.admin.get(paths.group_state(group))[0])
        except (ZkError, CodecError):
            return False
        if self.unsafe:  # a naive migration: the coordinator does not know of the zk-client members
            return state.phase is GroupPhase.STABLE and len(state.members) == coordinator
        return state.phase is GroupPhase.STABLE and len(state.members) == coordinator and len(state.legacy) == legacy

    def _subscribed(self, group: str) -> list[str]:
        w = self.workload
        return [w.static_topic] if group == w.static_group else list(w.wildcard_topics)

    def lag(self, group: str) -> int | None:
        try:
            description = describe_group(self.admin, group, self.data_dir)
        except ZkCoordError:  # not there yet: no lag to tell
            return None
        if description.problems and any("offset" in p for p in description.problems):
            return None
        total = 0
        for part in description.partitions:
            if part.lag is None:
                return None
            total += part.lag
        return total

    def wait_all_stable(self, timeout: float) -> None:
        def ok() -> bool:
            return all(self.stable(g, len(self.present(g))) for g in self.groups())

        wait_until(ok, timeout, "every group stable", interval=0.1)

    def record_fault(self, fault: str, target: str, detail: str = "") -> None:
        self.journal.emit("fault.injected", fault=fault, target=target, detail=detail)

    def describe(self) -> dict[str, object]:
        return {
            "zookeeper": self.connect,
            "brokers": sorted(self.brokers),
            "consumers": {g: len(self.live_members(g)) for g in self.groups()},
            "unsafe": self.unsafe,
        }

    def dump(self) -> str:
        return json.dumps(self.describe())
