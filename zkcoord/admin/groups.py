"""Read-only views of consumer groups (``/consumers/groups/<g>``), in the spirit of ``kafka-consumer-groups.sh``.

:func:`describe_group` reads one group: its members (``ids/<consumerId>``, with each registration znode's ``czxid``
and ``ctime``), its persisted rebalance state (``state``), the ownership registry (``owners/<t>/<p>``), the committed
offsets (``offsets/<t>/<p>``) and, for every owned or committed partition, the partition log's start and end
offsets, from which it computes the lag.  :func:`list_groups` summarises every group.

Contract:

- Nothing is written, neither to ZooKeeper nor to disk.
- ZooKeeper reads are pipelined (:meth:`zkcoord.zk.ZkClient.read_many`), one round trip per level of the tree (three
  for a description, two for a listing); failures are the project's typed errors.  A znode deleted between listing
  and reading is skipped: the view is a best-effort snapshot of a tree that changes while it is read.
- Bad data (S7): a malformed member, state, owner or offset znode, a child that is not a valid topic name or
  partition number, or an unreadable partition log never fails the call; each is described, path and reason, in the
  result's ``problems`` and the rest is reported as usual.
- Lag is ``log_end - committed``.  A partition with no committed offset has lag ``log_end - log_start`` and
  ``lag_from == "log_start"`` (what a consumer starting from the beginning would have to read).  An unreadable
  committed offset or log, or a committed offset out of the log's range, gives lag ``None``.
- ``out_of_range`` says why a committed offset lies outside ``[log start, high water]``
(``zkcoord.protocol.offset_reset``):
  the next consumer to fetch it applies its ``--offset-reset`` policy, or (``none``) holds it until an operator sets
  a valid offset.  ``last_reset`` is the last such finding a consumer recorded (``resets/<t>/<p>``): where the
  position was, where it was moved (``to`` None: held), the policy and when.

The state shown to users (:class:`GroupStatus`) is derived: ``empty`` if no member is registered, else ``unknown``
if the group never rebalanced (no readable ``state``), else ``failed``, ``rebalancing`` (phase stopping/starting) or
``stable`` from the persisted phase.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any, Literal, TypeVar

from zkcoord.data.partlog import PartitionReader
from zkcoord.errors import CodecError, InvalidNameError, LogError, NoNodeError, ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState, decode_owner
from zkcoord.layout.names import MAX_PARTITIONS, validate_group, validate_topic
from zkcoord.layout.registrations import MemberRegistration
from zkcoord.layout.znodes import decode_int
from zkcoord.protocol.offset_reset import ResetRecord, out_of_range
from zkcoord.zk import ReadKind, Stat, ZkClient

#: Reads in flight at once; more are issued as earlier ones complete.
_WINDOW = 512
#: How long one pipelined read may take before the call fails with ZkUnavailableError.
_READ_TIMEOUT_S = 30.0
_PARTITION = re.compile(r"0|[1-9][0-9]{0,4}")
T = TypeVar("T")


class GroupNotFoundError(ZkCoordError):
    def __init__(self, group: str) -> None:
        self.group = group
        super().__init__(f"group {group!r} does not exist")


class GroupStatus(Enum):
    """The group state shown to users, derived from the members and the persisted phase (module docstring)."""

    STABLE = "stable"
    REBALANCING = "rebalancing"
    FAILED = "failed"
    EMPTY = "empty"
    UNKNOWN = "unknown"


def derive_status(member_count: int, state: GroupState | None) -> GroupStatus:
    """Pure: the user-facing state of a group with ``member_count`` registrations and persisted ``state``."""
    if member_count == 0:
        return GroupStatus.EMPTY
    if state is None:
        return GroupStatus.UNKNOWN
    if state.phase is GroupPhase.FAILED:
        return GroupStatus.FAILED
    if state.phase in (GroupPhase.STOPPING, GroupPhase.STARTING):
        return GroupStatus.REBALANCING
    return GroupStatus.STABLE


@dataclass(frozen=True, slots=True)
class MemberView:
    """One ``ids/<consumerId>`` znode.  ``registration`` is ``None`` if its data is malformed (see ``problems``)."""

    consumer_id: str
    czxid: int
    ctime_ms: int
    registration: MemberRegistration | None

    @property
    def threads(self) -> int:
        """Consumer threads the member asked for (over all its topics); 0 if its registration is unreadable."""
        return sum(self.registration.subscription.values()) if self.registration else 0

    def to_json(self) -> dict[str, Any]:
        reg = self.registration
        return {
            "consumer_id": self.consumer_id,
            "czxid": self.czxid,
            "ctime_ms": self.ctime_ms,
            "pattern": reg.pattern.value if reg else None,
            "subscription": dict(reg.subscription) if reg else None,
            "timestamp_ms": reg.timestamp_ms if reg else None,
            "threads": self.threads,
        }


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition the group owns or has committed an offset for.

    ``owner`` is the owning thread id (``None``: unowned or unreadable); ``owner_live`` whether that thread's consumer
    is a registered member.  ``committed`` is ``None`` when absent or unreadable.  ``log_start``/``log_end`` are
    ``None`` when the log cannot be read.  ``lag_from`` says what ``lag`` is counted from (``None`` with no lag).
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

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
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
    the persisted generation, i.e. a rebalance is due or under way."""

    group: str
    state: GroupStatus
    persisted: GroupState | None
    members: tuple[MemberView, ...]
    partitions: tuple[PartitionView, ...]
    membership_changed: bool
    problems: tuple[str, ...]

    @property
    def generation(self) -> int | None:
        return self.persisted.generation if self.persisted else None

    def to_json(self) -> dict[str, Any]:
        st = self.persisted
        return {
            "group": self.group,
            "state": self.state.value,
            "generation": self.generation,
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
            },
            "membership_changed": self.membership_changed,
            "members": [m.to_json() for m in self.members],
            "partitions": [p.to_json() for p in self.partitions],
            "problems": list(self.problems),
        }


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One row of :func:`list_groups`.  ``generation`` is ``None`` when the state is absent or unreadable."""

    group: str
    members: int
    state: GroupStatus
    generation: int | None
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        plain = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**plain, "state": self.state.value, "problems": list(self.problems)}


# --- pipelined reads ------------------------------------------------------------------------------------------------

_Op = tuple[ReadKind, str]


def _read_all(zk: ZkClient, ops: Sequence[_Op]) -> list[Any]:
    """Run ``ops`` pipelined (:meth:`ZkClient.read_many`, :data:`_WINDOW` in flight at once); return their results
    in order: ``(data, stat)`` for ``get``, a sorted child list for ``children``, ``None`` for a znode that does not
    exist.  :raises ZkError: (typed) for any other failure."""
    results: list[Any] = []
    for begin in range(0, len(ops), _WINDOW):
        window = ops[begin : begin + _WINDOW]
        for (kind, _path), value in zip(window, zk.read_many(window, _READ_TIMEOUT_S), strict=True):
            results.append(sorted(value) if kind == "children" and value is not None else value)
    return results


def _owners_root(group: str) -> str:
    # paths.py has no helper for the parent itself; derive it from the one it has so the layout stays in one place.
    return posixpath.dirname(paths.owners(group, "_"))


def _offsets_root(group: str) -> str:
    return posixpath.dirname(paths.offsets(group, "_"))


def _decode_state(raw: tuple[bytes, Stat] | None, path: str, problems: list[str]) -> GroupState | None:
    return None if raw is None else _decoded(GroupState.decode, raw[0], path, problems)


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


# --- describe -------------------------------------------------------------------------------------------------------


def describe_group(zk: ZkClient, group: str, data_dir: Path) -> GroupDescription:
    """Describe ``group`` (module docstring has the contract).  ``data_dir`` holds the partition logs.

    :raises InvalidNameError: ``group`` is not a legal group name.
    :raises GroupNotFoundError: ``/consumers/groups/<group>`` does not exist.
    :raises ZkError: (typed subclasses) ZooKeeper failed; nothing else about the group's data raises.
    """
    validate_group(group)
    problems: list[str] = []
    ids_root, owners_root, offsets_root = paths.group_ids(group), _owners_root(group), _offsets_root(group)
    state_path = paths.group_state(group)

    # Round trip 1: the group node and its children ids/, state, owners/, offsets/, resets/.
    exists, ids, state_raw, owner_topic_names, offset_topic_names, reset_topic_names = _read_all(
        zk,
        [
            ("children", paths.group(group)),
            ("children", ids_root),
            ("get", state_path),
            ("children", owners_root),
            ("children", offsets_root),
            ("children", paths.resets_root(group)),
        ],
    )
    if exists is None:
        raise GroupNotFoundError(group)
    persisted = _decode_state(state_raw, state_path, problems)
    owner_topics = _valid_topics(owner_topic_names, owners_root, problems)
    offset_topics = _valid_topics(offset_topic_names, offsets_root, problems)
    reset_topics = _valid_topics(reset_topic_names, paths.resets_root(group), problems)

    # Round trip 2: member registrations, and the partitions under owners/<t> and offsets/<t>.
    ops: list[_Op] = [("get", paths.member(group, c)) for c in ids or []]
    ops += [("children", paths.owners(group, t)) for t in owner_topics]
    ops += [("children", paths.offsets(group, t)) for t in offset_topics]
    ops += [("children", paths.resets(group, t)) for t in reset_topics]
    level2 = _read_all(zk, ops)
    n_ids, n_own, n_off = len(ids or []), len(owner_topics), len(offset_topics)
    members = _members(group, ids or [], level2[:n_ids], problems)
    owned = [
        (t, p)
        for t, kids in zip(owner_topics, level2[n_ids : n_ids + n_own], strict=True)
        for p in _valid_partitions(kids, paths.owners(group, t), problems)
    ]
    committed_keys = [
        (t, p)
        for t, kids in zip(offset_topics, level2[n_ids + n_own : n_ids + n_own + n_off], strict=True)
        for p in _valid_partitions(kids, paths.offsets(group, t), problems)
    ]
    reset_keys = [
        (t, p)
        for t, kids in zip(reset_topics, level2[n_ids + n_own + n_off :], strict=True)
        for p in _valid_partitions(kids, paths.resets(group, t), problems)
    ]

    # Round trip 3: owner and offset values.  A key present with None: the znode exists but is malformed.
    level3 = _read_all(
        zk,
        [("get", paths.owner(group, t, p)) for t, p in owned]
        + [("get", paths.offset(group, t, p)) for t, p in committed_keys]
        + [("get", paths.reset(group, t, p)) for t, p in reset_keys],
    )
    owners: dict[tuple[str, int], str | None] = {}
    for (t, p), raw in zip(owned, level3[: len(owned)], strict=True):
        if raw is not None:
            owners[(t, p)] = _decoded(decode_owner, raw[0], paths.owner(group, t, p), problems)
    offsets: dict[tuple[str, int], int | None] = {}
    n_committed = len(owned) + len(committed_keys)
    for (t, p), raw in zip(committed_keys, level3[len(owned) : n_committed], strict=True):
        if raw is not None:
            offsets[(t, p)] = _decoded(_decode_offset, raw[0], paths.offset(group, t, p), problems)
    resets: dict[tuple[str, int], ResetRecord | None] = {}
    for (t, p), raw in zip(reset_keys, level3[n_committed:], strict=True):
        if raw is not None:
            resets[(t, p)] = _decoded(ResetRecord.decode, raw[0], paths.reset(group, t, p), problems)

    live = {m.consumer_id for m in members}
    partitions = tuple(
        _partition_view(
            key,
            owner=owners.get(key),
            offsets=offsets,
            live=live,
            data_dir=data_dir,
            problems=problems,
            last_reset=resets.get(key),
        )
        for key in sorted(owners.keys() | offsets.keys())
    )
    changed = persisted is not None and dict(persisted.members) != {m.consumer_id: m.czxid for m in members}
    return GroupDescription(
        group=group,
        state=derive_status(len(members), persisted),
        persisted=persisted,
        members=members,
        partitions=partitions,
        membership_changed=changed,
        problems=tuple(problems),
    )


def _members(
    group: str, ids: list[str], raws: list[tuple[bytes, Stat] | None], problems: list[str]
) -> tuple[MemberView, ...]:
    members = []
    for consumer_id, raw in zip(ids, raws, strict=True):
        if raw is None:
            continue  # left the group while we were reading
        data, stat = raw
        registration = _decoded(MemberRegistration.decode, data, paths.member(group, consumer_id), problems)
        members.append(MemberView(consumer_id, stat.czxid, stat.ctime, registration))
    return tuple(members)


def _decoded(decode: Callable[[bytes, str], T], data: bytes, path: str, problems: list[str]) -> T | None:
    """``decode(data, path)``, or ``None`` with the reason appended to ``problems`` if the data is malformed."""
    try:
        return decode(data, path)
    except CodecError as e:
        problems.append(str(e))
        return None


def _decode_offset(data: bytes, path: str) -> int:
    return decode_int("committed offset", data, path)


def consumer_of(thread_id: str) -> str:
    """The consumer id of a thread id ``<consumerId>-<n>``."""
    return thread_id.rsplit("-", 1)[0]


def _partition_view(
    key: tuple[str, int],
    *,
    owner: str | None,
    offsets: dict[tuple[str, int], int | None],
    live: set[str],
    data_dir: Path,
    problems: list[str],
    last_reset: ResetRecord | None = None,
) -> PartitionView:
    topic, partition = key
    committed = offsets.get(key)
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
        elif key not in offsets:  # never committed (an unreadable offset gives no lag)
            lag, lag_from = end - start, "log_start"
    return PartitionView(
        topic=topic,
        partition=partition,
        owner=owner,
        owner_live=owner is not None and consumer_of(owner) in live,
        committed=committed,
        log_start=start,
        log_end=end,
        lag=lag,
        lag_from=lag_from,
        out_of_range=why,
        last_reset=last_reset,
        high_water=high_water,
    )


# --- list -----------------------------------------------------------------------------------------------------------


def list_groups(zk: ZkClient) -> list[GroupSummary]:
    """Summarise every group under ``/consumers/groups``, sorted by name (one pipelined round trip after the listing).

    A malformed ``state`` (the group then shows as ``unknown``, or ``empty``) or a child whose name is not a legal
    group name is reported in that summary's ``problems``, never raised.

    :raises ZkError: (typed subclasses) ZooKeeper failed.
    """
    try:
        names = sorted(zk.get_children(paths.GROUPS))
    except NoNodeError:
        return []
    raws = _read_all(
        zk, [op for g in names for op in (("children", paths.group_ids(g)), ("get", paths.group_state(g)))]
    )
    summaries = []
    for i, name in enumerate(names):
        ids, state_raw = raws[2 * i], raws[2 * i + 1]
        problems: list[str] = []
        try:
            validate_group(name)
        except InvalidNameError as e:
            problems.append(f"{paths.group(name)}: {e}")
        state = _decode_state(state_raw, paths.group_state(name), problems)
        count = len(ids or [])
        summaries.append(
            GroupSummary(
                group=name,
                members=count,
                state=derive_status(count, state),
                generation=state.generation if state else None,
                problems=tuple(problems),
            )
        )
    return summaries
