"""A start-fetcher, and a hand-over's wait for the partitions it awaits (the consumer's command thread).

``start-fetcher``: read each partition's owner version and committed offset, seek, announce the assignment to the
application (its next ``poll()`` calls ``on_partitions_assigned``), start fetching, then acknowledge; an
``incremental`` one lists the whole new assignment, of which only the partitions not fetched already are started
(and any fetched but not listed are stopped first).

A hand-over (one-step incremental rebalance): a ``start-fetcher`` with ``awaiting`` starts the other partitions at
once and each awaited one when its owner znode names our thread (a one-shot watch on each brings an ``owner`` event),
and is acknowledged when none is left.  A newer command arriving meanwhile supersedes it: the wait ends and it is
acknowledged (the coordinator that sent the newer one no longer waits for it), then the newer one is applied.

A migrating consumer starts only the partitions whose zk-client owners have let go; the rest are claimed again later
(:meth:`Starter.claim_pending`, :mod:`zkcoord.consumer.migration`).

Everything here runs on the command thread (:mod:`zkcoord.consumer.commands`), on :class:`HandlerState`.
"""

from __future__ import annotations

import logging
import threading

from zkcoord.consumer.acks import assignment_ack
from zkcoord.consumer.handler_state import HandlerState, PendingStart, Rebalance
from zkcoord.consumer.handoff import Change
from zkcoord.consumer.inbox import reject
from zkcoord.consumer.migration import newer
from zkcoord.consumer.offsets import Claims
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import ZkError
from zkcoord.layout import paths
from zkcoord.layout.commands import Command

log = logging.getLogger(__name__)


class Starter:
    """Applies start-fetchers and ends hand-over waits, on the command handler's state.  Command thread only."""

    def __init__(self, state: HandlerState) -> None:
        self.s = state
        self.c = state.c

    def start(self, name: str, path: str, command: Command, vouched: dict[TopicPartition, str]) -> bool:
        """Apply a start-fetcher; False while partitions it awaits are still to be handed over (then it is
        acknowledged once they are: :meth:`claim_awaited`).  ``vouched``: the partitions whose owner znodes its
        claims may repair (:class:`zkcoord.consumer.inbox.Admitted`)."""
        c = self.c
        self.s.admission.adopt(command)
        ownership = {
            TopicPartition(topic, p): thread
            for topic, parts in command.ownership.items()
            for p, thread in parts.items()
        }
        foreign = sorted(t for t in set(ownership.values()) if not t.startswith(f"{c.consumer_id}-"))
        if foreign:
            reason = f"ownership names threads of another consumer: {', '.join(foreign[:3])}"
            reject(c, name, command, reason, "forged")
            self.s.refuse(name)
            return True
        incremental = command.incremental and c.bridge is None
        if incremental:
            # Keep what we fetch on the same thread; whatever else we fetch is no longer ours (not expected: the
            # coordinator revokes first), so it is handed over before anything starts.
            held = c.fetcher.assignment()
            self.s.revoke({tp for tp, thread in held.items() if ownership.get(tp) != thread}, "start-fetcher")
            ownership = {tp: thread for tp, thread in ownership.items() if held.get(tp) != thread}
        elif c.fetcher.assignment():  # a start without a stop before it (only seen in unsafe mode)
            if c.config.unsafe_no_fencing:  # the old order: commit what poll() returned, hand over
                self.s.commits.quietly(c.fetcher.revoke("start-fetcher"))
                self.s.release()
            else:  # not expected: stopped and released as lost, nothing committed (the application's to commit)
                self.s.revoke(set(c.fetcher.assignment()), "start-fetcher")
        awaited = {TopicPartition(t, p) for t, parts in (command.awaiting or {}).items() for p in parts}
        awaiting = {tp: thread for tp, thread in ownership.items() if tp in awaited} if incremental else {}
        now = {tp: thread for tp, thread in ownership.items() if tp not in awaiting}
        # A consumer-protocol start's carried owner versions are checked in the transaction that acknowledges it
        # (zkcoord.consumer.carried): then it is acknowledged already when this returns.
        carried = carried_versions(command) if incremental and not awaiting and c.bridge is None else {}
        ack = path if carried and assignment_ack(path) is not None else None
        offsets = carried_offsets(command) if carried else {}
        result = self._claim_and_fetch(
            now, name, incremental=incremental, vouched=vouched, carried=carried, offsets=offsets, ack=ack
        )
        if result.acked:
            self.s.landed = name
        claimed = len(result.claims)
        if incremental and not claimed and not awaiting:
            c.handoff.announce(Change.ASSIGNED, [])  # a start that gives nothing new: the rebalance is over for us
        if awaiting:
            pending = self.s.pending = PendingStart(name, path, command, awaiting, claimed)
            self.s.applied.add(name)  # from here on the wait, not the channel listing, finishes it
            try:
                if self.claim_awaited():
                    return False  # every partition was handed over already: acknowledged
            except ZkError as e:
                log.warning("consumer %s: reading the awaited owner znodes: %s", c.consumer_id, e)
                c.redeliver_later(("owner", None))  # read them again shortly
            if pending.journalled:
                return False  # applied already; only its acknowledgement failed (retried from the owner event)
            c.journal.emit(
                "command.awaiting",
                group=c.config.group,
                consumer=c.consumer_id,
                name=name,
                epoch=command.epoch,
                generation=command.generation,
                partitions=len(pending.awaiting),
                started=pending.claimed,
            )
            return False
        self._finish_start(name, command, claimed)
        return True

    def _claim_and_fetch(
        self,
        ownership: dict[TopicPartition, str],
        name: str,
        *,
        incremental: bool = True,
        awaited: bool = False,
        vouched: dict[TopicPartition, str] | None = None,
        carried: dict[TopicPartition, int] | None = None,
        offsets: dict[TopicPartition, tuple[int, int]] | None = None,
        ack: str | None = None,
    ) -> Claims:
        """Claim ``ownership`` for start-fetcher ``name`` and start fetching what was claimed (beside what is
        fetched already, or instead of it when not ``incremental``).  ``awaited``: partitions handed over by their
        previous owner (see :meth:`OffsetStore.claim`'s ``wait``); ``vouched``: see :meth:`start`; ``carried``,
        ``offsets`` and ``ack``: the start's owner versions and committed offsets, checked with its acknowledgement
        (:meth:`OffsetStore.claim`)."""
        c = self.c
        repairable = {tp for tp, thread in (vouched or {}).items() if ownership.get(tp) == thread}
        result = c.offsets.claim(
            ownership,
            add=incremental,
            wait=c.on_owner_changed if awaited else None,
            repairable=repairable,
            carried=carried,
            offsets=offsets,
            ack=ack,
        )
        self.s.commits.journal_repairs()
        for problem in result.problems:
            c.journal.emit("input.rejected", what="partition claim", path=name, reason=problem)
        fetching = {tp: claim.thread for tp, claim in result.claims.items()}
        if c.bridge is not None:
            fetching = c.bridge.claim(
                fetching
            )  # the rest waits for their zk-client owners (zkcoord.consumer.migration)
            self._journal_waiting()
        positions = self._positions(fetching)  # read before the announcement: its callback waits for the fetcher
        applied = threading.Event()
        if result.claims or not incremental:
            # Announced before anything is fetched: poll() runs it before it returns a record of these partitions.
            # Its callback waits for ``applied``: a seek() inside it must find the partitions in the fetcher, or it
            # would be lost and they would start at their committed offsets (a region member's merged offsets were
            # skipped that way, under load).  An eager start announces even nothing ("joined, nothing for me").
            c.handoff.announce(Change.ASSIGNED, sorted(result.claims), applied)
        try:
            if incremental:
                c.fetcher.extend(positions)
            else:
                c.fetcher.assign(positions)
        finally:
            applied.set()
        return result

    def claim_awaited(self, owner: str | None = None) -> bool:
        """Start the awaited partitions whose owner znode names us now (each read also watches it: the next change
        brings an ``owner`` event for its path); once none is left, journal the start-fetcher applied and
        acknowledge it, and return True.  ``owner``: read only the partition of that owner znode (its watch fired;
        the others' are still set), else every one awaited.  Command thread.

        :raises ZkError: a read or the acknowledgement failed (the event loop tries again shortly; the wait stays
            until the acknowledgement has landed).
        """
        p = self.s.pending
        if p is None or self.s.lost:
            return False
        if p.command.incarnation is not None and p.command.incarnation != self.c.incarnation:
            self.s.abandon_wait()  # meant for a registration of ours that has ended since
        group = self.c.config.group
        todo = {
            tp: thread
            for tp, thread in p.awaiting.items()
            if owner is None or paths.owner(group, tp.topic, tp.partition) == owner
        }
        if todo:
            result = self._claim_and_fetch(todo, p.name, awaited=True)
            p.claimed += len(result.claims)
            for tp in set(todo) - result.pending:
                del p.awaiting[tp]
        if p.awaiting:
            return False
        self._end_wait(p, superseded=False)
        return True

    def supersede(self, p: PendingStart) -> None:
        """A newer command is to be applied while start-fetcher ``p`` awaits hand-overs: stop waiting, acknowledge
        it (the coordinator that sent the newer command does not wait for it).

        :raises ZkError: the acknowledgement failed (the listing is handled again, and supersedes again).
        """
        if p.awaiting:
            log.info(
                "consumer %s: %s superseded, %d partitions not handed over", self.c.consumer_id, p.name, len(p.awaiting)
            )
        self._end_wait(p, superseded=True)

    def _end_wait(self, p: PendingStart, *, superseded: bool) -> None:
        """Journal ``p`` applied, once (superseded: with what it never started, so nothing reads the group as
        settled on it), then acknowledge it; the wait is over only once the acknowledgement landed.

        :raises ZkError: the acknowledgement failed.
        """
        if not p.journalled:
            p.journalled = True
            self._finish_start(p.name, p.command, p.claimed, not_started=len(p.awaiting) if superseded else None)
        p.awaiting.clear()
        self.s.ack(p.path, p.name)
        self.s.pending = None

    def _finish_start(self, name: str, command: Command, claimed: int, *, not_started: int | None = None) -> None:
        """Journal start-fetcher ``name`` applied (``not_started``: superseded, with that many partitions never
        handed over) and count the rebalance."""
        c = self.c
        extra = {} if not_started is None else {"superseded": True, "not_started": not_started}
        self.s.journal_applied(name, command, claimed, **extra)
        if self.s.stop_received_at is not None:
            latency = (c.clock() - self.s.stop_received_at) * 1000
            self.s.rebalances += 1
            self.s.last_rebalance = Rebalance(command.generation, latency, c.clock())
            self.s.stop_received_at = None

    def _positions(self, fetching: dict[TopicPartition, str]) -> dict[TopicPartition, tuple[int, str]]:
        """Start offset and thread of each partition: its committed offset (for a migrating consumer the newer of
        both protocols', read after its owner znode was claimed), else the start policy."""
        c = self.c
        committed = c.offsets.committed()
        if c.bridge is not None:
            legacy, problems = c.bridge.committed(fetching)
            for problem in problems:
                c.journal.emit("input.rejected", what="zk-client offset", path=c.config.group, reason=problem)
            committed = {tp: off for tp in fetching if (off := newer(committed.get(tp), legacy.get(tp))) is not None}
        starts = c.start_positions({tp: committed.get(tp) for tp in fetching})
        return {tp: (starts[tp], thread) for tp, thread in fetching.items()}

    def claim_pending(self) -> None:
        """Claim again the partitions whose zk-client owners had not let go (migrating consumers only)."""
        c = self.c
        if c.bridge is None or not c.bridge.pending or self.s.lost:
            return
        got = c.bridge.retry()
        if got:
            c.fetcher.extend(self._positions(got))
            c.journal.emit(
                "migration.claimed",
                group=c.config.group,
                consumer=c.consumer_id,
                partitions=len(got),
                pending=len(c.bridge.pending),
            )

    def _journal_waiting(self) -> None:
        c = self.c
        if c.bridge is None or not c.bridge.pending:
            return
        holders = c.bridge.holders()
        c.journal.emit(
            "migration.waiting",
            group=c.config.group,
            consumer=c.consumer_id,
            partitions=len(holders),
            holders=sorted({h for h in holders.values() if h}),
        )


def carried_versions(command: Command) -> dict[TopicPartition, int]:
    """The owner znode versions a consumer-protocol start carries (:mod:`zkcoord.consumer.carried`)."""
    return {TopicPartition(t, p): v for t, parts in (command.versions or {}).items() for p, v in parts.items()}


def carried_offsets(command: Command) -> dict[TopicPartition, tuple[int, int]]:
    """The committed offsets, with their offset znodes' versions, a consumer-protocol start carries
    (:mod:`zkcoord.consumer.carried`)."""
    return {TopicPartition(t, p): pair for t, parts in (command.offsets or {}).items() for p, pair in parts.items()}
