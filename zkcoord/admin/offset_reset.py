"""``zkcoord group reset-offsets``: move a group's committed offsets, as ``kafka-consumer-groups.sh --reset-offsets``.

Contract:

- **Only an empty group** is reset (Kafka refuses a group with members too): a member registered in either layout's
  ``ids/`` (live, or a paused process whose session still lives) makes :func:`plan_reset` raise
  :class:`GroupNotEmptyError`, before anything is written.
- **Both layouts**: the group's offsets are written in every layout the group exists in (the coordinator's
  ``/consumers/groups/<g>/offsets``, Kafka 0.8's ``/consumers/<g>/offsets``, both for a group that migrated), so its
  next consumer starts from the new position whatever protocol it speaks.  The *current* offset shown is the one
  ``group describe`` counts (:func:`~zkcoord.admin.group_merge.counted_offset`: with no owner, the newer of both).
- **The log's range**: every new offset is clamped into ``[log start, high water]`` of the partition's log in the
  data directory (the range in which a consumer does not apply its ``--offset-reset``,
  :mod:`zkcoord.protocol.offset_reset`); the plan says which were clamped and to what.
- **Atomic and versioned** (:func:`apply_reset`): one ZooKeeper transaction writes every offset of the plan, each
  conditional on the version read (an absent one is created, so it fails if created meanwhile), and checks the
  coordinator's ``state`` at the version read.  A commit, a rebalance or another reset between the read and the
  write fails the whole transaction: nothing is written and :class:`ResetConflictError` names the znode.
- A plan too large for one transaction (ZooKeeper's 1 MiB request limit) is refused, never split.

Runs on the caller's thread; every call blocks on ZooKeeper and on log reads.  :raises ZkError: (typed) when
ZooKeeper fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zkcoord.admin.group_merge import counted_offset, merge_members
from zkcoord.admin.group_reads import GroupRead, Key, Layout, read_groups, tree
from zkcoord.admin.groups import GroupNotFoundError
from zkcoord.admin.reset_spec import Mode, ResetSpec, TopicSelection
from zkcoord.data.partlog import PartitionReader, partition_dir
from zkcoord.data.partlog.times import offset_for_time
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import (
    BadVersionError,
    CodecError,
    ConfigurationError,
    LogError,
    NodeExistsError,
    NoNodeError,
    ZkCoordError,
)
from zkcoord.layout import paths
from zkcoord.layout.checkpoints import Checkpoint
from zkcoord.layout.names import validate_group
from zkcoord.layout.znodes import decode_int, encode_int
from zkcoord.zk import ReadKind, ZkClient

#: ZooKeeper refuses a request above ``jute.maxbuffer`` (1 MiB by default); a plan is kept well below it.
MAX_TRANSACTION_BYTES = 900_000
#: Reads in flight at once (as :mod:`~zkcoord.admin.group_reads`).
_WINDOW = 512
#: Bytes a transaction spends per operation besides its path and data (op header, version, ACL, flags).
_OP_OVERHEAD = 48


class GroupNotEmptyError(ZkCoordError):
    """The group has registered members: its offsets are theirs to move."""

    def __init__(self, group: str, members: list[str], what: str) -> None:
        self.members = members
        shown = ", ".join(members[:3]) + (f" and {len(members) - 3} more" if len(members) > 3 else "")
        super().__init__(
            f"group {group!r} has {len(members)} live member{'s' if len(members) != 1 else ''} ({shown}): stop "
            f"{'it' if len(members) == 1 else 'them'} before {what} (Kafka refuses too)"
        )


class ResetConflictError(ZkCoordError):
    """Something wrote the group's offsets or state between the plan's read and its transaction."""

    retriable = True


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """One partition's row: ``current`` the offset that counts now (``None``: none committed, or unreadable, which
    ``note`` says), ``new`` where it goes (``None``: left as it is), the log's range, and ``note`` (clamped, not in
    the checkpoint, no log yet...)."""

    topic: str
    partition: int
    current: int | None
    new: int | None
    log_start: int
    high_water: int
    clamped: bool = False
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "current": self.current,
            "new": self.new,
            "log_start": self.log_start,
            "high_water": self.high_water,
            "clamped": self.clamped,
            "note": self.note or None,
        }


@dataclass(frozen=True, slots=True)
class _Stored:
    """An offset znode as read: its value (``None``: unreadable) and version."""

    value: int | None
    version: int


@dataclass(slots=True)
class ResetPlan:
    """What :func:`plan_reset` read and decided; :func:`apply_reset` writes it."""

    group: str
    spec: ResetSpec
    layouts: tuple[Layout, ...]
    rows: list[PartitionPlan]
    #: the coordinator's ``state`` znode's version as read (``None``: absent), checked by the transaction
    state_version: int | None = None
    #: per layout, the offset znodes of the planned partitions as read (absent ones are missing)
    stored: dict[Layout, dict[Key, _Stored]] = field(default_factory=dict)
    #: the offset directories that exist (the root and each topic's), per layout
    dirs: dict[Layout, set[str]] = field(default_factory=dict)

    @property
    def changes(self) -> list[PartitionPlan]:
        return [r for r in self.rows if r.new is not None]


def plan_reset(
    zk: ZkClient,
    group: str,
    spec: ResetSpec,
    topics: tuple[TopicSelection, ...] | None,
    *,
    data_dir: Path,
    checkpoint: Checkpoint | None = None,
) -> ResetPlan:
    """Read the group and the logs and compute the plan (writes nothing).  ``topics`` ``None``: every topic the group
    has committed offsets for (with ``--to-checkpoint``, also those of the checkpoint, given in ``checkpoint``).

    :raises GroupNotFoundError: the group exists in neither layout.
    :raises GroupNotEmptyError: it has registered members.
    :raises TopicNotFoundError: a topic chosen does not exist.
    :raises ConfigurationError: a partition out of the topic's range, nothing to reset, or no log of any chosen
        partition in ``data_dir`` (a wrong ``--data-dir`` would otherwise clamp everything to 0).
    :raises LogError: a chosen partition's log cannot be read.
    """
    validate_group(group)
    read = read_groups(zk, [group], offsets=True)[group]
    if not read.exists:
        raise GroupNotFoundError(group)
    members = sorted(merge_members(read))
    if members:
        raise GroupNotEmptyError(group, members, "resetting its offsets")
    layouts = tuple(lay for lay, lr in read.layouts.items() if lr.exists)
    keys = _chosen(zk, read, topics, checkpoint)
    plan = ResetPlan(group, spec, layouts, [])
    _read_stored(zk, plan, keys)
    _check_logs(keys, data_dir)
    for key in keys:
        plan.rows.append(_plan_row(plan, key, data_dir, checkpoint))
    return plan


def _chosen(
    zk: ZkClient, read: GroupRead, topics: tuple[TopicSelection, ...] | None, checkpoint: Checkpoint | None
) -> list[Key]:
    """The partitions chosen, checked against the topics' partition counts."""
    admin = TopicAdmin(zk)
    if topics is None:
        keys = {key for lr in read.layouts.values() for key in lr.offsets}
        if checkpoint is not None:
            keys |= {(t, p) for t, parts in checkpoint.offsets.items() for p in parts}
        if not keys:
            raise ConfigurationError(
                f"group {read.group!r} has no committed offsets: nothing to reset with --all-topics"
            )
        return sorted(keys)
    out: list[Key] = []
    for selection in topics:
        count = admin.describe(selection.topic).partitions
        wanted = selection.partitions if selection.partitions is not None else tuple(range(count))
        beyond = [p for p in wanted if p >= count]
        if beyond:
            raise ConfigurationError(
                f"topic {selection.topic!r} has {count} partition{'s' if count != 1 else ''} (0..{count - 1}): "
                f"no partition {', '.join(map(str, beyond))}"
            )
        out.extend((selection.topic, p) for p in wanted)
    return out


def _read_stored(zk: ZkClient, plan: ResetPlan, keys: list[Key]) -> None:
    """One pipelined burst: the state's stat, and per layout the offset directories and the chosen offset znodes."""
    reads: list[tuple[ReadKind, str]] = []
    sinks: list[Any] = []
    if Layout.COORDINATOR in plan.layouts:
        reads.append(("get", paths.group_state(plan.group)))
        sinks.append(("state",))
    for layout in plan.layouts:
        t = tree(layout)
        plan.stored[layout], plan.dirs[layout] = {}, set()
        for path in [t.offsets_root(plan.group), *sorted({t.offsets(plan.group, topic) for topic, _ in keys})]:
            reads.append(("get", path))
            sinks.append(("dir", layout, path))
        for key in keys:
            reads.append(("get", t.offset(plan.group, *key)))
            sinks.append(("offset", layout, key))
    results: list[Any] = []
    for begin in range(0, len(reads), _WINDOW):
        results += zk.read_many(reads[begin : begin + _WINDOW], 30.0)
    for sink, (_kind, path), got in zip(sinks, reads, results, strict=True):
        if got is None:
            continue
        data, stat = got
        if sink[0] == "state":
            plan.state_version = stat.version
        elif sink[0] == "dir":
            plan.dirs[sink[1]].add(sink[2])
        else:
            plan.stored[sink[1]][sink[2]] = _Stored(_decoded(data, path), stat.version)


def _decoded(data: bytes, path: str) -> int | None:
    try:
        return decode_int("committed offset", data, path)
    except CodecError:
        return None


def _check_logs(keys: list[Key], data_dir: Path) -> None:
    if keys and not any(partition_dir(data_dir, *key).is_dir() for key in keys):
        topics = ", ".join(sorted({t for t, _ in keys}))
        raise ConfigurationError(
            f"no log of {topics} in {data_dir}: wrong --data-dir? (the reset clamps to each log's range)"
        )


def _log_range(key: Key, data_dir: Path) -> tuple[int, int, PartitionReader]:
    reader = PartitionReader(data_dir, *key)
    try:
        return reader.start_offset, max(reader.high_water(), reader.start_offset), reader
    except (LogError, OSError) as e:
        reader.close()
        raise LogError(f"cannot read the log of {key[0]}-{key[1]} in {data_dir}: {e}; nothing was reset") from e


def _plan_row(plan: ResetPlan, key: Key, data_dir: Path, checkpoint: Checkpoint | None) -> PartitionPlan:
    offsets = {lay: plan.stored[lay][key].value for lay in plan.layouts if key in plan.stored[lay]}
    current, _layout, unreadable = counted_offset(None, offsets, claims_0_8=False, coordinated=False)
    notes = ["committed offset unreadable"] if unreadable else []
    if not partition_dir(data_dir, *key).is_dir():
        notes.append(f"no log in {data_dir} yet")
    start, high, reader = _log_range(key, data_dir)
    with reader:
        wanted, why = _Target(plan.spec, current, start, high, key).of(reader, checkpoint)
    if why:
        notes.append(why)
    if wanted is None:
        return PartitionPlan(*key, current, None, start, high, note="; ".join(notes))
    new = min(max(wanted, start), high)
    if new != wanted:
        edge = "log start" if new == start and wanted < start else "high water"
        notes.append(f"{wanted} is outside the log: clamped to its {edge} {new}")
    return PartitionPlan(*key, current, new, start, high, clamped=new != wanted, note="; ".join(notes))


@dataclass(frozen=True, slots=True)
class _Target:
    """One partition's mode, committed offset and log range."""

    spec: ResetSpec
    current: int | None
    start: int
    high: int
    key: Key

    def of(self, reader: PartitionReader, checkpoint: Checkpoint | None) -> tuple[int | None, str]:
        """Where the mode sends the partition before clamping (``None``: left alone), and a note."""
        mode, number = self.spec.mode, self.spec.number or 0
        if mode is Mode.EARLIEST:
            return self.start, ""
        if mode is Mode.LATEST:
            return self.high, ""
        if mode is Mode.OFFSET:
            return number, ""
        if mode is Mode.SHIFT:
            if self.current is None:
                return self.start + number, "no committed offset: shifted from the log start"
            return self.current + number, ""
        if mode is Mode.DATETIME:
            try:
                found = offset_for_time(reader, number)
            except (LogError, OSError) as e:
                raise LogError(f"cannot read the log of {self.key[0]}-{self.key[1]}: {e}; nothing was reset") from e
            return (self.high, "no record at or after that time: the high water") if found is None else (found, "")
        saved = None if checkpoint is None else checkpoint.offset(*self.key)
        return (None, f"not in checkpoint {self.spec.checkpoint}: unchanged") if saved is None else (saved, "")


# --- applying ---------------------------------------------------------------------------------------------------------


def apply_reset(zk: ZkClient, plan: ResetPlan) -> int:
    """Write ``plan`` in one transaction (module docstring); return how many offset znodes it wrote.

    :raises ResetConflictError: an offset or the state changed since the plan was read (nothing written).
    :raises ConfigurationError: the plan is too large for one transaction (nothing written).
    """
    txn = zk.transaction()
    size = 0
    written = 0
    if plan.state_version is not None:
        txn.check(paths.group_state(plan.group), plan.state_version)
    for layout in plan.layouts:
        t = tree(layout)
        created: set[str] = set(plan.dirs[layout])
        for row, new in ((r, r.new) for r in plan.rows if r.new is not None):
            key = (row.topic, row.partition)
            path, data = t.offset(plan.group, *key), encode_int(new)
            stored = plan.stored[layout].get(key)
            if stored is None:
                for parent in (t.offsets_root(plan.group), t.offsets(plan.group, row.topic)):
                    if parent not in created:
                        txn.create(parent)
                        created.add(parent)
                        size += len(parent) + _OP_OVERHEAD
                txn.create(path, data)
                written += 1
            elif stored.value == new:
                txn.check(path, stored.version)  # unchanged, but the plan rests on it
            else:
                txn.set_data(path, data, stored.version)
                written += 1
            size += len(path) + len(data) + _OP_OVERHEAD
    if size > MAX_TRANSACTION_BYTES:
        raise ConfigurationError(
            f"{len(plan.changes)} partitions make a transaction of about {size // 1024} KiB, above ZooKeeper's "
            f"request limit: reset fewer at once (--topic T:P,...); nothing was reset"
        )
    if not len(txn):
        return 0
    try:
        txn.commit()
    except (BadVersionError, NodeExistsError, NoNodeError) as e:
        what = "the group's state" if e.path == paths.group_state(plan.group) else f"znode {e.path}"
        raise ResetConflictError(
            f"{what} changed while the reset was planned (a commit, a rebalance or another reset): nothing was "
            "reset; look at the group again and rerun"
        ) from e
    return written


def members_now(zk: ZkClient, group: str) -> list[str]:
    """The members registered now in either layout (after a reset: one that joined during it)."""
    read = read_groups(zk, [group], offsets=False)[group]
    return sorted(merge_members(read))
