"""What ``zkcoord group list|describe`` read: every layout a group can live in, for many groups at once.

A group of one name may live in two trees (``docs/zookeeper-layout.md``), one per :class:`Layout`:

* :attr:`Layout.COORDINATOR`: ``/consumers/groups/<g>/{ids,owners,offsets,resets,state}`` (:mod:`zkcoord.layout.paths`);
* :attr:`Layout.ZK_CLIENT`: Kafka 0.8's ``/consumers/<g>/{ids,owners,offsets}`` (:mod:`zkcoord.layout.legacy_paths`),
  written by ``zk-client`` members and, during a migration, by ``--migrating`` ones.  A reserved name
  (:data:`~zkcoord.layout.legacy_paths.RESERVED_GROUPS`) has no such tree: ``/consumers/groups`` is not a group.

:func:`read_groups` reads both, level by level: one pipelined burst per level of the trees for all the groups
together (the roots; the registrations and the topic directories; the values and the partition counts of the
subscribed topics), so a description costs three round trips, and a listing of any number of groups four (the
names first).  Every znode is
decoded with the layout's own codec (:class:`MemberRegistration` for both registries, :func:`decode_owner` for both
ownership registries, :func:`decode_int` for both offsets); nothing is parsed by hand.

Contract: read-only.  A znode that disappears between two levels is skipped (the tree changes while it is read: a
group deleted half-way reads as what is left of it).  Bad data never raises: a malformed znode, or a child whose name
is not a topic or partition number, is left out (a registration or owner: kept as unreadable) and described, path
and reason, in :attr:`GroupRead.problems`.  ZooKeeper failures raise the project's typed :class:`ZkError`.

A new layout (KIP-848's records, issue 16; the classic protocol's, issue 17) adds a :class:`Layout`, its tree in
:data:`_TREES` and the reads of its own records here; the merge (:mod:`zkcoord.admin.group_merge`) tells its members'
protocol apart.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from zkcoord.errors import CodecError, InvalidNameError
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.group_state import GroupState, decode_owner
from zkcoord.layout.names import MAX_PARTITIONS, validate_topic
from zkcoord.layout.registrations import MemberRegistration, Pattern, TopicAssignment
from zkcoord.layout.znodes import decode_int
from zkcoord.protocol.offset_reset import ResetRecord
from zkcoord.protocol.subscriptions import matches
from zkcoord.zk import ReadKind, Stat, ZkClient

#: Reads in flight at once; more are issued as earlier ones complete.
_WINDOW = 512
#: How long one pipelined read may take before the call fails with ZkUnavailableError.
_READ_TIMEOUT_S = 30.0
_PARTITION = re.compile(r"0|[1-9][0-9]{0,4}")
T = TypeVar("T")
#: ``(topic, partition)``
Key = tuple[str, int]


class Layout(Enum):
    """A tree a group's members write to; its value names it in ``--json``."""

    COORDINATOR = "coordinator"
    ZK_CLIENT = "zk-client"


@dataclass(frozen=True, slots=True)
class _Tree:
    """The paths of one layout (each built by the layout's own module)."""

    root: Callable[[str], str]
    ids: Callable[[str], str]
    member: Callable[[str, str], str]
    owners_root: Callable[[str], str]
    owners: Callable[[str, str], str]
    owner: Callable[[str, str, int], str]
    offsets_root: Callable[[str], str]
    offsets: Callable[[str, str], str]
    offset: Callable[[str, str, int], str]


_TREES = {
    Layout.COORDINATOR: _Tree(
        paths.group, paths.group_ids, paths.member, paths.owners_root, paths.owners, paths.owner,
        paths.offsets_root, paths.offsets, paths.offset,
    ),
    Layout.ZK_CLIENT: _Tree(
        legacy_paths.group_dir, legacy_paths.ids, legacy_paths.member, legacy_paths.owners_root,
        legacy_paths.owners, legacy_paths.owner, legacy_paths.offsets_root, legacy_paths.offsets,
        legacy_paths.offset,
    ),
}  # fmt: skip


def tree(layout: Layout) -> _Tree:
    """The paths of ``layout`` (for messages that name a znode)."""
    return _TREES[layout]


@dataclass(frozen=True, slots=True)
class Registered:
    """One registration znode of a member in one layout's registry: its incarnation (``czxid``), creation time and
    decoded data (``None``: unreadable, the reason is in the group's problems)."""

    layout: Layout
    czxid: int
    ctime_ms: int
    registration: MemberRegistration | None


@dataclass(slots=True)
class LayoutRead:
    """What one layout holds of a group.

    ``owned``: partitions with an owner znode (readable or not); ``owners``: their decoded values (``None``:
    unreadable; not read in a listing of a group that does not claim 0.8 owner znodes).  ``offsets``: committed
    offsets (``None``: unreadable; read for a description only).  ``state`` and ``resets`` exist in the
    coordinator's layout only (``state`` ``None``: absent or unreadable).
    """

    layout: Layout
    exists: bool = False
    members: dict[str, Registered] = field(default_factory=dict)
    owned: set[Key] = field(default_factory=set)
    owners: dict[Key, str | None] = field(default_factory=dict)
    offsets: dict[Key, int | None] = field(default_factory=dict)
    state: GroupState | None = None
    resets: dict[Key, ResetRecord | None] = field(default_factory=dict)


@dataclass(slots=True)
class GroupRead:
    """Every layout's read of one group, the partition counts of the topics its members subscribe to (those that
    exist and are readable), and the problems met."""

    group: str
    layouts: dict[Layout, LayoutRead]
    partition_counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return any(read.exists for read in self.layouts.values())

    def layout(self, layout: Layout) -> LayoutRead:
        """The read of ``layout`` (an empty one if the group cannot live there: a reserved name)."""
        return self.layouts.get(layout) or LayoutRead(layout)


def layouts_of(group: str) -> tuple[Layout, ...]:
    """The layouts ``group`` can live in: a reserved name is a znode of the coordinator's, never a 0.8 group."""
    if group in legacy_paths.RESERVED_GROUPS:
        return (Layout.COORDINATOR,)
    return (Layout.COORDINATOR, Layout.ZK_CLIENT)


def group_names(zk: ZkClient) -> list[str]:
    """Every group name either layout holds, sorted: the children of ``/consumers/groups`` and those of
    ``/consumers`` (Kafka 0.8's ``ZkUtils.getConsumerGroups``) less the coordinator's own znodes.
    :raises ZkError: (typed) ZooKeeper failed."""
    coordinator, consumers = _read_all(zk, [("children", paths.GROUPS), ("children", paths.CONSUMERS)])
    legacy = {name for name in consumers or [] if name not in legacy_paths.RESERVED_GROUPS}
    return sorted(set(coordinator or []) | legacy)


# --- pipelined reads ------------------------------------------------------------------------------------------------


class _Burst:
    """Reads gathered for one pipelined burst, each with the function its result goes to."""

    def __init__(self) -> None:
        self.ops: list[tuple[ReadKind, str]] = []
        self.sinks: list[Callable[[Any], None]] = []

    def add(self, kind: ReadKind, path: str, sink: Callable[[Any], None]) -> None:
        self.ops.append((kind, path))
        self.sinks.append(sink)

    def run(self, zk: ZkClient) -> None:
        for sink, result in zip(self.sinks, _read_all(zk, self.ops), strict=True):
            sink(result)


def _read_all(zk: ZkClient, ops: Sequence[tuple[ReadKind, str]]) -> list[Any]:
    """Run ``ops`` pipelined (:data:`_WINDOW` in flight at once); their results in order: ``(data, stat)`` for
    ``get``, a sorted child list for ``children``, ``None`` for an absent znode.  :raises ZkError: (typed)."""
    results: list[Any] = []
    for begin in range(0, len(ops), _WINDOW):
        window = ops[begin : begin + _WINDOW]
        for (kind, _path), value in zip(window, zk.read_many(window, _READ_TIMEOUT_S), strict=True):
            results.append(sorted(value) if kind == "children" and value is not None else value)
    return results


def read_groups(zk: ZkClient, groups: Iterable[str], *, offsets: bool) -> dict[str, GroupRead]:
    """Read ``groups`` in every layout they can live in (module docstring has the contract).

    Always the registrations, the state, which partitions have owner znodes and the partition counts; with
    ``offsets`` (a description) also the owners' values, the committed offsets and the reset records.  Without, the
    owners' values of a group whose members claim Kafka 0.8 owner znodes (:func:`claims_0_8`) are read all the same
    (its state depends on them: a migrating member may wait for one), the others' not (a listing stays cheap).
    :raises ZkError: (typed subclasses) ZooKeeper failed; nothing about the groups' data raises.
    """
    reader = _Reader(groups, offsets)
    for level in (reader.roots, reader.children, reader.leaves):
        burst = _Burst()
        level(burst)
        burst.run(zk)
    reader.finish()
    return reader.reads


class _Reader:
    """The three levels of :func:`read_groups`; each adds its reads to a burst, with sinks that file the results
    for the next level.  Used by one thread, once."""

    def __init__(self, groups: Iterable[str], offsets: bool) -> None:
        self.offsets = offsets
        self.reads = {g: GroupRead(g, {layout: LayoutRead(layout) for layout in layouts_of(g)}) for g in groups}
        self.topic_names: list[str] = []
        #: ``(group, layout, directory)`` -> its children: ``ids`` and the topic directories (:func:`_dirs`)
        self.listed: dict[tuple[str, Layout, str], list[str]] = {}
        #: ``(group, layout, directory)`` -> the partitions found under its topics
        self.keys: dict[tuple[str, Layout, str], list[Key]] = {}
        self.counts: dict[str, int] = {}
        self.bad_counts: dict[str, str] = {}

    def _lister(self, key: tuple[str, Layout, str]) -> Callable[[Any], None]:
        return lambda got: self.listed.__setitem__(key, got or [])

    def roots(self, burst: _Burst) -> None:
        """Level 1: the roots, the registries, the topic directories, the state, and ``/brokers/topics``."""
        burst.add("children", paths.BROKER_TOPICS, lambda got: self.topic_names.extend(got or []))
        for g, read in self.reads.items():
            for layout, lr in read.layouts.items():
                burst.add("children", _TREES[layout].root(g), functools.partial(_exists, lr))
                burst.add("children", _TREES[layout].ids(g), self._lister((g, layout, "ids")))
                for name, (root, _parent) in _dirs(layout, self.offsets).items():
                    burst.add("children", root(g), self._lister((g, layout, name)))
                if layout is Layout.COORDINATOR:
                    path = paths.group_state(g)
                    burst.add("get", path, functools.partial(_state, path=path, read=read, lr=lr))

    def children(self, burst: _Burst) -> None:
        """Level 2: the registrations, and the partitions under each topic directory."""
        for g, read in self.reads.items():
            for layout, lr in read.layouts.items():
                for cid in self.listed.get((g, layout, "ids"), []):
                    path = _TREES[layout].member(g, cid)
                    burst.add("get", path, functools.partial(_registered, path=path, consumer_id=cid, read=read, lr=lr))
                for name, (root, parent) in _dirs(layout, self.offsets).items():
                    found = self.keys.setdefault((g, layout, name), [])
                    for topic in _valid_topics(self.listed.get((g, layout, name)), root(g), read.problems):
                        path = parent(g, topic)
                        burst.add("children", path, _partitions_sink(found, topic, path, read.problems))

    def leaves(self, burst: _Burst) -> None:
        """Level 3: the owners (and offsets and resets, with ``offsets``), and the partition counts of the topics the
        members subscribe to."""
        for g, read in self.reads.items():
            for layout, lr in read.layouts.items():
                t = _TREES[layout]
                lr.owned.update(self.keys.get((g, layout, "owners"), []))
                if not (self.offsets or claims_0_8(read)):
                    continue  # a listing reads a coordinator group's owners no further than their existence
                for tp in self.keys.get((g, layout, "owners"), []):
                    path = t.owner(g, *tp)
                    burst.add("get", path, _value_sink(lr.owners, tp, decode_owner, path, read.problems))
                for tp in self.keys.get((g, layout, "offsets"), []):
                    path = t.offset(g, *tp)
                    burst.add("get", path, _value_sink(lr.offsets, tp, _decode_offset, path, read.problems))
                for tp in self.keys.get((g, layout, "resets"), []):
                    path = paths.reset(g, *tp)
                    burst.add("get", path, _value_sink(lr.resets, tp, ResetRecord.decode, path, read.problems))
        for topic in sorted(_subscribed(self.reads.values(), self.topic_names)):
            burst.add("get", paths.topic(topic), _count_sink(topic, self.counts, self.bad_counts))

    def finish(self) -> None:
        """File each group's partition counts (and the subscribed topics whose count cannot be read)."""
        for read in self.reads.values():
            for topic in sorted(_subscribed([read], self.topic_names)):
                if topic in self.counts:
                    read.partition_counts[topic] = self.counts[topic]
                elif topic in self.bad_counts:
                    read.problems.append(f"subscribed topic {topic!r} left out: {self.bad_counts[topic]}")


# --- decoding -------------------------------------------------------------------------------------------------------


def _dirs(layout: Layout, offsets: bool) -> dict[str, tuple[Callable[[str], str], Callable[[str, str], str]]]:
    """The topic directories to read of ``layout``: name -> (its root, a topic's directory under it)."""
    t = _TREES[layout]
    out = {"owners": (t.owners_root, t.owners)}
    if offsets:
        out["offsets"] = (t.offsets_root, t.offsets)
    if offsets and layout is Layout.COORDINATOR:
        out["resets"] = (paths.resets_root, paths.resets)
    return out


def _decoded(decode: Callable[[bytes, str], T], data: bytes, path: str, problems: list[str]) -> T | None:
    """``decode(data, path)``, or ``None`` with the reason appended to ``problems`` if the data is malformed."""
    try:
        return decode(data, path)
    except CodecError as e:
        problems.append(str(e))
        return None


def _decode_offset(data: bytes, path: str) -> int:
    return decode_int("committed offset", data, path)


def _exists(lr: LayoutRead, got: list[str] | None) -> None:
    lr.exists = got is not None


def _state(got: tuple[bytes, Stat] | None, *, path: str, read: GroupRead, lr: LayoutRead) -> None:
    if got is not None:
        lr.state = _decoded(GroupState.decode, got[0], path, read.problems)


def _registered(got: tuple[bytes, Stat] | None, path: str, consumer_id: str, read: GroupRead, lr: LayoutRead) -> None:
    if got is None:
        return  # left the group while we were reading
    data, stat = got
    registration = _decoded(MemberRegistration.decode, data, path, read.problems)
    lr.members[consumer_id] = Registered(lr.layout, stat.czxid, stat.ctime, registration)


def _value_sink(
    out: dict[Key, Any], key: Key, decode: Callable[[bytes, str], Any], path: str, problems: list[str]
) -> Callable[[Any], None]:
    def sink(got: tuple[bytes, Stat] | None) -> None:
        if got is not None:  # absent: deleted since it was listed
            out[key] = _decoded(decode, got[0], path, problems)

    return sink


def _partitions_sink(out: list[Key], topic: str, parent: str, problems: list[str]) -> Callable[[Any], None]:
    def sink(got: list[str] | None) -> None:
        out.extend((topic, p) for p in _valid_partitions(got, parent, problems))

    return sink


def _valid_topics(names: list[str] | None, root: str, problems: list[str]) -> list[str]:
    valid = []
    for name in names or []:
        try:
            valid.append(validate_topic(name))
        except InvalidNameError as e:
            problems.append(f"ignored {root}/{name}: {e}")
    return valid


def _valid_partitions(names: list[str] | None, parent: str, problems: list[str]) -> list[int]:
    valid = []
    for name in names or []:
        if _PARTITION.fullmatch(name) and int(name) < MAX_PARTITIONS:
            valid.append(int(name))
        else:
            problems.append(f"ignored {parent}/{name}: not a partition number")
    return sorted(valid)


def claims_0_8(read: GroupRead) -> bool:
    """Whether some member of ``read`` claims Kafka 0.8 owner znodes: every such member (zk-client, or migrating,
    which registers there first) is in 0.8's registry, and a migrating one says so in its registrations."""
    coordinator = read.layout(Layout.COORDINATOR).members.values()
    migrating = any(r.registration is not None and r.registration.migrating for r in coordinator)
    return bool(read.layout(Layout.ZK_CLIENT).members) or migrating


def covers(registration: MemberRegistration, topic: str) -> bool:
    """Whether ``registration`` subscribes to ``topic`` (a static topic of it, or one its wildcard matches)."""
    if registration.pattern is Pattern.STATIC:
        return topic in registration.subscription
    return matches(registration, topic)


def _subscribed(reads: Iterable[GroupRead], topic_names: list[str]) -> set[str]:
    """The topics the readable registrations of ``reads`` cover: their static topics, and the existing topics their
    wildcards match."""
    out: set[str] = set()
    for read in reads:
        for lr in read.layouts.values():
            for member in lr.members.values():
                reg = member.registration
                if reg is None:
                    continue
                if reg.pattern is Pattern.STATIC:
                    out.update(reg.subscription)
                else:
                    out.update(t for t in topic_names if _is_topic(t) and matches(reg, t))
    return out


def _is_topic(name: str) -> bool:
    try:
        validate_topic(name)
    except InvalidNameError:
        return False
    return True


def _count_sink(topic: str, counts: dict[str, int], unreadable: dict[str, str]) -> Callable[[Any], None]:
    """Record ``topic``'s partition count, or why it cannot be read; a topic that does not exist is neither."""

    def sink(got: tuple[bytes, Stat] | None) -> None:
        if got is None:
            return
        try:
            counts[topic] = TopicAssignment.decode(got[0], paths.topic(topic)).partition_count
        except CodecError as e:
            unreadable[topic] = str(e)

    return sink
