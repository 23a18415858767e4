"""``auto.offset.reset``: the pure decision (hypothesis properties) and the fetch manager applying it on real logs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit import fetcher_helpers as base
from tests.unit.fetcher_helpers import WAIT, Events, append, by_partition, poll_until, value
from zkcoord.consumer.config import ConsumerConfig, Subscription
from zkcoord.consumer.fetcher import FetchManager, OutOfRange
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.data.partlog import PartitionWriter, WriterConfig, partition_dir
from zkcoord.data.partlog.layout import index_path, list_segments, log_path
from zkcoord.errors import CodecError, ConfigurationError, OffsetOutOfRangeError
from zkcoord.protocol.offset_reset import (
    BELOW_START,
    BEYOND_END,
    Decision,
    OffsetReset,
    ResetRecord,
    decide,
    out_of_range,
)

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
cid, managers = base.cid, base.managers  # the fetcher tests' fixtures
offsets = st.integers(min_value=0, max_value=1 << 64)
policies: st.SearchStrategy[OffsetReset] = st.sampled_from(["earliest", "latest", "none"])


@given(offsets, offsets, offsets, policies)
def test_a_position_is_moved_only_when_out_of_range_and_only_into_the_range(
    position: int, start: int, length: int, policy: OffsetReset
) -> None:
    high_water = start + length
    decision = decide(position, start, high_water, policy)
    in_range = start <= position <= high_water
    assert (decision is None) == in_range
    if decision is None:
        return
    assert decision.reason == (BELOW_START if position < start else BEYOND_END)
    if policy == "none":
        assert decision.to is None
    else:
        assert decision.to == (start if policy == "earliest" else high_water)
        assert decide(decision.to, start, high_water, policy) is None  # idempotent: a reset position stays


@given(offsets, offsets, offsets)
def test_a_high_water_below_the_start_is_taken_as_the_start(position: int, start: int, high_water: int) -> None:
    decision = decide(position, start, min(high_water, start), "latest")
    assert decision is None or (decision.to is not None and decision.to >= start)
    assert out_of_range(start, start, start) is None


def test_the_policy_is_validated_and_earliest_by_default(tmp_path: Path) -> None:
    config = ConsumerConfig("g", Subscription.static({"t": 1}), "127.0.0.1:2181", tmp_path)
    assert config.offset_reset == "earliest"
    with pytest.raises(ConfigurationError, match="offset reset policy"):
        ConsumerConfig("g", Subscription.static({"t": 1}), "127.0.0.1:2181", tmp_path, offset_reset="oldest")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        FetchManager(tmp_path, offset_reset="smallest")  # type: ignore[arg-type]


def test_the_reset_record_round_trips_and_refuses_wrong_types() -> None:
    record = ResetRecord(999999999, 1100, "latest", BEYOND_END, 0, 1100, "g_h-1-abcdef01", 1700000000000)
    assert ResetRecord.decode(record.encode(), "/p") == record
    held = ResetRecord(5, None, "none", BELOW_START, 10, 20, "c", 1)
    assert ResetRecord.decode(held.encode(), "/p") == held
    for bad in (b"{", b"[]", b'{"from": "1"}', record.encode().replace(b'"to": 1100', b'"to": "1100"')):
        with pytest.raises(CodecError):
            ResetRecord.decode(bad, "/p")


class Resets:
    def __init__(self) -> None:
        self.seen: list[OutOfRange] = []
        self.cond = threading.Condition()

    def __call__(self, event: OutOfRange) -> None:
        with self.cond:
            self.seen.append(event)
            self.cond.notify_all()

    def wait(self, n: int) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: len(self.seen) >= n, WAIT)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("earliest", list(range(10))), ("latest", [10, 11])],
)
def test_a_position_beyond_the_log_is_reset_and_new_records_are_consumed(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager], policy: str, expected: list[int]
) -> None:
    append(tmp_path, A, 0, 10)
    append(tmp_path, B, 0, 3)
    resets = Resets()
    manager = managers(tmp_path, offset_reset=policy, on_reset=resets)
    manager.assign({A: (999_999_999, f"{cid}-0"), B: (0, f"{cid}-0")})
    assert resets.wait(1)
    assert resets.seen == [OutOfRange(A, f"{cid}-0", 999_999_999, expected[0], policy, BEYOND_END, 0, 10)]  # type: ignore[arg-type]
    if policy == "latest":
        append(tmp_path, A, 10, 2)
    got = by_partition(poll_until(manager, len(expected) + 3))
    assert got == {A: expected, B: [0, 1, 2]}
    assert manager.positions() == {A: expected[-1] + 1, B: 3}
    assert not manager.failed()


def test_policy_none_holds_the_partition_and_reports_it_while_the_others_go_on(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 10)
    append(tmp_path, B, 0, 3)
    resets, events = Resets(), Events()
    manager = managers(tmp_path, offset_reset="none", on_reset=resets, on_error=events.error)
    manager.assign({A: (50, f"{cid}-0"), B: (0, f"{cid}-0")})
    assert resets.wait(1)
    assert resets.seen[0].to is None and resets.seen[0].reason == BEYOND_END
    assert isinstance(events.errors[0][1], OffsetOutOfRangeError)
    assert by_partition(poll_until(manager, 3)) == {B: [0, 1, 2]}
    append(tmp_path, B, 3, 2)
    assert by_partition(poll_until(manager, 2)) == {B: [3, 4]}
    assert list(manager.failed()) == [A]
    assert manager.positions()[A] == 50  # not moved: an operator decides


def test_a_position_below_a_start_that_moved_is_reset(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    """The first segment was deleted (retention by hand, a lost file): positions in it are below the start."""
    with PartitionWriter(tmp_path, "t", 0, config=WriterConfig(segment_bytes=200, fsync_on_roll=False)) as writer:
        for i in range(20):
            writer.append(value(A, i))
    directory = partition_dir(tmp_path, "t", 0)
    first, second = list_segments(directory)[:2]
    log_path(directory, first).unlink()
    index_path(directory, first).unlink()
    resets = Resets()
    manager = managers(tmp_path, offset_reset="earliest", on_reset=resets)
    manager.assign({A: (0, f"{cid}-0")})
    assert resets.wait(1)
    assert (resets.seen[0].reason, resets.seen[0].to) == (BELOW_START, second)
    records: list[ConsumerRecord] = poll_until(manager, 20 - second)
    assert by_partition(records) == {A: list(range(second, 20))}


def test_a_position_in_a_lost_tail_waits_for_the_records_that_follow(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    """Records 5..9 were lost after being consumed: a position of 10 is not out of range, and no record is skipped."""
    append(tmp_path, A, 0, 5, batch=5)
    cut_at = log_path(partition_dir(tmp_path, "t", 0), 0).stat().st_size
    append(tmp_path, A, 5, 5, batch=5)
    with open(log_path(partition_dir(tmp_path, "t", 0), 0), "r+b") as f:
        f.truncate(cut_at)
    resets = Resets()
    manager = managers(tmp_path, offset_reset="earliest", on_reset=resets)
    manager.assign({A: (10, f"{cid}-0")})
    assert manager.poll(0.1) == []
    append(tmp_path, A, 10, 3)  # the writer skips the lost offsets: these are 10..12, not 5..7
    assert by_partition(poll_until(manager, 3)) == {A: [10, 11, 12]}
    assert resets.seen == []
    assert Decision(None, BEYOND_END).to is None
