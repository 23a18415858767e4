"""The fenced writes of one rebalance step: the stop-fetchers, the hand-over, the start-fetchers, and the group's
state written with them.

:class:`Sender` is owned by the :class:`~zkcoord.coordinator.rebalancer.Rebalancer`, which decides which step comes
next; the sender writes it (:class:`~zkcoord.coordinator.commands.PhaseWriter`: batches of commands, the state, and
the channels they need, each under the term's fence), journals ``command.sent``, arms the step's timeout and watches
the commands written (:class:`~zkcoord.coordinator.acks.Acks`).  A write that fails is handed back to the rebalancer
(``retry``); one whose outcome the connection loss left unknown marks the attempt ``uncertain``, for the rebalancer
to resume after reconnecting.

Threads: everything runs on the coordinator's worker thread; nothing here blocks on anything but ZooKeeper.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from zkcoord.coordinator.acks import Acks
from zkcoord.coordinator.attempt import Attempt, Step, channel_ops, command_ops, ownership_ops, phase_timeout_s
from zkcoord.coordinator.commands import Op, PhaseWriteError, PhaseWriter, command_prefix, generation_prefix
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.metrics import Metrics
from zkcoord.coordinator.plan import Moves
from zkcoord.coordinator.snapshot import KnownMembers, with_owners_read_again
from zkcoord.errors import CodecError, NoNodeError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.commands import CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.runtime.faults import fault_point
from zkcoord.runtime.journal import Journal
from zkcoord.zk import WatchEvent, ZkClient

log = logging.getLogger(__name__)


class Sender:
    """Writes the steps of the running attempts (``active``, the rebalancer's, by group).

    Shares the rebalancer's ``channels`` (by group, the members whose channel znode this term knows to exist) and
    ``members`` (the registrations read last).  ``advance(attempt)`` is called when a step written has nothing to
    wait for; ``retry(attempt, reason)`` when a write fails; ``schedule(delay_s, group, token)`` arms a step's
    timeout.
    """

    def __init__(
        self,
        zk: ZkClient,
        writer: PhaseWriter,
        config: CoordinatorConfig,
        journal: Journal,
        *,
        active: dict[str, Attempt],
        channels: dict[str, set[str]],
        members: dict[str, KnownMembers],
        member_watch: Callable[[WatchEvent], None] | None,
        acks: Acks,
        metrics: Metrics,
        schedule: Callable[[float, str, int], None],
        advance: Callable[[Attempt], None],
        retry: Callable[[Attempt, str], None],
        clock: Callable[[], float],
        wall_ms: Callable[[], int],
    ) -> None:
        self.zk = zk
        self.writer = writer
        self.config = config
        self.journal = journal
        self.epoch = writer.fence.term.epoch
        self.active = active
        self.channels = channels
        self.members = members
        self.member_watch = member_watch
        self.acks = acks
        self.metrics = metrics
        self.schedule = schedule
        self.advance = advance
        self.retry = retry
        self.clock = clock
        self.wall_ms = wall_ms
        #: the last token given a step (its timeout names it: a timer of an earlier step is moot)
        self._tokens = 0

    def _channel_ops(self, attempt: Attempt) -> list[Op]:
        """The channels to create for this step's recipients.  None with ACLs (docs/security.md): a channel is its
        consumer's to create, naming its per-member id, which the coordinator cannot; a member's channel exists
        before it registers, and one deleted by hand fails the write and is created again by its consumer."""
        return channel_ops(attempt) if self.zk.role is None else []

    def know_channels(self, attempt: Attempt, members: frozenset[str], *, retry: bool = True) -> bool:
        """Make sure whether the channels of ``members`` exist is known (listing the group's channels when one is
        not known to exist; a channel, once created, stays).  False if the listing failed (then, with ``retry``, a
        retry of the attempt is scheduled)."""
        if members <= attempt.channels:
            return True
        try:
            attempt.channels |= set(self.zk.get_children(paths.channel_root(attempt.group)))
        except NoNodeError:
            pass
        except ZkError as e:
            if retry:
                self.retry(attempt, f"cannot list the channels: {e}")
            return False
        return True

    def next_token(self) -> int:
        """A new step's token (its timeout names it: a timer of an earlier step is moot)."""
        self._tokens += 1
        return self._tokens

    def stop(self, attempt: Attempt) -> None:
        """The stop step: stop-fetchers to every member (eager) or to those giving partitions up (incremental);
        with nothing to take from anyone, the start step at once."""
        g = attempt.group
        attempt.channels = self.channels.setdefault(g, set())
        revoke = attempt.moves.revoke if attempt.moves is not None else None
        if revoke is not None and not revoke:
            # Nothing is taken from anyone (a member left, partitions were added): no barrier to wait for.
            attempt.stop_done_at = self.clock()
            self.start(attempt)
            return
        attempt.step = Step.STOPPING
        attempt.prefix = command_prefix(self.epoch, attempt.generation, CommandOption.STOP_FETCHER)
        attempt.recipients = frozenset(attempt.plan.members if revoke is None else revoke)
        if not self.know_channels(attempt, attempt.recipients):
            return
        ops = self._channel_ops(attempt) + command_ops(attempt, CommandOption.STOP_FETCHER, self.epoch, self.wall_ms())
        self.write(attempt, ops, GroupPhase.STOPPING, attempt.read.state_version)
        if attempt.moves is not None and self.active.get(g) is attempt and attempt.step is Step.STOPPING:
            # While the stops are applied: whether the new owners' channels exist (a newcomer's does not yet).  A
            # failure here costs nothing: the start step lists them again.
            self.know_channels(attempt, attempt.moves.gain, retry=False)

    def handover(self, attempt: Attempt, m: Moves) -> None:
        """The one step of a hand-over: stops to the members giving partitions up, starts to those receiving."""
        attempt.channels = self.channels.setdefault(attempt.group, set())
        attempt.stop_done_at = self.clock()
        attempt.prefix = generation_prefix(self.epoch, attempt.generation)  # its stops and its starts
        attempt.recipients = frozenset(m.revoke) | m.gain
        if not self.know_channels(attempt, attempt.recipients):
            return
        ops = self._channel_ops(attempt) + ownership_ops(attempt)
        ops += command_ops(attempt, None, self.epoch, self.wall_ms())
        self.write(attempt, ops, GroupPhase.STARTING, attempt.read.state_version)

    def start(self, attempt: Attempt) -> None:
        """The start step: the ownership registry and start-fetchers to every member (eager) or to those gaining
        partitions (incremental)."""
        attempt.step = Step.STARTING
        attempt.stop_done_at = self.clock()
        attempt.prefix = command_prefix(self.epoch, attempt.generation, CommandOption.START_FETCHER)
        attempt.recipients = frozenset(attempt.plan.members if attempt.moves is None else attempt.moves.gain)
        if not self.know_channels(attempt, attempt.recipients):
            return
        state = attempt.read.snapshot.state
        if attempt.moves is None and state is not None and state.phase is not GroupPhase.STABLE:
            # After an interrupted attempt, which may have been a hand-over: an old owner may have written its owner
            # znodes after this attempt read them (before acknowledging this attempt's stop, so not after now).
            try:
                attempt.read = with_owners_read_again(self.zk, attempt.read, self.members, self.member_watch)
            except ZkError as e:
                self.retry(attempt, f"cannot read the owner znodes again: {e}")
                return
        ops = self._channel_ops(attempt) + ownership_ops(attempt)
        ops += command_ops(attempt, CommandOption.START_FETCHER, self.epoch, self.wall_ms())
        self.write(attempt, ops, GroupPhase.STARTING, attempt.state_version)

    def resume(self, attempt: Attempt) -> None:
        """After a reconnect: read the state back and send only the batches that did not commit (then look at the
        acknowledgements again: those seen while the outcome was unknown were not counted)."""
        try:
            data, stat = self.zk.get(paths.group_state(attempt.group))
            state = GroupState.decode(data, paths.group_state(attempt.group))
        except (ZkError, CodecError) as e:
            self.retry(attempt, f"cannot read back the state after a connection loss: {e}")
            return
        for cid in attempt.recipients:  # a bound for commands of batches that landed unseen (at most this late)
            attempt.written.setdefault(cid, stat.mzxid)
        phase = GroupPhase.STOPPING if attempt.step is Step.STOPPING else GroupPhase.STARTING
        landed = state.sent if (state.generation, state.phase) == (attempt.generation, phase) else 0
        # Unfenced (the demo's contrast), a resumed coordinator writes over whatever the state holds now.
        base_version = stat.version if landed or self.writer.fence.unsafe else attempt.state_version
        if landed >= len(self.writer.batches(attempt.ops)):
            attempt.state_version = stat.version
            self.sent(attempt)
        else:
            attempt.uncertain = False
            self.write(attempt, attempt.ops, phase, base_version, start=landed)
        if self.active.get(attempt.group) is attempt and not attempt.uncertain:
            self.acks.recheck(attempt)

    def state(self, attempt: Attempt, phase: GroupPhase, error: str = "") -> GroupState:
        """The group's state znode for ``attempt`` in ``phase``."""
        return GroupState(
            generation=attempt.generation,
            phase=phase,
            epoch=self.epoch,
            members=attempt.plan.members,
            target=attempt.plan.target,
            assignor=attempt.plan.assignor,
            legacy=attempt.plan.legacy,
            updated_ms=self.wall_ms(),
            attempt=attempt.number,
            error=error,
        )

    def write(self, attempt: Attempt, ops: list[Op], phase: GroupPhase, state_version: int, start: int = 0) -> None:
        """Write one step's ``ops`` with the group's state in ``phase`` (from batch ``start`` on: a resume), then
        :meth:`sent`.  A failed write retries the attempt; one whose outcome is unknown marks it ``uncertain``.

        :raises FencedError: the term is over.
        """
        attempt.ops = ops
        attempt.outstanding = set(attempt.recipients)
        if not start:
            attempt.written, attempt.commands = {}, {}
        attempt.step_started = self.clock()
        attempt.token = self.next_token()
        try:
            attempt.state_version, created = self.writer.write(
                attempt.group, self.state(attempt, phase), state_version, ops, start
            )
        except PhaseWriteError as e:
            if e.uncertain:
                attempt.uncertain = True
                log.warning("group %s: %s; will resume after reconnecting", attempt.group, e)
                return
            self.channels.pop(attempt.group, None)  # a channel deleted behind our back fails the write: list again
            self.retry(attempt, str(e))
            return
        self.sent(attempt, created)

    def sent(self, attempt: Attempt, created: list[tuple[str, int]] | None = None) -> None:
        """The step's commands are written (``created``: their paths and zxids, when known: not after a resume, which
        lists the channels instead)."""
        attempt.uncertain = False
        for path, zxid in created or []:
            parsed = paths.command_of(path)
            if parsed is not None:
                attempt.written[parsed[1]] = zxid
                attempt.commands[parsed[1]] = parsed[2]
        attempt.channels |= attempt.recipients
        revoke = attempt.moves.revoke if attempt.moves is not None else {}
        for cid in sorted(attempt.recipients):
            option = attempt.option_for(cid)
            if option is CommandOption.START_FETCHER:
                partitions = sum(len(p) for p in attempt.share(cid).values())
            else:
                partitions = sum(len(p) for p in revoke.get(cid, {}).values())
            self.metrics.commands_sent[option.value] += 1
            self.journal.emit(
                "command.sent",
                group=attempt.group,
                consumer=cid,
                option=option.value,
                epoch=self.epoch,
                generation=attempt.generation,
                partitions=partitions,
            )
        base_s = attempt.plan.config.rebalance_timeout_s(self.config.rebalance_timeout_s)  # the group's, if set
        attempt.timeout_s = phase_timeout_s(attempt, base_s)
        self.schedule(attempt.timeout_s, attempt.group, attempt.token)
        if attempt.step is Step.HANDOVER and created:
            fault_point("coordinator.mid_handover", self.journal)  # written and journalled, nothing acknowledged
        if created:
            self.acks.watch_commands(attempt, [path for path, _ in created])
        elif not attempt.outstanding:  # a group with no members has nothing to wait for
            self.advance(attempt)
