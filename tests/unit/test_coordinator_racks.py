"""Racks on the coordinator's side, pure: what a consumer-protocol target is computed from (its basis: a change of
partition racks bumps the group epoch when some member has a rack, and nothing when none has), the target itself,
and the classic incremental planner, which passes racks to the uniform assignor too."""

from __future__ import annotations

from zkcoord.coordinator.kip848.model import basis, compute_target, rack_inputs
from zkcoord.coordinator.plan import GroupSnapshot, Member, plan
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.layout.registrations import MemberRegistration, Pattern

#: partition p of t on a broker of rack a (even p) or b (odd p), as TopicAdmin places one replica on two brokers
RACKS = {"t": tuple(frozenset("ab"[p % 2]) for p in range(4)), "other": (frozenset("a"),)}
THREADS = {"m1": {"t": 1}, "m2": {"t": 1}}


def test_rack_inputs_are_the_members_racks_and_their_topics_partition_racks() -> None:
    racks = rack_inputs({"m1": "a"}, THREADS, RACKS)
    assert racks is not None and racks.members == {"m1": "a"} and set(racks.partitions) == {"t"}
    assert rack_inputs({}, THREADS, RACKS) is None, "no member has a rack: partition racks change nothing"


def test_a_change_of_partition_racks_changes_the_basis_only_when_a_member_has_a_rack() -> None:
    members = {"m1": 1, "m2": 2}
    moved = {**RACKS, "t": (frozenset("c"),) * 4}
    with_racks = [basis(members, THREADS, {"t": 4}, racks=rack_inputs({"m1": "a"}, THREADS, r)) for r in (RACKS, moved)]
    assert with_racks[0] != with_racks[1]
    without = [basis(members, THREADS, {"t": 4}, racks=rack_inputs({}, THREADS, r)) for r in (RACKS, moved)]
    assert without[0] == without[1] == basis(members, THREADS, {"t": 4})
    unsubscribed = {**RACKS, "other": (frozenset("z"),)}
    assert basis(members, THREADS, {"t": 4}, racks=rack_inputs({"m1": "a"}, THREADS, unsubscribed)) == with_racks[0]


def test_the_target_gives_a_joiner_the_partitions_of_its_rack() -> None:
    previous = {"m1": PartitionSet({"t": [0, 1, 2, 3]})}
    racks = rack_inputs({"m1": "a", "m2": "b"}, THREADS, RACKS)
    target = compute_target("uniform", THREADS, {"t": 4}, previous, racks)
    assert target == {"m1": PartitionSet({"t": [0, 2]}), "m2": PartitionSet({"t": [1, 3]})}
    blind = compute_target("uniform", THREADS, {"t": 4}, previous)
    assert blind == {"m1": PartitionSet({"t": [0, 1]}), "m2": PartitionSet({"t": [2, 3]})}
    assert compute_target("range", THREADS, {"t": 4}, previous, racks) == compute_target(
        "range", THREADS, {"t": 4}, previous
    ), "range, as Kafka's server-side range, takes no racks"


def test_the_incremental_planner_passes_racks_to_the_uniform_assignor() -> None:
    def member(cid: str, rack: str, czxid: int) -> Member:
        return Member(cid, MemberRegistration(Pattern.STATIC, {"t": 1}, 0, incremental=True, rack=rack), czxid)

    members = {"g_a": member("g_a", "a", 100), "g_b": member("g_b", "b", 101)}
    fetching = {"t": dict.fromkeys(range(4), "g_a-0")}  # g_a fetches everything; g_b just joined
    snap = GroupSnapshot("g", members, None, fetching)
    racks = {"t": (frozenset("a"), frozenset("b"), frozenset("b"), frozenset("a"))}
    assert plan(snap, {"t": 4}, "range", racks=racks).target == {"t": {0: "g_a-0", 1: "g_b-0", 2: "g_b-0", 3: "g_a-0"}}
    assert plan(snap, {"t": 4}, "range").target == {"t": {0: "g_a-0", 1: "g_b-0", 2: "g_a-0", 3: "g_b-0"}}
