"""Read-only views of consumer groups, whatever protocol their members speak, like ``kafka-consumer-groups.sh``.

A group lives in the coordinator's tree (``/consumers/groups/<g>``), in Kafka 0.8's (``/consumers/<g>``: zk-client
members, and migrating ones beside them), or in both during a migration.  :func:`describe_group` reads both
(:mod:`zkcoord.admin.group_reads`) and merges them into one view (:mod:`zkcoord.admin.group_merge` has the rules):
per member its protocol and how the coordinator's state counts it; per partition its owner from whichever layout
holds it, the committed offset that counts, the partition log's start and end offsets and the lag; the group's
protocol mix and the migration's progress.  :func:`list_groups` summarises every group of either tree.

Contract:

- Nothing is written, neither to ZooKeeper nor to disk.
- ZooKeeper reads are pipelined, one round trip per level of the trees for all groups at once (three for a
  description, four for a listing); failures are the project's typed errors.  A znode deleted between two levels is
  skipped: the view is a best-effort snapshot of a tree that changes while it is read.
- Bad data (S7): a malformed member, state, owner, offset or topic znode, a child that is not a valid topic name or
  partition number, or an unreadable partition log never fails the call; each is described, path and reason, in the
  result's ``problems`` and the rest is reported as usual.  So is an ownership problem (a partition owned in both
  layouts at once, or by a consumer registered nowhere), which is also in ``ownership_problems``.
- The partitions shown are those owned, committed or subscribed to (every partition of every topic a member's
  registration covers).
- Lag is ``log_end - committed``.  A partition with no committed offset has lag ``log_end - log_start`` and
  ``lag_from == "log_start"`` (what a consumer starting from the beginning would have to read).  An unreadable
  committed offset or log, or a committed offset out of the log's range, gives lag ``None``.
- ``out_of_range`` says why a committed offset lies outside ``[log start, high water]``
  (``zkcoord.protocol.offset_reset``): the next consumer to fetch it applies its ``--offset-reset`` policy, or
  (``none``) holds it until an operator sets a valid offset.  ``last_reset`` is the last such finding a consumer
  recorded (``resets/<t>/<p>``): where the position was, where it was moved (``to`` None: held), the policy and when.

The state shown to users (:class:`GroupStatus`) is derived (:func:`~zkcoord.admin.group_merge.derive_status`):
``empty`` with no member in either registry; with coordinator members, ``unknown`` if the group never rebalanced (no
readable ``state``), else ``failed``, ``rebalancing`` (phase stopping/starting) or ``stable`` from the persisted
phase; and while members claim Kafka 0.8 owner znodes, ``rebalancing`` until every partition they subscribe to has
one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from zkcoord.admin.classic_view import ClassicView, read_classic
from zkcoord.admin.group_merge import (
    OWNERSHIP,
    GroupStatus,
    MemberView,
    Ownership,
    Protocol,
    consumer_of,
    derive_status,
    membership_changed,
    merge_members,
    migration,
    ownership,
    protocol_mix,
    unclaimed,
    with_counts,
)
from zkcoord.admin.group_reads import GroupRead, Key, Layout, group_names, read_groups
from zkcoord.admin.kip848_view import Kip848View, read_kip848
from zkcoord.data.partlog import PartitionReader
from zkcoord.errors import InvalidNameError, LogError, ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.commands import encode_ownership
from zkcoord.layout.group_state import GroupState
from zkcoord.layout.names import validate_group
from zkcoord.protocol.offset_reset import ResetRecord, out_of_range
from zkcoord.zk import ZkClient

__all__ = [
    "GroupDescription",
    "GroupNotFoundError",
    "GroupStatus",
    "GroupSummary",
    "MemberView",
    "PartitionView",
    "committed_offsets",
    "consumer_of",
    "describe_group",
    "list_groups",
]


class GroupNotFoundError(ZkCoordError):
    def __init__(self, group: str) -> None:
        self.group = group
        super().__init__(f"group {group!r} does not exist")


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition the group owns, has committed an offset for, or subscribes to.

    ``owner`` is the owning thread id (``None``: unowned or unreadable; :mod:`~zkcoord.admin.group_merge` says which
    layout's owner counts); ``owner_live`` whether that thread's consumer is a registered member; ``protocol`` the
    protocol it speaks; ``pending`` a migrating thread the coordinator gave it that waits for its 0.8 owner znode.
    ``owners`` and ``offsets`` hold each layout's znode by layout name (value ``None``: unreadable).  ``committed``
    is the offset that counts (``committed_from``: the layout it is from), ``None`` when absent or unreadable.
    ``log_start``/``log_end`` are ``None`` when the log cannot be read.  ``lag_from`` says what ``lag`` is counted
    from (``None`` with no lag).  ``problems`` are its ownership problems, ``ownership`` their kinds
    (:data:`~zkcoord.admin.group_merge.DOUBLE_OWNER`, :data:`~zkcoord.admin.group_merge.GONE_OWNER`).
    """

    topic: str
    partition: int
    owner: str | None
    owner_live: bool
    committed: int | None
    log_start: int | None
    log_end: int | None
    lag: int | None
    lag_from: Literal["committed", "log_start"] | None
    out_of_range: str | None = None
    last_reset: ResetRecord | None = None
    high_water: int | None = None
    protocol: str | None = None
    pending: str | None = None
    owners: dict[str, str | None] = field(default_factory=dict)
    offsets: dict[str, int | None] = field(default_factory=dict)
    committed_from: str | None = None
    problems: tuple[str, ...] = ()
    ownership: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["problems"], out["ownership"] = list(self.problems), list(self.ownership)
        if self.last_reset is not None:
            reset = self.last_reset
            out["last_reset"] = {
                "from": reset.from_offset,
                "to": reset.to,
                "policy": reset.policy,
                "reason": reset.reason,
                "consumer": reset.consumer,
                "at_ms": reset.at_ms,
            }
        return out


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """Everything :func:`describe_group` found.  ``persisted`` is the decoded ``state`` znode (``None``: absent or
    malformed); ``membership_changed`` is true when the registered members (by id and ``czxid``) differ from those of
    the persisted generation, i.e. a rebalance is due or under way.  ``layouts``: the trees the group exists in.
    ``protocols``: members per protocol; ``migration``: its progress (``None``: no 0.8 side); ``unclaimed``: the
    partitions 0.8-claiming members subscribe to without a 0.8 owner znode.  ``problems`` holds every problem,
    ``ownership_problems`` those of them ``--check`` fails on."""

    group: str
    state: GroupStatus
    persisted: GroupState | None
    members: tuple[MemberView, ...]
    partitions: tuple[PartitionView, ...]
    membership_changed: bool
    problems: tuple[str, ...]
    layouts: tuple[str, ...] = ()
    protocols: dict[str, int] = field(default_factory=dict)
    migration: dict[str, Any] | None = None
    unclaimed: tuple[Key, ...] = ()
    ownership_problems: tuple[str, ...] = ()
    #: a consumer-protocol group's KIP-848 records (``None``: it has none)
    kip848: Kip848View | None = None
    #: a classic-protocol group's join and sync records: strategy, leader (``None``: it has none)
    classic: ClassicView | None = None

    @property
    def generation(self) -> int | None:
        return self.persisted.generation if self.persisted else None

    def state_json(self) -> dict[str, Any]:
        """The ``--state`` part of :meth:`to_json`."""
        st = self.persisted
        return {
            "group": self.group,
            "state": self.state.value,
            "generation": self.generation,
            "layouts": list(self.layouts),
            "protocols": dict(self.protocols),
            "migration": self.migration,
            "unclaimed": [{"topic": t, "partition": p} for t, p in self.unclaimed],
            "persisted_state": None
            if st is None
            else {
                "generation": st.generation,
                "phase": st.phase.value,
                "coordinator_epoch": st.epoch,
                "assignor": st.assignor,
                "attempt": st.attempt,
                "error": st.error,
                "updated_ms": st.updated_ms,
                "sent": st.sent,
                "members": dict(sorted(st.members.items())),
                "legacy": dict(sorted(st.legacy.items())),
                "target": encode_ownership(st.target),
            },
            "membership_changed": self.membership_changed,
            "kip848": None if self.kip848 is None else self.kip848.to_json(),
            "classic": None if self.classic is None else self.classic.to_json(),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            **self.state_json(),
            "members": [m.to_json() for m in self.members],
            "partitions": [p.to_json() for p in self.partitions],
            "problems": list(self.problems),
            "ownership_problems": list(self.ownership_problems),
        }


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One row of :func:`list_groups`.  ``generation`` is ``None`` when the state is absent or unreadable."""

    group: str
    members: int
    state: GroupStatus
    generation: int | None
    problems: tuple[str, ...] = ()
    protocols: dict[str, int] = field(default_factory=dict)
    layouts: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        plain = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**plain, "state": self.state.value, "problems": list(self.problems), "layouts": list(self.layouts)}


# --- describe -------------------------------------------------------------------------------------------------------


def describe_group(zk: ZkClient, group: str, data_dir: Path) -> GroupDescription:
    """Describe ``group`` (module docstring has the contract).  ``data_dir`` holds the partition logs.

    :raises InvalidNameError: ``group`` is not a legal group name.
    :raises GroupNotFoundError: the group exists in neither layout.
    :raises ZkError: (typed subclasses) ZooKeeper failed; nothing else about the group's data raises.
    """
    validate_group(group)
    read = read_groups(zk, [group], offsets=True)[group]
    if not read.exists:
        raise GroupNotFoundError(group)
    m = _Merged(read)
    problems = read.problems
    resets = read.layout(Layout.COORDINATOR).resets
    partitions = tuple(
        _partition_view(key, o, data_dir=data_dir, problems=problems, last_reset=resets.get(key))
        for key, o in zip(m.keys, m.owned, strict=True)
    )
    problems.extend(_member_problems(m.members))
    problems.extend(m.alarms)
    kip848 = read_kip848(zk, group, problems) if Layout.COORDINATOR.value in m.layouts else None
    classic = read_classic(zk, group, problems) if Layout.COORDINATOR.value in m.layouts else None
    return GroupDescription(
        group=group,
        state=m.status,
        persisted=m.persisted,
        members=m.views,
        partitions=partitions,
        membership_changed=membership_changed(m.members, m.persisted),
        problems=tuple(problems),
        layouts=m.layouts,
        protocols=protocol_mix(m.views),
        migration=migration(m.views, m.persisted),
        unclaimed=tuple(m.unclaimed),
        ownership_problems=m.alarms,
        kip848=kip848,
        classic=classic,
    )


class _Merged:
    """The merge of one group's read (:mod:`~zkcoord.admin.group_merge`), shared by describe and list."""

    def __init__(self, read: GroupRead) -> None:
        self.members = merge_members(read)
        self.persisted = read.layout(Layout.COORDINATOR).state
        claims_0_8 = any(m.protocol.claims_0_8 for m in self.members.values())
        coordinated = any(m.in_layout(Layout.COORDINATOR) is not None for m in self.members.values())
        self.unclaimed = unclaimed(read, self.members)
        self.keys = _partition_keys(read)
        self.owned = [ownership(key, read, self.members, claims_0_8, coordinated) for key in self.keys]
        self.alarms = tuple(text for o in self.owned for kind, text in o.problems if kind in OWNERSHIP)
        self.views = with_counts(self.members, self.owned)
        pending = sum(o.pending is not None for o in self.owned)
        self.status = derive_status(self.members, self.persisted, len(self.unclaimed), pending)
        self.layouts = tuple(lay.value for lay, lr in read.layouts.items() if lr.exists)


def committed_offsets(read: GroupRead) -> tuple[dict[Key, int], list[Key]]:
    """The committed offset that counts for each partition of ``read`` (taken with ``offsets=True``), merged as
    :func:`describe_group` merges them (:func:`~zkcoord.admin.group_merge.counted_offset`: the owner's layout, or the
    newer of both), and the partitions whose offset that counts cannot be read."""
    m = _Merged(read)
    counted = {key: o.committed for key, o in zip(m.keys, m.owned, strict=True) if o.committed is not None}
    unreadable = [key for key, o in zip(m.keys, m.owned, strict=True) if o.committed_unreadable]
    return counted, unreadable


def _partition_keys(read: GroupRead) -> list[Key]:
    """Every partition owned, committed or subscribed to, in either layout."""
    keys: set[Key] = {(t, p) for t, count in read.partition_counts.items() for p in range(count)}
    for lr in read.layouts.values():
        keys |= lr.owned | lr.offsets.keys()
    return sorted(keys)


def _member_problems(members: dict[str, MemberView]) -> list[str]:
    """A coordinator member without ``--migrating`` beside zk-client members is given nothing (docs/migration.md)."""
    if not any(m.protocol is Protocol.ZK_CLIENT for m in members.values()):
        return []
    return [
        f"member {cid} ({m.protocol.value}) is not --migrating in a group with zk-client members: the coordinator "
        "gives it nothing until they are gone (docs/migration.md)"
        for cid, m in members.items()
        if m.protocol in (Protocol.EAGER, Protocol.INCREMENTAL)
    ]


def _partition_view(
    key: Key, o: Ownership, *, data_dir: Path, problems: list[str], last_reset: ResetRecord | None = None
) -> PartitionView:
    topic, partition = key
    committed = o.committed
    start: int | None = None
    end: int | None = None
    high_water: int | None = None
    try:
        with PartitionReader(data_dir, topic, partition) as reader:
            start, end, high_water = reader.start_offset, reader.end_offset(), reader.high_water()
    except (LogError, OSError) as e:
        problems.append(f"cannot read the log of {topic}-{partition} in {data_dir}: {e}")
    lag: int | None = None
    lag_from: Literal["committed", "log_start"] | None = None
    why: str | None = None
    if start is not None and end is not None and high_water is not None:
        why = None if committed is None else out_of_range(committed, start, high_water)
        if committed is not None and why is None:
            lag, lag_from = max(0, end - committed), "committed"
        elif committed is not None:
            problems.append(
                f"committed offset {committed} of {topic}-{partition} is {why} [{start}, {high_water}]: the next "
                "consumer applies its --offset-reset policy (none: holds it until the offset is fixed; or wrong "
                "--data-dir?)"
            )
        elif not o.committed_unreadable:  # never committed (an unreadable offset gives no lag)
            lag, lag_from = end - start, "log_start"
    return PartitionView(
        topic=topic,
        partition=partition,
        owner=o.owner,
        owner_live=o.live,
        committed=committed,
        log_start=start,
        log_end=end,
        lag=lag,
        lag_from=lag_from,
        out_of_range=why,
        last_reset=last_reset,
        high_water=high_water,
        protocol=None if o.protocol is None else o.protocol.value,
        pending=o.pending,
        owners={lay.value: v for lay, v in o.owners.items()},
        offsets={lay.value: v for lay, v in o.offsets.items()},
        committed_from=None if o.committed_from is None else o.committed_from.value,
        problems=tuple(text for _kind, text in o.problems),
        ownership=tuple(kind for kind, _text in o.problems),
    )


# --- list -----------------------------------------------------------------------------------------------------------


def list_groups(zk: ZkClient) -> list[GroupSummary]:
    """Summarise every group of either layout, sorted by name (module docstring: four pipelined round trips).

    A malformed ``state`` (the group then shows as ``unknown``, or ``empty``), registration, owner or topic, or a
    child whose name is not a legal group name, is reported in that summary's ``problems``, never raised.  A listing
    reads no committed offset, and the owner znodes' values only of groups whose members claim Kafka 0.8 owner znodes
    (their state depends on them), so it checks no ownership: :func:`describe_group` does.

    :raises ZkError: (typed subclasses) ZooKeeper failed.
    """
    names = group_names(zk)
    reads = read_groups(zk, names, offsets=False)
    summaries = []
    for name in names:
        read = reads[name]
        if not read.exists:
            continue  # deleted since it was listed
        problems: list[str] = []
        try:
            validate_group(name)
        except InvalidNameError as e:
            where = paths.group(name) if read.layout(Layout.COORDINATOR).exists else f"{paths.CONSUMERS}/{name}"
            problems.append(f"{where}: {e}")
        m = _Merged(read)
        summaries.append(
            GroupSummary(
                group=name,
                members=len(m.members),
                state=m.status,
                generation=m.persisted.generation if m.persisted else None,
                problems=(*problems, *read.problems),
                protocols=protocol_mix(m.views),
                layouts=m.layouts,
            )
        )
    return summaries
