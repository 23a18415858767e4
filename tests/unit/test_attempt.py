"""An incremental attempt's moves and the operations of each step (pure): which rebalances can be one hand-over, and
what the two-step form and the hand-over write."""

from __future__ import annotations

import pytest

from tests.unit.test_plan import TOPICS, inc, settled, snapshot
from zkcoord.coordinator.attempt import Attempt, Step, command_ops, ownership_ops
from zkcoord.coordinator.commands import Op, command_prefix
from zkcoord.coordinator.plan import GroupSnapshot, Moves, moves, plan
from zkcoord.coordinator.snapshot import ReadResult
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState


def joined() -> tuple[GroupSnapshot, Moves, Attempt]:
    """a and b hold clicks 0-2; c joins: a gives one partition to c."""
    members = {cid: inc({"clicks": 1}) for cid in ("a", "b")}
    before = settled(members)
    snap = snapshot({**members, "c": inc({"clicks": 1})}, before.state, before.owners)
    planned = plan(snap, TOPICS, "range")
    read = ReadResult(snap, 3, frozenset({"clicks"}), owners_root=True)
    attempt = Attempt("g", 6, 0, planned, read, "membership change", 0.0)
    attempt.moves = moves(snap, planned.target)
    return snap, attempt.moves, attempt


def commands(ops: list[Op]) -> dict[str, Command]:
    """The commands among ``ops``, by recipient (``.../channel/<consumer>/<prefix>``)."""
    return {op.path.split("/")[-2]: Command.decode(op.data) for op in ops if op.kind == "create_seq"}


def test_a_join_is_one_hand_over_each_moved_partition_named_on_both_sides() -> None:
    _, m, _ = joined()
    assert m.one_step
    ((loser, handed),) = m.handover.items()
    (moved,) = handed["clicks"]
    assert loser in ("a", "b") and handed == {"clicks": {moved: "c-0"}}
    assert m.awaiting == {"c": {"clicks": (moved,)}}


def test_a_member_that_gives_and_receives_or_a_partition_without_new_owner_needs_two_steps() -> None:
    owners = {"clicks": {0: "a-0", 1: "b-0"}}
    state = GroupState(5, GroupPhase.STABLE, 1, {"a": 100, "b": 101}, owners)
    members = snapshot({"a": inc({"clicks": 1}), "b": inc({"clicks": 1})}, state, owners)
    swapped = moves(members, {"clicks": {0: "b-0", 1: "a-0"}})
    assert set(swapped.revoke) == {"a", "b"} == set(swapped.gain) and not swapped.one_step
    dropped = moves(members, {"clicks": {0: "a-0"}})
    assert dropped.revoke == {"b": {"clicks": (1,)}} and not dropped.one_step


def test_the_hand_over_step_writes_stops_with_successors_starts_with_awaited_and_leaves_their_owners_alone() -> None:
    _, m, attempt = joined()
    attempt.step = Step.HANDOVER
    attempt.recipients = frozenset(m.revoke) | m.gain
    ops = ownership_ops(attempt) + command_ops(attempt, None, 1, 0)
    sent = commands(ops)
    ((loser, handed),) = m.handover.items()
    stop, start = sent[loser], sent["c"]
    assert stop.option is CommandOption.STOP_FETCHER and stop.handover == handed and stop.revoke == m.revoke[loser]
    assert start.option is CommandOption.START_FETCHER and start.incremental and start.awaiting == m.awaiting["c"]
    assert start.ownership == attempt.share("c")
    # Each command goes under its own option's prefix; the old owner writes the moved partition's owner znode.
    names = {op.path.rsplit("/", 1)[1] for op in ops if op.kind == "create_seq"}
    assert names == {command_prefix(1, 6, option) for option in CommandOption}
    (moved,) = handed["clicks"]
    assert paths.owner("g", "clicks", moved) not in {op.path for op in ops if op.kind != "create_seq"}


@pytest.mark.parametrize("step", [Step.STOPPING, Step.STARTING])
def test_the_two_step_form_writes_no_hand_over(step: Step) -> None:
    _, m, attempt = joined()
    attempt.step = step
    option = CommandOption.STOP_FETCHER if step is Step.STOPPING else CommandOption.START_FETCHER
    attempt.prefix = command_prefix(1, 6, option)
    attempt.recipients = frozenset(m.revoke) if step is Step.STOPPING else m.gain
    sent = commands(command_ops(attempt, option, 1, 0))
    assert set(sent) == set(attempt.recipients)
    assert all(c.option is option and c.handover is None and c.awaiting is None for c in sent.values())
    assert all(attempt.option_for(cid) is option for cid in sent)
    if step is Step.STARTING:
        (moved,) = next(iter(m.handover.values()))["clicks"]
        assert paths.owner("g", "clicks", moved) in {op.path for op in ownership_ops(attempt)}
