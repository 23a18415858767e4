"""A consumer-protocol start's carried owner znode versions (issue 16): the codec, and which versions a member may
check instead of reading (``zkcoord.consumer.carried``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zkcoord.consumer.carried import carried_out, carry
from zkcoord.consumer.owner_repair import Claim
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import CodecError
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.kip848 import AssignmentAck

OWNERSHIP = {"t": {0: "g_h-1-0000000a-0", 1: "g_h-1-0000000a-0"}}


def _start(**extra: Any) -> Command:
    return Command(CommandOption.START_FETCHER, 3, 7, "g", OWNERSHIP, 1, incremental=True, **extra)


def test_a_start_carries_its_owner_versions_through_the_codec() -> None:
    start = _start(versions={"t": {1: 4}})
    assert json.loads(start.encode())["versions"] == {"t": {"1": 4}}
    assert Command.decode(start.encode()).versions == {"t": {1: 4}}
    assert Command.decode(_start().encode()).versions is None  # none carried: the member reads, as before


@pytest.mark.parametrize(
    ("versions", "reason"),
    [
        ({"t": {"2": 1}}, "does not give"),  # a partition the start does not give
        ({"u": {"0": 1}}, "does not give"),
        ({"t": {"0": -1}}, "bad owner znode version"),
        ({"t": {"0": True}}, "bad owner znode version"),
        ({"t": {"0": "1"}}, "bad owner znode version"),
        ({"t": [0]}, "must be an object"),
        ([1], "must be an object"),
    ],
)
def test_a_start_with_malformed_versions_is_refused(versions: Any, reason: str) -> None:
    raw = json.loads(_start().encode())
    raw["versions"] = versions
    with pytest.raises(CodecError, match=reason):
        Command.decode(json.dumps(raw).encode())


def test_a_stop_carries_no_versions() -> None:
    raw = json.loads(Command(CommandOption.STOP_FETCHER, 3, 7, "g", {}, 1, revoke={"t": (0,)}).encode())
    raw["versions"] = {"t": {"0": 1}}
    with pytest.raises(CodecError, match="start-fetcher only"):
        Command.decode(json.dumps(raw).encode())


def test_only_versions_the_state_vouches_for_are_checked_instead_of_read() -> None:
    """A version is used only for a partition the start gives and the state's target vouches for, at 1 or more (a
    version-0 claim needs its znode's czxid, which only a read gives), and never for a hand-over's wait."""
    t0, t1, t2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    ownership = {t0: "a-0", t1: "a-0"}
    carried = {t0: 3, t1: 0, t2: 5}
    assert carry(carried, ownership, {t0, t1, t2}, None) == {t0: 3}
    assert carry(carried, ownership, {t1}, None) == {}
    assert carry(carried, ownership, {t0}, lambda _e: None) == {}
    assert carry(None, ownership, {t0}, None) == {}


# --- committed offsets carried from a revoker's acknowledgement to the next owner's start -----------------------------


def test_a_start_carries_committed_offsets_for_partitions_with_a_carried_version() -> None:
    start = _start(versions={"t": {1: 4}}, offsets={"t": {1: (17, 3)}})
    assert json.loads(start.encode())["offsets"] == {"t": {"1": [17, 3]}}
    assert Command.decode(start.encode()).offsets == {"t": {1: (17, 3)}}
    assert Command.decode(_start(versions={"t": {1: 4}}).encode()).offsets is None


@pytest.mark.parametrize(
    ("offsets", "reason"),
    [
        ({"t": {"0": [1, 1]}}, "does not give"),  # a partition without a carried owner version
        ({"t": {"1": [1]}}, r"bad \[offset, version\]"),
        ({"t": {"1": [-1, 1]}}, r"bad \[offset, version\]"),
        ({"t": {"1": [1, 2**31]}}, r"bad \[offset, version\]"),
        ({"t": {"1": [1, True]}}, r"bad \[offset, version\]"),
        ({"t": {"x": [1, 1]}}, "bad partition"),
        ({"t": [1]}, "must be an object"),
        ([1], "must be an object"),
    ],
)
def test_a_start_with_malformed_offsets_is_refused(offsets: Any, reason: str) -> None:
    raw = json.loads(_start(versions={"t": {1: 4}}).encode())
    raw["offsets"] = offsets
    with pytest.raises(CodecError, match=reason):
        Command.decode(json.dumps(raw).encode())


def test_a_stop_carries_no_offsets() -> None:
    raw = json.loads(Command(CommandOption.STOP_FETCHER, 3, 7, "g", {}, 1, revoke={"t": (0,)}).encode())
    raw["offsets"] = {"t": {"0": [1, 1]}}
    with pytest.raises(CodecError, match="start-fetcher only"):
        Command.decode(json.dumps(raw).encode())


def test_an_acknowledgement_carries_offsets_through_the_codec() -> None:
    ack = AssignmentAck(99, offsets={"t": {0: (5, 2)}})
    assert json.loads(ack.encode())["offsets"] == {"t": {"0": [5, 2]}}
    assert AssignmentAck.decode(ack.encode()) == ack
    assert "offsets" not in json.loads(AssignmentAck(99).encode())  # none: the data is as before
    assert AssignmentAck.decode(AssignmentAck(99).encode()).offsets == {}
    raw = json.loads(ack.encode())
    raw["offsets"] = {"t": {"0": [5]}}
    refused = AssignmentAck.decode(json.dumps(raw).encode())
    assert refused.offsets == {} and "bad [offset, version]" in (refused.offsets_refused or "")


def test_bad_carried_offsets_leave_the_acknowledgement_standing() -> None:
    """The carried offsets are an optimisation: bad ones (a newer or buggy writer) are left out, with the reason,
    and the acknowledgement itself decodes -- a coordinator that refused it whole would fence a healthy member."""
    raw = json.loads(AssignmentAck(99).encode())
    raw["offsets"] = {"t": {"0": [5, 2**31]}}
    ack = AssignmentAck.decode(json.dumps(raw).encode())
    assert (ack.assignment, ack.offsets) == (99, {})
    assert ack.offsets_refused is not None and "bad [offset, version]" in ack.offsets_refused


def test_a_stop_carries_the_versions_its_own_transaction_leaves() -> None:
    """A position written moves a known version by one (created: 0); one not written carries the value and version
    its claim holds together; an unknown version or a partition not claimed is left out."""
    t0, t1, t2, t3, t4, t5 = (TopicPartition("t", p) for p in range(6))
    claims = {
        t0: Claim("a-0", 1, 5, True, offset_version=4),  # written: 4 -> 5
        t1: Claim("a-0", 1, None, False),  # created: version 0
        t2: Claim("a-0", 1, 9, True, offset_version=7),  # not written: the claim's value at the claim's version
        t3: Claim("a-0", 1, 11, True, offset_version=0),  # not written, at version 0
        t4: Claim("a-0", 1, 3, True),  # version unknown: left out
    }
    out = carried_out(claims, {t0, t1, t2, t3, t4, t5}, {t0: 6, t1: 1, t4: 4})
    assert out == {"t": {0: (6, 5), 1: (1, 0), 2: (9, 7), 3: (11, 0)}}
    assert carried_out({t2: Claim("a-0", 1, 9, True, offset_version=2**31)}, {t2}, {t2: 10}) == {}  # past the range
