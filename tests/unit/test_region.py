"""The region's pure parts: the client state machine (every transition, one by one), the records' codecs, the merge
rule, the config's bounds, the demo app's arithmetic."""

from __future__ import annotations

import itertools
import queue
import threading
from pathlib import Path

import pytest

from zkcoord.consumer import ConsumerRecord, TopicPartition
from zkcoord.errors import CodecError, ConfigurationError
from zkcoord.layout.region import (
    Ack,
    CompletedRecord,
    Contribution,
    ControlOrder,
    RegionRecord,
    ResetRequest,
    merge,
)
from zkcoord.region.app import AggregateApp, value_of
from zkcoord.region.config import RegionConfig
from zkcoord.region.gate import Gate
from zkcoord.region.states import ClientState, IllegalTransitionError, check
from zkcoord.region.store import CheckpointMissingError, LocalStore

S, P, R = ClientState.SUBSCRIBED, ClientState.CR_RESET_PENDING, ClientState.RESET_COMPLETE
#: written out here, not read from the table: a change of the table must change this test too
LEGAL = {(S, P), (P, R), (R, P)}  # every reset passes through CR_RESET_PENDING


@pytest.mark.parametrize(("old", "new"), list(itertools.product(ClientState, ClientState)))
def test_each_transition_is_legal_exactly_when_the_state_machine_says(old: ClientState, new: ClientState) -> None:
    if (old, new) in LEGAL:
        assert check(old, new) is new
    else:
        with pytest.raises(IllegalTransitionError, match=f"{old.value} -> {new.value}"):
            check(old, new)


def test_the_records_round_trip_and_refuse_bad_input() -> None:
    order = ControlOrder(3, 17, "checkpoint", 5, ("m1", "m2"))
    assert ControlOrder.decode(order.encode()) == order
    assert ControlOrder.decode(ControlOrder(1, 2, "reset", None, ("m1",)).encode()).seq is None
    c = Contribution("m1", ("m1", "m2"), 5, {("orders", 0): 1500})
    assert Contribution.decode(c.encode()) == c
    assert Ack.decode(Ack(4, ok=False, reason="x").encode()) == Ack(4, ok=False, reason="x")
    assert ResetRequest.decode(ResetRequest(4, "revoked").encode()) == ResetRequest(4, "revoked")
    assert RegionRecord.decode(RegionRecord("r1").encode()) == RegionRecord("r1")
    for bad in (
        b'{"epoch":1,"id":1,"op":"explode","seq":1,"members":[],"version":1}',
        b'{"epoch":1,"id":1,"op":"checkpoint","seq":null,"members":[],"version":1}',
        b'{"epoch":-1,"id":1,"op":"reset","seq":null,"members":[],"version":1}',
        b'{"epoch":1,"id":1,"op":"reset","seq":null,"members":["../x"],"version":1}',
        b"[]",
        b"",
    ):
        with pytest.raises(CodecError):
            ControlOrder.decode(bad)
    for bad in (
        b'{"member":"m1","members":["m1"],"seq":1,"offsets":{"orders":1},"version":1}',
        b'{"member":"m1","members":["m1"],"seq":1,"offsets":{"orders/x":1},"version":1}',
        b'{"member":"m1","members":["m1"],"seq":1,"offsets":{"orders/0":-1},"version":1}',
    ):
        with pytest.raises(CodecError):
            Contribution.decode(bad)


def test_a_merge_needs_every_named_member_once_for_its_seq_and_no_partition_twice() -> None:
    a = Contribution("m1", ("m1", "m2"), 5, {("t", 0): 10})
    b = Contribution("m2", ("m1", "m2"), 5, {("t", 1): 20})
    assert not merge(5, [a]).complete
    assert not merge(5, [a, Contribution("m2", ("m1", "m2"), 6, {("t", 1): 20})]).complete  # another seq
    assert not merge(5, [a, Contribution("m2", ("m2", "m3"), 5, {("t", 1): 20})]).complete  # N disagrees
    done = merge(5, [a, b])
    assert done.complete and done.offsets == {("t", 0): 10, ("t", 1): 20}
    clash = merge(5, [a, Contribution("m2", ("m1", "m2"), 5, {("t", 0): 12})])
    assert not clash.complete and clash.conflicts == (("t", 0),) and clash.offsets == {("t", 0): 10}


def test_a_merge_is_complete_only_when_it_covers_every_partition_with_a_control_variable() -> None:
    """N distinct contributions are not enough: a partition that had a control variable when the checkpoint was taken
    and that no contribution gives would be rewound to its initial offset by a reset while the states count it."""
    a = Contribution("m1", ("m1", "m2"), 5, {("t", 0): 10})
    b = Contribution("m2", ("m1", "m2"), 5, {("t", 1): 20})
    covered = merge(5, [a, b], required={("t", 0), ("t", 1)})
    assert covered.complete and covered.uncovered == () and covered.why_not() == ""
    short = merge(5, [a, b], required={("t", 0), ("t", 1), ("t", 2)})
    assert not short.complete and short.uncovered == (("t", 2),)
    assert "no contribution covers: t/2" in short.why_not()
    assert short.offsets == {("t", 0): 10, ("t", 1): 20}


def test_the_completed_record_round_trips_and_refuses_bad_input() -> None:
    done = CompletedRecord(3, 7, ("m1", "m2"))
    assert CompletedRecord.decode(done.encode()) == done
    assert CompletedRecord.decode(CompletedRecord(1, None, ()).encode()).seq is None
    for bad in (b'{"epoch":-1,"seq":1,"members":[],"version":1}', b'{"epoch":1,"seq":"x","members":[]}', b"[]"):
        with pytest.raises(CodecError):
            CompletedRecord.decode(bad)


def test_the_config_refuses_bad_values(tmp_path: Path) -> None:
    assert RegionConfig("r1", "m1", tmp_path).merge_wait_s(300) == 15.0
    assert RegionConfig("r1", "m1", tmp_path, reset_timeout_s=10).merge_wait_s(300) == 5.0
    assert RegionConfig("r1", "m1", tmp_path).merge_wait_s(8) == 4.0
    for kwargs in (
        {"region": "a/b"},
        {"member": ""},
        {"start_position": "offset"},
        {"start_position": "timestamp"},
        {"start_timestamp_ms": 5},
        {"reset_timeout_s": 0.1},
    ):
        args = {"region": "r1", "member": "m1", "store_dir": tmp_path, **kwargs}
        with pytest.raises(ConfigurationError):
            RegionConfig(**args)  # type: ignore[arg-type]


def test_the_local_store_keeps_each_checkpoint_whole(tmp_path: Path) -> None:
    store = LocalStore(tmp_path, "r1", "m1")
    store.save(3, {"state": {"k": [1, 2]}})
    assert store.load(3) == {"state": {"k": [1, 2]}}
    assert store.seqs() == [3]
    store.retire(3)
    with pytest.raises(CheckpointMissingError, match="checkpoint 3 is not in the local store"):
        store.load(3)
    for seq in (5, 6, 8):
        store.save(seq, {"state": {}})
    store.retire_through(6)  # 5 never completed, 6 is retired: both go; 8 stays
    assert store.seqs() == [8]
    store.path(4).parent.mkdir(parents=True, exist_ok=True)
    store.path(4).write_text("{torn")
    with pytest.raises(CheckpointMissingError, match="cannot be read"):
        store.load(4)


def test_the_aggregate_counts_and_sums_per_key() -> None:
    from zkcoord.consumer import ConsumerRecord

    assert value_of(b"producer-t:42:xxxx") == 42
    assert value_of(b"producer-t:42:") == 42
    assert value_of(b"abc") == 3
    app = AggregateApp()
    for i, key in enumerate([b"a", b"b", b"a", None]):
        app.process(ConsumerRecord("t", 0, i, 0, key, f"p:{i}:".encode()))
    assert app.snapshot() == {"-": [1, 3], "a": [2, 2], "b": [1, 1]}
    app.restore(None)
    assert app.snapshot() == {}
    app.restore({"a": [2, 2]})
    assert app.snapshot() == {"a": [2, 2]}


def test_the_process_thread_refuses_a_record_past_its_partitions_position() -> None:
    """The log's offsets are dense: a record past the position would skip records the position claims processed.
    It is never handed to the application; the region is asked to reset, and the queue is dropped."""
    tp = TopicPartition("t", 0)
    gate = Gate()
    gate.positions[tp] = 5
    messages: queue.Queue[tuple[int, ConsumerRecord]] = queue.Queue()
    for offset in (5, 7, 8):
        messages.put((0, ConsumerRecord("t", 0, offset, 0, b"k", b"1")))
    processed: list[int] = []
    failures: list[str] = []
    stopping = threading.Event()

    class App:
        def process(self, record: ConsumerRecord) -> None:
            processed.append(record.offset)

        def restore(self, state: object) -> None:
            raise AssertionError("not called by the process thread")

    def failed(reason: str) -> None:
        failures.append(reason)
        stopping.set()

    thread = threading.Thread(target=gate.process_loop, args=(messages, App(), stopping, failed, "m"))
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert processed == [5] and gate.positions[tp] == 6
    assert failures == ["a gap in t-0: record 7 at position 6"]
    assert messages.empty() and gate.epoch == 1  # offset 8 dropped with the queue
