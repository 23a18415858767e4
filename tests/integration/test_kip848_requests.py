"""What a consumer-protocol step costs in ZooKeeper requests (issue 16: a join in <= 80), and that each request saved
leaves the safety rule it served as it was.

Real ZooKeeper; the offset store and the consumers' own code, with their requests counted at kazoo's queue
(:class:`tests.requests_spy.Requests`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer import make, polling, produce
from tests.integration.test_coordinator import owners_registry
from tests.requests_spy import Requests
from zkcoord.consumer.offsets import Claims, OffsetStore
from zkcoord.consumer.records import TopicPartition
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.commands import Command
from zkcoord.layout.kip848 import AssignmentAck
from zkcoord.layout.znodes import decode_int, encode_int
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

G = "g"
A = f"{G}_h-1-0000000a"
TP = TopicPartition("t", 0)


@pytest.fixture
def member(zk_hosts: str) -> Iterator[ZkClient]:
    """A member's session: registered, its ``ack/<c>`` created, holding the owner znode of ``t/0``."""
    with ZkClient(dataclasses.replace(ZkConfig.from_string(zk_hosts), consumer_id=A)) as zk:
        zk.create(paths.member(G, A), b"{}", ephemeral=True, makepath=True)
        zk.create(paths.ack(G, A), b"", makepath=True)
        zk.ensure_path(paths.owners(G, "t"))
        zk.create(paths.owner(G, "t", 0), f"{A}-0".encode())
        zk.set(paths.owner(G, "t", 0), f"{A}-0".encode())
        yield zk


def _stop_of(zk: ZkClient) -> str:
    """A consumer-protocol stop as the member names it: ``assignment/<c>/assignment-<zxid>`` (a real write)."""
    path = paths.assignment(G, A)
    stat = zk.set(path, b"{}") if zk.exists(path) else zk.create_stat(path, b"{}", makepath=True)
    return f"{path}/assignment-{stat.mzxid}"


def _claimed(zk: ZkClient) -> OffsetStore:
    store = OffsetStore(zk, G, paths.member(G, A))
    assert store.claim({TP: f"{A}-0"}).claims
    store.commit({TP: 5})  # poll()'s auto-commit: the stop will find the position unchanged
    return store


def test_a_stop_with_its_positions_committed_already_reads_no_offset(
    member: ZkClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The revoker's stop, its positions committed by ``poll()`` already: one request, the transaction that checks the
    offset znode still exists and acknowledges -- no read of the offset before it (it was the revoker's 4th request
    per join)."""
    store = _claimed(member)
    stop = _stop_of(member)
    requests = Requests(monkeypatch)
    mark = requests.mark()
    assert store.commit({TP: 5}, ack=stop, final=True) == {}
    sent = requests.since(mark, member.kazoo)
    assert requests.reads(mark, paths.offset(G, "t", 0)) == 0, f"the offset was read before the stop: {sent}"
    assert [kind for kind, _ in sent] == ["Transaction"], sent
    ack = AssignmentAck.decode(member.get(paths.ack(G, A))[0])
    assert ack.assignment == int(stop.rpartition("-")[2]) and not ack.refused
    assert member.get(paths.offset(G, "t", 0))[0] == encode_int(5)


def test_a_stop_recreates_an_offset_deleted_under_it(member: ZkClient) -> None:
    """The unchanged position's offset znode was deleted (by hand, or with the group's subtree): the stop's check
    finds it gone and writes it again, so the next owner starts where we stopped (S3), and acknowledges with it."""
    store = _claimed(member)
    stop = _stop_of(member)
    member.delete(paths.offsets(G, "t"), recursive=True)
    assert store.commit({TP: 5}, ack=stop, final=True) == {TP: 5}
    assert member.get(paths.offset(G, "t", 0))[0] == encode_int(5)
    assert AssignmentAck.decode(member.get(paths.ack(G, A))[0]).assignment == int(stop.rpartition("-")[2])


def test_a_parked_stops_verified_position_is_written_again_only_if_gone(member: ZkClient) -> None:
    """A parked stop whose auto-commit before the callback found the position committed already hands it to the
    stop's transaction to verify (``verify``): checked there, written again only if its offset znode is gone."""
    store = _claimed(member)
    assert store.commit({}, ack=_stop_of(member), final=True, verify={TP: 5}) == {}
    member.delete(paths.offsets(G, "t"), recursive=True)
    assert store.commit({}, ack=_stop_of(member), final=True, verify={TP: 5}) == {TP: 5}
    assert member.get(paths.offset(G, "t", 0))[0] == encode_int(5)


def test_a_stop_leaves_an_operators_fix_of_an_unchanged_position(member: ZkClient) -> None:
    """An operator set the offset while we held the partition and never moved it: the stop does not write over it."""
    store = _claimed(member)
    stop = _stop_of(member)
    member.set(paths.offset(G, "t", 0), encode_int(3))
    assert store.commit({TP: 5}, ack=stop, final=True) == {}
    assert member.get(paths.offset(G, "t", 0))[0] == encode_int(3)
    assert AssignmentAck.decode(member.get(paths.ack(G, A))[0]).assignment == int(stop.rpartition("-")[2])


def test_a_stop_whose_ack_znode_was_deleted_still_acknowledges(member: ZkClient) -> None:
    """Our ``ack/<c>`` deleted by hand: the stop's transaction fails on it, so the stop commits, then acknowledges
    alone, creating it."""
    store = _claimed(member)
    stop = _stop_of(member)
    member.delete(paths.ack(G, A))
    store.commit({TP: 5}, ack=stop, final=True)
    assert AssignmentAck.decode(member.get(paths.ack(G, A))[0]).assignment == int(stop.rpartition("-")[2])


# --- a start's carried owner versions (zkcoord.consumer.carried) ----------------------------------------------------


def _start_of(zk: ZkClient) -> str:
    """A consumer-protocol start as the member names it (its assignment znode written for real)."""
    path = paths.assignment(G, A)
    stat = zk.create_stat(path, b"{}", makepath=True)
    return f"{path}/assignment-{stat.mzxid}"


def test_a_carried_version_claims_without_reading_the_owner_and_acknowledges_with_the_check(
    member: ZkClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start carries the version the coordinator's transaction left the owner znode at, and the state vouches
    for the partition: the claim reads its committed offset only, and one transaction checks the version and
    acknowledges the start."""
    start = _start_of(member)
    member.create(paths.offset(G, "t", 0), encode_int(7), makepath=True)  # the previous owner's commit
    version = member.exists(paths.owner(G, "t", 0))
    assert version is not None
    store = OffsetStore(member, G, paths.member(G, A))
    requests = Requests(monkeypatch)
    mark = requests.mark()
    result = store.claim({TP: f"{A}-0"}, add=True, repairable={TP}, carried={TP: version.version}, ack=start)
    assert result.acked and set(result.claims) == {TP}
    assert result.claims[TP].owner_version == version.version and result.claims[TP].committed == 7
    assert requests.reads(mark, paths.owner(G, "t", 0)) == 0, requests.since(mark, member.kazoo)
    assert [kind for kind, _ in requests.since(mark, member.kazoo)] == ["GetData", "Transaction"]
    assert AssignmentAck.decode(member.get(paths.ack(G, A))[0]).assignment == int(start.rpartition("-")[2])


def test_a_wrong_carried_version_falls_back_to_a_read_and_acknowledges_nothing(
    member: ZkClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner znode was rewritten by hand since the coordinator's write (another thread, a new version): the
    check fails, so nothing is acknowledged with it and nothing is claimed on the carried guess; the claim reads the
    owner znode and does what a claim without a carried version does -- here, the state vouching for the partition,
    repair it conditionally on what it read -- and holds the version it read and wrote, not the guess."""
    start = _start_of(member)
    owner = paths.owner(G, "t", 0)
    carried = member.exists(owner)
    assert carried is not None
    member.set(owner, b"someone-else-0")  # by hand, after the coordinator's write
    store = OffsetStore(member, G, paths.member(G, A))
    requests = Requests(monkeypatch)
    mark = requests.mark()
    result = store.claim({TP: f"{A}-0"}, add=True, repairable={TP}, carried={TP: carried.version}, ack=start)
    assert not result.acked
    assert member.get(paths.ack(G, A))[0] == b"", "the acknowledgement landed without its check"
    assert requests.reads(mark, owner) == 1, "the owner znode was not read after the check failed"
    now = member.exists(owner)
    assert now is not None and now.version == carried.version + 2  # the hand's write, then the repair
    assert set(result.claims) == {TP} and result.claims[TP].owner_version == now.version
    assert member.get(owner)[0] == f"{A}-0".encode()


def test_a_carried_version_for_a_partition_the_state_does_not_vouch_for_is_not_trusted(
    member: ZkClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start (forged, or the state moved on since) carries the right version of an owner znode naming another
    thread: without the state's word the version is not used -- the owner znode is read, and names another thread:
    not claimed (S2)."""
    start = _start_of(member)
    owner = paths.owner(G, "t", 0)
    member.set(owner, b"someone-else-0")
    right = member.exists(owner)
    assert right is not None
    store = OffsetStore(member, G, paths.member(G, A))
    requests = Requests(monkeypatch)
    mark = requests.mark()
    result = store.claim({TP: f"{A}-0"}, add=True, carried={TP: right.version}, ack=start)
    assert result.claims == {} and not result.acked
    assert requests.reads(mark, paths.owner(G, "t", 0)) == 1
    assert member.get(paths.ack(G, A))[0] == b""


# --- committed offsets carried from the revoker's acknowledgement to the next owner ------------------------------


def test_a_stops_acknowledgement_carries_the_offsets_it_leaves(member: ZkClient) -> None:
    """The stop's acknowledgement carries each given-up partition's committed offset with the version its offset
    znode is at once the stop's transaction landed -- a position written there and one ``poll()`` committed before
    -- which is what the next owner checks instead of reading."""
    store = _claimed(member)
    assert store.commit({TP: 8}, ack=_stop_of(member), final=True, releasing={TP}) == {TP: 8}
    stat = member.exists(paths.offset(G, "t", 0))
    assert stat is not None
    ack = AssignmentAck.decode(member.get(paths.ack(G, A))[0])
    assert ack.offsets == {"t": {0: (8, stat.version)}}
    store.commit({TP: 8}, ack=_stop_of(member), final=True, releasing={TP})  # unchanged: only checked
    assert AssignmentAck.decode(member.get(paths.ack(G, A))[0]).offsets == {"t": {0: (8, stat.version)}}


def test_a_stop_carries_what_the_revoke_callback_committed_not_the_position_it_expected(member: ZkClient) -> None:
    """``poll()``'s auto-commit committed 5 and the parked stop expects 5 still committed (``verify``), but the
    application's ``on_partitions_revoked`` committed 3 (Kafka's ``commitSync(Map)`` inside the callback): the
    acknowledgement carries 3 with the version that write left, never 5 at it -- the next owner would start at 5
    and skip 3-4 (S3; found in review)."""
    store = _claimed(member)
    store.commit({TP: 3})
    store.commit({}, ack=_stop_of(member), final=True, verify={TP: 5}, releasing={TP})
    data, stat = member.get(paths.offset(G, "t", 0))
    ack = AssignmentAck.decode(member.get(paths.ack(G, A))[0])
    assert ack.offsets == {"t": {0: (decode_int("offset", data), stat.version)}} == {"t": {0: (3, 1)}}


def _claim_carrying(
    member: ZkClient, monkeypatch: pytest.MonkeyPatch, carried: tuple[int, int]
) -> tuple[Claims, Requests, int]:
    """Claim ``t/0`` as a start carrying the owner znode's current version and the committed offset ``carried``
    (offset, offset znode version) would, counting the requests from just before the claim."""
    start = _start_of(member)
    owner = member.exists(paths.owner(G, "t", 0))
    assert owner is not None
    store = OffsetStore(member, G, paths.member(G, A))
    requests = Requests(monkeypatch)
    mark = requests.mark()
    result = store.claim(
        {TP: f"{A}-0"}, add=True, repairable={TP}, carried={TP: owner.version}, offsets={TP: carried}, ack=start
    )
    return result, requests, mark


def test_carried_offsets_claim_without_any_read(member: ZkClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start carries the owner znode's version and the committed offset with its offset znode's version: the
    claim sends one request, the transaction that checks both and acknowledges, and starts from the carried
    offset."""
    offset = member.create_stat(paths.offset(G, "t", 0), encode_int(7), makepath=True)
    result, requests, mark = _claim_carrying(member, monkeypatch, (7, offset.version))
    assert result.acked and result.claims[TP].committed == 7 and result.claims[TP].offset_version == offset.version
    assert [kind for kind, _ in requests.since(mark, member.kazoo)] == ["Transaction"]


def test_a_stale_carried_offset_is_read_and_acknowledges_nothing(
    member: ZkClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The offset moved after the revoker's acknowledgement (an operator's reset): the carried version no longer
    matches, the transaction fails whole, and the claim reads the offset znode and starts where it says."""
    offset = member.create_stat(paths.offset(G, "t", 0), encode_int(7), makepath=True)
    member.set(paths.offset(G, "t", 0), encode_int(3))  # after the revoker's acknowledgement
    result, requests, mark = _claim_carrying(member, monkeypatch, (7, offset.version))
    assert not result.acked and member.get(paths.ack(G, A))[0] == b""
    assert requests.reads(mark, paths.offset(G, "t", 0)) == 1
    assert result.claims[TP].committed == 3 and result.claims[TP].offset_version == offset.version + 1


# --- one join, end to end ---------------------------------------------------------------------------------------------


def test_a_join_costs_its_members_only_the_requests_it_needs(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member joins a consumer-protocol group of one that holds 4 partitions, and takes 2 of them (real coordinator,
    real consumers, real ZooKeeper; every request of every client counted).  Each request issue 16 removed stays
    removed -- the joiner reads no owner znode (the start carries their versions, which are the ones ZooKeeper holds)
    and no committed offset (the start carries those the revoker's acknowledgement reported, checked likewise),
    reads the state only with an assignment (its first look is one ``exists``), reads its registration once, creates
    its channel in one request and checks no ``offsets/<t>``; the revoker reads no offset at its stop -- and the
    result is as safe: every partition fetched by exactly one member, as the owner znodes say."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    data = tmp_path / "data"
    produce(data, "t", 4, 20)
    with ExitStack() as stack:
        first = make(cluster, data, stack, rebalance="consumer")
        wait_until(polling([first], lambda: len(first.assignment()) == 4), 20, "the first member fetching all 4")
        wait_until(polling([first], lambda: cluster.is_stable("g", 1)), 10, "the group stable")
        wait_until(polling([first], lambda: first.lag() == 0), 20, "every record consumed")
        first.commit()  # its positions committed before the join: its stop finds them unchanged
        requests = Requests(monkeypatch)
        mark = requests.mark()
        joiner = make(cluster, data, stack, rebalance="consumer")
        both = [first, joiner]

        def balanced() -> bool:
            return len(first.assignment()) == len(joiner.assignment()) == 2 and cluster.is_stable("g", 2)

        wait_until(polling(both, balanced), 20, "2 partitions each, the group stable")
        sent = requests.since(mark, joiner.zk.kazoo)
        revoker = requests.since(mark, first.zk.kazoo)
        command = Command.decode(cluster.admin_zk.get(paths.assignment("g", joiner.consumer_id))[0])
        held = {(tp.topic, tp.partition): c.consumer_id for c in both for tp in c.assignment()}
        registry = owners_registry(cluster.admin_zk, "g")
        versions = {(t, p): v for t, ps in (command.versions or {}).items() for p, v in ps.items()}
        actual = {}
        for t, p in versions:
            stat = cluster.admin_zk.exists(paths.owner("g", t, p))
            actual[(t, p)] = None if stat is None else stat.version
    commands = len(cluster.events("command.sent", consumer=joiner.consumer_id))
    problems = _join_problems(joiner.consumer_id, sent, revoker, commands)
    if not versions or versions != actual:
        problems.append(f"the start carried {versions}, the owner znodes are at {actual}")
    assert not problems, "\n".join(problems) + f"\njoiner's requests: {sent}"
    assert len(held) == 4, "a partition fetched by both members, or by none"
    assert {(t, p): registry[t][p].rpartition("-")[0] for t, p in held} == held, "fetched by another than its owner"


def _join_problems(
    me: str, sent: list[tuple[str, str | None]], revoker: list[tuple[str, str | None]], commands: int
) -> list[str]:
    """What the joiner's (``sent``) and the revoker's requests show of a request issue 16 removed, sent again
    (``commands``: how many the coordinator wrote to the joiner)."""

    def count(kind: str, path: str) -> int:
        return sum(1 for k, p in sent if k == kind and p is not None and p.endswith(path))

    problems = []
    owner_reads = [p for k, p in sent if k == "GetData" and p is not None and "/owners/" in p]
    if owner_reads:
        problems.append(f"the joiner read owner znodes: {owner_reads}")
    offset_reads = [p for k, p in sent if k == "GetData" and p is not None and "/offsets/" in p]
    if offset_reads:
        problems.append(f"the joiner read committed offsets the revoker's acknowledgement carried: {offset_reads}")
    states = count("GetData", paths.group_state("g"))
    if states > commands:
        problems.append(f"the joiner read the state {states} times for {commands} commands written to it")
    if count("GetData", paths.member("g", me)) != 1:
        problems.append(f"the joiner read its registration {count('GetData', paths.member('g', me))} times")
    if count("Exists", paths.channel("g", me)) or count("Exists", paths.channel_root("g")):
        problems.append("the joiner ensured its channel (exists before create)")
    if count("Exists", paths.offsets("g", "t")):
        problems.append("the joiner checked offsets/t")
    stop = [(k, p) for k, p in revoker if k != "Exists"]  # (its heartbeat's lease round trips are exists)
    if len(stop) != 3:  # its assignment, the state that vouches for it, the transaction that checks and acks
        problems.append(f"the revoker's stop cost {len(stop)} requests, not 3: {stop}")
    return problems
