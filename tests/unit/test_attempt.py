"""An incremental attempt's moves and the operations of each step (pure): which rebalances can be one hand-over, and
what the two-step form and the hand-over write."""

from __future__ import annotations

import pytest

from tests.unit.test_plan import TOPICS, inc, settled, snapshot
from zkcoord.coordinator.attempt import Attempt, Step, command_ops, ownership_ops, phase_timeout_s
from zkcoord.coordinator.commands import Op, command_prefix
from zkcoord.coordinator.plan import GroupSnapshot, Moves, moves, plan
from zkcoord.coordinator.snapshot import ReadResult
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import MemberRegistration, Pattern


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


# --- how long a step waits ----------------------------------------------------------------------------------------


def polling(intervals: dict[str, int | None]) -> tuple[GroupSnapshot, Attempt]:
    """a and b hold clicks 0-2 (settled), c joins; each member publishes the poll interval given (None: none)."""
    regs = {
        cid: MemberRegistration(Pattern.STATIC, {"clicks": 1}, 0, incremental=True, max_poll_interval_ms=ms)
        for cid, ms in intervals.items()
    }
    before = settled({cid: regs[cid] for cid in ("a", "b")})
    snap = snapshot(regs, before.state, before.owners)
    planned = plan(snap, TOPICS, "range")
    attempt = Attempt("g", 6, 0, planned, ReadResult(snap, 3, frozenset({"clicks"}), owners_root=True), "t", 0.0)
    attempt.moves = moves(snap, planned.target)
    return snap, attempt


def test_an_eager_stop_waits_the_base_plus_the_longest_published_poll_interval_and_a_start_the_base() -> None:
    _, attempt = polling({"a": 3_000, "b": None, "c": 7_500})
    attempt.moves = None  # eager: every member is stopped, then every member started
    attempt.step, attempt.recipients = Step.STOPPING, frozenset(attempt.plan.members)
    assert phase_timeout_s(attempt, 10.0) == 17.5
    attempt.step = Step.STARTING
    assert phase_timeout_s(attempt, 10.0) == 10.0  # a start is not held by the application


def test_only_the_members_told_to_stop_count() -> None:
    _, attempt = polling({"a": 4_000, "b": 9_000, "c": 60_000})  # a gives c one partition; b is left alone
    m = attempt.moves
    assert m is not None and set(m.revoke) == {"a"} and "c" in m.gain and "b" not in m.gain
    attempt.step, attempt.recipients = Step.HANDOVER, frozenset(m.revoke) | m.gain
    assert phase_timeout_s(attempt, 0.5) == 4.5
    attempt.step, attempt.recipients = Step.STOPPING, frozenset(m.revoke)  # the two-step form's stop
    assert phase_timeout_s(attempt, 0.5) == 4.5
    attempt.step, attempt.recipients = Step.STARTING, m.gain
    assert phase_timeout_s(attempt, 0.5) == 0.5


def test_members_that_published_no_interval_or_cannot_be_read_wait_the_base() -> None:
    snap, attempt = polling({"a": None, "b": None, "c": None})
    attempt.step, attempt.recipients = Step.STOPPING, frozenset(attempt.plan.members)
    assert phase_timeout_s(attempt, 10.0) == 10.0
    # A recipient whose registration cannot be read (planned from the state's members, not in the snapshot's).
    attempt.recipients |= {"z"}
    assert "z" not in snap.members and phase_timeout_s(attempt, 10.0) == 10.0


def test_an_eager_start_goes_to_every_member_an_empty_one_to_a_member_given_nothing() -> None:
    regs = {cid: MemberRegistration(Pattern.STATIC, {"orders": 1}, 0) for cid in ("a", "b", "c")}  # orders: 2
    snap = snapshot(regs, None, {})
    planned = plan(snap, TOPICS, "range")
    attempt = Attempt("g", 1, 0, planned, ReadResult(snap, -1, frozenset(), owners_root=False), "t", 0.0)
    attempt.step, attempt.recipients = Step.STARTING, frozenset(planned.members)
    attempt.prefix = command_prefix(1, 1, CommandOption.START_FETCHER)
    sent = commands(command_ops(attempt, CommandOption.START_FETCHER, 1, 0))
    assert set(sent) == {"a", "b", "c"} and all(c.option is CommandOption.START_FETCHER for c in sent.values())
    assert sent["c"].ownership == {} and sent["a"].ownership and sent["b"].ownership
