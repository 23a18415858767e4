"""The end-to-end tour behind ``zkcoord demo``, as it stands today.

It runs every part that exists, each as a real process against a real ZooKeeper: the embedded ZooKeeper server,
a broker (``zkcoord broker``), topic creation (``zkcoord topic create``), a producer (``zkcoord produce``), reading
everything back from the partition logs and checking it against the producer's journal, and a clean shutdown.
Later issues grow ``zkcoord demo`` into the split-brain demonstration; this tour stays as its first phase.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from zkcoord import paths
from zkcoord.journal import read_journal
from zkcoord.partlog import PartitionReader
from zkcoord.procs import ChildProcess, ProcessError, run_command, wait_until
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver import ZkServer, ZkServerConfig


@dataclass
class TourResult:
    run_dir: Path
    produced: int = 0
    read_back: int = 0
    per_partition: dict[int, int] = field(default_factory=dict)
    missing: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.produced > 0 and self.missing == 0 and self.read_back == self.produced


@contextlib.contextmanager
def _zookeeper(zk: str | None, run_dir: Path, say: Callable[[str], None]) -> Iterator[str]:
    if zk is not None:
        say(f"using ZooKeeper at {zk}")
        yield zk
        return
    with ZkServer(ZkServerConfig(data_dir=run_dir / "zookeeper")) as server:
        say(f"started ZooKeeper {server.connect_string} (pid {server.pid}, data {run_dir / 'zookeeper'})")
        yield server.connect_string
    say("stopped ZooKeeper")


def run_tour(
    run_dir: Path,
    *,
    zk: str | None = None,
    topic: str = "demo",
    partitions: int = 4,
    count: int = 20_000,
    say: Callable[[str], None] = print,
) -> TourResult:
    """Run the tour in ``run_dir`` (created); return what it measured.  Raises on any failed step."""
    started = time.monotonic()
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = run_dir / "journal"
    data = run_dir / "data"
    logs = run_dir / "logs"
    result = TourResult(run_dir)
    with _zookeeper(zk, run_dir, say) as connect:
        common = ["--zk", connect, "--session-timeout", "4"]
        broker = ChildProcess(["broker", "--id", "0", *common, "--journal", str(journal)], logs / "broker-0.log")
        with broker:
            _wait_registered(connect, broker)
            say(f"broker 0 registered at {paths.broker(0)} (pid {broker.pid})")
            run_command(
                ["topic", "create", topic, "--partitions", str(partitions), *common, "--journal", str(journal)],
                logs / "topic-create.log",
                timeout=60,
            )
            say(f"created topic {topic!r} with {partitions} partitions")
            out = run_command(
                [
                    "produce",
                    topic,
                    "--count",
                    str(count),
                    "--keys",
                    "64",
                    "--size",
                    "100",
                    *common,
                    "--data-dir",
                    str(data),
                    "--journal",
                    str(journal),
                ],
                logs / "produce.log",
                timeout=300,
            )
            say(out.strip().splitlines()[-1])
            _read_back(result, data, journal, topic, partitions)
            say(
                f"read back {result.read_back} of {result.produced} records from the partition logs: "
                + ", ".join(f"p{p}={n}" for p, n in sorted(result.per_partition.items()))
            )
            status = broker.terminate()
            if status != 0:
                raise ProcessError(f"broker exited with status {status} on SIGTERM: {broker.tail(1)}")
            say("broker stopped cleanly on SIGTERM (exit 0)")
    result.seconds = time.monotonic() - started
    return result


def _wait_registered(connect: str, broker: ChildProcess) -> None:
    with ZkClient(ZkConfig.from_string(connect), name="tour") as client:

        def registered() -> bool:
            if not broker.alive():
                raise ProcessError(f"broker exited: {broker.tail(1)}")
            return client.exists(paths.broker(0)) is not None

        wait_until(registered, 30, "broker 0 to register")


def _read_back(result: TourResult, data: Path, journal: Path, topic: str, partitions: int) -> None:
    """Compare what the logs hold with the ``produce.batch`` ranges the producer journalled."""
    expected: dict[int, set[int]] = {}
    for event in read_journal(journal):
        if event.event == "produce.batch" and event.fields.get("topic") == topic:
            p = int(event.fields["partition"])
            expected.setdefault(p, set()).update(range(int(event.fields["first"]), int(event.fields["last"]) + 1))
    result.produced = sum(len(v) for v in expected.values())
    for p in range(partitions):
        reader = PartitionReader(data, topic, p)
        seen: set[int] = set()
        position = reader.start_offset
        while batch := reader.read(position, max_records=10_000):
            seen.update(r.offset for r in batch)
            position = batch[-1].offset + 1
        result.per_partition[p] = len(seen)
        result.read_back += len(seen & expected.get(p, set()))
        result.missing += len(expected.get(p, set()) - seen)
