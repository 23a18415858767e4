"""A consumer-protocol start's carried owner znode versions (issue 16): the codec, and which versions a member may
check instead of reading (``zkcoord.consumer.carried``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zkcoord.consumer.carried import carry
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import CodecError
from zkcoord.layout.commands import Command, CommandOption

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
