"""The application inside ``zkcoord consume``: what it does with each record, and what it commits.

It processes every record it gets (``--work-ms``: that long per record, standing for real work), journals what it
finished as ``records.processed`` (the demo's verdict judges S3 on that, not on what ``poll()`` handed out), and
commits as Kafka's applications do: with auto-commit on, the consumer commits what ``poll()`` returned; with
``--no-auto-commit`` the application commits what it *finished*, after each batch and in ``on_partitions_revoked``
(which the consumer runs inside ``poll()``, between batches: ``docs/consumer.md``).  With auto-commit off, a stop
asked for in the middle of a batch leaves the rest of it unprocessed and uncommitted: the partitions' next owner gets
it again; with it on, the batch is finished first, since the consumer's close commits what ``poll()`` returned.

Thread: the one that runs the poll loop (the callbacks run on it too).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from zkcoord.consumer import Consumer, ConsumerRecord, OffsetCommitFencedError, TopicPartition
from zkcoord.consumer.legacy import LegacyConsumer
from zkcoord.errors import ZkError
from zkcoord.runtime.journal import Journal

log = logging.getLogger(__name__)


class App:
    def __init__(
        self, journal: Journal, group: str, *, work_ms: float, auto_commit: bool, stop: threading.Event
    ) -> None:
        self.journal = journal
        self.group = group
        self.work_s = work_ms / 1000
        self.auto_commit = auto_commit
        self.stop = stop
        self.consumer: Consumer | LegacyConsumer | None = None
        #: per partition, the offset after the last record finished (what a commit of finished work writes)
        self.done: dict[TopicPartition, int] = {}
        self.processed = 0

    def bind(self, consumer: Consumer | LegacyConsumer) -> None:
        self.consumer = consumer

    # --- the rebalance callbacks (inside poll(), on this thread) ---------------------------------------------

    def on_revoked(self, partitions: list[TopicPartition]) -> None:
        """Commit what was finished of the partitions going away (auto-commit off; on, the consumer did).  The
        zk-client consumer calls this on its rebalance thread, and can only commit what ``poll()`` returned: it
        commits nothing here (what was finished since its last commit is processed again by the next owner)."""
        if not isinstance(self.consumer, Consumer):
            return  # another thread than the loop's: it leaves the loop's state alone
        if not self.auto_commit:
            self._commit({tp: off for tp, off in self.done.items() if tp in set(partitions)})
        for tp in partitions:
            self.done.pop(tp, None)

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        """Gone without a chance to commit: forget them (their next owner starts at our last commit)."""
        for tp in partitions:
            self.done.pop(tp, None)

    # --- the loop ----------------------------------------------------------------------------------------------

    def process(self, records: list[ConsumerRecord], show: Callable[[ConsumerRecord], None] | None) -> int:
        """Work on ``records`` in order, journalling each finished run.  A stop asked for in the middle of the batch
        ends it early only with auto-commit off: with it on, ``close()`` commits everything ``poll()`` returned, so the
        batch is finished first (Kafka's at-least-once contract for auto-commit).  Then, with auto-commit off, commit
        what was finished.  Returns how many were finished."""
        finished = 0
        run: list[ConsumerRecord] = []
        for record in records:
            if self.stop.is_set() and not self.auto_commit:
                break  # the rest is not committed (only what is done is): the next owner processes it
            if self.work_s > 0:
                time.sleep(self.work_s)  # the simulated work itself
            if show is not None:
                show(record)
            if run and (run[-1].topic, run[-1].partition) != (record.topic, record.partition):
                self._journal(run)
                run = []
            run.append(record)
            self.done[TopicPartition(record.topic, record.partition)] = record.offset + 1
            finished += 1
            if self.work_s > 0:  # slow work: each record is journalled as it is finished, so a kill shows where
                self._journal(run)
                run = []
        if run:
            self._journal(run)
        self.processed += finished
        if not self.auto_commit and finished and (isinstance(self.consumer, Consumer) or finished == len(records)):
            self._commit(dict(self.done))  # zk-client: only a whole batch (its commit() writes what poll() returned)
        return finished

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets or self.consumer is None:
            return
        try:
            if isinstance(self.consumer, Consumer):
                self.consumer.commit(offsets)
            else:
                self.consumer.commit()  # zk-client: the positions of what poll() returned, all finished here
        except OffsetCommitFencedError as e:
            log.warning("%s", e)
        except ZkError as e:  # not committed: the next commit (or the next owner) covers it
            log.warning("commit failed: %s", e)

    def _journal(self, run: list[ConsumerRecord]) -> None:
        if self.consumer is None or self.journal.path is None:
            return
        first = run[0]
        tp = TopicPartition(first.topic, first.partition)
        self.journal.emit(
            "records.processed",
            group=self.group,
            consumer=self.consumer.consumer_id,
            thread=self.consumer.assignment().get(tp, ""),
            topic=first.topic,
            partition=first.partition,
            first=first.offset,
            last=run[-1].offset,
            count=len(run),
            at_ms=time.time_ns() // 1_000_000,
        )
