"""What a legacy consumer journals: the coordinator consumer's data-plane events, plus its own rebalance events.

The data-plane events (``consumer.registered``, ``fetch.started``/``fetch.stopped``, ``records.consumed``,
``offsets.committed``, ``consumer.deregistered``) carry the same fields as the coordinator consumer's, with
``group`` = the group's name, so the journal checks (overlapping ownership, missing and duplicated records) read a
legacy run unchanged.  They carry no ``generation``: the legacy protocol has none.  ``consumer.registered`` adds
``protocol = "zk-client"``.

The ``legacy.*`` events (:data:`LEGACY_EVENTS`) record the client-side rebalance.  They are kept apart from the
coordinator's ``rebalance.*`` on purpose: those are keyed by a group-wide generation, while here every member runs
its own rebalance, numbered by its own attempts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.runtime.journal import Journal

PROTOCOL = "zk-client"

#: ``on_partitions_revoked`` / ``on_partitions_assigned``: called on the rebalance thread with the partitions
PartitionsCallback = Callable[[list[TopicPartition]], None]

#: The legacy event types, with what they record (the rows for ``zkcoord.runtime.journal.EVENTS`` and docs/journal.md).
LEGACY_EVENTS: dict[str, str] = {
    "legacy.rebalance.started": "a legacy rebalance attempt began: group, consumer, attempt, trigger",
    "legacy.rebalance.conflict": (
        "a legacy claim met an owner: group, consumer, attempt, topic, partition, thread, owner"
    ),
    "legacy.rebalance.retrying": "a legacy attempt failed: group, consumer, attempt, reason, backoff_s",
    "legacy.rebalance.completed": (
        "a legacy rebalance ended: group, consumer, attempt, partitions, members, latency_ms, outcome"
    ),
    "legacy.rebalance.failed": "a legacy rebalance used up its retries: group, consumer, retries, reason",
    "legacy.session.expired": "a legacy session expired; partitions forgotten: group, consumer, partitions",
}


class EventLog:
    """One legacy consumer's journal, with ``group`` and ``consumer`` filled in.  Thread-safe (the journal is)."""

    def __init__(self, journal: Journal, group: str, consumer_id: str, *, auto_commit: bool) -> None:
        self.journal = journal
        self.group = group
        self.consumer_id = consumer_id
        #: the consumer's commit policy, journalled with each commit (see docs/journal.md, ``offsets.committed``)
        self.auto_commit = auto_commit

    def emit(self, event: str, **fields: object) -> None:
        self.journal.emit(event, group=self.group, consumer=self.consumer_id, **fields)

    # --- the data plane, as the coordinator consumer journals it ------------------------------------------------

    def fetch_started(self, tp: TopicPartition, offset: int, thread: str) -> None:
        self.emit("fetch.started", thread=thread, topic=tp.topic, partition=tp.partition, offset=offset)

    def fetch_stopped(self, tp: TopicPartition, offset: int, thread: str, reason: str) -> None:
        self.emit("fetch.stopped", thread=thread, topic=tp.topic, partition=tp.partition, offset=offset, reason=reason)

    def committed(self, written: Mapping[TopicPartition, int]) -> None:
        for tp, offset in sorted(written.items()):
            self.emit(
                "offsets.committed",
                topic=tp.topic,
                partition=tp.partition,
                offset=offset,
                auto_commit=self.auto_commit,
            )

    def consumed(self, records: list[ConsumerRecord], threads: Mapping[TopicPartition, str]) -> None:
        """Journal what one ``poll`` handed out as offset ranges, one event per run of records of one partition.

        ``poll`` returns each partition's records as one contiguous run, so this walks run boundaries only.
        """
        if self.journal.path is None:
            return
        start, n = 0, len(records)
        while start < n:
            first = records[start]
            end = start + 1
            while end < n and records[end].partition == first.partition and records[end].topic == first.topic:
                end += 1
            self.emit(
                "records.consumed",
                thread=threads.get(TopicPartition(first.topic, first.partition), ""),
                topic=first.topic,
                partition=first.partition,
                first=first.offset,
                last=records[end - 1].offset,
                count=end - start,
            )
            start = end
