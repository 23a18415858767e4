"""Which commands a consumer applies (consumer.vouch.Admission): ordered by (epoch, generation), per group and
registration; pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from consumer.vouch import Admission
from zkcoord.znodes import Command, CommandOption


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
