"""Acknowledgements in a consumer-protocol group: this design's heartbeat.  A member that deleted its command, with
its channel's record of it (the rule of :mod:`zkcoord.coordinator.acks`), reports owning what it was assigned and
nothing it was told to give up; a command deleted without that record was lost and is sent again.  A base of
:class:`~zkcoord.coordinator.kip848.engine.Reconciler`, which supplies the rounds and the retries.

Threads: the coordinator's worker thread; the watches it sets only enqueue.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from zkcoord.coordinator.acks import acknowledges
from zkcoord.coordinator.commands import Op
from zkcoord.coordinator.kip848.model import GroupModel, InFlight
from zkcoord.coordinator.metrics import Metrics
from zkcoord.errors import CodecError, NoNodeError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.commands import CommandOption, decode_acknowledged
from zkcoord.runtime.journal import Journal
from zkcoord.zk import WatchEvent, ZkClient


class Acknowledgements(ABC):
    """Following the commands of the consumer-protocol groups (worker thread only)."""

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

    def _watch(self, model: GroupModel, commands: list[str]) -> None:
        """Watch ``commands``; those already gone are looked at now."""
        if not commands:
            return
        try:
            reads = self.zk.get_many(commands, watch=self.ack_watch)
        except ZkError as e:
            self._retry(model.group, f"cannot watch its commands: {e}")
            return
        for path, got in zip(commands, reads, strict=True):
            parsed = paths.command_of(path)
            if got is None and parsed is not None and self.models.get(model.group) is model:
                inflight = model.inflight.get(parsed[1])
                if inflight is not None and inflight.path == path:
                    self._acknowledged(model, parsed[1], inflight)

    def _watch_inflight(self, model: GroupModel) -> None:
        self._watch(model, [i.path for i in model.inflight.values() if i.path is not None])

    def _acknowledged(self, model: GroupModel, member: str, inflight: InFlight) -> None:
        """``member``'s command is gone: its acknowledgement if its channel records it (:mod:`~.acks`' rule), then
        the member has reported what it owns and the group takes its next steps; if not, the command was lost and
        is sent again."""
        if inflight.path is None:
            return  # not written yet: nothing can have deleted it
        name = inflight.path.rsplit("/", 1)[1]
        try:
            data, stat = self.zk.get(paths.channel(model.group, member))
            record = decode_acknowledged(data, paths.channel(model.group, member))
            lost = "recreated" if inflight.zxid and stat.czxid > inflight.zxid else ""
            if not lost and not acknowledges(record, name, name.rsplit("-", 1)[0]):
                lost = "unacknowledged"
        except NoNodeError:
            lost = "deleted"
            model.channels.discard(member)
        except CodecError:
            lost = "unreadable"
        except ZkError as e:
            self._retry(model.group, f"cannot check {member}'s acknowledgement: {e}")
            return
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
        # The round waits for the worker's batch of events to end (:meth:`Reconciler.flush`): acknowledgements that
        # arrived together are answered by one round, in one write.
        self._dirty.add(model.group)
