"""Where a ``zkcoord bench rebalance`` run plays: its directories, its ZooKeeper (started here on a free port with a
temporary data dir, or ``--zk``), the broker process hosting the coordinator, the topics with their records, and each
protocol's worker processes.

:class:`BenchEnvironment` is owned by :class:`zkcoord.bench.rebalance.run.RebalanceBench` and used on the driver's one
thread; what it starts is stopped by the run's :class:`~contextlib.ExitStack` (the workers by the protocol's run).
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path

from zkcoord.bench.common import BenchError
from zkcoord.bench.rebalance.cluster import CpuMeter, WorkerProcess, child_env, stop_all
from zkcoord.bench.rebalance.config import BenchConfig, Progress
from zkcoord.bench.rebalance.timeline import COORDINATED
from zkcoord.bench.rebalance.zkfloor import mntr_address, read_counters
from zkcoord.data.partlog import PartitionWriter, WriterConfig
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient
from zkcoord.zkserver import ZkServer, ZkServerConfig, mntr


class BenchEnvironment:
    """The run's surroundings (see the module docstring); filled in by :meth:`prepare_dirs`,
    :meth:`start_zookeeper` and :meth:`start_broker`, in that order."""

    def __init__(self, config: BenchConfig, say: Progress, cpu: CpuMeter) -> None:
        self.config = config
        self.say = say
        self.cpu = cpu
        self.root = Path()
        self.journal_dir = Path()
        self.data_dir = Path()
        self.hosts = ""
        self.mntr_at: tuple[str, int] = ("", 0)
        self.zk_pid: int | None = None  # the server's, when started here (its CPU is measured)
        self.zk_version = ""
        self.broker_id = 1
        self.coordinator_broker: int | None = None

    def prepare_dirs(self, stack: ExitStack) -> None:
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

    def start_zookeeper(self, stack: ExitStack) -> None:
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

    def start_broker(self, stack: ExitStack, admin: ZkClient) -> None:
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

    def create_topics(self, admin: ZkClient, names: list[str]) -> None:
        cfg = self.config
        topics = TopicAdmin(admin)
        records = [(b"k%d" % i, b"v" * 8) for i in range(cfg.max_poll_records)]
        writer_config = WriterConfig(exclusive=True, fsync_on_roll=False)
        for topic in names:
            topics.create(topic, cfg.partitions)
            for p in range(cfg.partitions):
                with PartitionWriter(self.data_dir, topic, p, config=writer_config) as writer:
                    writer.append_batch(records)
        self.say(
            f"{len(names)} topic(s) of {cfg.partitions} partitions, {cfg.max_poll_records} records in each partition"
        )

    def start_workers(self, protocol: str, count: int, short: str) -> list[WorkerProcess]:
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
                log_path = self.root / "logs" / f"worker-{short}{i}.log"
                workers.append(WorkerProcess(i, args, log_path, env).start())
            for w in workers:
                w.call({"op": "ping"}, timeout=30.0)
        except BaseException:
            stop_all(workers, timeout=10.0)
            raise
        return workers
