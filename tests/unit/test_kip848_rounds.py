"""The consumer-protocol coordinator's rounds (:mod:`zkcoord.coordinator.kip848.model`), pure: revoke before
assign, no partition granted while another member holds it, every member told what moves for it, and convergence
to the target once members acknowledge -- under any interleaving of joins, leaves, target changes and
acknowledgements (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zkcoord.coordinator.commands import Op
from zkcoord.coordinator.kip848.model import (
    GroupModel,
    InFlight,
    MemberStep,
    basis,
    compute_target,
    next_target,
    round_steps,
)
from zkcoord.coordinator.kip848.ops import carry_versions
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.kip848 import CurrentAssignment, GroupEpochs, MemberState, MemberTarget
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.protocol.kip848 import partition_epochs

TOPICS = {"a": 6, "b": 3}


def _model(members: list[str]) -> GroupModel:
    model = GroupModel("g", GroupEpochs(0, 0), {}, {}, {}, {}, {})
    for m in members:
        model.members[m] = 1
        model.threads[m] = dict.fromkeys(TOPICS, 1)
    _bump(model)
    return model


def _bump(model: GroupModel) -> None:
    """A new group epoch and target, as the engine computes them."""
    epoch = model.epochs.group_epoch + 1
    previous = {m: t.partitions for m, t in model.targets.items()}
    target = compute_target("uniform", model.threads, TOPICS, previous)
    model.epochs = GroupEpochs(epoch, epoch)
    model.targets = {m: MemberTarget(epoch, p) for m, p in target.items()}
    model.basis = basis(model.members, model.threads, TOPICS)


def _round(model: GroupModel) -> list[str]:
    """One round; the members told something are in flight afterwards, as the engine records them.  Checks that
    nothing granted was held by another member at the end of the round (assigned or pending revocation: the
    partition-epoch index raises on a partition two members hold) and that every grant goes with a start."""
    told = []
    for step in round_steps(model):
        if step.option is not None:
            told.append(step.member)
            model.inflight[step.member] = InFlight(step.option, f"/c/{step.member}", 1)
        if step.granted:
            assert step.option is CommandOption.START_FETCHER, "a grant is always told"
    partition_epochs(model.currents)  # raises on a partition held by two members
    return told


def _ack(model: GroupModel, member: str) -> None:
    model.inflight.pop(member, None)


def test_a_join_revokes_from_the_owner_before_granting_to_the_joiner() -> None:
    model = _model(["m1"])
    assert _round(model) == ["m1"]  # the joiner hears its whole assignment
    _ack(model, "m1")
    _round(model)
    assert model.stable() and model.currents["m1"].assigned.count() == 9
    model.members["m2"], model.threads["m2"] = 1, dict.fromkeys(TOPICS, 1)
    _bump(model)
    told = _round(model)
    # m1 must give up what m2's target holds; m2 is granted nothing of it yet, and hears nothing until it is (no
    # empty start to acknowledge before its first grant).
    assert model.currents["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert model.currents["m2"].state is MemberState.UNRELEASED_PARTITIONS
    assert not model.currents["m2"].assigned
    assert set(told) == {"m1"}
    assert _round(model) == []  # m2 waits: m1 has not acknowledged
    _ack(model, "m1")
    told = _round(model)
    assert told == ["m2"], "once m1 released them, m2 is granted its partitions in the same round"
    assert model.currents["m1"].is_reconciled_to(model.epochs.assignment_epoch)
    assert model.currents["m2"].assigned == model.targets["m2"].partitions
    _ack(model, "m2")
    _round(model)
    assert model.stable()


def test_a_member_that_only_moves_epochs_is_told_nothing() -> None:
    model = _model(["m1", "m2"])
    for _ in range(3):
        for m in list(model.inflight):
            _ack(model, m)
        _round(model)
    assert model.stable()
    model.threads["m1"] = {"a": 1, "b": 1}  # same subscription, new epoch (a metadata bump that moves nothing)
    _bump(model)
    steps = round_steps(model)
    assert {s.member for s in steps} == {"m1", "m2"}
    assert all(s.option is None for s in steps), "nothing moved: no command, only the current assignment's epoch"
    assert model.stable()


def test_a_rebuilt_member_of_unknown_fetching_is_stopped_entirely_first() -> None:
    model = _model(["m1"])
    model.must_stop.add("m1")
    [step] = round_steps(model)
    assert step.option is CommandOption.STOP_FETCHER and step.full_stop


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(st.sampled_from(["join", "leave", "ack", "ack-all", "resubscribe"]), st.integers(0, 5)),
        max_size=40,
    )
)
def test_any_interleaving_keeps_one_holder_per_partition_and_converges(ops: list[tuple[str, int]]) -> None:
    model = _model(["m0"])
    names = [f"m{i}" for i in range(6)]
    _round(model)
    for op, i in ops:
        member = names[i]
        if op == "join" and member not in model.members:
            model.members[member], model.threads[member] = 1, dict.fromkeys(TOPICS, 1)
            _bump(model)
        elif op == "leave" and member in model.members and len(model.members) > 1:
            # gone with its session: its partitions are free (S6 stopped it)
            del model.members[member], model.threads[member]
            model.currents.pop(member, None)
            model.inflight.pop(member, None)
            _bump(model)
        elif op == "resubscribe" and member in model.members:
            model.threads[member] = {"a": 1} if "b" in model.threads[member] else dict.fromkeys(TOPICS, 1)
            _bump(model)
        elif op == "ack":
            _ack(model, member)
        elif op == "ack-all":
            for m in list(model.inflight):
                _ack(model, m)
        _round(model)
        for m, current in model.currents.items():
            if current.pending_revocation:
                assert current.state is MemberState.UNREVOKED_PARTITIONS and m in model.inflight
    for _ in range(10):  # everyone answers from now on
        for m in list(model.inflight):
            _ack(model, m)
        _round(model)
    assert model.stable()
    for m in model.members:
        assert model.currents[m].assigned == model.targets[m].partitions
    every = sorted(p for c in model.currents.values() for p in c.assigned.pairs())
    subscribed = {t for threads in model.threads.values() for t in threads}
    assert every == sorted(PartitionSet.of({t: range(TOPICS[t]) for t in subscribed}).pairs())


@settings(max_examples=60)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), min_size=1, max_size=25))
def test_the_target_on_the_change_equals_the_full_computation(changes: list[tuple[bool, int]]) -> None:
    """``next_target`` with its cache (one join or leave worked on the change) gives exactly what
    ``compute_target`` gives sticky to the previous target, through any sequence of joins and leaves."""
    topics = {"a": 7, "b": 5}
    members: dict[str, dict[str, int]] = {"m0": dict.fromkeys(topics, 1)}
    target, cache = next_target(None, "uniform", members, topics, {})
    for join, i in changes:
        member = f"m{i}"
        if join:
            members[member] = dict.fromkeys(topics, 1)
        elif member in members and len(members) > 1:
            del members[member]
        expected = compute_target("uniform", members, topics, target)
        target, cache = next_target(cache, "uniform", members, topics, target)
        assert target == expected


def test_a_start_carries_the_released_offsets_only_with_a_carried_owner_version() -> None:
    """A grant's start carries the committed offset its previous holder's acknowledgement reported (with its offset
    znode's version) only where it also carries the owner znode's version -- the member checks both in one
    transaction; each reported offset is spent by the grant either way, so none is handed on twice."""
    model = GroupModel("g", GroupEpochs(1, 1), {}, {}, {}, {}, {})
    model.members["m"] = 1
    owner0, owner1 = paths.owner("g", "t", 0), paths.owner("g", "t", 1)
    model.owner_versions[owner0] = 3  # t/1's is not known (read back): no version, so no offset either
    model.released = {("t", 0): (17, 4), ("t", 1): (23, 2)}
    before = CurrentAssignment(1, 0, MemberState.STABLE)
    after = CurrentAssignment(1, 0, MemberState.STABLE, PartitionSet({"t": [0, 1]}))
    step = MemberStep("m", before, after, CommandOption.START_FETCHER)
    start = Command(CommandOption.START_FETCHER, 1, 1, "g", {"t": {0: "m-0", 1: "m-0"}}, 0, incremental=True)
    ops = [Op("set", owner0, b"m-0"), Op("set", owner1, b"m-0"), Op("set", paths.assignment("g", "m"), b"")]
    carry_versions(model, ops, [(step, start, 2)])
    sent = Command.decode(ops[2].data)
    assert sent.versions == {"t": {0: 4}} and sent.offsets == {"t": {0: (17, 4)}}
    assert model.released == {}
