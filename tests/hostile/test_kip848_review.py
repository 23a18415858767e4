"""Review of KIP-848's consumer protocol: hostile state and fault sequences the engine mishandles.

Each test is a finding of the review (wip-review848): it fails on the code it was written against and says which
property breaks.  Real ZooKeeper, coordinators in this process (``Cluster``), scripted members that acknowledge
only what the test lets them (``ScriptedConsumer.ack`` is read at every command, so a member is turned "hung" once
it holds its partitions).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.clusters import Cluster
from tests.scripted import ScriptedConsumer
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.commands import CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.kip848 import CurrentAssignment
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.testbed.procs import wait_until

pytestmark = [pytest.mark.integration]

G, T = "g", "t"


def _member(cluster: Cluster, group: str = G, **kw: object) -> ScriptedConsumer:
    return cluster.consumer(group, {T: 1}, consumer_protocol=True, **kw)


def _set_state(cluster: Cluster, group: str, **changes: object) -> None:
    data, stat = cluster.admin_zk.get(paths.group_state(group))
    state = dataclasses.replace(GroupState.decode(data), **changes)  # type: ignore[arg-type]
    cluster.admin_zk.set(paths.group_state(group), state.encode(), stat.version)


def _worker_alive(cluster: Cluster, broker: int) -> bool:
    worker = cluster.coordinator(broker)._worker  # the evidence: whether the worker thread died
    return worker is not None and worker.is_alive()


def _steps(cluster: Cluster, consumer: str) -> list[dict[str, object]]:
    return [e.fields for e in cluster.events("kip848.member_step", consumer=consumer)]


# --- the coordinator's worker ------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_rebuilt_member_fenced_mid_full_stop_does_not_kill_the_coordinator(cluster: Cluster) -> None:
    """A rebuilt group's member is sent a stop of everything (``must_stop``) and does not acknowledge it in time: it
    is fenced, but ``_fence`` leaves it in ``must_stop``; the next round builds its full stop again and
    ``ops.command`` looks up ``model.members[member]``: KeyError, not a ZkCoordError, so the coordinator's worker
    thread dies while its broker keeps the coordinator's seat -- no group of the cluster is coordinated any more."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create(T, 4)
    hung, other = _member(cluster), _member(cluster)
    cluster.wait_stable(G, 2)
    cluster.brokers[1].stop()
    # Records that cannot be trusted (rebuild) and a state that does not vouch for the registry (full stops).
    cluster.admin_zk.set(paths.kip848(G), b"not json")
    _set_state(cluster, G, phase=GroupPhase.RECONCILING)
    hung.ack = False  # hung from here: its full stop is never acknowledged
    cluster.broker(2, rebalance_timeout_s=1.0, fence_grace_s=2.0)
    wait_until(lambda: bool(cluster.events("kip848.member_fenced")), 15, "the hung member fenced")
    # Its grace over, the fenced member's partitions are the other member's.
    other.wait_for(lambda c: len(c.partitions()) == 4, timeout=15)
    assert _worker_alive(cluster, 2)


def test_a_fenced_sole_member_keeps_its_partitions_held_through_its_grace(cluster: Cluster) -> None:
    """The group's only member is fenced (here: it never acknowledges a rebuilt group's stop of everything).  Its
    registration deleted, the group has no member: ``speaks_consumer`` is false, the classic path runs the empty
    group (an eager "rebalance" of nobody that deletes the owner znodes) and ``forget`` drops the model -- with its
    ``fenced`` entry.  A member joining next is granted everything at once, while the fenced member may still be
    fetching (S2: the grace is the design's only guard against a fenced member)."""
    grace = 4.0
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create(T, 4)
    hung = _member(cluster)
    hung.wait_for(lambda c: len(c.partitions()) == 4)
    cluster.wait_stable(G, 1)
    cluster.brokers[1].stop()
    cluster.admin_zk.set(paths.kip848(G), b"not json")
    _set_state(cluster, G, phase=GroupPhase.RECONCILING)
    hung.ack = False
    cluster.broker(2, rebalance_timeout_s=1.0, fence_grace_s=grace)
    wait_until(lambda: bool(cluster.events("kip848.member_fenced")), 15, "the hung member fenced")
    [fenced] = cluster.events("kip848.member_fenced")
    joiner = _member(cluster)
    joiner.wait_for(lambda c: len(c.partitions()) == 4, timeout=grace + 10)
    [grant] = [e for e in cluster.events("command.sent", consumer=joiner.consumer_id) if e.fields["partitions"]]
    assert grant.mono_ns - fenced.mono_ns >= (grace - 0.1) * 1e9, "S2: granted before the fenced member's grace ended"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_epoch_at_the_limit_does_not_kill_the_coordinator(cluster: Cluster) -> None:
    """A group state whose generation is beyond KIP-848's int32 epochs (the state's codec takes any non-negative
    int): the records disagree with it, the group is rebuilt at that epoch and ``GroupEpochs`` raises ValueError --
    the worker thread dies (S7: bad input must be refused, not fatal).  Another group is then never served."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create(T, 2)
    _member(cluster).wait_for(lambda c: len(c.partitions()) == 2)
    cluster.wait_stable(G, 1)
    cluster.brokers[1].stop()
    _set_state(cluster, G, generation=2**31)
    cluster.broker(2)
    other = _member(cluster, "other")
    other.wait_for(lambda c: len(c.partitions()) == 2, timeout=15)
    assert _worker_alive(cluster, 2)


def test_two_current_records_holding_one_partition_do_not_starve_the_other_groups(cluster: Cluster) -> None:
    """Two members' ``current/<m>`` records both hold t/0 (bad persisted state).  Every examination of that group
    raises DoubleOwnershipError out of ``round_steps`` (caught by the worker as a failed step), and ``_pump`` puts
    the whole batch back with the bad group first: every group queued behind it is never examined again -- here a
    member joining another group never hears anything (liveness for the whole cluster, S7)."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create(T, 2)
    a1, a2 = _member(cluster, "a"), _member(cluster, "a")
    b1 = _member(cluster, "b")
    b1.wait_for(lambda c: len(c.partitions()) == 2)
    cluster.wait_stable("a", 2)
    cluster.wait_stable("b", 1)
    cluster.brokers[1].stop()
    path1, path2 = paths.current("a", a1.consumer_id), paths.current("a", a2.consumer_id)
    c1 = CurrentAssignment.decode(cluster.admin_zk.get(path1)[0])
    c2 = CurrentAssignment.decode(cluster.admin_zk.get(path2)[0])
    cluster.admin_zk.set(path2, dataclasses.replace(c2, assigned=c2.assigned | c1.assigned).encode())
    b2 = _member(cluster, "b")
    cluster.broker(2)
    b2.wait_for(lambda c: len(c.partitions()) == 1, timeout=15)


# --- fencing -----------------------------------------------------------------------------------------------------


def test_a_fenced_member_is_released_by_a_new_coordinator(cluster: Cluster) -> None:
    """A member fenced for not revoking keeps its partitions held through its grace, in the coordinator's memory
    only (``model.fenced``); its ``current/<m>`` record stays.  A coordinator that takes over reads that record for a
    member the state no longer lists, holds its partitions for ever (no grace timer, no member to drop): the joiner
    waits for them for ever (liveness; S3's "eventually consumed")."""
    cluster.broker(1, rebalance_timeout_s=1.0, fence_grace_s=3.0)
    TopicAdmin(cluster.admin_zk).create(T, 4)
    hung = _member(cluster)
    hung.wait_for(lambda c: len(c.partitions()) == 4)
    hung.ack = False
    joiner = _member(cluster)
    wait_until(lambda: bool(cluster.events("kip848.member_fenced")), 10, "the hung member fenced")
    wait_until(lambda: hung.consumer_id not in cluster.state(G).members, 10, "the state written without it")
    cluster.brokers[1].stop()
    cluster.broker(2, rebalance_timeout_s=1.0, fence_grace_s=3.0)
    joiner.wait_for(lambda c: len(c.partitions()) == 4, timeout=20)


def test_a_grace_timer_of_an_earlier_fence_does_not_release_a_member_fenced_again(cluster: Cluster) -> None:
    """A member fenced, released when it registered again (same consumer id: the consumer's ``register_again``
    keeps its id), then fenced again: the first fence's grace timer still fires (``on_timer`` checks only that the
    member is fenced, not which fence armed the timer) and releases the member's partitions before the second
    fence's grace has passed -- the departure from Kafka that S2 rests on ("held until fence_grace_s has
    passed") is broken."""
    grace = 6.0
    cluster.broker(1, rebalance_timeout_s=1.0, fence_grace_s=grace)
    TopicAdmin(cluster.admin_zk).create(T, 4)
    hung = _member(cluster)
    hung.wait_for(lambda c: len(c.partitions()) == 4)
    hung.ack = False
    joiner = _member(cluster)
    wait_until(lambda: bool(cluster.events("kip848.member_fenced")), 10, "the hung member fenced")
    joiner.close()
    hung.close()
    back = _member(cluster, consumer_id=hung.consumer_id)  # the same consumer id, registered again
    back.wait_for(lambda c: len(c.partitions()) == 4, timeout=15)
    back.ack = False
    _member(cluster)
    wait_until(lambda: len(cluster.events("kip848.member_fenced")) == 2, 10, "fenced a second time")
    second = cluster.events("kip848.member_fenced")[1]
    wait_until(
        lambda: any(e.mono_ns > second.mono_ns for e in cluster.events("kip848.member_released")),
        grace + 10,
        "released after its second fence",
    )
    released = next(e for e in cluster.events("kip848.member_released") if e.mono_ns > second.mono_ns)
    assert released.mono_ns - second.mono_ns >= (grace - 0.1) * 1e9, "released before its grace ended (S2)"


def test_a_revocation_found_in_flight_by_a_new_coordinator_still_has_a_deadline(cluster: Cluster) -> None:
    """A coordinator taking over waits for the stops it finds in the channels (``_find_inflight``) but arms no
    revocation deadline for them (``InFlight.token`` 0): a member that never acknowledges is never fenced, and the
    partitions it was revoking are never granted (issue 16 item 2: fenced within the rebalance timeout)."""
    cluster.broker(1, rebalance_timeout_s=4.0, fence_grace_s=1.0)
    TopicAdmin(cluster.admin_zk).create(T, 4)
    hung = _member(cluster)
    hung.wait_for(lambda c: len(c.partitions()) == 4)
    hung.ack = False
    joiner = _member(cluster)
    hung.wait_for(lambda c: bool(c.commands(CommandOption.STOP_FETCHER)), timeout=10)
    cluster.brokers[1].stop()  # before its revocation deadline
    assert not cluster.events("kip848.member_fenced")
    cluster.broker(2, rebalance_timeout_s=1.0, fence_grace_s=1.0)
    wait_until(lambda: bool(cluster.events("kip848.member_fenced")), 15, "the hung member fenced by the successor")
    joiner.wait_for(lambda c: len(c.partitions()) == 4, timeout=15)


# --- S2 under hostile records --------------------------------------------------------------------------------------


def _hold_everything_then_stop_coordinator(cluster: Cluster) -> ScriptedConsumer:
    cluster.broker(1, rebalance_timeout_s=60.0)
    TopicAdmin(cluster.admin_zk).create(T, 4)
    holder = _member(cluster)
    holder.wait_for(lambda c: len(c.partitions()) == 4)
    cluster.wait_stable(G, 1)
    cluster.brokers[1].stop()
    holder.ack = False  # fetching all four until it acknowledges a stop: it never does
    return holder


def _nothing_granted_while_holder_fetches(cluster: Cluster, holder: ScriptedConsumer, joiner: ScriptedConsumer) -> None:
    cluster.broker(2, rebalance_timeout_s=60.0)
    wait_until(lambda: bool(_steps(cluster, joiner.consumer_id)), 15, "the joiner's first step")
    wait_until(lambda: bool(holder.commands(CommandOption.STOP_FETCHER)), 15, "the holder told to stop")
    granted = [s for s in _steps(cluster, joiner.consumer_id) if s["granted"]]
    assert granted == [], f"S2: granted partitions the holder still fetches (it acknowledged no stop): {granted}"


def test_a_rebuild_counts_what_the_state_says_a_member_fetches_not_only_the_registry(cluster: Cluster) -> None:
    """The owner znodes deleted by hand and the records made unreadable: the rebuilt model gives the member the
    state's target names only the registry's partitions as pending revocation (none), so the joiner is granted its
    share in the same round as the holder's stop of everything -- while the holder still fetches it (S2).  The
    classic path refuses exactly this (``registry_vouched``: the state's target says who fetches what)."""
    holder = _hold_everything_then_stop_coordinator(cluster)
    for p in cluster.admin_zk.get_children(paths.owners(G, T)):
        cluster.admin_zk.delete(paths.owner(G, T, int(p)))
    cluster.admin_zk.set(paths.kip848(G), b"not json")
    joiner = _member(cluster)
    _nothing_granted_while_holder_fetches(cluster, holder, joiner)


def test_a_current_record_deleted_by_hand_does_not_free_its_members_partitions(cluster: Cluster) -> None:
    """A live member's ``current/<m>`` deleted by hand: the successor resumes, takes the member for a joiner holding
    nothing (epoch 0), and at the next bump grants its partitions to another member while it still fetches them
    (S2).  (The member is sent no stop at all: it is told a start of its new share.)"""
    holder = _hold_everything_then_stop_coordinator(cluster)
    cluster.admin_zk.delete(paths.current(G, holder.consumer_id))
    joiner = _member(cluster)
    cluster.broker(2, rebalance_timeout_s=60.0)
    wait_until(lambda: bool(_steps(cluster, joiner.consumer_id)), 15, "the joiner's first step")
    wait_until(lambda: bool(_steps(cluster, holder.consumer_id)), 15, "the holder's step")
    granted = [s for s in _steps(cluster, joiner.consumer_id) if s["granted"]]
    assert granted == [], f"S2: granted partitions the holder still fetches (it was told no stop): {granted}"


# --- S5, bad channel content, static members -----------------------------------------------------------------------


def test_a_rebuild_after_the_state_and_epochs_were_deleted_does_not_send_stale_generations(cluster: Cluster) -> None:
    """The group state and the ``kip848`` record deleted by hand mid-term: the next write fails, the model is read
    back and rebuilt at epoch 0 (``_rebuild`` sees neither record; the rebalancer's in-memory ``generations`` and the
    generations the consumers hold are ignored), so its commands carry generation 1 under the same coordinator
    epoch.  The holder refuses the stale stop of everything -- and a refused command is acknowledged, so the
    coordinator takes it as done and grants the holder's partitions to the joiner while the holder still fetches
    them (S5, then S2)."""
    cluster.broker(1, rebalance_timeout_s=60.0)
    TopicAdmin(cluster.admin_zk).create(T, 4)
    holder = _member(cluster)
    passing = _member(cluster)
    cluster.wait_stable(G, 2)
    passing.close()
    wait_until(lambda: cluster.is_stable(G, 1) and len(holder.partitions()) == 4, 15, "the holder with everything")
    assert holder.generation >= 3
    cluster.admin_zk.delete(paths.group_state(G))
    cluster.admin_zk.delete(paths.kip848(G))
    joiner = _member(cluster)
    joiner.wait_for(lambda c: bool(c.partitions()), timeout=15)
    both = joiner.partitions() & holder.partitions()
    stale = [s.name for s in holder.seen if s.error == "stale"]
    assert not both, f"S2: {sorted(both)} granted while the holder fetches them; it refused as stale (S5): {stale}"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_junk_command_name_in_a_channel_does_not_kill_the_coordinator(cluster: Cluster) -> None:
    """A znode named like a command but not one of the coordinator's (``cmd-x-y-start-<seq>``) in a member's channel
    when a coordinator takes over: ``_find_inflight`` waits for it as the member's command in flight; its deletion
    (a consumer refuses and deletes such a znode) reaches ``_acknowledged``, which parses the generation out of the
    name: ``int('y')`` raises ValueError and the worker thread dies (S7)."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create(T, 2)
    member = _member(cluster)
    member.wait_for(lambda c: len(c.partitions()) == 2)
    cluster.wait_stable(G, 1)
    cluster.brokers[1].stop()
    member.ack = False
    junk = cluster.admin_zk.kazoo.create(f"{paths.channel(G, member.consumer_id)}/cmd-x-y-start-", b"?", sequence=True)
    cluster.broker(2)
    wait_until(lambda: bool(cluster.events("kip848.resumed")), 15, "the group resumed")
    cluster.admin_zk.delete(junk)  # as the consumer does with a command it refuses
    other = _member(cluster, "other")
    other.wait_for(lambda c: len(c.partitions()) == 2, timeout=15)
    assert _worker_alive(cluster, 2)


@dataclass
class _Static(ScriptedConsumer):
    instance_id: str = "a"

    def register_async(self) -> Any:
        reg = MemberRegistration(
            Pattern.STATIC,
            self.subscription,
            int(time.time() * 1000),
            consumer_protocol=True,
            instance_id=self.instance_id,
        )
        return self.zk.kazoo.create_async(paths.member(self.group, self.consumer_id), reg.encode(), ephemeral=True)


def test_a_held_static_member_back_under_its_own_consumer_id_is_not_ignored(cluster: Cluster) -> None:
    """A static member's registration ends (here deleted, as a session expiry does) and the same consumer registers
    again under the same consumer id (the consumer's ``register_again`` keeps its id): ``_membership`` skips every
    member in ``model.absent`` and every id already in ``model.members``, so the new incarnation is never looked at
    -- it gets nothing during the hold, and after it (``_expire`` rebalances without it, and nothing examines the
    group again) nothing either (issue 16 item 5; liveness)."""
    hold = 3.0
    cluster.broker(1, static_hold_s=hold)
    TopicAdmin(cluster.admin_zk).create(T, 2)
    member = _Static(cluster.hosts, G, {T: 1}, consumer_protocol=True)
    cluster.stack.enter_context(member)
    cluster.stack.enter_context(_Static(cluster.hosts, G, {T: 1}, consumer_protocol=True, instance_id="b"))
    cluster.wait_stable(G, 2)
    cluster.admin_zk.delete(paths.member(G, member.consumer_id))
    wait_until(lambda: bool(cluster.events("kip848.member_held")), 10, "the static member held")
    member.register()
    stat = cluster.admin_zk.exists(paths.member(G, member.consumer_id))
    assert stat is not None
    member.wait_for(
        lambda c: any(cmd.incarnation == stat.czxid for cmd in c.commands(CommandOption.START_FETCHER)),
        timeout=hold + 10,
    )
