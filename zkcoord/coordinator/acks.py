"""Acknowledgements of a rebalance step's commands: a command's deletion counts only if its member recorded it.

A consumer acknowledges a command by deleting it and, in the same transaction, writing the command's name into its
channel znode's data (:mod:`zkcoord.consumer.acks`; in the transaction that commits its offsets, for a stop that
commits them).  The coordinator sees the deletion -- a one-shot data watch on each command written, or, after a
connection loss, a listing of the channel without it -- but a command also disappears when someone else deletes it:
by hand, alone, or with its whole channel, which kazoo's ``delete(recursive=True)``, Curator and older zkCli do
children first, the channel a round trip later.  Its member then never read it: a stop-fetcher lost that way, taken
for an acknowledgement, would let the coordinator give the member's partitions to another while it still fetches
them (S2).

The rule: **a command's deletion is its acknowledgement only if its channel is still the one it was written into and
records it, or a later command, as acknowledged** -- the channel exists, was created no later than the command (its
``czxid`` is at most the zxid of the transaction that created the command,
:class:`~zkcoord.coordinator.commands.PhaseWriter`), and its data names a command whose sequence number is at least
the command's (:func:`acknowledges`; the member handles its commands in sequence order, so a later one acknowledged
means this one was handled).  Sequence numbers start over in a channel created again, which is why the record is
only ever written with the delete of a command in the same channel, and why the ``czxid`` check still holds.  It is
checked for every recipient of the step, in one pipelined read, when the last deletion arrives -- before the
step's barrier is passed.  A channel gone, created again, or whose data does not record the command (empty,
unreadable, or naming an earlier command) means the command was lost: the step is not complete, whatever the
deletions said.  A lost command is journalled (``command.lost``) and the attempt is retried: the retry is eager, it
lists the channels again, so each member is commanded again in the channel that exists now (and one whose channel
is gone gets a new one), and nothing starts before every member acknowledged a stop written into its current channel.

Threads: everything runs on the coordinator's worker thread; the watch callback only enqueues.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from zkcoord.coordinator.attempt import Attempt
from zkcoord.coordinator.metrics import Metrics
from zkcoord.errors import CodecError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.commands import Acknowledged, command_sequence, decode_acknowledged
from zkcoord.runtime.journal import Journal
from zkcoord.zk import Stat, WatchEvent, WatchKind, ZkClient

log = logging.getLogger(__name__)


class Acks:
    """The acknowledgements of the running attempts (``active``, the rebalancer's, by group).

    ``advance(attempt)`` is called once every recipient of the step acknowledged and no command was lost;
    ``retry(attempt, reason)`` when one was lost (or could not be checked); ``forget_channels(group)`` drops what the
    rebalancer knows of the group's channels, so that the retry lists them again.
    """

    def __init__(
        self,
        zk: ZkClient,
        journal: Journal,
        active: dict[str, Attempt],
        *,
        epoch: int,
        metrics: Metrics,
        watch: Callable[[WatchEvent], None] | None,
        clock: Callable[[], float],
        advance: Callable[[Attempt], None],
        retry: Callable[[Attempt, str], None],
        forget_channels: Callable[[str], None],
    ) -> None:
        self.zk = zk
        self.journal = journal
        self.active = active
        self.epoch = epoch
        self.metrics = metrics
        #: the one-shot watch set on every command written (it must only enqueue; the worker calls :meth:`on_ack`)
        self.watch = watch
        self.clock = clock
        self.advance = advance
        self.retry = retry
        self.forget_channels = forget_channels
        #: groups whose commands could not be watched (a connection loss): listed again on reconnecting
        self.unwatched: set[str] = set()

    def on_ack(self, event: WatchEvent) -> None:
        """The watch on a command fired: deleted is acknowledged (subject to :meth:`_complete`'s check); anything
        else (a connection loss reset it) is looked at again, with a new watch."""
        parsed = paths.command_of(event.path)
        if parsed is None:
            return
        group, consumer_id, name = parsed
        attempt = self.active.get(group)
        if attempt is None or consumer_id not in attempt.outstanding or attempt.uncertain:
            return
        if not name.startswith(attempt.prefix):
            return  # a command of an earlier attempt
        if event.kind is WatchKind.DELETED:
            attempt.commands.setdefault(consumer_id, name)
            self.acked(attempt, consumer_id)
        else:
            self.watch_commands(attempt, [event.path])

    def watch_commands(self, attempt: Attempt, commands: list[str]) -> None:
        """Watch ``commands`` (paths) of ``attempt``; those already gone are acknowledged now."""
        try:
            reads = self.zk.get_many(commands, watch=self.watch)
        except ZkError as e:
            # Not watched: looked at again after the reconnect (or the phase times out and is retried).
            log.warning("group %s: cannot watch its commands: %s", attempt.group, e)
            self.unwatched.add(attempt.group)
            return
        prefix = attempt.prefix
        for path, got in zip(commands, reads, strict=True):
            parsed = paths.command_of(path)
            if got is not None or parsed is None or self.active.get(attempt.group) is not attempt:
                continue
            if attempt.prefix != prefix:
                return  # the last acknowledgement advanced the attempt: the rest were of the step before
            attempt.commands.setdefault(parsed[1], parsed[2])
            self.acked(attempt, parsed[1])

    def recheck(self, attempt: Attempt) -> None:
        """Acknowledgements seen while the outcome was unknown were not counted: list the channels again."""
        members = sorted(attempt.outstanding)
        try:
            listings = self.zk.children_many([paths.channel(attempt.group, cid) for cid in members])
        except ZkError as e:
            log.warning("group %s: cannot list its channels: %s", attempt.group, e)
            self.unwatched.add(attempt.group)  # listed again at the next reconnect (or the phase times out)
            return
        prefix = attempt.prefix
        for cid, children in zip(members, listings, strict=True):
            if self.active.get(attempt.group) is not attempt or attempt.prefix != prefix:
                return  # ended, or advanced by the last acknowledgement: these listings are of the step before
            self._on_listing(attempt, cid, children or [])

    def _on_listing(self, attempt: Attempt, consumer_id: str, children: list[str]) -> None:
        """A member's channel as listed: acknowledged if none of this step's commands is left, else watched."""
        if consumer_id not in attempt.outstanding:
            return
        mine = [name for name in children if name.startswith(attempt.prefix)]
        if mine:
            # One command per recipient and step: the lowest is the coordinator's (another is a copy made by hand).
            attempt.commands.setdefault(consumer_id, min(mine, key=command_sequence))
            self.watch_commands(attempt, [f"{paths.channel(attempt.group, consumer_id)}/{name}" for name in mine])
        else:
            self.acked(attempt, consumer_id)

    def acked(self, attempt: Attempt, consumer_id: str) -> None:
        """``consumer_id``'s command of the step is gone; the step completes with the last one (see the module)."""
        if consumer_id not in attempt.outstanding:
            return
        attempt.outstanding.discard(consumer_id)
        option = attempt.option_for(consumer_id).value
        self.metrics.commands_acked[option] += 1
        self.journal.emit(
            "command.acked",
            group=attempt.group,
            consumer=consumer_id,
            generation=attempt.generation,
            epoch=self.epoch,
            option=option,
            latency_ms=round((self.clock() - attempt.step_started) * 1000, 2),
        )
        if not attempt.outstanding:
            self._complete(attempt)

    def _complete(self, attempt: Attempt) -> None:
        """Every command of the step is gone: pass the step if each was acknowledged by its member, else retry the
        attempt (module docstring)."""
        members = sorted(attempt.recipients)
        try:
            reads = self.zk.get_many([paths.channel(attempt.group, cid) for cid in members])
        except ZkError as e:
            self.retry(attempt, f"cannot check the channels acknowledged in: {e}")
            return
        lost = []
        for cid, got in zip(members, reads, strict=True):
            why = self._unacknowledged(attempt, cid, got)
            if why is None:
                continue
            lost.append(cid)
            option = attempt.option_for(cid).value
            self.metrics.commands_lost[option] += 1
            self.journal.emit(
                "command.lost",
                group=attempt.group,
                consumer=cid,
                generation=attempt.generation,
                epoch=self.epoch,
                option=option,
                channel=why,
            )
        if not lost:
            self.advance(attempt)
            return
        log.warning("group %s: command(s) deleted unacknowledged: %s", attempt.group, ", ".join(lost))
        self.forget_channels(attempt.group)
        self.retry(attempt, f"command(s) deleted without their member's acknowledgement: {', '.join(lost)}")

    @staticmethod
    def _unacknowledged(attempt: Attempt, consumer_id: str, channel: tuple[bytes, Stat] | None) -> str | None:
        """None if ``consumer_id``'s command of the step was acknowledged, by what its ``channel`` (as read) holds;
        else why not (the ``channel`` field of ``command.lost``)."""
        written = attempt.written.get(consumer_id)
        if channel is None:
            return "deleted"
        if written is None or channel[1].czxid > written:
            return "recreated"
        try:
            record = decode_acknowledged(channel[0], paths.channel(attempt.group, consumer_id))
        except CodecError:
            return "unreadable"
        if not acknowledges(record, attempt.commands.get(consumer_id), attempt.prefix):
            return "unacknowledged"
        return None


def acknowledges(record: Acknowledged | None, command: str | None, prefix: str) -> bool:
    """Whether a channel's ``record`` (its data, decoded) acknowledges the step's ``command`` in it (its name).

    A record of the command or of a later one (a sequence number at least the command's) does: commands are handled
    in sequence order.  With the command's name unknown (its write's reply was lost, and its member deleted it before
    the coordinator listed the channel), the record must name a command of the step (``prefix``: the epoch and
    generation are the step's alone, and each recipient gets one command per step).
    """
    if record is None:
        return False
    if command is None:
        return record.name.startswith(prefix)
    sequence = command_sequence(command)
    return sequence >= 0 and record.sequence >= sequence
