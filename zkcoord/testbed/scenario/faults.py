"""The faults a scenario injects, each for real: signals to processes, a cut network path, ZooKeeper restarts.

Every fault journals ``fault.injected`` (role ``scenario``) when it happens, waits on conditions with deadlines
(never a fixed sleep where a condition exists), and leaves the run with the same number of brokers and consumers it
found, so faults compose in any order -- and, under the random nemesis, two at once (on two threads): a fault takes
its victim from the members no other fault has taken away (:meth:`RunCluster.present`), waits for "stable" over
the present members, and resumes (or reconnects) what it took away even when a wait times out.

``FAULTS`` maps each kind to its function and a one-line description (``zkcoord demo --list`` prints them).
"""

from __future__ import annotations

import random
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from zkcoord.data.topics import TopicAdmin
from zkcoord.runtime.faults import arm, disarm
from zkcoord.runtime.journal import decode_line
from zkcoord.runtime.shutdown import DEFAULT_CONSUMER_TIMEOUT_S, EXIT_INCOMPLETE, hard_bound
from zkcoord.testbed.procs import ProcessError, wait_until
from zkcoord.testbed.scenario.cluster import Member, RunCluster, Workload
from zkcoord.zkserver.util import is_stopped

Say = Callable[[str], None]


class Skipped(str):
    """What a fault returns when it found nothing to inject into (every consumer taken away by other faults, an
    incremental run for an eager-only fault, no ZooKeeper of its own): a string like any fault's result, which the
    runners report as a skip -- never as a fault done, nor as one of two faults at once."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    description: str
    run: Callable[[RunCluster, random.Random, Say], str]


def _settle(cluster: RunCluster, timeout: float = 40) -> None:
    try:
        cluster.wait_all_stable(timeout)
    except ProcessError:
        # An unsafe run can be left unsettled on purpose; the verdict shows what that did.
        if not cluster.unsafe:
            raise


def _grace(cluster: RunCluster) -> float:
    """Long enough for a session to expire on the server and the coordinator to notice."""
    return cluster.workload.session_timeout_s * 2 + 10


def _coordinator(cluster: RunCluster) -> int:
    """The coordinator's broker id, waiting for one: a moment without one (ZooKeeper restarting, a failover, under
    another fault of the random nemesis) is no reason to skip a coordinator fault -- it comes once that is over, still
    during the other fault's aftermath.  :raises ProcessError: no coordinator within the grace of a failover."""
    found: list[int] = []

    def elected() -> bool:
        broker = cluster.coordinator()
        if broker is not None:
            found.append(broker)
        return broker is not None

    wait_until(elected, _grace(cluster), "a coordinator to inject the fault into")
    return found[-1]


def coordinator_zombie(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """Pause the coordinator between its stop and start phases (an incremental group's join: in its hand-over),
    past its session; resume it after a takeover."""
    broker = _coordinator(cluster)
    proc = cluster.brokers[broker]
    arm(cluster.fault_dir, proc.pid, "coordinator.before_start", "pause", "coordinator.mid_handover")
    trigger = cluster.start_consumer(cluster.workload.static_group)  # a join: the coordinator must rebalance
    try:
        wait_until(lambda: is_stopped(proc.pid), 30, "the coordinator to stop itself mid-rebalance")
        cluster.record_fault("coordinator-pause", f"broker-{broker}", "SIGSTOP between stop and start phases")
        say(f"broker {broker} (coordinator) paused itself after its stop phase; waiting for a takeover")
        wait_until(lambda: cluster.coordinator() not in (None, broker), _grace(cluster), "a new coordinator")
        _settle(cluster)
    finally:  # a wait that timed out (another fault in the way) must not leave the broker stopped for good
        disarm(cluster.fault_dir, proc.pid)  # nor armed, to stop itself later with nobody to resume it
        proc.signal(signal.SIGCONT)
    cluster.record_fault("coordinator-resume", f"broker-{broker}", "SIGCONT: the zombie wakes up")
    say(f"broker {broker} resumed as a zombie; new coordinator is broker {cluster.coordinator()}")
    _settle(cluster)
    return f"zombie broker {broker}, joined by {trigger.proc.pid}"


def coordinator_kill(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """SIGKILL the coordinator in the middle of a rebalance (at coordinator.before_start, or in a hand-over), then
    restart it."""
    broker = _coordinator(cluster)
    proc = cluster.brokers[broker]
    arm(cluster.fault_dir, proc.pid, "coordinator.before_start", "kill", "coordinator.mid_handover")
    cluster.start_consumer(cluster.workload.wildcard_group)
    try:
        wait_until(lambda: not proc.alive(), 30, "the coordinator to die mid-rebalance")
    except ProcessError:
        disarm(cluster.fault_dir, proc.pid)  # not to die later, with nobody to restart it
        raise
    cluster.record_fault("coordinator-kill", f"broker-{broker}", "SIGKILL mid-rebalance")
    say(f"broker {broker} (coordinator) killed mid-rebalance")
    wait_until(lambda: cluster.coordinator() not in (None, broker), _grace(cluster), "a new coordinator")
    cluster.start_broker(broker)
    _settle(cluster)
    return f"killed broker {broker}"


def _victim(cluster: RunCluster, rng: random.Random, *, proxied: bool = False) -> Member | None:
    """A live consumer no other fault has taken away (None if there is none), talking through the proxy or not."""
    members = [m for m in cluster.present() if m.via_proxy == proxied]
    return rng.choice(members) if members else None


def _without(cluster: RunCluster, group: str) -> Callable[[], bool]:
    """The condition "``group`` is stable over its present members": a member taken away (paused, cut off) is not
    counted, and the count is taken afresh at each poll, since another fault may start or kill members meanwhile."""
    return lambda: cluster.stable(group, len(cluster.present(group)))


def consumer_pause(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """SIGSTOP a consumer past its session timeout, then SIGCONT it: it must wake up fenced."""
    member = _victim(cluster, rng)
    if member is None:
        return Skipped("nobody to pause")
    group = member.group
    member.proc.signal(signal.SIGSTOP)
    cluster.away.add(member.proc.pid)
    cluster.record_fault("consumer-pause", f"consumer-{member.proc.pid}", f"SIGSTOP in group {group}")
    say(f"consumer {member.proc.pid} ({group}) paused past its session timeout")
    try:
        wait_until(_without(cluster, group), _grace(cluster), "the group to rebalance without it")
    finally:  # resumed even when the wait timed out: a fault leaves as many consumers as it found
        member.proc.signal(signal.SIGCONT)
        cluster.away.discard(member.proc.pid)
    cluster.record_fault("consumer-resume", f"consumer-{member.proc.pid}", "SIGCONT")
    _settle(cluster)
    return f"paused consumer {member.proc.pid}"


def consumer_kill(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """SIGKILL a consumer (its uncommitted records may be consumed again), then start a replacement."""
    member = _victim(cluster, rng)
    if member is None:
        return Skipped("nobody to kill")
    group = member.group
    member.proc.signal(signal.SIGKILL)
    cluster.record_fault("consumer-kill", f"consumer-{member.proc.pid}", f"SIGKILL in group {group}")
    say(f"consumer {member.proc.pid} ({group}) killed")
    member.proc.wait(10)
    # The group must have noticed (the session expired, a rebalance went without it) before the replacement comes:
    # started at once, the newcomer's registration would stand in for the dead one's and "stable" hold at once.
    wait_until(_without(cluster, group), _grace(cluster), "the group to rebalance without it")
    cluster.start_consumer(group)
    _settle(cluster)
    return f"killed consumer {member.proc.pid}"


#: the batch the application of ``consumer-kill-after-revoke`` asks ``poll()`` for
SLOW_BATCH = 20


def slow_app(workload: Workload) -> tuple[str, ...]:
    """The application of ``consumer-kill-after-revoke``: it commits only what it finished, and works at half the
    rate records arrive on one partition of the static topic, so a backlog builds on whatever it owns and each
    ``poll()`` returns a full batch it takes seconds to finish.  Then it is in the middle of a batch at any moment
    but the instant of a ``poll()`` -- where the stop lands in the unsafe contrast, and where the kill must find it
    for the contrast to show the loss every time, not by luck."""
    per_partition = workload.rate / workload.static_partitions  # records/s arriving on one partition
    work_ms = max(1, round(2 * 1000 / per_partition))
    return ("--no-auto-commit", "--work-ms", str(work_ms), "--max-poll-records", str(SLOW_BATCH))


def _full_batch(cluster: RunCluster, pid: int) -> bool:
    """The consumer ``pid``'s ``poll()`` has returned a full batch (``records.consumed`` of one call, which share
    their ``at_ms``, add up to :data:`SLOW_BATCH`): its application is behind its partitions."""
    calls: Counter[int] = Counter()
    for path in cluster.journal_dir.glob(f"*.{pid}.jsonl"):
        with path.open("rb") as lines:
            for line in lines:
                e = decode_line(line)
                if e is not None and e.get("ev") == "records.consumed" and isinstance(e.get("count"), int):
                    calls[e.get("at_ms", 0)] += e["count"]
    return any(n >= SLOW_BATCH for n in calls.values())


def consumer_kill_after_revoke(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """A slow application with auto-commit off is killed right after its revoke callback, while a member joins its
    group (issue 25): the next owner must start at the application's own last commit, so nothing is lost.  In the
    unsafe contrast the stop commits what ``poll()`` had returned before the application finished it (the order
    before issue 25), and the records of the batch it was in are lost."""
    if cluster.workload.rebalance != "eager":
        # The uniform assignor of incremental rebalances takes a newcomer's share from the members over their new
        # quota, chosen by member order: the slow member cannot be made a loser on purpose there.
        return Skipped("needs eager rebalances")
    group = cluster.workload.static_group
    # An id that sorts before every Kafka-form id (<group>_<host>-...): the range assignor gives the first threads
    # their partitions, so the slow member owns some however many members joined before it.
    slow_id = f"{group}_-slow-{len(cluster.members)}"
    victim = cluster.start_consumer(group, extra=(*slow_app(cluster.workload), "--consumer-id", slow_id))
    try:
        # Stable over the present members, the slow one among them: a member the other fault of a step took away
        # (the proxied consumer cut off) is alive but no member, and counting it would wait for it to come back.
        wait_until(_without(cluster, group), 40, f"{group} stable with the slow member")
        wait_until(lambda: cluster.owns(group, slow_id), 20, "the slow member to own partitions")
        wait_until(lambda: _full_batch(cluster, victim.proc.pid), 40, "the slow member's application to fall behind")
        arm(cluster.fault_dir, victim.proc.pid, "consumer.after_revoke", "kill")
        joiner = cluster.start_consumer(group)  # an eager rebalance revokes everything from everyone
        wait_until(lambda: not victim.proc.alive(), 40, "the slow member killed after its revoke callback")
    except ProcessError:
        # The fault did not land: the slow member must not stay behind it, working at half the rate records arrive
        # for the rest of the run (seed 8 of the 20-seed run: its backlog outlived the drain).  It leaves cleanly,
        # committing only what it finished, so its partitions go to members that keep up.
        disarm(cluster.fault_dir, victim.proc.pid)
        if victim.proc.alive():
            victim.proc.signal(signal.SIGTERM)
            _left_cleanly(victim)
        raise
    cluster.record_fault(
        "consumer-kill-after-revoke", f"consumer-{victim.proc.pid}", f"SIGKILL after on_partitions_revoked in {group}"
    )
    say(f"consumer {victim.proc.pid} ({group}, auto-commit off, slow) killed right after its revoke callback")
    _settle(cluster)
    return f"killed consumer {victim.proc.pid} after its revoke; {joiner.proc.pid} joined"


def consumer_join(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    group = rng.choice(cluster.groups())
    member = cluster.start_consumer(group)
    cluster.record_fault("consumer-join", f"consumer-{member.proc.pid}", f"joins {group}")
    say(f"consumer {member.proc.pid} joins {group}")
    _settle(cluster)
    return f"joined {group}"


def _left_cleanly(member: Member) -> None:
    """A consumer told to leave with ZooKeeper up (faults run one at a time, and each settles) exits 0 within its
    stop's hard bound; 3 (an incomplete stop) is a failure of the fault here, said as such, not as a crash."""
    status = member.proc.wait(hard_bound(DEFAULT_CONSUMER_TIMEOUT_S) + 5)
    if status == EXIT_INCOMPLETE:
        raise ProcessError(f"consumer {member.proc.pid} left with an incomplete stop (exit 3): {member.proc.tail(1)}")
    if status != 0:
        raise ProcessError(
            f"consumer {member.proc.pid} did not exit 0 on SIGTERM (exit {status}): {member.proc.tail(1)}"
        )


def consumer_leave(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    groups = [g for g in cluster.groups() if len([m for m in cluster.present(g) if not m.via_proxy]) > 1]
    if not groups:
        return Skipped("nobody to leave")
    group = rng.choice(groups)
    member = rng.choice([m for m in cluster.present(group) if not m.via_proxy])
    member.proc.signal(signal.SIGTERM)
    cluster.record_fault("consumer-leave", f"consumer-{member.proc.pid}", f"SIGTERM, leaves {group}")
    say(f"consumer {member.proc.pid} leaves {group} cleanly")
    _left_cleanly(member)
    _settle(cluster)
    return f"left {group}"


def migrate_consumer(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """Roll one zk-client consumer of the static group onto the coordinator: stop it cleanly, start a migrating one."""
    group = cluster.workload.static_group
    legacy = [m for m in cluster.live_members(group) if m.kind == "zk-client"]
    if not legacy:
        return Skipped("nothing left to migrate")
    member = rng.choice(legacy)
    member.proc.signal(signal.SIGTERM)
    _left_cleanly(member)
    successor = cluster.start_consumer(group, kind="migrating")
    cluster.record_fault(
        "migrate-consumer", f"consumer-{member.proc.pid}", f"zk-client consumer replaced by {successor.proc.pid}"
    )
    say(f"zk-client consumer {member.proc.pid} of {group} replaced by migrating consumer {successor.proc.pid}")
    _settle(cluster)
    return f"{len(legacy) - 1} zk-client consumers left in {group}"


def partitions_added(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    topic = rng.choice(cluster.workload.topics)
    admin = TopicAdmin(cluster.admin)
    before = admin.describe(topic).partitions
    admin.alter(topic, before + 2)
    cluster.record_fault("partitions-added", topic, f"{before} -> {before + 2}")
    say(f"topic {topic} grew from {before} to {before + 2} partitions")
    _settle(cluster)
    return f"{topic} +2"


def zookeeper_restart(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """Restart the ZooKeeper server (single), or kill the ensemble's leader and restart it later."""
    if cluster.zk_ensemble is not None:
        leader = cluster.zk_ensemble.leader_index()
        if leader is None:
            return Skipped("no leader")
        cluster.zk_ensemble.kill(leader)
        cluster.record_fault("zk-leader-kill", f"zookeeper-{leader + 1}", "SIGKILL the ensemble's leader")
        say(f"ZooKeeper leader (server {leader + 1}) killed")
        cluster.zk_ensemble.wait_for_quorum(30)
        cluster.zk_ensemble.start(leader)
        _settle(cluster)
        return f"leader {leader + 1}"
    if cluster.zk_server is None:
        return Skipped("external ZooKeeper: not restarted")
    cluster.record_fault("zk-restart", "zookeeper", "stop and start the server (sessions survive)")
    say("ZooKeeper server restarting")
    cluster.zk_server.restart()
    _settle(cluster)
    return "restarted"


def network_cut(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """Cut the consumer that talks through the proxy off from ZooKeeper while it keeps running."""
    proxied = [m for m in cluster.present() if m.via_proxy]
    if not proxied or cluster.proxy is None:
        return Skipped("no proxied consumer")
    member = proxied[0]
    cluster.proxy.cut()
    cluster.away.add(member.proc.pid)
    cluster.record_fault("network-cut", f"consumer-{member.proc.pid}", "cut off from ZooKeeper (proxy)")
    say(f"consumer {member.proc.pid} ({member.group}) cut off from ZooKeeper, still running")
    try:
        wait_until(_without(cluster, member.group), _grace(cluster), "the group to go on without it")
    finally:  # restored even when the wait timed out
        cluster.proxy.restore()
        cluster.away.discard(member.proc.pid)
    cluster.record_fault("network-restore", f"consumer-{member.proc.pid}", "proxy restored")
    _settle(cluster)
    return f"cut consumer {member.proc.pid}"


FAULTS: dict[str, Fault] = {
    f.kind: f
    for f in (
        Fault("coordinator-zombie", "SIGSTOP the coordinator between its stop and start phases past its session, "
              "SIGCONT after a new coordinator took over", coordinator_zombie),
        Fault("coordinator-kill", "SIGKILL the coordinator in the middle of a rebalance, then restart it",
              coordinator_kill),
        Fault("consumer-pause", "SIGSTOP a consumer past its session timeout, then SIGCONT", consumer_pause),
        Fault("consumer-kill", "SIGKILL a consumer and start a replacement", consumer_kill),
        Fault("consumer-kill-after-revoke", "a slow consumer with auto-commit off joins, then is SIGKILLed right "
              "after its revoke callback while another joins", consumer_kill_after_revoke),
        Fault("consumer-join", "a consumer joins a group", consumer_join),
        Fault("consumer-leave", "a consumer leaves cleanly (SIGTERM)", consumer_leave),
        Fault("partitions-added", "a topic grows by two partitions while producing", partitions_added),
        Fault("zk-restart", "restart ZooKeeper (one server) or kill the ensemble's leader", zookeeper_restart),
        Fault("network-cut", "cut one consumer off from ZooKeeper through its TCP proxy, past its session",
              network_cut),
    )
}  # fmt: skip

#: Steps of the migration scenario; not faults, so not in the default scenario's "every kind once".
STEPS: dict[str, Fault] = {
    "migrate-consumer": Fault(
        "migrate-consumer",
        "roll one zk-client consumer onto the coordinator: SIGTERM it, start a --migrating successor",
        migrate_consumer,
    ),
}
