"""KIP-848's records (``zkcoord/layout/kip848.py``) and the set of partitions they hold: each record refuses to be
built breaking KIP-848's invariants; each codec round-trips (hypothesis) and refuses garbage -- any bytes, or a valid
encoding with any field replaced, dropped or added, decode to a record or raise CodecError, never anything else (S7).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.kip848_helpers import P
from zkcoord.errors import CodecError
from zkcoord.layout.kip848 import MAX_EPOCH
from zkcoord.protocol.kip848 import (
    CurrentAssignment,
    GroupEpochs,
    MemberState,
    MemberTarget,
    PartitionSet,
    TargetAssignment,
)

# --- PartitionSet ------------------------------------------------------------------------------------------------


def test_a_partition_set_is_a_normalized_immutable_mapping_with_set_operations() -> None:
    s = PartitionSet({"a": [1, 2], "b": [], "c": {0}})
    assert dict(s) == {"a": frozenset({1, 2}), "c": frozenset({0})}  # a topic with none is absent
    assert s == {"a": {1, 2}, "c": {0}, "d": set()}
    assert hash(s) == hash(P(c=[0], a=[2, 1]))
    assert s.count() == 3
    assert sorted(s.pairs()) == [("a", 1), ("a", 2), ("c", 0)]
    assert s & P(a=[2, 3]) == P(a=[2])
    assert s - P(a=[1], c=[0]) == P(a=[2])
    assert s | P(b=[5]) == P(a=[1, 2], b=[5], c=[0])
    assert s.isdisjoint(P(a=[3], b=[1]))
    assert not s.isdisjoint(P(c=[0]))
    assert P(a=[1]).issubset(s)
    assert not P(b=[1]).issubset(s)
    assert PartitionSet.of(s) is s
    assert PartitionSet.from_pairs([("a", 1), ("a", 1)]) == P(a=[1])


@pytest.mark.parametrize("topics", [{"": [1]}, {"a": [-1]}, {"a": [True]}, {"a": ["1"]}, {1: [1]}])
def test_a_partition_set_refuses_what_is_not_a_topic_partition(topics: Any) -> None:
    with pytest.raises(ValueError, match="must be"):
        PartitionSet(topics)


# --- the records refuse to be built breaking KIP-848's invariants ------------------------------------------------

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda: CurrentAssignment(-1, 0, STABLE), "member_epoch"),
        (lambda: CurrentAssignment(0, MAX_EPOCH + 1, STABLE), "previous_member_epoch"),
        (lambda: CurrentAssignment(True, 0, STABLE), "member_epoch"),
        (lambda: CurrentAssignment(1, 1, UNREVOKED, P(a=[1]), P(a=[1, 2])), "both assigned and pending"),
        (lambda: CurrentAssignment(1, 1, STABLE, P(a=[1]), P(a=[2])), "no partitions pending revocation"),
        (
            lambda: CurrentAssignment(1, 1, MemberState.UNRELEASED_PARTITIONS, P(), P(a=[2])),
            "no partitions pending revocation",
        ),
        (lambda: GroupEpochs(3, 4), "ahead of group epoch"),
        (lambda: GroupEpochs(-1, 0), "group_epoch"),
        (lambda: MemberTarget(-5), "epoch"),
        (lambda: TargetAssignment(3, {"m1": P(a=[1, 2]), "m2": P(a=[2])}), "in the targets of both"),
        (lambda: TargetAssignment(3, {"": P()}), "member id"),
    ],
)
def test_a_record_breaking_an_invariant_is_not_built(build: Callable[[], object], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        build()


def test_a_target_is_assembled_from_the_epochs_and_every_members_record() -> None:
    epochs = GroupEpochs(9, 8)
    target = TargetAssignment.assemble(epochs, {"m1": MemberTarget(8, P(a=[0])), "m2": MemberTarget(5, P(a=[1]))})
    assert target == TargetAssignment(8, {"m1": P(a=[0]), "m2": P(a=[1])})
    assert target.of("m3") == P()
    with pytest.raises(TypeError):
        target.members["m3"] = P(a=[2])  # type: ignore[index]
    with pytest.raises(CodecError, match="ahead of assignment epoch"):
        TargetAssignment.assemble(epochs, {"m1": MemberTarget(9, P(a=[0]))})
    with pytest.raises(CodecError, match="in the targets of both"):
        TargetAssignment.assemble(epochs, {"m1": MemberTarget(8, P(a=[0])), "m2": MemberTarget(8, P(a=[0]))})


# --- codecs -------------------------------------------------------------------------------------------------------

topics = st.sampled_from(["a", "t-1", "x.y", "Z_9"])
partition_sets = st.dictionaries(topics, st.frozensets(st.integers(0, 9999), max_size=5), max_size=3).map(PartitionSet)
epochs = st.integers(0, MAX_EPOCH)


@st.composite
def current_assignments(draw: st.DrawFn) -> CurrentAssignment:
    state = draw(st.sampled_from(MemberState))
    assigned = draw(partition_sets)
    pending = draw(partition_sets) - assigned if state in (UNREVOKED, MemberState.UNKNOWN) else P()
    return CurrentAssignment(draw(epochs), draw(epochs), state, assigned, pending)


group_epochs = st.tuples(epochs, epochs).map(lambda e: GroupEpochs(max(e), min(e)))
member_targets = st.builds(MemberTarget, epochs, partition_sets)
RECORDS: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (CurrentAssignment, current_assignments()),
    (GroupEpochs, group_epochs),
    (MemberTarget, member_targets),
]


@pytest.mark.parametrize(("kind", "records"), RECORDS, ids=lambda x: getattr(x, "__name__", ""))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_record_round_trips(kind: Any, records: st.SearchStrategy[Any], data: st.DataObject) -> None:
    record = data.draw(records)
    encoded = record.encode()
    assert kind.decode(encoded) == record
    assert kind.decode(encoded).encode() == encoded  # one encoding per record


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_to_a_record_or_a_codec_error(data: bytes) -> None:
    for kind, _ in RECORDS:
        with contextlib.suppress(CodecError):
            kind.decode(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.parametrize(("kind", "records"), RECORDS, ids=lambda x: getattr(x, "__name__", ""))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_record_with_a_field_replaced_dropped_or_added_decodes_or_is_refused(
    kind: Any, records: st.SearchStrategy[Any], data: st.DataObject
) -> None:
    obj = json.loads(data.draw(records).encode())
    key = data.draw(st.sampled_from([*sorted(obj), "extra"]))
    if data.draw(st.booleans()):
        obj[key] = data.draw(json_values)
    else:
        obj.pop(key, None)
    with contextlib.suppress(CodecError):
        kind.decode(json.dumps(obj).encode())


VALID_CURRENT = {
    "version": 1,
    "member_epoch": 7,
    "previous_member_epoch": 6,
    "state": 1,
    "assigned": {"a": [0, 2]},
    "pending_revocation": {"a": [1]},
}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"version": 2}, "unsupported version"),
        ({"extra": 1}, "unknown field 'extra'"),
        ({"assigned": None}, "must be an object"),
        ({"assigned": {"a": [2, 0]}}, "ascending"),
        ({"assigned": {"a": [0, 0]}}, "each once"),
        ({"assigned": {"a": []}}, "at least one"),
        ({"assigned": {"a": [10_000]}}, "0..9999"),
        ({"assigned": {"a/b": [0]}}, "invalid topic name"),
        ({"assigned": {"a": [0, 1]}}, "both assigned and pending"),
        ({"member_epoch": 2**31}, "epoch in 0..2147483647"),
        ({"member_epoch": -1}, "epoch in 0"),
        ({"member_epoch": "7"}, "must be int"),
        ({"previous_member_epoch": True}, "got a boolean"),
        ({"state": 128}, "state code"),
        ({"state": 0}, "no partitions pending revocation"),
    ],
)
def test_a_current_assignment_not_written_by_this_code_is_refused(change: dict[str, Any], reason: str) -> None:
    assert CurrentAssignment.decode(json.dumps(VALID_CURRENT).encode()).member_epoch == 7
    with pytest.raises(CodecError, match=reason):
        CurrentAssignment.decode(json.dumps({**VALID_CURRENT, **change}).encode(), "/current/m1")


def test_a_missing_field_is_refused() -> None:
    for key in VALID_CURRENT:
        obj = {k: v for k, v in VALID_CURRENT.items() if k != key}
        with pytest.raises(CodecError, match=key):
            CurrentAssignment.decode(json.dumps(obj).encode())


def test_a_state_code_of_a_newer_release_decodes_as_unknown() -> None:
    """Kafka's ``MemberState.fromValue``: reconciliation fences such a member unless it owns nothing."""
    decoded = CurrentAssignment.decode(json.dumps({**VALID_CURRENT, "state": 5}).encode())
    assert decoded.state is MemberState.UNKNOWN
    assert json.loads(decoded.encode())["state"] == 127


def test_the_encodings_are_kafkas_codes_and_compact() -> None:
    record = CurrentAssignment(7, 6, UNREVOKED, P(b=[3, 1], a=[0]), P(a=[2]))
    assert record.encode() == (
        b'{"assigned":{"a":[0],"b":[1,3]},"member_epoch":7,"pending_revocation":{"a":[2]},'
        b'"previous_member_epoch":6,"state":1,"version":1}'
    )
    assert GroupEpochs(12, 11).encode() == b'{"assignment_epoch":11,"group_epoch":12,"version":1}'
    assert MemberTarget(11, P(a=[4])).encode() == b'{"epoch":11,"partitions":{"a":[4]},"version":1}'
