"""Reading groups' znodes into :class:`~zkcoord.coordinator.plan.GroupSnapshot` values (pipelined reads).

:func:`read_groups` reads any number of groups in four pipelined bursts (a new coordinator re-examines every group
this way); :func:`read_group` is the same for one group.

Runs on the coordinator's worker thread.  Malformed znodes are never fatal: each becomes a ``(path, reason)`` in
``GroupSnapshot.rejected`` (S7).  What the coordinator then does depends on what the znode stands for: a member
registration it cannot decode still stands for a live member (its ephemeral exists, so its session does, and it may
be fetching): it goes in ``GroupSnapshot.unreadable`` with its incarnation, and is planned as a member that is stopped
like any other but given nothing (:mod:`~zkcoord.coordinator.plan`).  An owner znode it cannot decode is in
``ReadResult.unreadable_owners``: its partition counts as unowned, and the next rebalance overwrites it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from zkcoord.coordinator.plan import GroupSnapshot, Member
from zkcoord.errors import CodecError, NoNodeError, ZkError
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.group_state import GroupState, decode_owner
from zkcoord.layout.registrations import MemberRegistration
from zkcoord.zk import Stat, WatchEvent, ZkClient

_PARTITION = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True, slots=True)
class ReadResult:
    snapshot: GroupSnapshot
    #: version of the state znode, or -1 when it does not exist yet (the next write must create it)
    state_version: int
    #: topics that have an ``owners/<topic>`` directory (so a write knows whether to create it)
    owner_topics: frozenset[str]
    #: whether ``owners`` itself exists
    owners_root: bool
    #: owner znodes that exist but could not be decoded (S7): the next write overwrites or deletes them
    unreadable_owners: frozenset[tuple[str, int]] = frozenset()
    #: whether the group is migrating from the zk-client protocol (some member says so, or the state has
    #: zk-client members): its zk-client members were read too, and their registry needs watching
    migrating: bool = False


@dataclass(frozen=True, slots=True)
class KnownRegistry:
    """The ownership registry of a group as this coordinator left it, valid while the state znode's version is
    still ``state_version``: every change to ``owners/`` is written in a transaction that also writes the state
    (conditionally, behind the fence), or by a hand-over's old owner during an attempt, which wrote the state first
    and leaves it STABLE only once every hand-over is acknowledged (so done).  An unchanged state version therefore
    vouches for an unchanged registry, and the per-partition owner reads can be skipped (a rebalance of P partitions
    saves P requests)."""

    state_version: int
    owners: dict[str, dict[int, str]]


#: A group's ``ids`` as listed: the children, and the ``cversion`` and ``czxid`` of ``ids`` at that listing.
Listing = tuple[list[str], int, int]


def listing(got: tuple[list[str], Stat]) -> Listing:
    """A listing of ``ids`` with its stat, as :class:`KnownMembers` needs it."""
    return got[0], got[1].cversion, got[1].czxid


@dataclass
class KnownMembers:
    """A group's member registrations as last read, at the ``ids`` listing with ``cversion``.

    A consumer that registers again makes a new znode (a new ``czxid``), so a later listing needs only the new names
    read -- provided no name was deleted and created again in between, which the ``cversion`` tells: it counts every
    creation and deletion of a child, so when it grew by exactly the number of names added and removed, nothing else
    happened.  It counts from 0 again when ``ids`` itself is deleted and created again (by hand): the ``czxid`` of
    ``ids`` tells that.  A registration's data can still change in place (someone ``set`` s it; its consumer writes
    it back), which no listing shows: so only a registration read under a one-shot data watch is kept, and the
    caller drops it (:func:`forget_member`) as soon as that watch fires -- what is kept is what is stored now.
    """

    cversion: int
    names: frozenset[str]
    members: dict[str, Member]
    #: czxid of ``ids`` at that listing
    parent: int = 0


Watch = Callable[[WatchEvent], None]


def forget_member(members: dict[str, KnownMembers], path: str) -> None:
    """The data watch on the registration at ``path`` fired (changed, deleted, or reset by a connection loss): drop
    it from the cache, so that the next read of its group reads it again (and watches it again)."""
    group = paths.group_of_member(path)
    known = members.get(group) if group is not None else None
    if known is not None:
        known.members.pop(path.rsplit("/", 1)[1], None)


def read_group(
    zk: ZkClient,
    group: str,
    known: KnownRegistry | None = None,
    members: dict[str, KnownMembers] | None = None,
    watch: Watch | None = None,
) -> ReadResult:
    """Read members, state and ownership registry of ``group``.  :raises ZkError: on I/O failure."""
    registries = {group: known} if known else None
    result = read_groups(zk, [group], known_registries=registries, known_members=members, watch=watch)[group]
    if isinstance(result, ZkError):
        raise result
    return result


def with_owners_read_again(
    zk: ZkClient, read: ReadResult, members: dict[str, KnownMembers], watch: Watch | None = None
) -> ReadResult:
    """``read`` with its ownership registry read again from ZooKeeper (the rest as it was).

    :raises ZkError: on I/O failure.
    """
    fresh = read_group(zk, read.snapshot.group, None, members, watch)
    return dataclasses.replace(
        read,
        snapshot=dataclasses.replace(read.snapshot, owners=fresh.snapshot.owners),
        owner_topics=fresh.owner_topics,
        owners_root=fresh.owners_root,
        unreadable_owners=fresh.unreadable_owners,
    )


def read_groups(
    zk: ZkClient,
    groups: Sequence[str],
    member_ids: Mapping[str, Listing] | None = None,
    known_registries: Mapping[str, KnownRegistry] | None = None,
    known_members: dict[str, KnownMembers] | None = None,
    *,
    watch: Watch | None = None,
) -> dict[str, ReadResult | ZkError]:
    """Read many groups as :func:`read_group` does, pipelined *across* groups: four bursts in all, one per level of
    dependency (listings; registrations and states; owner topics; owners), whatever the number of groups, and the
    last two only for groups whose registry is not known.

    ``member_ids``: member listings the caller already holds *under a children watch* (any later change is reported
    to it, and it examines the group again then); those groups' ``ids`` are not listed again.
    ``known_registries``: registries this coordinator wrote (:class:`KnownRegistry`); a group whose state version
    still matches is not read beyond its members and state.
    ``known_members``: the caller's cache of registrations (:class:`KnownMembers`), used and updated in place: only
    registrations not known at an unchanged incarnation are read.  ``watch``: a one-shot data watch set on every
    registration read (it must only enqueue; its owner then calls :func:`forget_member`); without it, the
    registrations read are not added to the cache (nothing would say when they change).

    Returns a result per group.  A failed burst fails the groups it carried, each with the error (so a caller treats
    them exactly as a failed :func:`read_group`); the other groups are unaffected.  Never raises :class:`ZkError`.
    """
    out: dict[str, ReadResult | ZkError] = {}
    known = member_ids or {}
    unlisted = [g for g in groups if g not in known]
    try:
        # The Kafka 0.8 registry of each group is listed too (absent for nearly every group: one cheap NoNode), so
        # that zk-client members are seen even when no member of ours says the group is migrating.
        # One burst for the owner topics, the zk-client registries and the unlisted member ids.
        n = len(groups)
        burst = zk.children_stat_many(
            [paths.owners_root(g) for g in groups]
            + [legacy_paths.ids(g) for g in groups]
            + [paths.group_ids(g) for g in unlisted]
        )
        listings = [None if x is None else x[0] for x in burst[: 2 * n]]
        topics = {g: listings[i] for i, g in enumerate(groups)}
        legacy_ids = {g: listings[n + i] or [] for i, g in enumerate(groups)}
        listed = {g: known[g] for g in groups if g in known}
        ids_stats = burst[2 * n :]
        listed.update(
            (g, ([], -1, 0) if got is None else listing(got)) for g, got in zip(unlisted, ids_stats, strict=True)
        )
        cache = known_members if known_members is not None else {}
        ids = {g: sorted(listed[g][0]) for g in groups}
        fresh = {g: _to_read(ids[g], listed[g][1], listed[g][2], cache.get(g)) for g in groups}
        reads = zk.get_many(
            [p for g in groups for p in (*(paths.member(g, c) for c in fresh[g]), paths.group_state(g))],
            watch=watch,
            watched={paths.member(g, c) for g in groups for c in fresh[g]},
        )
        cached = _still_known(groups, fresh, reads, known_registries or {})
        topic_keys = [(g, t) for g in groups if g not in cached for t in sorted(topics[g] or [])]
        partition_lists = zk.children_many([paths.owners(g, t) for g, t in topic_keys])
        rejected: dict[str, list[tuple[str, str]]] = {g: [] for g in groups}
        owner_keys: list[tuple[str, str, int]] = []
        for (g, topic), parts in zip(topic_keys, partition_lists, strict=True):
            for p in sorted(parts or []):
                if _PARTITION.fullmatch(p):  # canonical only: "01" would alias partition 1
                    owner_keys.append((g, topic, int(p)))
                else:
                    rejected[g].append((f"{paths.owners(g, topic)}/{p}", "not a partition number"))
        owner_reads = zk.get_many([paths.owner(g, t, p) for g, t, p in owner_keys])
    except ZkError as e:
        return dict.fromkeys(groups, e)
    owners: dict[str, dict[str, dict[int, str]]] = {g: {} for g in groups}
    unreadable: dict[str, set[tuple[str, int]]] = {g: set() for g in groups}
    for g, registry in cached.items():
        owners[g] = {t: dict(parts) for t, parts in registry.owners.items()}
    for (g, topic, partition), got in zip(owner_keys, owner_reads, strict=True):
        if got is None:
            continue
        path = paths.owner(g, topic, partition)
        try:
            owners[g].setdefault(topic, {})[partition] = decode_owner(got[0], path)
        except CodecError as e:
            rejected[g].append((path, e.reason))
            unreadable[g].add((topic, partition))
    at = 0
    for g in groups:
        n = len(fresh[g])
        previous = cache.get(g)
        kept = {c: m for c, m in previous.members.items() if c in set(ids[g])} if previous and n < len(ids[g]) else {}
        read = _decode(
            g, fresh[g], reads[at : at + n + 1], owners=owners[g], topics=topics[g], rejected=rejected[g], kept=kept
        )
        out[g] = dataclasses.replace(read, unreadable_owners=frozenset(unreadable[g])) if unreadable[g] else read
        if listed[g][1] >= 0:
            # Only what a data watch covers is kept (the rest is read again next time: see KnownMembers).
            watched = read.snapshot.members if watch is not None else kept
            cache[g] = KnownMembers(listed[g][1], frozenset(ids[g]), dict(watched), listed[g][2])
        at += n + 1
    _with_legacy_members(zk, out, legacy_ids)
    return out


def _to_read(names: list[str], cversion: int, parent: int, known: KnownMembers | None) -> list[str]:
    """The members of a listing whose registrations must be read: all of them, unless ``known`` is the same
    registry at an earlier ``cversion`` and the difference accounts for every change since (see
    :class:`KnownMembers`); then only the names not known (new ones, and those that could not be read or decoded)."""
    if known is None or cversion < 0 or parent != known.parent:
        return names
    now = set(names)
    changes = len(now - known.names) + len(known.names - now)
    if cversion - known.cversion != changes:
        return names
    return [c for c in names if c not in known.members]


def _still_known(
    groups: Sequence[str],
    ids: Mapping[str, list[str]],
    reads: Sequence[tuple[bytes, Stat] | None],
    known: Mapping[str, KnownRegistry],
) -> dict[str, KnownRegistry]:
    """The known registries still valid: their group's state version (the last read of the group) is unchanged."""
    out: dict[str, KnownRegistry] = {}
    at = 0
    for g in groups:
        at += len(ids[g]) + 1
        got, registry = reads[at - 1], known.get(g)
        if registry is not None and got is not None and got[1].version == registry.state_version:
            out[g] = registry
    return out


def _decode(
    group: str,
    member_ids: list[str],
    reads: list[tuple[bytes, Stat] | None],
    *,
    owners: dict[str, dict[int, str]],
    topics: list[str] | None,
    rejected: list[tuple[str, str]],
    kept: Mapping[str, Member],
) -> ReadResult:
    """One group's snapshot from its reads: the member registrations, then the state (the last of ``reads``);
    ``kept``: registrations known already, not read again."""
    members: dict[str, Member] = dict(kept)
    unreadable: dict[str, int] = {}
    for cid, got in zip(member_ids, reads[:-1], strict=True):
        if got is None:
            continue  # left between the listing and the read
        path = paths.member(group, cid)
        data, stat = got
        try:
            members[cid] = Member(cid, MemberRegistration.decode(data, path), stat.czxid)
        except CodecError as e:
            rejected.append((path, e.reason))
            unreadable[cid] = stat.czxid  # alive all the same: see GroupSnapshot.unreadable

    state: GroupState | None = None
    state_version = -1
    got_state = reads[-1]
    state_path = paths.group_state(group)
    if got_state is not None:
        state_version = got_state[1].version
        try:
            state = GroupState.decode(got_state[0], state_path)
        except CodecError as e:
            rejected.append((state_path, e.reason))  # rebuilt by the next rebalance

    migrating = any(m.registration.migrating for m in members.values()) or bool(state and state.legacy)
    snapshot = GroupSnapshot(
        group=group,
        members=members,
        state=state,
        owners=owners,
        rejected=tuple(rejected),
        unreadable=unreadable,
    )
    return ReadResult(snapshot, state_version, frozenset(topics or []), topics is not None, migrating=migrating)


def _with_legacy_members(
    zk: ZkClient, results: dict[str, ReadResult | ZkError], legacy_ids: Mapping[str, list[str]]
) -> None:
    """Add the zk-client members of every group in ``results`` that has any, or is migrating (one more pipelined
    burst, only when some group does): ``/consumers/<g>/ids`` (``legacy_ids``, listed already) less the migrating
    members, ours (each registers there too, so that the zk-client members count it) and those whose coordinator
    registration is not there yet (counted once it is: one rebalance per migrating join, not two).  Such a group is
    marked migrating.  Malformed registrations are rejected (S7).
    """
    migrating = {
        g: r
        for g, r in sorted(results.items())
        if isinstance(r, ReadResult) and (r.migrating or set(legacy_ids.get(g, [])) - set(r.snapshot.members))
    }
    if not migrating:
        return
    keys = [
        (g, cid) for g, r in migrating.items() for cid in sorted(legacy_ids.get(g, [])) if cid not in r.snapshot.members
    ]
    try:
        reads = zk.get_many([legacy_paths.member(g, cid) for g, cid in keys])
    except ZkError as e:
        results.update(dict.fromkeys(migrating, e))
        return
    legacy: dict[str, dict[str, Member]] = {g: {} for g in migrating}
    rejected: dict[str, list[tuple[str, str]]] = {g: [] for g in migrating}
    for (g, cid), got in zip(keys, reads, strict=True):
        if got is None:
            continue  # left between the listing and the read
        path = legacy_paths.member(g, cid)
        try:
            registration = MemberRegistration.decode(got[0], path)
        except CodecError as e:
            rejected[g].append((path, e.reason))
            continue
        if not registration.migrating:  # a migrating member registered here first: it counts once it is ours
            legacy[g][cid] = Member(cid, registration, got[1].czxid)
    for g, read in migrating.items():
        snapshot = dataclasses.replace(
            read.snapshot, legacy=legacy[g], rejected=(*read.snapshot.rejected, *rejected[g])
        )
        results[g] = dataclasses.replace(read, snapshot=snapshot, migrating=True)


def group_exists(zk: ZkClient, group: str) -> bool:
    try:
        return zk.exists(paths.group(group)) is not None
    except NoNodeError:
        return False
