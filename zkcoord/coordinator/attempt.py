"""One rebalance attempt: its state (:class:`Attempt`) and the ZooKeeper operations each step writes.

The functions here are pure: they turn an attempt into the operations of a step (commands, channels, the ownership
registry), which :class:`~zkcoord.coordinator.commands.PhaseWriter` then writes.  The state machine that drives
attempts is :mod:`zkcoord.coordinator.rebalancer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from zkcoord import paths
from zkcoord.assignors import threads_of
from zkcoord.coordinator.commands import Op
from zkcoord.coordinator.plan import Moves, Plan
from zkcoord.coordinator.snapshot import ReadResult
from zkcoord.znodes import Command, CommandOption, encode_owner


class Begun(Enum):
    """What ``Rebalancer.begin`` did with a group."""

    #: examined and nothing to do, or the attempt ended at once (its read or first write failed: retry scheduled)
    SKIPPED = "skipped"
    #: an attempt is running
    STARTED = "started"
    #: a rebalance is needed but there was no room: nothing was done, the caller queues the group again
    DEFERRED = "deferred"


class Step(Enum):
    STOPPING = "stopping"
    STARTING = "starting"


class Mode(Enum):
    """How an attempt moves partitions: stop everyone, then start everyone; or only what changes owner."""

    EAGER = "eager"
    INCREMENTAL = "incremental"


@dataclass
class Attempt:
    """One attempt of one group's rebalance (mutable; owned by the worker thread)."""

    group: str
    generation: int
    number: int  # 0 for the first attempt of this rebalance, 1.. for retries
    plan: Plan
    read: ReadResult
    trigger: str
    requested_at: float  # monotonic seconds: when the rebalance was first requested
    step: Step = Step.STOPPING
    mode: Mode = Mode.EAGER
    #: incremental: who stops what, who starts (None when eager)
    moves: Moves | None = None
    #: the members this step's commands go to
    recipients: frozenset[str] = frozenset()
    #: the members known to have a channel znode (the rebalancer's set for the group, shared)
    channels: set[str] = field(default_factory=set)
    prefix: str = ""
    ops: list[Op] = field(default_factory=list)
    outstanding: set[str] = field(default_factory=set)
    state_version: int = -1
    token: int = 0
    step_started: float = 0.0
    stop_done_at: float = 0.0
    stop_ms: float = 0.0
    #: a write whose outcome is unknown (connection lost); resumed on reconnect
    uncertain: bool = False


def channel_ops(attempt: Attempt) -> list[Op]:
    """Create the channels this step's recipients lack (before their commands, in the same batch order)."""
    missing = sorted(attempt.recipients - attempt.channels)
    return [Op("create", paths.channel(attempt.group, cid)) for cid in missing]


def command_ops(attempt: Attempt, option: CommandOption, epoch: int, now_ms: int) -> list[Op]:
    """One command per recipient of the step, for the incarnation of it the attempt planned with.

    A stop of an incremental attempt names the partitions it revokes; a start carries the recipient's whole target
    (``incremental`` then: the partitions it fetches already keep running).
    """
    g = attempt.group
    stop = option is CommandOption.STOP_FETCHER
    out = []
    for cid in sorted(attempt.recipients):
        cmd = Command(
            option,
            epoch,
            attempt.generation,
            g,
            {} if stop else threads_of(attempt.plan.target, cid),
            now_ms,
            revoke=attempt.moves.revoke[cid] if stop and attempt.moves is not None else None,
            incremental=not stop and attempt.moves is not None,
            incarnation=attempt.plan.members[cid],
        )
        out.append(Op("create_seq", f"{paths.channel(g, cid)}/{attempt.prefix}", cmd.encode()))
    return out


def ownership_ops(attempt: Attempt) -> list[Op]:
    """Turn the registry (as read) into the target: create, change or delete ``owners/<t>/<p>``."""
    g, old, new = attempt.group, attempt.read.snapshot.owners, attempt.plan.target
    unreadable = attempt.read.unreadable_owners  # they exist: overwritten or deleted, never created
    ops: list[Op] = []
    if new and not attempt.read.owners_root:
        ops.append(Op("create", paths.owners_root(g)))
    for topic in sorted(new):
        if topic not in attempt.read.owner_topics:
            ops.append(Op("create", paths.owners(g, topic)))
        for p, thread in sorted(new[topic].items()):
            held = old.get(topic, {}).get(p)
            if held is None and (topic, p) not in unreadable:
                ops.append(Op("create", paths.owner(g, topic, p), encode_owner(thread)))
            elif held != thread:
                ops.append(Op("set", paths.owner(g, topic, p), encode_owner(thread)))
    for topic, p in sorted({(t, q) for t in old for q in old[t]} | unreadable):
        if p not in new.get(topic, {}):
            ops.append(Op("delete", paths.owner(g, topic, p)))
    return ops
