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
import math
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
    "process.stopped": "a process ended by itself (not killed): reason",
    "shutdown.incomplete": (
        "a stop ended within its deadline but skipped steps: skipped, reason, uncommitted, timeout_s, elapsed_ms, "
        "forced (the watchdog cut it short), and the process's broker or group and consumer"
    ),
    "zk.state": "ZooKeeper connection state changed: state (connected|suspended|lost), session",
    "zk.refused": (
        "ZooKeeper refused an operation (--zk-auth ACLs), once per znode and operation: path, op, acl_role, user, "
        "action (stop: the process stops, exit 4; group: that group's rebalance fails), and broker, or group and "
        "consumer"
    ),
    "broker.registered": "a broker registered /brokers/ids/<id>: broker, host, port, session",
    "broker.deregistered": "a broker removed its registration on shutdown: broker",
    "topic.created": "a topic was created: topic, partitions, replicas",
    "topic.altered": "a topic grew: topic, old_partitions, partitions",
    "topic.refused": "a topic command was refused: topic, reason",
    "produce.started": "a producer began: topic, partitions, count, rate, size, keys",
    "produce.batch": "records appended to one partition: topic, partition, first, last, count, bytes",
    "produce.records": (
        "the records of a batch one by one (a producer started with --journal-records, for S8): topic, partition, "
        "first, keys (each record's key, null if none), values (each record's number, the n of its value <role>:<n>:)"
    ),
    "produce.finished": "a producer finished: topic, count, seconds, records_per_s, mb_per_s",
    "log.recovered": "a torn tail was cut off a partition log on open: topic, partition, bytes_cut",
    "log.rewound": (
        "a partition log ended below its high-water mark (records handed out were lost); the next record skips "
        "past them: topic, partition, end_offset, high_water, epoch"
    ),
    "coordinator.elected": "a broker won the coordinator election: broker, epoch, session",
    "coordinator.standby": "a broker lost the election and watches the coordinator's znode: broker",
    "coordinator.resigned": "a coordinator gave up its term: broker, epoch, reason (fenced, session lost, stopping)",
    "coordinator.crashed": "a worker step raised an untranslated error (a bug): broker, step, on, error, retry_in_s",
    "coordinator.metrics": "periodic coordinator counters: rebalances, latency percentiles, groups by state",
    "coordinator.node_removed": "a broker deleted a left-over coordinator znode: broker, kind, owner, version, data",
    "coordinator.epoch_repaired": "the epoch znode was untrustworthy; the highest epoch on record was taken: found, "
    "version, known, recorded, epoch",
    "rebalance.requested": "a group was queued for a rebalance: group, trigger",
    "rebalance.skipped": "the necessity check found nothing to do: group, reason, trigger",
    "rebalance.started": "an attempt began: group, generation, epoch, attempt, trigger, reason, members, partitions",
    "rebalance.barrier": "every stop-fetcher of an attempt was acknowledged: group, generation, epoch, stop_ms",
    "rebalance.completed": "a rebalance finished: group, generation, epoch, attempts, latency_ms, stop_ms, start_ms",
    "rebalance.aborted": "an attempt was dropped because a member left: group, generation, epoch, reason",
    "classic.joined": "a classic-protocol generation's join record was written (seed 001): group, generation, epoch, "
    "leader, strategy, reason (why this strategy), members, passed_over (leaders that failed this rebalance)",
    "classic.synced": "the coordinator accepted a classic leader's assignment: group, generation, epoch, leader, "
    "strategy, compute_ms (the leader's), wait_ms (join to sync), partitions",
    "classic.assignment_invalid": "the coordinator refused a classic leader's assignment (its assignor failed, or it "
    "misses or invents partitions, or gives one to a non-subscriber): group, generation, epoch, leader, reason",
    "classic.sync_stale": "the coordinator ignored a sync record of another generation or leader: group, generation, "
    "leader, expected_generation, expected_leader",
    "classic.sync_written": "a classic leader wrote its generation's assignment: group, consumer, generation, "
    "strategy, compute_ms, members, partitions, error (its assignor's, if it failed)",
    "classic.sync_refused": "a classic leader's write was refused by the fence (a newer generation's join record): "
    "group, consumer, generation, reason",
    "classic.assignor_failed": "a classic leader's assignor raised or returned garbage: group, consumer, generation, "
    "strategy, error",
    "kip848.rebuilt": "a consumer-protocol group's records could not be carried on from; its model is rebuilt "
    "(every member stopped first unless the classic state vouches for the registry): group, epoch, reason",
    "kip848.resumed": "a coordinator carries a consumer-protocol group on from its records: group, epoch, "
    "group_epoch, members, in_flight, stable",
    "kip848.member_joined": "a consumer-protocol member joined (epoch 0): group, consumer, epoch",
    "kip848.member_left": "a consumer-protocol member left (its registration is gone or new): group, consumer, epoch",
    "kip848.member_step": "a member's reconciliation step was written: group, consumer, epoch, member_epoch, state, "
    "assigned, pending_revocation, granted",
    "kip848.member_fenced": "a member did not revoke within its rebalance timeout: its registration was deleted "
    "and its partitions held until it stopped: group, consumer, epoch, member_epoch, reason",
    "kip848.member_held": "a static member left: its assignment is held for its instance id: group, consumer, "
    "instance_id, epoch, hold_s",
    "kip848.member_replaced": "a static member came back with its instance id and took its predecessor's place: "
    "group, consumer, previous, instance_id, epoch, partitions",
    "kip848.member_released": "a fenced member's partitions are free again: group, consumer, epoch, reason",
    "rebalance.retrying": "an attempt failed and will be retried: group, generation, epoch, retry, backoff_s, reason",
    "rebalance.failed": "a rebalance failed for good after its retries: group, generation, epoch, retries, reason",
    "command.sent": "a command was written to a consumer's channel: group, consumer, option, epoch, generation",
    "command.acked": "a consumer deleted (acknowledged) a command: group, consumer, option, epoch, generation",
    "command.lost": (
        "a command's channel was deleted (or created again) before the command was acknowledged: the deletion is not "
        "taken for an acknowledgement, the attempt is retried: group, consumer, option, epoch, generation, channel"
    ),
    "consumer.registered": (
        "a consumer created its member znode: group, consumer, pattern, subscription, session, protocol (zk-client), "
        "assignors (classic)"
    ),
    "consumer.deregistered": "a consumer removed its member znode on close: group, consumer",
    "consumer.fenced": "a consumer's session expired; it dropped its partitions uncommitted: group, consumer, reason",
    "consumer.poll_timeout": (
        "a consumer's application did not call poll() within its max poll interval (KIP-62); the consumer left the "
        "group, committing nothing: group, consumer, interval_ms, away_ms, partitions"
    ),
    "command.applied": (
        "a consumer applied a command: group, consumer, name, option, epoch, generation, partitions; a stop-fetcher "
        "parked for the application also wait_ms (parked until its revoke callback returned)"
    ),
    "command.parked": (
        "a consumer stopped fetching for a stop-fetcher and waits for the application's next poll() to run its revoke "
        "callback before it acknowledges: group, consumer, name, epoch, generation, partitions"
    ),
    "command.rejected": "a consumer refused (and acknowledged) a command: group, consumer, name, reason, ...",
    "command.awaiting": (
        "a consumer applied a start-fetcher but for partitions still to be handed over to it: group, consumer, "
        "name, epoch, generation, partitions, started"
    ),
    "fetch.started": "a consumer began fetching a partition: group, consumer, thread, topic, partition, offset",
    "fetch.stopped": "a consumer stopped fetching a partition: group, consumer, thread, topic, partition, reason",
    "records.consumed": "records handed to the application: group, consumer, thread, topic, partition, first, last",
    "records.processed": (
        "records the application finished processing (written by it, after its work): group, consumer, thread, "
        "topic, partition, first, last, count, at_ms"
    ),
    "region.joined": "a member joined its group's consistent region: group, region, member, members",
    "region.refused": "a member of another region was refused at start: group, region, member, group_region",
    "region.checkpoint": (
        "a member's checkpoint is durable: group, region, member, checkpoint (its seq id), members (names at that "
        "time), offsets (topic/partition -> next offset), state (the application's)"
    ),
    "region.reset": (
        "a member sought its assigned partitions and restored its state: group, region, member, checkpoint (null: "
        "the initial state), offsets (topic/partition -> next offset)"
    ),
    "region.reset_pending": "a member awaits a reset of its region: group, region, member, reason",
    "region.retired": "a member retired a checkpoint (its merge and its local copy): group, region, member, checkpoint",
    "region.order": "the region driver wrote an order: group, region, epoch, id, op, checkpoint, members",
    "region.completed": (
        "the region driver found checkpoint seq complete and recorded it in region/completed (every member "
        "acknowledged it, the merge has N distinct contributions, no partition twice and every partition with a "
        "control variable, no reset was requested meanwhile): group, region, checkpoint, members"
    ),
    "region.incomplete": "a driver's checkpoint did not complete and is retired: group, region, checkpoint, reason",
    "region.unusable": (
        "the last complete checkpoint's merge is no longer complete; the driver resets to the initial state: group, "
        "region, checkpoint, reason"
    ),
    "region.checkpoint_refused": (
        "a member refused a checkpoint while a reset of its region is pending: group, region, member, checkpoint, "
        "reason"
    ),
    "region.request_failed": (
        "a member's reset request was not written (tried again each second): group, region, member, reason, error"
    ),
    "region.restore_failed": (
        "the application's restore raised on a stored state (the member stops): group, region, member, checkpoint, "
        "error"
    ),
    "region.failed": "a region member cannot go on and stops: group, region, member, reason",
    "offsets.committed": (
        "a committed offset: group, consumer, topic, partition, offset, auto_commit (the committing consumer's setting)"
    ),
    "offsets.fenced": "a commit refused because the partition has another owner: group, consumer, topic, partition",
    "offsets.reset": (
        "a position was out of its log's range and the reset policy moved it (or held the partition, to null): "
        "group, consumer, thread, topic, partition, from, to, policy, reason, log_start, high_water"
    ),
    "owner.repaired": "a consumer rewrote the owner znode of a partition it owns (vanished or unreadable): group, "
    "consumer, topic, partition, thread, reason",
    "member.unreadable": "the coordinator cannot decode a live member's registration (given nothing; stopped first "
    "if it may be fetching): group, consumer, incarnation, stopped",
    "group.config.changed": "a group's dynamic config (/config/groups/<g>) changed: group, config, previous",
    "group.max_size_reached": "members of a group beyond its max.size are given nothing: group, max_size, excluded, "
    "stopped",
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
            raise ValueError(f"unknown journal event type {event!r}; add it to zkcoord.runtime.journal.EVENTS")
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

#: The JSON type of every field a reader interprets, the one table both readers follow (this module's
#: :func:`read_journal` and the Spark schema, :mod:`zkcoord.analysis.schema`, which is built from it).  Kinds:
#: ``int`` an integer that fits 64 bits (not a boolean); ``float`` a finite number; ``str`` a string; ``text`` any
#: value (a field whose shape differs between event types, read as its JSON text); ``counts`` an object of ``int``;
#: ``int|list`` an integer or a list (``partitions``: a count, or the partitions themselves in older journals);
#: ``bool`` ``true`` or ``false``.  ``null`` is absence, whatever the kind.  A line whose field has another type is
#: malformed: counted, never used.
FIELD_KINDS: dict[str, str] = {
    # core fields (v: a non-integer v is a newer schema, not a malformed line)
    "v": "int",
    "ts": "int",
    "mono": "int",
    "seq": "int",
    "role": "str",
    "pid": "int",
    "ev": "str",
    # who and where
    "group": "str",
    "consumer": "str",
    "thread": "str",
    "topic": "str",
    "partition": "int",
    "broker": "text",
    # ranges and offsets
    "first": "int",
    "last": "int",
    "count": "int",
    "offset": "int",
    "at_ms": "float",
    "auto_commit": "bool",
    # coordination
    "epoch": "int",
    "generation": "int",
    "attempt": "int",
    "attempts": "int",
    "retry": "int",
    "retries": "int",
    "option": "text",
    "name": "text",
    "reason": "text",
    "trigger": "text",
    "members": "text",
    "partitions": "int|list",
    "moved": "int",
    "latency_ms": "float",
    "stop_ms": "float",
    "start_ms": "float",
    # membership, faults
    "pattern": "text",
    "subscription": "counts",
    "fault": "text",
    "target": "text",
    "detail": "text",
    # consistent regions (S8)
    "region": "text",
    "member": "str",
    "checkpoint": "int",
    "offsets": "counts",
    "state": "text",
    "keys": "text",
    "values": "text",
}

_INT64 = (-(2**63), 2**63 - 1)


def _is_int(value: object) -> bool:
    return type(value) is int and _INT64[0] <= value <= _INT64[1]


def _has_kind(value: object, kind: str) -> bool:
    """Whether a (non-null) decoded JSON value is of ``kind`` (see :data:`FIELD_KINDS`)."""
    if kind == "int":
        return _is_int(value)
    if kind == "float":
        if type(value) is int:
            return -1.7976931348623157e308 <= value <= 1.7976931348623157e308  # as a double: finite
        return type(value) is float and math.isfinite(value)
    if kind == "str":
        return isinstance(value, str)
    if kind == "counts":
        return isinstance(value, dict) and all(_is_int(v) for v in value.values())
    if kind == "int|list":
        return _is_int(value) or isinstance(value, list)
    if kind == "bool":
        return type(value) is bool
    return True  # text


def mistyped_fields(obj: dict[str, Any]) -> list[str]:
    """The fields of a decoded line (core fields but ``v`` included) whose value breaks :data:`FIELD_KINDS`."""
    return [k for k, kind in FIELD_KINDS.items() if k != "v" and obj.get(k) is not None and not _has_kind(obj[k], kind)]


class _Unreadable(ValueError):
    """A JSON text this reader refuses although Python's parser would take it: a duplicate key, NaN, Infinity."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Unreadable("duplicate key")
    return obj


def _no_constant(name: str) -> Any:
    raise _Unreadable(f"{name} is not a number")


def decode_line(raw: bytes) -> dict[str, Any] | None:
    """A journal line's JSON object, or None if it is not a plain JSON object (not JSON, not an object, a duplicate
    key, a NaN or Infinity token).  Never raises."""
    try:
        obj = json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError and _Unreadable are ValueErrors
        return None
    return obj if isinstance(obj, dict) else None


def read_journal(directory: Path, stats: ReadStats | None = None) -> Iterator[JournalEvent]:
    """Yield every event of every ``*.jsonl`` file in ``directory``, file by file, in file order.

    A truncated last line (a process killed mid-write) and malformed lines are skipped and counted in ``stats``;
    lines of a newer schema version are skipped and counted too, never misread.  In this order: a line without its
    newline is truncated; one that is not a plain JSON object (:func:`decode_line`) or lacks a core field (or has it
    null) is malformed; one whose ``v`` is not an integer or is above :data:`SCHEMA_VERSION` is of a newer schema;
    one with a field of the wrong type (:data:`FIELD_KINDS`) is malformed.  The Spark reader
    (:mod:`zkcoord.analysis.load`) follows the same rules, and a test keeps the two in step.
    """
    stats = stats if stats is not None else ReadStats()
    for path in sorted(directory.glob("*.jsonl")):
        with path.open("rb") as f:
            for raw in f:
                stats.lines += 1
                if not raw.endswith(b"\n"):
                    stats.truncated += 1
                    continue
                obj = decode_line(raw)
                if obj is None or any(obj.get(k) is None for k in _CORE_KEYS):
                    stats.malformed += 1
                    continue
                if not _is_int(obj["v"]) or obj["v"] > SCHEMA_VERSION:
                    stats.newer_schema += 1
                    continue
                if mistyped_fields(obj):
                    stats.malformed += 1
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
