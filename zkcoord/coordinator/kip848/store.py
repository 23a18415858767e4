"""Reading a consumer-protocol group back from ZooKeeper, and the operations that write its records.

A coordinator that takes a group over -- after a failover, a connection loss that left a write's outcome unknown,
or the group's return from the classic path -- reads what the last writer left (:func:`load`): the epochs, every
member's target and current assignment, and the commands still in the channels.  Those records are written only in
fenced transactions with the group's state (S1), each transaction whole or not at all, so what is read is a state
some coordinator wrote, and the reconciliation carries on from it: nothing is stopped again.

Only when the records cannot be trusted is the group *rebuilt*, and the journal says why (``kip848.rebuilt``): a
record unreadable, the records and the state of different epochs (another protocol rebalanced the group since), or
no records at all.  A rebuilt group knows what its members fetch from the ownership registry when the classic state
vouches for it (STABLE, and the registry agrees with it); otherwise it stops every member first.

Threads: the coordinator's worker thread.  :raises ZkError: on I/O failure (the caller retries the group).
"""

from __future__ import annotations

from collections.abc import Mapping

from zkcoord.coordinator.kip848.model import GroupModel, InFlight
from zkcoord.coordinator.plan import registry_vouched
from zkcoord.coordinator.snapshot import ReadResult
from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.commands import CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.kip848 import CurrentAssignment, GroupEpochs, MemberState, MemberTarget
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.zk import Stat, ZkClient


def load(
    zk: ZkClient, group: str, read: ReadResult, threads: Mapping[str, Mapping[str, int]]
) -> tuple[GroupModel, str]:
    """The group as its records hold it, and ``""``; or a rebuilt model and why it was rebuilt."""
    snap = read.snapshot
    members = {cid: m.incarnation for cid, m in snap.members.items()}
    registry = {t: dict(ps) for t, ps in snap.owners.items()}
    model = GroupModel(
        group,
        GroupEpochs(0, 0),
        {},
        {},
        members,
        {m: dict(t) for m, t in threads.items()},
        registry,
        state_version=read.state_version,
        owner_topics=set(read.owner_topics),
    )
    model.channels = set(zk.get_children(paths.channel_root(group))) if zk.exists(paths.channel_root(group)) else set()
    names = zk.children_many([paths.targets_root(group), paths.currents_root(group)])
    target_names, current_names = names[0] or [], names[1] or []
    model.have_target, model.have_current = set(target_names), set(current_names)
    model.target_root, model.current_root = names[0] is not None, names[1] is not None
    got = zk.get_many(
        [paths.kip848(group)]
        + [paths.target(group, m) for m in target_names]
        + [paths.current(group, m) for m in current_names]
    )
    epochs_read, targets_read = got[0], got[1 : 1 + len(target_names)]
    model.have_epochs = epochs_read is not None
    currents_read = got[1 + len(target_names) :]
    state = snap.state
    why = _distrust(epochs_read, state)
    if not why and epochs_read is not None and state is not None:
        try:
            model.epochs = GroupEpochs.decode(epochs_read[0], paths.kip848(group))
            for m, r in zip(target_names, targets_read, strict=True):
                if r is not None:
                    model.targets[m] = MemberTarget.decode(r[0], paths.target(group, m))
            for m, r in zip(current_names, currents_read, strict=True):
                if r is not None:
                    model.currents[m] = CurrentAssignment.decode(r[0], paths.current(group, m))
        except CodecError as e:
            why = f"a record is unreadable: {e}"
    if why or state is None:
        _rebuild(model, read, max(state.generation if state else 0, _epoch_of(epochs_read)))
        return model, why or "no group state"
    model.members = dict(state.members)  # whom the records were written for
    model.assignor = state.assignor
    model.phase = state.phase
    _find_inflight(zk, model)
    return model, ""


def _distrust(epochs_read: tuple[bytes, Stat] | None, state: GroupState | None) -> str:
    """Why the records cannot be carried on from ("": they can)."""
    if epochs_read is None:
        return "no consumer-protocol records"
    if state is None:
        return "no group state"
    if state.phase not in (GroupPhase.STABLE, GroupPhase.RECONCILING):
        return f"the group state is {state.phase.value}: another protocol's rebalance did not finish"
    try:
        epochs = GroupEpochs.decode(epochs_read[0])
    except CodecError as e:
        return f"the group epochs are unreadable: {e.reason}"
    if epochs.group_epoch != state.generation:
        return f"the records are of group epoch {epochs.group_epoch}, the state of generation {state.generation}"
    return ""


def _epoch_of(epochs_read: tuple[bytes, Stat] | None) -> int:
    if epochs_read is None:
        return 0
    try:
        return GroupEpochs.decode(epochs_read[0]).group_epoch
    except CodecError:
        return 0


def _rebuild(model: GroupModel, read: ReadResult, epoch: int) -> None:
    """Start over at ``epoch`` (the next bump goes past it, so commands' generations keep growing): what each member
    fetches is the registry's if the classic state vouches for it; otherwise every member is stopped first."""
    model.epochs = GroupEpochs(epoch, epoch)
    model.targets = {}
    model.basis = None
    vouched = registry_vouched(read.snapshot)
    state = read.snapshot.state
    recorded = state.members if state is not None else {}
    named = {th.rsplit("-", 1)[0] for ps in model.registry.values() for th in ps.values()}
    if state is not None:
        named |= {th.rsplit("-", 1)[0] for ps in state.target.values() for th in ps.values()}
    for member, incarnation in model.members.items():
        held = PartitionSet.from_pairs(
            (t, p) for t, ps in model.registry.items() for p, th in ps.items() if th.rsplit("-", 1)[0] == member
        )
        if member not in named:
            continue  # no start was ever written for it (the registry and the state would name it): it fetches nothing
        if vouched and recorded.get(member) == incarnation:
            model.currents[member] = CurrentAssignment(0, 0, MemberState.STABLE, assigned=held)
        else:
            model.currents[member] = CurrentAssignment(0, 0, MemberState.UNREVOKED_PARTITIONS, pending_revocation=held)
            model.must_stop.add(member)


def _find_inflight(zk: ZkClient, model: GroupModel) -> None:
    """The commands a previous writer left unacknowledged in the members' channels: waited for as in flight (the
    lowest of each member's: commands are applied in order).  A member left revoking with nothing in its channel
    may or may not have heard its stop: it is sent again (a stop of what it no longer fetches is harmless)."""
    members = sorted(model.members)
    listings = zk.children_many([paths.channel(model.group, m) for m in members])
    pending: dict[str, str] = {}
    for member, children in zip(members, listings, strict=True):
        mine = sorted((c for c in children or [] if c.startswith(paths.COMMAND_PREFIX)), key=lambda c: c[-10:])
        if mine:
            pending[member] = f"{paths.channel(model.group, member)}/{mine[0]}"
    stats = zk.get_many(list(pending.values()))
    for (member, path), got in zip(pending.items(), stats, strict=True):
        if got is None:
            continue  # acknowledged since the listing: nothing to wait for
        option = CommandOption.STOP_FETCHER if "-stop-" in path.rsplit("/", 1)[1] else CommandOption.START_FETCHER
        model.inflight[member] = InFlight(option, path, got[1].czxid)
    for member, current in model.currents.items():
        if member in model.members and member not in model.inflight and current.pending_revocation:
            model.resend[member] = CommandOption.STOP_FETCHER
