"""Steps of the ``kip848-migration`` scenario: the static group rolled from the coordinator's classic (eager)
protocol onto KIP-848's consumer protocol, one member at a time, with the faults that matter during such a roll.

Each step stops one classic member of the static group with SIGTERM (it must exit 0) and starts a ``--protocol
consumer`` member in its place, journalled as ``upgrade-consumer``.  While the group mixes both protocols the
coordinator runs it by the classic path; when the last classic member has left it takes the group over
(``kip848.rebuilt``) and reconciles it member by member from then on (docs/migration.md).  Two steps also fault the
coordinator in the rebalance the newcomer's join causes: ``upgrade-zombie`` pauses it there past its session and
resumes it after a takeover, ``upgrade-failover`` kills it there and restarts it.  Whichever path runs the group,
the coordinator is armed at every point where a rebalance has revoked and not yet granted: the classic path's
``coordinator.before_start`` (``coordinator.mid_handover`` for an incremental hand-over) and the consumer protocol's
``coordinator.mid_reconcile``.  ``member-kill`` SIGKILLs a member of the rolling group and starts one of the same
protocol in its place.

Like :mod:`~zkcoord.testbed.scenario.faults`, every step waits on conditions with deadlines and leaves the group
with as many members as it found.  Runs on the scenario runner's thread.
"""

from __future__ import annotations

import random
import signal

from zkcoord.runtime.faults import arm
from zkcoord.testbed.procs import ProcessError, wait_until
from zkcoord.testbed.scenario.cluster import Member, RunCluster
from zkcoord.testbed.scenario.faults import Fault, Say, Skipped, _grace, _left_cleanly, _settle
from zkcoord.zkserver.util import is_stopped

#: where a rebalance has revoked and not granted yet, on either path (the first one hit fires)
MID_REBALANCE = ("coordinator.before_start", "coordinator.mid_handover", "coordinator.mid_reconcile")


def _roll_out(cluster: RunCluster, rng: random.Random) -> Member | None:
    """SIGTERM one classic member of the static group and wait for its clean exit; ``None`` if none is left."""
    classic = [m for m in cluster.live_members(cluster.workload.static_group) if m.kind == "coordinator"]
    if not classic:
        return None
    member = rng.choice(classic)
    member.proc.signal(signal.SIGTERM)
    _left_cleanly(member)
    return member


def _roll_in(cluster: RunCluster, member: Member, say: Say) -> Member:
    group = cluster.workload.static_group
    successor = cluster.start_consumer(group, kind="consumer")
    left = sum(m.kind == "coordinator" for m in cluster.live_members(group))
    cluster.record_fault(
        "upgrade-consumer",
        f"consumer-{member.proc.pid}",
        f"classic member replaced by consumer-protocol member {successor.proc.pid}; {left} classic left",
    )
    say(f"classic consumer {member.proc.pid} of {group} replaced by consumer-protocol consumer {successor.proc.pid}")
    return successor


def upgrade_consumer(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """Roll one classic member onto the consumer protocol: SIGTERM it, start a ``--protocol consumer`` successor
    (at once, as a rolling restart does), then wait for the group to settle."""
    member = _roll_out(cluster, rng)
    if member is None:
        return Skipped("nothing left to upgrade")
    _roll_in(cluster, member, say)
    _settle(cluster)
    return f"{_classic_left(cluster)} classic members left"


def _upgrade_with_coordinator_fault(cluster: RunCluster, rng: random.Random, say: Say, action: str) -> str:
    """Roll one classic member over with the coordinator ``action`` (``pause`` or ``kill``) in the middle of the
    rebalance its successor's join causes.  The leave settles first, so that the join's rebalance is the one the
    coordinator stops in."""
    member = _roll_out(cluster, rng)
    if member is None:
        return Skipped("nothing left to upgrade")
    _settle(cluster)
    broker = cluster.coordinator()
    if broker is None:
        raise ProcessError("no coordinator to fault (the group settled without one?)")
    proc = cluster.brokers[broker]
    arm(cluster.fault_dir, proc.pid, MID_REBALANCE[0], action, *MID_REBALANCE[1:])
    _roll_in(cluster, member, say)
    if action == "pause":
        wait_until(lambda: is_stopped(proc.pid), 30, "the coordinator to stop itself mid-rebalance")
        cluster.record_fault("coordinator-pause", f"broker-{broker}", "SIGSTOP mid-rebalance, during the roll")
        say(f"broker {broker} (coordinator) paused itself mid-rebalance; waiting for a takeover")
    else:
        wait_until(lambda: not proc.alive(), 30, "the coordinator to die mid-rebalance")
        cluster.record_fault("coordinator-kill", f"broker-{broker}", "SIGKILL mid-rebalance, during the roll")
        say(f"broker {broker} (coordinator) killed mid-rebalance")
    wait_until(lambda: cluster.coordinator() not in (None, broker), _grace(cluster), "a new coordinator")
    _settle(cluster)
    if action == "pause":
        proc.signal(signal.SIGCONT)
        cluster.record_fault("coordinator-resume", f"broker-{broker}", "SIGCONT: the zombie wakes up")
        say(f"broker {broker} resumed as a zombie; new coordinator is broker {cluster.coordinator()}")
    else:
        cluster.start_broker(broker)
    _settle(cluster)
    done = "paused and resumed" if action == "pause" else "killed and restarted"
    return f"{_classic_left(cluster)} classic members left; coordinator broker {broker} {done}"


def upgrade_zombie(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    return _upgrade_with_coordinator_fault(cluster, rng, say, "pause")


def upgrade_failover(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    return _upgrade_with_coordinator_fault(cluster, rng, say, "kill")


def member_kill(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """SIGKILL a member of the rolling group (of either protocol); once the group has gone on without it (its
    session expired), start one of the same protocol in its place."""
    group = cluster.workload.static_group
    live = cluster.live_members(group)
    if not live:
        raise ProcessError(f"no live member of {group} to kill")
    member = rng.choice(live)
    member.proc.signal(signal.SIGKILL)
    cluster.record_fault("consumer-kill", f"consumer-{member.proc.pid}", f"SIGKILL ({member.kind}) in {group}")
    say(f"consumer {member.proc.pid} ({group}, {member.kind} protocol) killed mid-roll")
    member.proc.wait(10)
    wait_until(
        lambda: cluster.stable(group, len(live) - 1), _grace(cluster), f"{group} to rebalance without the dead member"
    )
    cluster.start_consumer(group, kind=member.kind)
    _settle(cluster)
    return f"killed consumer {member.proc.pid} ({member.kind})"


def _classic_left(cluster: RunCluster) -> int:
    return sum(m.kind == "coordinator" for m in cluster.live_members(cluster.workload.static_group))


#: Steps of the kip848-migration scenario: not faults of the default scenario's "every kind once".
UPGRADE_STEPS: dict[str, Fault] = {
    f.kind: f
    for f in (
        Fault("upgrade-consumer", "roll one classic member onto the consumer protocol: SIGTERM it, start a "
              "--protocol consumer successor", upgrade_consumer),
        Fault("upgrade-zombie", "upgrade-consumer with the coordinator SIGSTOPped mid-rebalance (the successor's "
              "join) past its session, SIGCONT after a takeover", upgrade_zombie),
        Fault("upgrade-failover", "upgrade-consumer with the coordinator SIGKILLed mid-rebalance (the successor's "
              "join; after the last one, mid-reconciliation), then restarted", upgrade_failover),
        Fault("member-kill", "SIGKILL a member of the rolling group, start one of the same protocol",
              member_kill),
    )
}  # fmt: skip
