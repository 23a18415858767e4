"""Acknowledgements in a consumer-protocol group: this design's heartbeat.  A member acknowledges its assignment
znode (``assignment/<m>``, the command this coordinator last wrote to it) by writing ``ack/<m>``, naming the
assignment by the zxid of the transaction that wrote it (:class:`~zkcoord.layout.kip848.AssignmentAck`); it then
owns what it was assigned and nothing it was told to give up.  The coordinator follows each ``ack/<m>`` with a
one-shot data watch, re-armed by the read that answers it.

An acknowledgement counts only if it names the write in flight exactly: one naming an earlier write is stale (a
retry landing late, a previous command's) and is ignored; one naming a later write (someone else rewrote the
assignment), or marked refused, says the command was lost: it is written again.  A base of
:class:`~zkcoord.coordinator.kip848.engine.Reconciler`, which supplies the rounds and the retries.

Threads: the coordinator's worker thread; the watches it sets only enqueue.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable

from zkcoord.coordinator.commands import Op
from zkcoord.coordinator.kip848.model import GroupModel
from zkcoord.coordinator.metrics import Metrics
from zkcoord.errors import CodecError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.commands import CommandOption
from zkcoord.layout.kip848 import AssignmentAck
from zkcoord.runtime.journal import Journal
from zkcoord.zk import Stat, WatchEvent, ZkClient

log = logging.getLogger(__name__)


class Acknowledgements(ABC):
    """Following the acknowledgements of the consumer-protocol groups (worker thread only)."""

    zk: ZkClient
    journal: Journal
    epoch: int
    clock: Callable[[], float]
    models: dict[str, GroupModel]
    metrics: Metrics
    ack_watch: Callable[[WatchEvent], None] | None
    _timers: dict[int, tuple[str, str, str]]
    #: groups with acknowledgements not answered by a round yet
    _dirty: set[str]

    @abstractmethod
    def _round(self, model: GroupModel, ops: list[Op]) -> None:
        """Step the group's members and write it all with ``ops`` (the engine's)."""

    @abstractmethod
    def _retry(self, group: str, reason: str) -> None:
        """Drop the group's model and read it again shortly (the engine's)."""

    # --- acknowledgements ------------------------------------------------------------------------------------------

    def _watch(self, model: GroupModel, members: list[str]) -> None:
        """Arm the data watch on the ``ack/<m>`` of ``members`` that have none armed (one read each, pipelined), and
        look at what those reads found: an acknowledgement may have landed before the watch."""
        todo = sorted(m for m in set(members) if m not in model.ack_watched)
        if not todo:
            return
        ack_paths = [paths.ack(model.group, m) for m in todo]
        reads: list[tuple[bytes, Stat] | None] = []
        try:
            for path, read in zip(ack_paths, self.zk.get_many(ack_paths, watch=self.ack_watch), strict=True):
                # An absent znode takes no data watch: watch for its creation (the member creates it with its first
                # acknowledgement); one created meanwhile is read now.
                if read is None and self.zk.exists(path, watch=self.ack_watch) is not None:
                    read = self.zk.get(path, watch=self.ack_watch)  # noqa: PLW2901
                reads.append(read)
        except ZkError as e:
            self._retry(model.group, f"cannot watch its acknowledgements: {e}")
            return
        model.ack_watched.update(todo)
        for member, got in zip(todo, reads, strict=True):
            if self.models.get(model.group) is not model:
                return
            self._check(model, member, got)

    def _watch_inflight(self, model: GroupModel) -> None:
        self._watch(model, [m for m, i in model.inflight.items() if i.path is not None])

    def _ack_fired(self, model: GroupModel, member: str) -> None:
        """``ack/<m>``'s watch fired: read it again (which arms the watch again) and judge it."""
        model.ack_watched.discard(member)
        self._watch(model, [member])

    def _check(self, model: GroupModel, member: str, got: tuple[bytes, Stat] | None) -> None:
        """Judge ``member``'s acknowledgement as read (``got``; None: not written yet) against its command in
        flight (module docstring)."""
        inflight = model.inflight.get(member)
        if inflight is None or inflight.path is None or got is None or not got[0]:
            return  # nothing in flight, not written yet, or no acknowledgement yet
        path = paths.ack(model.group, member)
        try:
            ack = AssignmentAck.decode(got[0], path)
        except CodecError as e:
            # Not the member's (it writes only what it decodes): ignored, as a stale one is; the member's next
            # acknowledgement overwrites it, and a revocation's deadline still runs.
            self.journal.emit("input.rejected", what="assignment acknowledgement", path=path, reason=str(e))
            return
        if ack.assignment < inflight.zxid:
            return  # stale: an earlier assignment's (a retry that landed late): the one in flight is still due
        if ack.offsets_refused is not None:
            # Only the carried offsets are bad: the acknowledgement stands, and the next owner reads its offsets.
            self.journal.emit("input.rejected", what="carried offsets", path=path, reason=ack.offsets_refused)
        lost = "refused" if ack.refused else "overwritten" if ack.assignment > inflight.zxid else ""
        del model.inflight[member]
        self._timers.pop(inflight.token, None)
        generation = inflight.generation
        self.metrics.commands_acked[inflight.option.value] += 1
        self.journal.emit(
            "command.acked",
            group=model.group,
            consumer=member,
            generation=generation,
            epoch=self.epoch,
            option=inflight.option.value,
            latency_ms=round((self.clock() - inflight.sent_at) * 1000, 2) if inflight.sent_at else None,
        )
        if lost:
            self.metrics.commands_lost[inflight.option.value] += 1
            self.journal.emit(
                "command.lost",
                group=model.group,
                consumer=member,
                generation=generation,
                epoch=self.epoch,
                option=inflight.option.value,
                channel=lost,
            )
            model.resend[member] = inflight.option
        elif inflight.option is CommandOption.STOP_FETCHER:
            model.must_stop.discard(member)
            _keep_released(model, member, ack)
        # The round waits for the worker's batch of events to end (:meth:`Reconciler.flush`): acknowledgements that
        # arrived together are answered by one round, in one write.
        self._dirty.add(model.group)


def _keep_released(model: GroupModel, member: str, ack: AssignmentAck) -> None:
    """A stop's acknowledgement carries the committed offsets of what it gave up (with their offset znodes'
    versions): kept for the start that grants each partition next (``ops.carry_versions``), for the partitions this
    stop revoked only (an entry for any other is not the stop's to give).  The new owner checks each version before
    it fetches, so a value that is wrong or has gone stale since costs it a read, nothing else."""
    current = model.currents.get(member)
    if current is None:
        return
    for topic, parts in ack.offsets.items():
        for p, pair in parts.items():
            if current.pending_revocation.has(topic, p):
                model.released[(topic, p)] = pair
