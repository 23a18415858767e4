"""KIP-848's consumer protocol end to end: a real broker, producer and consumer processes, the journals and the
group's znodes as evidence.  Each member reconciles on its own: revoke before assign, per member, no group-wide
barrier (S2); nothing lost (S3) or duplicated by a clean change (S4); the epochs and records are persisted and a new
coordinator carries on from them."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.clusters import Cluster
from tests.integration.test_consumer_e2e import Run, _id
from tests.integration.test_incremental import events
from tests.ledger import Ledger
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.kip848 import CurrentAssignment, GroupEpochs, MemberTarget
from zkcoord.runtime.journal import JournalEvent
from zkcoord.testbed.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONSUMER = ("--protocol", "consumer")


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def records(run: Run, group: str) -> tuple[GroupEpochs, dict[str, MemberTarget], dict[str, CurrentAssignment]]:
    """The group's KIP-848 records as ZooKeeper holds them."""
    epochs = GroupEpochs.decode(run.zk.get(paths.kip848(group))[0])
    targets = {
        m: MemberTarget.decode(run.zk.get(paths.target(group, m))[0])
        for m in run.zk.get_children(paths.targets_root(group))
    }
    currents = {
        m: CurrentAssignment.decode(run.zk.get(paths.current(group, m))[0])
        for m in run.zk.get_children(paths.currents_root(group))
    }
    return epochs, targets, currents


def reconciled(run: Run, group: str, members: int) -> bool:
    """The group STABLE with ``members`` members, each at the assignment epoch with exactly its target."""
    state = run.state(group)
    if state is None or state.phase is not GroupPhase.STABLE or len(state.members) != members:
        return False
    epochs, targets, currents = records(run, group)
    return set(currents) == set(targets) == set(state.members) and all(
        c.is_reconciled_to(epochs.assignment_epoch) and c.assigned == targets[m].partitions for m, c in currents.items()
    )


def owners(run: Run, group: str, topic: str) -> dict[int, str]:
    return {
        int(p): run.zk.get(paths.owner(group, topic, int(p)))[0].decode()
        for p in run.zk.get_children(paths.owners(group, topic))
    }


def test_joins_and_a_leave_reconcile_member_by_member_with_epochs(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 6)
    first = run.consumer("k", "t", extra=CONSUMER)
    wait_until(lambda: reconciled(run, "k", 1), 30, "the first member reconciled")
    epochs, _, currents = records(run, "k")
    [only] = currents.values()
    assert only.assigned.count() == 6 and only.member_epoch == epochs.assignment_epoch == epochs.group_epoch
    producer = run.producer("t", 20_000, 4_000)
    wait_until(lambda: Ledger.read(run.journal, "k").consumed != {}, 30, "consumption to begin")
    second = run.consumer("k", "t", extra=CONSUMER)
    wait_until(lambda: reconciled(run, "k", 2), 30, "two members reconciled")
    after_join, _, currents = records(run, "k")
    assert after_join.group_epoch > epochs.group_epoch, "a join bumps the group epoch"
    assert sorted(c.assigned.count() for c in currents.values()) == [3, 3]
    # The first member revoked before the second was granted: its stop was acknowledged before the start that gave
    # the second member anything.
    wait_until(lambda: bool(_id(run, first) and _id(run, second)), 10, "both members' ids")
    old = _id(run, first)
    new = _id(run, second)
    steps = events(run, "k", "command.acked", "command.sent")
    revoked = [
        e for e in steps if e["ev"] == "command.acked" and e["consumer"] == old and e["option"] == "stop-fetcher"
    ]
    granted = [e for e in steps if e["ev"] == "command.sent" and e["consumer"] == new and e["partitions"]]
    assert revoked and granted and revoked[0]["ts"] <= granted[0]["ts"]
    assert set(owners(run, "k", "t").values()) == {f"{old}-0", f"{new}-0"}
    second.signal(signal.SIGTERM)
    second.wait(timeout=30)
    wait_until(lambda: reconciled(run, "k", 1), 30, "back to one member")
    producer.wait(timeout=120)
    ledger = run.wait_consumed_all("k", {"t"}, timeout=90)
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"
    assert ledger.duplicates() == {}, "S4: a clean join and leave consumed something twice"
    modes = {e.get("mode") for e in events(run, "k", "rebalance.started")}
    assert modes == {"consumer"}, f"never an eager or incremental attempt: {modes}"


def test_a_new_coordinator_carries_the_reconciliation_on_from_the_records(run: Run) -> None:
    """The coordinator is killed while a member is revoking (its slow application has not polled yet); the next one
    reads the epochs, targets and current assignments back and carries on: no member is stopped again, the
    revocation completes, the joiner gets its share, and S2, S3 hold."""
    broker = run.broker(1)
    run.broker(2)
    TopicAdmin(run.zk).create("t", 4)
    slow = ("--no-auto-commit", "--work-ms", "10", "--max-poll-records", "50")  # a revocation waits <= 0.5 s
    first = run.consumer("f", "t", extra=(*CONSUMER, *slow))
    wait_until(lambda: reconciled(run, "f", 1), 30, "the first member reconciled")
    producer = run.producer("t", 2_000, 500)
    wait_until(lambda: Ledger.read(run.journal, "f").consumed != {}, 30, "consumption to begin")
    epochs, _, _ = records(run, "f")
    run.consumer("f", "t", extra=CONSUMER)
    wait_until(lambda: bool(_id(run, first)), 10, "the first member's id")
    old = _id(run, first)

    def revoking() -> bool:
        return any(e["consumer"] == old and e["option"] == "stop-fetcher" for e in events(run, "f", "command.sent"))

    wait_until(revoking, 30, "the first member told to revoke")
    broker.signal(signal.SIGKILL)
    wait_until(lambda: reconciled(run, "f", 2), 60, "two members reconciled under the new coordinator")
    resumed = [e for e in events(run, "f", "kip848.resumed", "kip848.rebuilt") if e["epoch"] > 1]
    assert [e["ev"] for e in resumed] == ["kip848.resumed"], f"carried on, not rebuilt: {resumed}"
    assert not events(run, "f", "rebalance.retrying"), "no write failed"
    assert records(run, "f")[0].group_epoch == epochs.group_epoch + 1, "one join, one epoch: no rebuild bump"
    full_stops = [e for e in events(run, "f", "command.sent") if e["option"] == "stop-fetcher" and not e["partitions"]]
    assert full_stops == [], "nobody was stopped entirely"
    producer.wait(timeout=120)
    ledger = run.wait_consumed_all("f", {"t"}, timeout=90)
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"


def test_a_member_that_does_not_revoke_in_time_is_fenced_and_its_partitions_held_until_its_grace_ends(
    zk_hosts: str, tmp_path: Path
) -> None:
    """A member told to revoke never acknowledges (its application hangs): past the rebalance timeout it is fenced
    (its registration deleted), and the partitions it was revoking are granted to the joiner only once its grace
    has passed -- never while it may still be fetching them (S2)."""
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, tmp_path / "journal", stack)
        cluster.broker(1, rebalance_timeout_s=1.0, fence_grace_s=3.0)
        TopicAdmin(cluster.admin_zk).create("t", 4)
        hung = cluster.consumer("h", {"t": 1}, consumer_protocol=True, stop_ack_delay_s=60.0)
        hung.wait_for(lambda c: len(c.partitions()) == 4)
        claimed = {p: cluster.admin_zk.exists(paths.owner("h", "t", p)) for p in range(4)}  # what its claims read
        joiner = cluster.consumer("h", {"t": 1}, consumer_protocol=True)
        wait_until(lambda: bool(cluster.events("kip848.member_fenced")), 10, "the hung member fenced")
        [fenced] = cluster.events("kip848.member_fenced")
        assert fenced.fields["consumer"] == hung.consumer_id
        gone = paths.member("h", hung.consumer_id)
        wait_until(lambda: cluster.admin_zk.exists(gone) is None, 5, "its registration deleted")
        # Its late commits are refused (FENCED_MEMBER_EPOCH): the fence moved the version of every owner znode it
        # held, so a commit conditional on the version its claim read no longer matches.
        for p, before in claimed.items():
            now = cluster.admin_zk.exists(paths.owner("h", "t", p))
            assert before is not None and now is not None and now.version > before.version, f"t/{p} not fenced"
        joiner.wait_for(lambda c: len(c.partitions()) == 4, timeout=15)
        [released] = cluster.events("kip848.member_released")

        def grants() -> list[JournalEvent]:
            sent = cluster.events("command.sent", consumer=joiner.consumer_id)
            return [e for e in sent if e.fields["partitions"] >= 3]

        # journalled right after the transaction the joiner may act on first (seen missing once at load 8)
        wait_until(lambda: bool(grants()), 10, "the joiner's grant journalled")
        assert grants()[0].mono_ns >= released.mono_ns, "granted before the fenced member was released"
        assert released.mono_ns - fenced.mono_ns >= 2.9e9, "released before its grace ended"


def test_a_static_member_restarting_gets_its_partitions_back_and_disturbs_nobody(run: Run) -> None:
    """Two static members; one is stopped and started again with its instance id: it takes its predecessor's
    place (its partitions, no group epoch bump), the other member hears nothing; a third process with a live
    member's instance id is refused in one line."""
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    a = run.consumer("s", "t", extra=(*CONSUMER, "--instance-id", "a"))
    b = run.consumer("s", "t", extra=(*CONSUMER, "--instance-id", "b"))
    wait_until(lambda: reconciled(run, "s", 2), 30, "two static members reconciled")
    epochs, targets, _ = records(run, "s")
    wait_until(lambda: bool(_id(run, a) and _id(run, b)), 10, "both members' ids")
    old_a, id_b = _id(run, a), _id(run, b)
    producer = run.producer("t", 2_000, 500)
    wait_until(lambda: Ledger.read(run.journal, "s").consumed != {}, 30, "consumption to begin")
    sent_to_b = len([e for e in events(run, "s", "command.sent") if e["consumer"] == id_b])
    a.signal(signal.SIGTERM)
    a.wait(timeout=30)
    again = run.consumer("s", "t", extra=(*CONSUMER, "--instance-id", "a"))
    wait_until(lambda: bool(events(run, "s", "kip848.member_replaced")), 30, "the static member back in its place")
    wait_until(lambda: bool(_id(run, again)), 10, "the restarted member's id")
    new_a = _id(run, again)
    wait_until(lambda: reconciled(run, "s", 2), 30, "both reconciled again")
    after, targets_after, _ = records(run, "s")
    assert after.group_epoch == epochs.group_epoch, "a static rejoin does not bump the group epoch"
    assert targets_after[new_a].partitions == targets[old_a].partitions, "it got its partitions back"
    assert targets_after[id_b] == targets[id_b]
    assert len([e for e in events(run, "s", "command.sent") if e["consumer"] == id_b]) == sent_to_b, "b disturbed"
    # group describe shows the records: the epochs, and per member its epoch, state, partitions and instance id.
    described = json.loads(run_cli("group", "describe", "s", "--json", "--zk", run.hosts).stdout)
    records_json = described["kip848"]
    assert records_json["group_epoch"] == after.group_epoch == records_json["assignment_epoch"]
    assert records_json["members"][new_a]["state"] == "STABLE"
    assert records_json["members"][new_a]["assigned"] == {"t": sorted(p for _, p in targets[old_a].partitions.pairs())}
    by_id = {m["consumer_id"]: m for m in described["members"]}
    assert by_id[new_a]["protocol"] == "consumer" and by_id[new_a]["instance_id"] == "a"
    text = run_cli("group", "describe", "s", "--zk", run.hosts).stdout
    assert f"consumer protocol (KIP-848): group epoch {after.group_epoch}" in text and "INSTANCE-ID" in text
    duplicate = run.consumer("s", "t", extra=(*CONSUMER, "--instance-id", "b"))
    assert duplicate.wait(timeout=30) != 0
    assert "instance id 'b' is held by another live member" in duplicate.log_path.read_text()
    producer.wait(timeout=120)
    ledger = run.wait_consumed_all("s", {"t"}, timeout=90)
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"


def test_an_eager_group_rolls_onto_the_consumer_protocol_member_by_member(run: Run) -> None:
    """Three eager members are replaced one by one by consumer-protocol members under load: while the group is mixed
    the classic path runs it; once every member speaks the consumer protocol the coordinator rebuilds it from the
    registry its state vouches for (nobody stopped) and reconciles from there, sticky to what the members fetch.
    S2 and S3 hold throughout."""
    run.broker()
    TopicAdmin(run.zk).create("t", 6)
    old = [run.consumer("m", "t") for _ in range(3)]
    run.wait_members("m", 3)
    producer = run.producer("t", 6_000, 1_000)
    wait_until(lambda: Ledger.read(run.journal, "m").consumed != {}, 30, "consumption to begin")
    for proc in old:
        proc.signal(signal.SIGTERM)
        proc.wait(timeout=30)
        run.consumer("m", "t", extra=CONSUMER)
        run.wait_members("m", 3, timeout=60)
    wait_until(lambda: reconciled(run, "m", 3), 30, "the consumer protocol running the group")
    [rebuilt] = events(run, "m", "kip848.rebuilt")
    assert "no consumer-protocol records" in rebuilt["reason"]
    after = [e for e in events(run, "m", "command.sent") if e["ts"] >= rebuilt["ts"]]
    assert not [e for e in after if e["option"] == "stop-fetcher" and not e["partitions"]], "a member stopped entirely"
    modes = [e.get("mode") for e in events(run, "m", "rebalance.started")]
    assert set(modes) <= {"eager", "consumer"} and modes[-1] == "consumer"
    producer.wait(timeout=120)
    ledger = run.wait_consumed_all("m", {"t"}, timeout=90)
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"


def test_a_static_member_that_does_not_come_back_within_its_hold_leaves_for_good(zk_hosts: str, tmp_path: Path) -> None:
    """A static member leaves: its partitions are held for its instance id (nobody else is told anything) until the
    hold ends; then it leaves for good and the group rebalances; one that registers with its instance id after that
    is a new member (a join, a new group epoch), not its replacement."""
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, tmp_path / "journal", stack)
        cluster.broker(1, static_hold_s=2.0)
        TopicAdmin(cluster.admin_zk).create("t", 4)
        a = cluster.consumer("h", {"t": 1}, consumer_protocol=True, instance_id="a")
        b = cluster.consumer("h", {"t": 1}, consumer_protocol=True, instance_id="b")
        wait_until(lambda: len(a.partitions()) == 2 and len(b.partitions()) == 2, 20, "two each")
        wait_until(lambda: cluster.state("h").phase is GroupPhase.STABLE, 10, "the group stable")
        a.close()
        wait_until(lambda: bool(cluster.events("kip848.member_held", consumer=a.consumer_id)), 10, "a held")
        [held] = cluster.events("kip848.member_held", consumer=a.consumer_id)
        b.wait_for(lambda c: len(c.partitions()) == 4, timeout=15)
        wait_until(lambda: bool(cluster.events("kip848.member_left", consumer=a.consumer_id)), 10, "a left")
        [left] = cluster.events("kip848.member_left", consumer=a.consumer_id)
        assert left.mono_ns - held.mono_ns >= 1.9e9, "the hold ended early"

        # (b may apply its start before the coordinator's journal line of it is written: wait for the line)
        def since_held() -> list[JournalEvent]:
            return [e for e in cluster.events("command.sent", consumer=b.consumer_id) if e.mono_ns > held.mono_ns]

        wait_until(lambda: bool(since_held()), 10, "b's grant")
        grants = since_held()
        assert grants and min(e.mono_ns for e in grants) >= left.mono_ns, "b was told something during the hold"
        again = cluster.consumer("h", {"t": 1}, consumer_protocol=True, instance_id="a")
        again.wait_for(lambda c: len(c.partitions()) == 2, timeout=15)
        assert cluster.events("kip848.member_joined", consumer=again.consumer_id)
        assert not cluster.events("kip848.member_replaced", consumer=again.consumer_id)
