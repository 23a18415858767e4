"""The fetch manager at its edges, on real partition logs: growing logs and partitions created later, damaged logs,
positions beyond the end, wakeup, close and misuse.  No ZooKeeper, no sleeping: tests wait on conditions with
deadlines.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit import fetcher_helpers as helpers
from tests.unit.fetcher_helpers import (
    WAIT,
    A,
    B,
    C,
    Events,
    Signal,
    append,
    by_partition,
    fetcher_threads,
    poll_until,
    value,
)
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.data.partlog import PartitionWriter, WriterConfig, partition_dir
from zkcoord.data.partlog.format import HEADER_SIZE
from zkcoord.data.partlog.layout import log_path
from zkcoord.errors import ConfigurationError, CorruptLogError, OffsetOutOfRangeError

cid, managers = helpers.cid, helpers.managers  # the shared fixtures

# --- growing logs, new partitions, damage ---------------------------------------------------------------------------


def test_fetchers_follow_a_growing_log_and_a_partition_created_later(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 5)
    assert not partition_dir(tmp_path, B.topic, B.partition).exists()  # no producer has written to B yet
    manager = managers(tmp_path, max_poll_records=4)
    manager.assign({A: (0, f"{cid}-0"), B: (0, f"{cid}-1")})
    records = poll_until(manager, 5)
    for step in range(5):
        append(tmp_path, A, 5 + 7 * step, 7, batch=3)
        append(tmp_path, B, 3 * step, 3, batch=1)
        records += poll_until(manager, 10)
    assert by_partition(records) == {A: list(range(40)), B: list(range(15))}
    assert manager.lag(A) == 0
    append(tmp_path, A, 40, 12)
    assert manager.lag(A) == 12
    with pytest.raises(KeyError):
        manager.lag(C)


def damage_middle_batch(data_dir: Path, tp: TopicPartition) -> None:
    """Write three batches of five records into ``tp`` and flip a byte inside the second one."""
    directory = partition_dir(data_dir, tp.topic, tp.partition)
    with PartitionWriter(data_dir, tp.topic, tp.partition, config=WriterConfig(index_interval_bytes=1 << 20)) as w:
        w.append_batch([(None, value(tp, i)) for i in range(5)])
        middle = log_path(directory, 0).stat().st_size
        w.append_batch([(None, value(tp, i)) for i in range(5, 10)])
        w.append_batch([(None, value(tp, i)) for i in range(10, 15)])
    with open(log_path(directory, 0), "r+b") as f:
        f.seek(middle + HEADER_SIZE + 10)
        byte = f.read(1)[0]
        f.seek(middle + HEADER_SIZE + 10)
        f.write(bytes([byte ^ 0x40]))


def test_a_damaged_log_stalls_its_partition_and_is_reported_while_the_others_go_on(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    damage_middle_batch(tmp_path, A)
    append(tmp_path, B, 0, 10)
    events = Events()
    manager = managers(tmp_path, on_error=events.error)
    manager.assign({A: (0, f"{cid}-0"), B: (0, f"{cid}-0")})
    records = poll_until(manager, 15)  # A's records before the damage, and all of B's
    assert by_partition(records) == {A: list(range(5)), B: list(range(10))}
    assert events.signal.wait_for(lambda: len(events.errors) == 1)
    assert events.errors[0][0] == A
    assert isinstance(events.errors[0][1], CorruptLogError)
    assert list(manager.failed()) == [A]
    append(tmp_path, B, 10, 5)
    assert by_partition(poll_until(manager, 5)) == {B: list(range(10, 15))}  # B's fetcher goes on
    assert manager.positions() == {A: 5, B: 15}
    manager.pause("retry")
    manager.resume()  # tries A again: same damage, reported again
    assert events.signal.wait_for(lambda: len(events.errors) == 2)


def test_a_position_beyond_the_end_of_the_log_is_reported_not_waited_on(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 10)
    events = Events()
    manager = managers(tmp_path, on_error=events.error)
    manager.assign({A: (50, f"{cid}-0")})
    assert events.signal.wait_for(lambda: len(events.errors) == 1)
    error = events.errors[0][1]
    assert isinstance(error, OffsetOutOfRangeError)
    assert (error.offset, error.start, error.end) == (50, 0, 10)
    assert manager.poll(0.02) == []
    assert manager.positions() == {A: 50}


# --- wakeup, close, misuse -----------------------------------------------------------------------------------------


def test_wakeup_returns_a_blocked_poll_at_once(tmp_path: Path, cid: str, managers: Callable[..., FetchManager]) -> None:
    manager = managers(tmp_path)
    manager.assign({A: (0, f"{cid}-0")})
    result: list[list[ConsumerRecord]] = []
    poller = threading.Thread(target=lambda: result.append(manager.poll(math.inf)))
    poller.start()
    manager.wakeup()
    poller.join(WAIT)
    assert not poller.is_alive()
    assert result == [[]]


def test_close_joins_every_fetcher_and_releases_a_blocked_poll(tmp_path: Path, cid: str) -> None:
    append(tmp_path, A, 0, 3)
    events = Events()
    manager = FetchManager(tmp_path, idle_wait_s=0.005, on_stopped=events.stopped).start()
    manager.assign({A: (0, f"{cid}-0"), B: (0, f"{cid}-1"), C: (0, f"{cid}-2")})
    poll_until(manager, 3)
    assert len(fetcher_threads(cid)) == 3
    outcome: list[object] = []

    def poll() -> None:
        try:
            outcome.append(manager.poll(60.0))
        except RuntimeError as e:  # closed before this poll began
            outcome.append(e)

    poller = threading.Thread(target=poll)
    poller.start()
    assert manager.close() == {A: 3, B: 0, C: 0}
    poller.join(WAIT)
    assert not poller.is_alive()
    assert outcome == [[]] or isinstance(outcome[0], RuntimeError)
    assert fetcher_threads(cid) == []
    assert [e[-1] for e in events.of("stopped")] == ["closed"] * 3
    assert manager.close() == {}  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        manager.poll(0.0)
    with pytest.raises(RuntimeError, match="closed"):
        manager.start()


def test_misuse_is_refused(tmp_path: Path, cid: str, managers: Callable[..., FetchManager]) -> None:
    with pytest.raises(ConfigurationError, match="max_poll_records"):
        FetchManager(tmp_path, max_poll_records=0)
    with pytest.raises(ConfigurationError, match="max_buffered_records"):
        FetchManager(tmp_path, max_buffered_records=0)
    unstarted = FetchManager(tmp_path)
    with pytest.raises(RuntimeError, match="not started"):
        unstarted.assign({A: (0, f"{cid}-0")})
    manager = managers(tmp_path)
    with pytest.raises(ValueError, match="offset -1"):
        manager.assign({A: (-1, f"{cid}-0")})
    with pytest.raises(ValueError, match="thread"):
        manager.assign({A: (0, "")})


def test_callbacks_cannot_call_the_control_methods(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 5)
    refused: list[str] = []
    signal = Signal()
    holder: list[FetchManager] = []

    def try_control(*_: object) -> None:
        try:
            holder[0].revoke("from a callback")
        except RuntimeError as e:
            refused.append(str(e))
        signal.notify()

    manager = managers(tmp_path, on_started=try_control, on_fetched=try_control)
    holder.append(manager)
    manager.assign({A: (0, f"{cid}-0")})  # on_started runs on this thread, inside assign()
    assert signal.wait_for(lambda: len(refused) == 2)  # on_fetched runs on the fetcher thread
    assert all("callbacks" in message for message in refused)
    assert [r.offset for r in poll_until(manager, 5)] == list(range(5))


def test_seek_moves_assigned_partitions_back_and_forth_and_leaves_the_others(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    for tp in (helpers.A, helpers.B):
        helpers.append(tmp_path, tp, 0, 50)
    events = helpers.Events()
    manager = managers(tmp_path, max_poll_records=10, on_started=events.started, on_stopped=events.stopped)
    manager.assign({helpers.A: (0, f"{cid}-0"), helpers.B: (0, f"{cid}-0")})
    got = helpers.by_partition(helpers.poll_until(manager, 100))
    assert got[helpers.A] == list(range(50))
    # Back to 10 for A (and C, not assigned: ignored); B untouched.
    old = manager.seek({helpers.A: 10, helpers.C: 3}, "region-reset")
    assert old == {helpers.A: 50}
    assert manager.positions() == {helpers.A: 10, helpers.B: 50}
    assert manager.assignment() == {helpers.A: f"{cid}-0", helpers.B: f"{cid}-0"}
    again = helpers.by_partition(helpers.poll_until(manager, 40))
    assert again == {helpers.A: list(range(10, 50))}
    assert ("stopped", helpers.A) in [(e[0], e[1]) for e in events.log]
    with pytest.raises(ValueError, match="negative"):
        manager.seek({helpers.A: -1})
