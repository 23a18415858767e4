"""The run journal: versioned JSON-lines events, one file per process, in a run's journal directory.

Every process of a run (brokers, producers, consumers, the scenario runner) appends what it did to
``<dir>/<role>.<pid>.jsonl``.  The journal is the evidence a run leaves behind: the demo's verdict and the Spark
pipeline read nothing else.  The schema is documented in ``docs/journal.md`` and versioned by :data:`SCHEMA_VERSION`.

Durability: each event is written with a single ``write(2)`` on an ``O_APPEND`` descriptor and no user-space
buffer, so an event that :meth:`Journal.emit` returned from survives a SIGKILL of the process (it is in the kernel's
page cache); only a crash of the machine can lose it.  A process killed *inside* ``emit`` can at worst leave one
truncated last line, which readers skip and count.

Thread safety: :meth:`Journal.emit` may be called from any thread.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zkcoord import __version__
from zkcoord.errors import ConfigurationError

SCHEMA_VERSION = 1

#: Every event type, with what it records.  ``emit`` refuses others, so the catalogue in docs/journal.md (which a
#: test keeps in step with this table) is complete.
EVENTS: dict[str, str] = {
    "process.started": "a process began: role, argv, version",
    "process.stopped": "a process ended cleanly: reason",
    "zk.state": "ZooKeeper connection state changed: state (connected|suspended|lost), session",
    "broker.registered": "a broker registered /brokers/ids/<id>: broker, host, port, session",
    "broker.deregistered": "a broker removed its registration on shutdown: broker",
    "topic.created": "a topic was created: topic, partitions, replicas",
    "topic.altered": "a topic grew: topic, old_partitions, partitions",
    "topic.refused": "a topic command was refused: topic, reason",
    "produce.started": "a producer began: topic, partitions, count, rate, size, keys",
    "produce.batch": "records appended to one partition: topic, partition, first, last, count, bytes",
    "produce.finished": "a producer finished: topic, count, seconds, records_per_s, mb_per_s",
    "log.recovered": "a torn tail was cut off a partition log on open: topic, partition, bytes_cut",
    "coordinator.elected": "a broker won the coordinator election: broker, epoch, session",
    "coordinator.standby": "a broker lost the election and watches the coordinator's znode: broker",
    "coordinator.resigned": "a coordinator gave up its term: broker, epoch, reason (fenced, session lost, stopping)",
    "coordinator.metrics": "periodic coordinator counters: rebalances, latency percentiles, groups by state",
    "rebalance.requested": "a group was queued for a rebalance: group, trigger",
    "rebalance.skipped": "the necessity check found nothing to do: group, reason, trigger",
    "rebalance.started": "an attempt began: group, generation, epoch, attempt, trigger, reason, members, partitions",
    "rebalance.barrier": "every stop-fetcher of an attempt was acknowledged: group, generation, epoch, stop_ms",
    "rebalance.completed": "a rebalance finished: group, generation, epoch, attempts, latency_ms, stop_ms, start_ms",
    "rebalance.aborted": "an attempt was dropped because a member left: group, generation, epoch, reason",
    "rebalance.retrying": "an attempt failed and will be retried: group, generation, epoch, retry, backoff_s, reason",
    "rebalance.failed": "a rebalance failed for good after its retries: group, generation, epoch, retries, reason",
    "command.sent": "a command was written to a consumer's channel: group, consumer, option, epoch, generation",
    "command.acked": "a consumer deleted (acknowledged) a command: group, consumer, option, epoch, generation",
    "consumer.registered": (
        "a consumer created its member znode: group, consumer, pattern, subscription, session, protocol (zk-client)"
    ),
    "consumer.deregistered": "a consumer removed its member znode on close: group, consumer",
    "consumer.fenced": "a consumer's session expired; it dropped its partitions uncommitted: group, consumer, reason",
    "command.applied": "a consumer applied a command: group, consumer, name, option, epoch, generation, partitions",
    "command.rejected": "a consumer refused (and acknowledged) a command: group, consumer, name, reason, ...",
    "command.awaiting": (
        "a consumer applied a start-fetcher but for partitions still to be handed over to it: group, consumer, "
        "name, epoch, generation, partitions, started"
    ),
    "fetch.started": "a consumer began fetching a partition: group, consumer, thread, topic, partition, offset",
    "fetch.stopped": "a consumer stopped fetching a partition: group, consumer, thread, topic, partition, reason",
    "records.consumed": "records handed to the application: group, consumer, thread, topic, partition, first, last",
    "offsets.committed": "a committed offset: group, consumer, topic, partition, offset",
    "offsets.fenced": "a commit refused because the partition has another owner: group, consumer, topic, partition",
    "owner.repaired": "a consumer rewrote the owner znode of a partition it owns (vanished or unreadable): group, "
    "consumer, topic, partition, thread, reason",
    "member.unreadable": "the coordinator cannot decode a live member's registration (given nothing; stopped first "
    "if it may be fetching): group, consumer, incarnation, stopped",
    "registration.repaired": "a consumer found its registration changed or gone under its session and rewrote it: "
    "group, consumer, reason",
    "lease.expired": "a consumer's lease ran out; it hands out nothing until renewed: group, consumer, deadline_ms",
    "legacy.rebalance.started": "a legacy rebalance attempt began: group, consumer, attempt, trigger",
    "legacy.rebalance.conflict": (
        "a legacy claim met an owner: group, consumer, attempt, topic, partition, thread, owner"
    ),
    "legacy.rebalance.retrying": "a legacy attempt failed: group, consumer, attempt, reason, backoff_s",
    "legacy.rebalance.completed": (
        "a legacy rebalance ended: group, consumer, attempt, partitions, members, latency_ms, outcome"
    ),
    "legacy.rebalance.failed": "a legacy rebalance used up its retries: group, consumer, retries, reason",
    "legacy.session.expired": "a legacy session expired; partitions forgotten: group, consumer, partitions",
    "migration.waiting": (
        "a migrating consumer found owner znodes of its new partitions held: group, consumer, partitions, holders"
    ),
    "migration.claimed": "a migrating consumer claimed partitions it was waiting for: group, consumer, partitions",
    "fault.injected": "the scenario runner injected a fault: fault, target, detail",
    "input.rejected": "bad input was refused without stopping the process (S7): what, path, reason",
}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class JournalEvent:
    """One decoded journal line (see :func:`read_journal`)."""

    ts_ms: int
    mono_ns: int
    seq: int
    role: str
    pid: int
    event: str
    fields: dict[str, Any]


class Journal:
    """Appends events of one process to ``<directory>/<role>.<pid>.jsonl``.

    ``Journal(None, role)`` is a journal that records nothing, for library use without a run directory.
    The clocks are injectable so tests can produce deterministic journals.
    """

    def __init__(
        self,
        directory: Path | None,
        role: str,
        *,
        wall_ms: Callable[[], int] = _now_ms,
        mono_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if not role or "/" in role or role.startswith("."):
            raise ConfigurationError(f"invalid journal role {role!r}")
        self.directory = directory
        self.role = role
        self.pid = os.getpid()
        self._wall_ms = wall_ms
        self._mono_ns = mono_ns
        self._seq = 0
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.path: Path | None = None
        if directory is not None:
            try:
                directory.mkdir(parents=True, exist_ok=True)
                self.path = directory / f"{role}.{self.pid}.jsonl"
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as e:
                raise ConfigurationError(f"cannot write the journal in {directory}: {e.strerror}") from e

    def emit(self, event: str, **fields: Any) -> None:
        """Append one event.  Never blocks on anything but the local disk; raises ValueError for unknown types."""
        if event not in EVENTS:
            raise ValueError(f"unknown journal event type {event!r}; add it to zkcoord.journal.EVENTS")
        with self._lock:
            self._seq += 1
            record = {
                "v": SCHEMA_VERSION,
                "ts": self._wall_ms(),
                "mono": self._mono_ns(),
                "seq": self._seq,
                "role": self.role,
                "pid": self.pid,
                "ev": event,
                **fields,
            }
            if self._fd is None:
                return
            line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode("utf-8")
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def process_started(journal: Journal, argv: list[str]) -> None:
    """Emit the ``process.started`` event every process begins with."""
    journal.emit("process.started", argv=argv, version=__version__, host=socket.gethostname())


@dataclass(slots=True)
class ReadStats:
    """What :func:`read_journal` skipped, so a reader can say so instead of failing."""

    lines: int = 0
    truncated: int = 0
    malformed: int = 0
    newer_schema: int = 0


_CORE_KEYS = ("v", "ts", "mono", "seq", "role", "pid", "ev")


def read_journal(directory: Path, stats: ReadStats | None = None) -> Iterator[JournalEvent]:
    """Yield every event of every ``*.jsonl`` file in ``directory``, file by file, in file order.

    A truncated last line (a process killed mid-write) and malformed lines are skipped and counted in ``stats``;
    lines of a newer schema version are skipped and counted too, never misread.
    """
    stats = stats if stats is not None else ReadStats()
    for path in sorted(directory.glob("*.jsonl")):
        with path.open("rb") as f:
            for raw in f:
                stats.lines += 1
                if not raw.endswith(b"\n"):
                    stats.truncated += 1
                    continue
                try:
                    obj = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    stats.malformed += 1
                    continue
                if not isinstance(obj, dict) or any(k not in obj for k in _CORE_KEYS):
                    stats.malformed += 1
                    continue
                if not isinstance(obj["v"], int) or obj["v"] > SCHEMA_VERSION:
                    stats.newer_schema += 1
                    continue
                core = {k: obj.pop(k) for k in _CORE_KEYS}
                yield JournalEvent(
                    ts_ms=core["ts"],
                    mono_ns=core["mono"],
                    seq=core["seq"],
                    role=core["role"],
                    pid=core["pid"],
                    event=core["ev"],
                    fields=obj,
                )
