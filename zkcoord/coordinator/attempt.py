"""One rebalance attempt: its state (:class:`Attempt`) and the ZooKeeper operations each step writes.

The functions here are pure: they turn an attempt into the operations of a step (commands, channels, the ownership
registry), which :class:`~zkcoord.coordinator.commands.PhaseWriter` then writes.  The state machine that drives
attempts is :mod:`zkcoord.coordinator.rebalancer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from zkcoord.coordinator.commands import Op, command_prefix
from zkcoord.coordinator.plan import Moves, Plan
from zkcoord.coordinator.snapshot import ReadResult
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_state import encode_owner
from zkcoord.protocol.assignors import Assignment, shares


class Begun(Enum):
    """What ``Rebalancer.begin`` did with a group."""

    #: examined and nothing to do, or the attempt ended at once (its read or first write failed: retry scheduled)
    SKIPPED = "skipped"
    #: an attempt is running
    STARTED = "started"
    #: a rebalance is needed but there was no room: nothing was done, the caller queues the group again
    DEFERRED = "deferred"


class Step(Enum):
    """An attempt's step.  Eager and two-step incremental: STOPPING, then STARTING.  A hand-over (incremental, one
    step): HANDOVER, whose stops and starts go out together; the old owners hand each partition to its new thread
    themselves (``docs/protocol.md``)."""

    STOPPING = "stopping"
    STARTING = "starting"
    HANDOVER = "handover"
    #: the classic protocol's first step: the join record written, the leader's assignment awaited
    #: (:mod:`zkcoord.coordinator.classic.engine`); STOPPING and STARTING follow with the leader's target
    SYNCING = "syncing"


class Mode(Enum):
    """How an attempt moves partitions: stop everyone, then start everyone; or only what changes owner."""

    EAGER = "eager"
    INCREMENTAL = "incremental"
    #: eager, with the target computed by a leader member (the classic protocol, seed 001)
    CLASSIC = "classic"


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
    #: how long the current step waits for its acknowledgements (:func:`phase_timeout_s`)
    timeout_s: float = 0.0
    stop_done_at: float = 0.0
    stop_ms: float = 0.0
    #: a write whose outcome is unknown (connection lost); resumed on reconnect
    uncertain: bool = False
    #: by recipient, the zxid of the transaction that wrote its command of this step (its channel must be no newer
    #: for the command's deletion to count as acknowledged: :mod:`~zkcoord.coordinator.acks`)
    written: dict[str, int] = field(default_factory=dict)
    #: by recipient, the name of its command of this step, once known (from the write's results, or a listing of its
    #: channel): its channel must record it, or a later one, as acknowledged (:mod:`~zkcoord.coordinator.acks`)
    commands: dict[str, str] = field(default_factory=dict)
    #: the plan's target split by member (see :meth:`share`)
    _shares: dict[str, Assignment] | None = field(default=None, init=False, repr=False)

    def share(self, consumer_id: str) -> Assignment:
        """The part of the target ``consumer_id``'s threads own (the target is split once per attempt: a step
        needs the share of every recipient)."""
        if self._shares is None:
            self._shares = shares(self.plan.target)
        return self._shares.get(consumer_id, {})

    def option_for(self, consumer_id: str) -> CommandOption:
        """The command the current step sends ``consumer_id``."""
        if self.step is Step.HANDOVER:
            stop = self.moves is not None and consumer_id in self.moves.revoke
        else:
            stop = self.step is Step.STOPPING
        return CommandOption.STOP_FETCHER if stop else CommandOption.START_FETCHER


def phase_timeout_s(attempt: Attempt, base_s: float) -> float:
    """How long the current step of ``attempt`` waits for its acknowledgements before the attempt is retried:
    ``base_s`` (the group's ``rebalance.timeout.ms`` if its config sets one, else the coordinator's
    ``rebalance_timeout_s``) plus, when the step sends stop-fetchers (eager stop, incremental stop, hand-over), the
    longest poll interval that the members told to stop published in their registrations (Kafka's rebalance timeout
    is its members' ``max.poll.interval.ms``).

    A stop is acknowledged once its member's application has finished its batch and run its revoke callback, which
    may take up to its poll interval; a start is not held by the application, so a start-only step waits ``base_s``.
    So do members whose interval is unknown (none published: ``zk-client``-era or older members, or a registration
    that cannot be read).  The interval is the one the attempt planned with: a member that registers again is a new
    incarnation, and its old one's departure aborts the attempt at once (as any member's), long wait or not.
    """
    members = attempt.read.snapshot.members
    longest_ms = 0
    for cid in attempt.recipients:
        member = members.get(cid)
        if member is None or attempt.option_for(cid) is not CommandOption.STOP_FETCHER:
            continue
        longest_ms = max(longest_ms, member.registration.max_poll_interval_ms or 0)
    return base_s + longest_ms / 1000


def channel_ops(attempt: Attempt) -> list[Op]:
    """Create the channels this step's recipients lack (before their commands, in the same batch order)."""
    missing = sorted(attempt.recipients - attempt.channels)
    return [Op("create", paths.channel(attempt.group, cid)) for cid in missing]


def command_ops(attempt: Attempt, option: CommandOption | None, epoch: int, now_ms: int) -> list[Op]:
    """One command per recipient of the step, for the incarnation of it the attempt planned with.

    A stop of an incremental attempt names the partitions it revokes; a start carries the recipient's whole target
    (``incremental`` then: the partitions it fetches already keep running).  ``option`` None: the hand-over step,
    a stop (with the thread each revoked partition goes to) to every member that gives partitions up, a start (with
    the partitions it awaits) to every other recipient.
    """
    g, m = attempt.group, attempt.moves
    out = []
    for cid in sorted(attempt.recipients):
        handing = m is not None and option is None and cid in m.revoke
        stop = option is CommandOption.STOP_FETCHER or handing
        cmd = Command(
            CommandOption.STOP_FETCHER if stop else CommandOption.START_FETCHER,
            epoch,
            attempt.generation,
            g,
            {} if stop else attempt.share(cid),
            now_ms,
            revoke=m.revoke[cid] if stop and m is not None else None,
            incremental=not stop and m is not None,
            incarnation=attempt.plan.members[cid],
            handover=m.handover.get(cid) if handing and m is not None else None,
            awaiting=m.awaiting.get(cid) if option is None and not stop and m is not None else None,
        )
        prefix = command_prefix(epoch, attempt.generation, cmd.option) if option is None else attempt.prefix
        out.append(Op("create_seq", f"{paths.channel(g, cid)}/{prefix}", cmd.encode()))
    return out


def ownership_ops(attempt: Attempt) -> list[Op]:
    """Turn the registry (as read) into the target: create, change or delete ``owners/<t>/<p>``.  In a hand-over
    step, the partitions handed over are left alone: their old owners write them, once they stopped fetching."""
    g, old, new = attempt.group, attempt.read.snapshot.owners, attempt.plan.target
    unreadable = attempt.read.unreadable_owners  # they exist: overwritten or deleted, never created
    handed: set[tuple[str, int]] = set()
    if attempt.step is Step.HANDOVER and attempt.moves is not None:
        handed = {(t, p) for topics in attempt.moves.handover.values() for t, ps in topics.items() for p in ps}
    ops: list[Op] = []
    if new and not attempt.read.owners_root:
        ops.append(Op("create", paths.owners_root(g)))
    for topic in sorted(new):
        if topic not in attempt.read.owner_topics:
            ops.append(Op("create", paths.owners(g, topic)))
        for p, thread in sorted(new[topic].items()):
            held = old.get(topic, {}).get(p)
            if (topic, p) in handed:
                continue
            if held is None and (topic, p) not in unreadable:
                # Created, then set once: an owner znode at version 0 can only be one created again by hand, which a
                # claim's version check alone would take for the one it read (zkcoord.consumer.offsets).
                ops.append(Op("create", paths.owner(g, topic, p), encode_owner(thread)))
                ops.append(Op("set", paths.owner(g, topic, p), encode_owner(thread)))
            elif held != thread:
                ops.append(Op("set", paths.owner(g, topic, p), encode_owner(thread)))
    for topic, p in sorted({(t, q) for t in old for q in old[t]} | unreadable):
        if p not in new.get(topic, {}):
            ops.append(Op("delete", paths.owner(g, topic, p)))
    return ops
