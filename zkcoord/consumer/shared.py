"""What both consumers (the coordinator's and the ``zk-client`` one) compute the same way: metrics, lag, start
positions, the stop step a failed commit skipped.  Pure functions of their arguments and the partition logs; any thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from zkcoord.consumer.records import TopicPartition
from zkcoord.data.partlog import log_offsets
from zkcoord.errors import LogError, ZkError, ZkNotSentError, ZkUnavailableError
from zkcoord.runtime.shutdown import COMMIT, COMMIT_UNKNOWN


@dataclass
class ConsumerMetrics:
    """Kafka-style consumer metrics (``assigned-partitions``, ``records-consumed-rate``, rebalance latency)."""

    assigned_partitions: int
    records_consumed_total: int
    records_consumed_rate: float
    rebalances: int
    rebalance_latency_ms_last: float | None
    last_rebalance_seconds_ago: float | None
    lag: int | None
    lease_valid: bool
    #: ``lag`` by assigned partition (a partition whose log's end cannot be read is left out)
    lag_by_partition: Mapping[TopicPartition, int] = field(default_factory=dict)


class LastRebalance(Protocol):
    @property
    def latency_ms(self) -> float: ...
    @property
    def finished_at(self) -> float: ...


def metrics(
    *,
    assigned: int,
    delivered: int,
    elapsed_s: float,
    rebalances: int,
    last: LastRebalance | None,
    now: float,
    lag: Mapping[TopicPartition, int],
    lease_valid: bool,
) -> ConsumerMetrics:
    return ConsumerMetrics(
        assigned_partitions=assigned,
        records_consumed_total=delivered,
        records_consumed_rate=delivered / max(elapsed_s, 1e-9),
        rebalances=rebalances,
        rebalance_latency_ms_last=last.latency_ms if last else None,
        last_rebalance_seconds_ago=(now - last.finished_at) if last else None,
        lag=sum(lag.values()),
        lease_valid=lease_valid,
        lag_by_partition=lag,
    )


def lag(data_dir: Path, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Records in each partition's log beyond its position in ``positions``.  A partition whose log's end cannot be
    read (a damaged tail: the fetcher reports and handles that) is left out: a status line or a scrape is no place
    to fail for it."""
    out: dict[TopicPartition, int] = {}
    for tp, position in positions.items():
        try:
            _, end = log_offsets(data_dir, tp.topic, tp.partition)
        except LogError:
            continue
        out[tp] = max(0, end - position)
    return out


def start_positions(
    data_dir: Path, start_from: str, committed: Mapping[TopicPartition, int | None]
) -> dict[TopicPartition, int]:
    """Where to start each partition: its committed offset (never before the log's start), else the start policy
    (``earliest``: the log's start, ``latest``: its end; Kafka's ``auto.offset.reset``)."""
    out: dict[TopicPartition, int] = {}
    for tp, offset in committed.items():
        start, end = log_offsets(data_dir, tp.topic, tp.partition)
        if offset is not None:
            out[tp] = max(offset, start)
        else:
            out[tp] = start if start_from == "earliest" else end
    return out


def commit_step(error: ZkError) -> str:
    """The stop step a commit that raised ``error`` skipped: ``commit`` when it cannot have landed (not sent, or
    refused), ``commit-unknown`` when it was sent and not answered (it may land yet)."""
    unanswered = isinstance(error, ZkUnavailableError) and not isinstance(error, ZkNotSentError)
    return COMMIT_UNKNOWN if unanswered else COMMIT
