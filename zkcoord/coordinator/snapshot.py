"""Reading one group's znodes into a :class:`~zkcoord.coordinator.plan.GroupSnapshot` (pipelined reads).

Runs on the coordinator's worker thread.  Malformed znodes are never fatal: each becomes a ``(path, reason)`` in
``GroupSnapshot.rejected`` and the member (or owner) is left out, so the group is rebalanced without it (S7).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zkcoord import legacy_paths, paths
from zkcoord.coordinator.plan import GroupSnapshot, Member
from zkcoord.errors import CodecError, NoNodeError
from zkcoord.zk import ZkClient
from zkcoord.znodes import GroupState, MemberRegistration, decode_owner


@dataclass(frozen=True, slots=True)
class ReadResult:
    snapshot: GroupSnapshot
    #: version of the state znode, or -1 when it does not exist yet (the next write must create it)
    state_version: int
    #: topics that have an ``owners/<topic>`` directory (so a write knows whether to create it)
    owner_topics: frozenset[str]
    #: whether ``owners`` itself exists
    owners_root: bool
    #: whether the group is migrating from the zk-client protocol (some member says so, or the state has
    #: zk-client members): its zk-client members were read too, and their registry needs watching
    migrating: bool = False


def read_group(zk: ZkClient, group: str) -> ReadResult:
    """Read members, state, ownership registry and channels of ``group``.  :raises ZkError: on I/O failure."""
    rejected: list[tuple[str, str]] = []
    ids_path, owners_path = paths.group_ids(group), paths.owners_root(group)
    member_ids, topics, channels = zk.children_many([ids_path, owners_path, paths.channel_root(group)])
    member_ids = sorted(member_ids or [])

    member_paths = [paths.member(group, cid) for cid in member_ids]
    state_path = paths.group_state(group)
    owner_topic_paths = [paths.owners(group, t) for t in sorted(topics or [])]
    reads = zk.get_many([*member_paths, state_path])
    partition_lists = zk.children_many(owner_topic_paths)

    members: dict[str, Member] = {}
    for cid, path, got in zip(member_ids, member_paths, reads[: len(member_paths)], strict=True):
        if got is None:
            continue  # left between the listing and the read
        data, stat = got
        try:
            members[cid] = Member(cid, MemberRegistration.decode(data, path), stat.czxid)
        except CodecError as e:
            rejected.append((path, e.reason))

    state: GroupState | None = None
    state_version = -1
    got_state = reads[-1]
    if got_state is not None:
        state_version = got_state[1].version
        try:
            state = GroupState.decode(got_state[0], state_path)
        except CodecError as e:
            rejected.append((state_path, e.reason))  # rebuilt by the next rebalance

    owner_paths: list[tuple[str, int, str]] = []
    for topic, parts in zip(sorted(topics or []), partition_lists, strict=True):
        for p in sorted(parts or []):
            if p.isdigit():
                owner_paths.append((topic, int(p), paths.owner(group, topic, int(p))))
            else:
                rejected.append((f"{paths.owners(group, topic)}/{p}", "not a partition number"))
    owners: dict[str, dict[int, str]] = {}
    for (topic, partition, path), got in zip(owner_paths, zk.get_many([p for _, _, p in owner_paths]), strict=True):
        if got is None:
            continue
        try:
            owners.setdefault(topic, {})[partition] = decode_owner(got[0], path)
        except CodecError as e:
            rejected.append((path, e.reason))

    migrating = any(m.registration.migrating for m in members.values()) or bool(state and state.legacy)
    legacy = read_legacy_members(zk, group, members, rejected) if migrating else {}
    snapshot = GroupSnapshot(
        group=group,
        members=members,
        state=state,
        owners=owners,
        channels=frozenset(channels or []),
        rejected=tuple(rejected),
        legacy=legacy,
    )
    return ReadResult(snapshot, state_version, frozenset(topics or []), topics is not None, migrating)


def read_legacy_members(
    zk: ZkClient, group: str, members: Mapping[str, Member], rejected: list[tuple[str, str]]
) -> dict[str, Member]:
    """The zk-client members of a migrating group: ``/consumers/<g>/ids`` less our own members (each migrating
    member registers there too, so that the zk-client members count it).  Malformed ones go to ``rejected``.
    """
    listed = zk.children_many([legacy_paths.ids(group)])[0] or []
    others = sorted(cid for cid in listed if cid not in members)
    member_paths = [legacy_paths.member(group, cid) for cid in others]
    out: dict[str, Member] = {}
    for cid, path, got in zip(others, member_paths, zk.get_many(member_paths), strict=True):
        if got is None:
            continue
        try:
            out[cid] = Member(cid, MemberRegistration.decode(got[0], path), got[1].czxid)
        except CodecError as e:
            rejected.append((path, e.reason))
    return out


def group_exists(zk: ZkClient, group: str) -> bool:
    try:
        return zk.exists(paths.group(group)) is not None
    except NoNodeError:
        return False
