"""Reading groups for planning (zkcoord.coordinator.snapshot) against a real ZooKeeper: the known-registry shortcut
is taken exactly while the state znode's version vouches for it, and migrating groups bring their zk-client members.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from zkcoord.coordinator.snapshot import KnownMembers, KnownRegistry, ReadResult, forget_member, read_group
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.group_state import GroupPhase, GroupState, encode_owner
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import WatchEvent, ZkClient, ZkConfig

pytestmark = pytest.mark.integration

G = "g"


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        yield client


def _group(zk: ZkClient, owners: dict[int, str], *, migrating: bool = False) -> int:
    """A stable group of one member owning ``owners`` of topic t; returns the state znode's version."""
    reg = MemberRegistration(Pattern.STATIC, {"t": 1}, 1, migrating=migrating)
    zk.create(paths.member(G, "g_a-1-00000001"), reg.encode(), makepath=True)
    state = GroupState(1, GroupPhase.STABLE, 1, {"g_a-1-00000001": 1}, {"t": owners})
    zk.create(paths.group_state(G), state.encode(), makepath=True)
    for p, thread in owners.items():
        zk.create(paths.owner(G, "t", p), encode_owner(thread), makepath=True)
    stat = zk.exists(paths.group_state(G))
    assert stat is not None
    return stat.version


def _read(zk: ZkClient, known: KnownRegistry | None = None) -> ReadResult:
    return read_group(zk, G, known)


def test_a_known_registry_is_used_while_the_state_version_matches_and_dropped_after(zk: ZkClient) -> None:
    version = _group(zk, {0: "g_a-1-00000001-0", 1: "g_a-1-00000001-0"})
    assert _read(zk).snapshot.owners == {"t": {0: "g_a-1-00000001-0", 1: "g_a-1-00000001-0"}}
    # What the coordinator believes it left: the shortcut returns it without reading the owner znodes...
    known = KnownRegistry(version, {"t": {0: "g_a-1-00000001-0"}})
    assert _read(zk, known).snapshot.owners == {"t": {0: "g_a-1-00000001-0"}}
    # ...until the state is written again, by anyone: then the registry is read for real.
    zk.set(paths.group_state(G), zk.get(paths.group_state(G))[0])
    assert _read(zk, known).snapshot.owners == {"t": {0: "g_a-1-00000001-0", 1: "g_a-1-00000001-0"}}


def test_a_migrating_group_reads_its_zk_client_members_but_not_its_own_mirror_registrations(zk: ZkClient) -> None:
    _group(zk, {0: "g_a-1-00000001-0"}, migrating=True)
    reg = MemberRegistration(Pattern.STATIC, {"t": 1}, 1)
    zk.create(legacy_paths.member(G, "g_a-1-00000001"), reg.encode(), makepath=True)  # our member's mirror
    zk.create(legacy_paths.member(G, "g_old-1-00000002"), reg.encode(), makepath=True)
    zk.create(legacy_paths.member(G, "g_bad-1-00000003"), b"{not json", makepath=True)
    # A migrating member whose coordinator registration is not there yet counts once it is (not as zk-client now).
    joining = MemberRegistration(Pattern.STATIC, {"t": 1}, 1, migrating=True)
    zk.create(legacy_paths.member(G, "g_new-1-00000004"), joining.encode(), makepath=True)
    read = _read(zk)
    assert read.migrating
    assert sorted(read.snapshot.legacy) == ["g_old-1-00000002"]
    assert [path for path, _ in read.snapshot.rejected] == [legacy_paths.member(G, "g_bad-1-00000003")]


def test_zk_client_members_are_seen_even_when_no_member_of_ours_is_migrating(zk: ZkClient) -> None:
    """A coordinator member started without --migrating into a group that zk-client members still run must not be
    given their partitions: the group is read as migrating because of the zk-client registry alone."""
    _group(zk, {0: "g_a-1-00000001-0"})
    reg = MemberRegistration(Pattern.STATIC, {"t": 1}, 1)
    zk.create(legacy_paths.member(G, "g_old-1-00000002"), reg.encode(), makepath=True)
    read = _read(zk)
    assert read.migrating
    assert sorted(read.snapshot.legacy) == ["g_old-1-00000002"]


def test_known_members_are_not_read_again_unless_a_name_was_deleted_and_created_again(zk: ZkClient) -> None:
    _group(zk, {0: "g_a-1-00000001-0"})
    cache: dict[str, KnownMembers] = {}
    events: list[WatchEvent] = []
    first = read_group(zk, G, members=cache, watch=events.append).snapshot.members
    assert set(first) == {"g_a-1-00000001"} and G in cache
    stale = MemberRegistration(Pattern.STATIC, {"t": 1}, 1)
    # A new member is read, the known one not (its data watch has not fired: nothing changed it).
    zk.create(paths.member(G, "g_b-1-00000002"), stale.encode())
    reads: list[list[str]] = []
    real = zk.get_many

    def counting(paths_: list[str], **kw: object) -> object:
        reads.append(list(paths_))
        return real(paths_, **kw)  # type: ignore[arg-type]

    zk.get_many = counting  # type: ignore[method-assign,assignment]
    try:
        second = read_group(zk, G, members=cache, watch=events.append).snapshot.members
    finally:
        zk.get_many = real  # type: ignore[method-assign]
    assert set(second) == {"g_a-1-00000001", "g_b-1-00000002"}
    assert paths.member(G, "g_a-1-00000001") not in reads[0] and paths.member(G, "g_b-1-00000002") in reads[0]
    # The same name deleted and created again between two reads (a new session: a new czxid): the cversion shows
    # more changes than the names explain, so everything is read again.
    zk.delete(paths.member(G, "g_a-1-00000001"))
    zk.create(paths.member(G, "g_a-1-00000001"), stale.encode())
    third = read_group(zk, G, members=cache, watch=events.append).snapshot.members
    assert third["g_a-1-00000001"].incarnation != first["g_a-1-00000001"].incarnation


def test_a_known_registration_rewritten_in_place_is_read_again_once_its_watch_fires(zk: ZkClient) -> None:
    """A registration ``set`` by someone else (and later written back by its consumer) changes no listing: what the
    cache keeps must be what is stored now, so each kept registration is watched and forgotten when it changes."""
    _group(zk, {0: "g_a-1-00000001-0"})
    cache: dict[str, KnownMembers] = {}
    events: list[WatchEvent] = []
    path = paths.member(G, "g_a-1-00000001")
    read_group(zk, G, members=cache, watch=events.append)
    hostile = MemberRegistration(Pattern.STATIC, {"other": 1}, 1)
    for registration in (hostile, MemberRegistration(Pattern.STATIC, {"t": 1}, 1)):  # rewritten, then written back
        zk.set(path, registration.encode())
        wait_until(lambda: bool(events), 10, "the registration's data watch")
        assert [e.path for e in events] == [path]
        forget_member(cache, events.pop().path)
        read = read_group(zk, G, members=cache, watch=events.append)
        assert read.snapshot.members["g_a-1-00000001"].registration == registration
    # Read without a watch, a registration is not kept: nothing would say when it changes.
    cache.clear()
    read_group(zk, G, members=cache)
    assert cache[G].members == {}
