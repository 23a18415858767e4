"""The application's side of a rebalance: the callbacks, run on the thread that calls ``poll()`` or ``close()``.

Kafka's ``ConsumerRebalanceListener`` contract, kept here (``docs/consumer.md``):

* ``on_partitions_revoked(partitions)`` runs inside ``poll()`` after fetching of ``partitions`` stopped and before
  the stop is acknowledged: the coordinator gives them to their next owner only after it returned.  With auto-commit
  on, the positions of what ``poll()`` returned are committed first; with it off nothing is, and ``commit()`` inside
  the callback commits what the application finished (the partitions are still ours).  Eager rebalances call it at
  every stop, with nothing revoked too; incremental ones only when something is.
* ``on_partitions_assigned(partitions)`` runs inside ``poll()`` once per applied start, before any record of those
  partitions is returned -- with nothing assigned too (eager, or an incremental start that gives nothing new).
* ``on_partitions_lost(partitions)`` runs inside ``poll()`` when partitions were taken away without a chance to
  commit (session lost, registration ended, poll interval exceeded, a commit fenced): they may be someone else's
  already, and a commit of them raises.  Default: ``on_partitions_revoked`` (Kafka's default too).
* An exception a callback raises comes out of the ``poll()`` that ran it, after the rebalance step it belonged to was
  handed back to the command thread (a stop is acknowledged all the same).

Thread: only the application's (the one calling ``poll()``/``close()``); the command thread's side is
:mod:`zkcoord.consumer.handoff`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from zkcoord.consumer.commits import Commits
from zkcoord.consumer.core import ConsumerCore
from zkcoord.consumer.handoff import Announcement, Change, ParkedStop
from zkcoord.consumer.offsets import OffsetCommitFencedError
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.errors import ZkError
from zkcoord.runtime.faults import fault_point

log = logging.getLogger(__name__)

PartitionsCallback = Callable[[list[TopicPartition]], None]


class AppSide:
    """Runs what the command thread left for the application (see the module docstring).  Application thread."""

    def __init__(
        self,
        core: ConsumerCore,
        commits: Commits,
        *,
        on_revoked: PartitionsCallback | None,
        on_assigned: PartitionsCallback | None,
        on_lost: PartitionsCallback | None,
    ) -> None:
        self.c = core
        self.commits = commits
        self.on_revoked = on_revoked
        self.on_assigned = on_assigned
        self.on_lost = on_lost if on_lost is not None else on_revoked
        #: positions of the partitions being revoked while their callback runs (``commit()`` commits them too)
        self.revoking: dict[TopicPartition, int] = {}
        #: the same partitions with the thread that fetched each (``assignment()`` shows them until it returned)
        self.revoking_threads: dict[TopicPartition, str] = {}
        #: a callback of the application runs now (``close()`` from inside one is refused)
        self.calling = False
        #: partitions announced lost since ``poll()`` last looked (their records taken before are dropped)
        self.lost: set[TopicPartition] = set()

    def run_due(self, *, announcements_only: bool = False) -> BaseException | None:
        """Run everything due, in order (``announcements_only``: up to the first parked stop); return the first
        exception a callback raised, for the caller to raise once everything due has run."""
        failure: BaseException | None = None
        self.lost.clear()
        while (item := self.c.handoff.next_due(announcements_only=announcements_only)) is not None:
            raised = self._finish(item) if isinstance(item, ParkedStop) else self._announce(item)
            failure = failure or raised
        return failure

    def close(self, positions: dict[TopicPartition, int], threads: dict[TopicPartition, str]) -> None:
        """``close()``'s callback: fetching stopped at ``positions`` and the claims still hold.  A parked stop's
        partitions were told already (``close()`` runs :meth:`run_due` first).  What the callback raises is logged:
        the stop goes on."""
        revoked = sorted(positions)
        if revoked and self.on_revoked is not None:
            self.revoking, self.revoking_threads = dict(positions), dict(threads)
            try:
                failure = self._call(self.on_revoked, revoked)
            finally:
                self.revoking, self.revoking_threads = {}, {}
            if failure is not None:
                log.warning("consumer %s: on_partitions_revoked failed while closing: %r", self.c.consumer_id, failure)

    def _finish(self, stop: ParkedStop) -> BaseException | None:
        """A parked stop: auto-commit first (Kafka's order), then the callback; then hand it back."""
        leftover: dict[TopicPartition, int] = {}
        if self.c.config.auto_commit and stop.positions and not stop.cancelled:
            committed = self.c.offsets.committed()
            changed = {tp: off for tp, off in stop.positions.items() if committed.get(tp) != off}
            # The unchanged ones must still be there for the next owner, which starts from them: a check in the
            # stop's own transaction (written again if gone) -- no request of their own (issue 16).
            stop.verify = {tp: off for tp, off in stop.positions.items() if tp not in changed}
            try:
                if changed:
                    self.commits.commit(changed, final=True)
            except OffsetCommitFencedError as e:
                log.warning("consumer %s: %s", self.c.consumer_id, e)
            except ZkError as e:  # not landed: the stop's own transaction commits them
                log.info("consumer %s: auto-commit before the revoke: %s", self.c.consumer_id, e)
                leftover = dict(stop.positions)
        failure = None
        try:
            # A stop cancelled since it was taken (the session ended): its partitions may be someone else's now.
            callback = self.on_lost if stop.cancelled else self.on_revoked
            if callback is not None and (stop.eager or stop.partitions):
                self.revoking, self.revoking_threads = dict(stop.positions), dict(stop.threads)
                failure = self._call(callback, list(stop.partitions))
            fault_point("consumer.after_revoke", self.c.journal)
        finally:  # whatever happens here (even a KeyboardInterrupt), the stop is handed back: it must be finished
            self.revoking, self.revoking_threads = {}, {}
            self.c.events.put(("revoke-done", (stop, leftover)))
        return failure

    def _announce(self, item: Announcement) -> BaseException | None:
        callback = {Change.ASSIGNED: self.on_assigned, Change.REVOKED: self.on_revoked, Change.LOST: self.on_lost}
        chosen = callback[item.change]
        if item.change is Change.LOST:
            self.lost.update(item.partitions)
        if chosen is None or (not item.partitions and item.change is not Change.ASSIGNED):
            return None
        if item.applied is not None:
            # The command thread sets it right after its fetcher call (in a finally), which never waits on this
            # thread: the wait is short and bounded by that call.
            item.applied.wait()
        return self._call(chosen, list(item.partitions))

    def _call(self, callback: PartitionsCallback, partitions: list[TopicPartition]) -> BaseException | None:
        """Call one of the application's callbacks; return what it raised (raised again from ``poll()`` once the
        step is handed back), so that a failing callback never leaves a stop unfinished."""
        self.calling = True
        try:
            callback(partitions)
        except Exception as e:  # noqa: BLE001 -- the application's own code: handed back, raised from poll()
            return e
        finally:
            self.calling = False
        return None


def journal_consumed(c: ConsumerCore, records: list[ConsumerRecord], at_ms: int) -> None:
    """Journal what ``poll()`` handed out as offset ranges (``records.consumed``): one event per run of records of one
    partition.  ``at_ms``: when the gate let them out (the event itself is written a little later).

    ``poll()`` returns each partition's records as one contiguous run, so this walks run boundaries only.
    """
    if c.journal.path is None:
        return
    owners = c.fetcher.assignment()
    start = 0
    n = len(records)
    while start < n:
        first = records[start]
        end = start + 1
        while end < n and records[end].partition == first.partition and records[end].topic == first.topic:
            end += 1
        tp = TopicPartition(first.topic, first.partition)
        c.journal.emit(
            "records.consumed",
            group=c.config.group,
            consumer=c.consumer_id,
            thread=owners.get(tp, ""),
            topic=first.topic,
            partition=first.partition,
            first=first.offset,
            last=records[end - 1].offset,
            count=end - start,
            at_ms=at_ms,
        )
        start = end
