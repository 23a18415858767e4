"""The pure parts of group administration: reset modes and partitions as parsed, the checkpoint codec, and the
partition log's lookup by time."""

from __future__ import annotations

from pathlib import Path

import pytest

from zkcoord.admin.reset_spec import Mode, ResetSpec, TopicSelection, parse_datetime, parse_spec, parse_topics
from zkcoord.data.partlog import PartitionReader, PartitionWriter
from zkcoord.data.partlog.times import offset_for_time
from zkcoord.errors import CodecError, ConfigurationError
from zkcoord.layout.checkpoints import Checkpoint

T0 = 1763740800000  # 2025-11-21T16:00:00Z
NONE: dict[str, object] = {
    "to_earliest": False,
    "to_latest": False,
    "to_offset": None,
    "shift_by": None,
    "to_datetime": None,
    "to_checkpoint": None,
}


def spec(**given: object) -> ResetSpec:
    return parse_spec(**{**NONE, **given})  # type: ignore[arg-type]


def test_one_mode_with_its_argument() -> None:
    assert spec(to_offset="42") == ResetSpec(Mode.OFFSET, number=42, text="42")
    s = spec(shift_by="-5")
    assert (s.mode, s.number, s.describe()) == (Mode.SHIFT, -5, "--shift-by -5")
    c = spec(to_checkpoint="nightly")
    assert (c.mode, c.checkpoint) == (Mode.CHECKPOINT, "nightly")
    assert spec(to_latest=True) == ResetSpec(Mode.LATEST)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({}, "no reset mode given"),
        ({"to_earliest": True, "to_offset": "3"}, "one reset mode only, got 2"),
        ({"to_offset": "-1"}, "--to-offset must not be negative"),
        ({"to_offset": "1e3"}, "--to-offset needs a whole number"),
        ({"shift_by": str(2**63)}, "--shift-by needs a whole number"),
        ({"to_datetime": "21/11/2025"}, "--to-datetime needs an ISO 8601 date-time"),
        ({"to_datetime": "1969-12-31T23:59:59Z"}, "must not be before 1970"),
        ({"to_checkpoint": "a/b"}, "invalid checkpoint name"),
    ],
)
def test_bad_modes_are_refused_in_one_line(given: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        spec(**given)


def test_datetimes_with_and_without_a_zone() -> None:
    assert parse_datetime("2025-11-21T16:00:00Z") == T0
    assert parse_datetime("2025-11-21T17:00:00.250+01:00") == T0 + 250
    assert parse_datetime("2025-11-21") == parse_datetime("2025-11-21T00:00:00")  # naive: local time


def test_topics_and_partitions() -> None:
    assert parse_topics(("b:2,0", "a", "b:1"), False) == (
        TopicSelection("a"),
        TopicSelection("b", (0, 1, 2)),
    )
    assert parse_topics(("a:1", "a"), False) == (TopicSelection("a"),)  # the whole topic wins
    assert parse_topics((), True) is None
    for values, all_topics, message in [
        ((), False, "no partitions chosen"),
        (("a",), True, "not both"),
        (("a:",), False, "expected T or T:P"),
        (("a:1,,2",), False, "expected T or T:P"),
        (("a b",), False, "invalid topic name"),
        (("a:10000",), False, "partition 10000 is out of range"),
    ]:
        with pytest.raises(ConfigurationError, match=message):
            parse_topics(values, all_topics)


def test_checkpoint_codec_round_trips_and_refuses_what_it_did_not_write() -> None:
    cp = Checkpoint({"orders": {1: 1498, 0: 1500}}, T0, 12)
    encoded = cp.encode()
    assert encoded == (
        b'{"created_ms":1763740800000,"generation":12,"offsets":{"orders":{"0":1500,"1":1498}},"version":1}'
    )
    assert Checkpoint.decode(encoded) == cp and cp.partitions == 2 and cp.offset("orders", 1) == 1498
    assert Checkpoint.decode(Checkpoint({}, 1).encode()).generation is None
    for bad in [
        b'{"created_ms":1,"offsets":{"orders":{"0":-1}},"version":1}',
        b'{"created_ms":1,"offsets":{"orders":{"0":true}},"version":1}',
        b'{"created_ms":1,"offsets":{"orders":{"x":1}},"version":1}',
        b'{"created_ms":1,"offsets":{"bad topic":{"0":1}},"version":1}',
        b'{"created_ms":1,"offsets":[],"version":1}',
        b'{"created_ms":1,"offsets":{},"extra":1,"version":1}',
        b'{"created_ms":1,"offsets":{},"version":2}',
        b"",
    ]:
        with pytest.raises(CodecError):
            Checkpoint.decode(bad, "/p")


def test_offset_for_time_is_the_first_record_at_or_after_it(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path, "t", 0) as writer:
        writer.append_batch([(None, b"a", T0), (None, b"b", T0 + 10)])  # offsets 0, 1
        writer.append_batch([(None, b"c", T0 + 30), (None, b"d", T0 + 20), (None, b"e", T0 + 40)])  # 2, 3, 4
        writer.append_batch([(None, b"f", T0 + 5)])  # 5: a producer's clock behind the rest
    with PartitionReader(tmp_path, "t", 0) as reader:
        assert offset_for_time(reader, 0) == 0
        assert offset_for_time(reader, T0 + 1) == 1
        assert offset_for_time(reader, T0 + 11) == 2  # the first at or after, not the first after an earlier one
        assert offset_for_time(reader, T0 + 35) == 4
        assert offset_for_time(reader, T0 + 41) is None
    with PartitionReader(tmp_path, "empty", 0) as reader:
        assert offset_for_time(reader, 0) is None
