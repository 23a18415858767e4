"""Which commands a consumer applies (zkcoord.consumer.vouch.Admission): ordered by (epoch, generation), per group and
registration; pure."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from zkcoord.consumer.vouch import Admission, beyond_target, vouch
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState


def cmd(epoch: int, generation: int, group: str = "g", incarnation: int | None = None) -> Command:
    return Command(CommandOption.STOP_FETCHER, epoch, generation, group, {}, 0, incarnation=incarnation)


def test_a_newer_epoch_is_newer_whatever_its_generation() -> None:
    a = Admission("g")
    a.adopt(cmd(3, 50))
    assert a.refusal(cmd(4, 1), None) is None  # its state was lost and its count restarted
    a.adopt(cmd(4, 1))
    assert (a.epoch, a.generation) == (4, 1)
    assert a.refusal(cmd(3, 99), None) == "stale: coordinator epoch 3 < 4"
    assert a.refusal(cmd(4, 0), None) == "stale: generation 0 < 1"


def test_other_groups_and_registrations_are_refused() -> None:
    a = Admission("g")
    assert a.refusal(cmd(1, 1, group="h"), 7) == "addressed to group 'h'"
    assert a.refusal(cmd(1, 1, incarnation=6), 7) == "addressed to registration 6, ours is 7"
    assert a.refusal(cmd(1, 1, incarnation=6), None) == "addressed to registration 6, ours is none yet"
    assert a.refusal(cmd(1, 1, incarnation=7), 7) is None


def test_the_unfenced_contrast_refuses_only_other_groups() -> None:
    a = Admission("g", unsafe=True)
    a.adopt(cmd(5, 5))
    assert a.refusal(cmd(1, 1, incarnation=3), 7) is None
    assert a.refusal(cmd(1, 1, group="h"), 7) is not None


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=30))
def test_what_is_admitted_only_grows(commands: list[tuple[int, int]]) -> None:
    a = Admission("g")
    applied: list[tuple[int, int]] = []
    for epoch, generation in commands:
        if a.refusal(cmd(epoch, generation), None) is None:
            a.adopt(cmd(epoch, generation))
            applied.append((epoch, generation))
    assert applied == sorted(applied)  # lexicographic: never an older command after a newer one
    if applied:
        assert (a.epoch, a.generation) == applied[-1]


# --- what the group's state vouches for (zkcoord.consumer.vouch.vouch) ------------------------------------------------


@dataclass(frozen=True)
class _Stat:
    """The fields of a znode's stat (zkcoord.zk.Stat); vouching reads only the zxids."""

    czxid: int = 0
    mzxid: int = 0
    version: int = 0
    ephemeralOwner: int = 0
    numChildren: int = 0
    cversion: int = 0
    ctime: int = 0
    mtime: int = 0


def _start(epoch: int, generation: int, parts: dict[int, str]) -> Command:
    return Command(CommandOption.START_FETCHER, epoch, generation, "g", {"t": parts})


def _state(epoch: int, generation: int, target: dict[int, str], mzxid: int = 10) -> tuple[bytes, _Stat]:
    state = GroupState(generation, GroupPhase.STARTING, epoch, {"a": 1}, {"t": target})
    return state.encode(), _Stat(mzxid=mzxid)


def test_a_start_written_after_the_state_or_beyond_its_epoch_or_generation_is_refused() -> None:
    state = _state(2, 5, {0: "a-0"})
    assert vouch(_start(2, 5, {0: "a-0"}), _Stat(czxid=11), state, "s").refused  # created after the state's write
    assert vouch(_start(3, 1, {0: "a-0"}), _Stat(czxid=9), state, "s").refused
    assert vouch(_start(2, 6, {0: "a-0"}), _Stat(czxid=9), state, "s").refused
    assert vouch(_start(2, 5, {0: "a-0"}), _Stat(czxid=9), None, "s").wait  # nothing vouches yet: look again


def test_the_state_at_the_commands_generation_vouches_for_its_target_only() -> None:
    """A forger's start at the current generation that a later state write covers (its czxid below the state's
    mzxid) still cannot give more than the generation's target; a state that has moved on vouches for nothing."""
    state = _state(2, 5, {0: "a-0", 1: "b-0"})
    verdict = vouch(_start(2, 5, {0: "a-0"}), _Stat(czxid=9), state, "s")
    assert verdict.refused is None and verdict.target == {"t": {0: "a-0", 1: "b-0"}}
    assert beyond_target(_start(2, 5, {0: "a-0"}), verdict.target) == []
    assert beyond_target(_start(2, 5, {0: "a-0", 1: "a-0", 2: "a-0"}), verdict.target) == ["t/1", "t/2"]
    assert vouch(_start(2, 4, {0: "a-0"}), _Stat(czxid=9), state, "s").target is None
