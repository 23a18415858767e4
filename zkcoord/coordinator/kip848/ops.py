"""The operations that write a consumer-protocol group's records, its commands and its owner znodes.

Pure: they build :class:`~zkcoord.coordinator.commands.Op` lists (and note in the model which znodes they create);
:class:`~zkcoord.coordinator.kip848.engine.Reconciler` writes them, fenced, with the group state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from zkcoord.coordinator.commands import Op
from zkcoord.coordinator.kip848.model import GroupModel, MemberStep, ownership
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_state import encode_owner
from zkcoord.layout.kip848 import CurrentAssignment, MemberTarget
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.protocol.assignors.classic import thread_id


def epoch_ops(model: GroupModel, changed: Mapping[str, MemberTarget], removed: set[str]) -> list[Op]:
    """The epochs, the targets that changed, and the records of members gone, as operations."""
    g = model.group
    path, data = paths.kip848(g), model.epochs.encode()
    ops = [Op("set", path, data) if model.have_epochs else Op("create", path, data)]
    model.have_epochs = True
    if changed and not model.target_root:
        ops.append(Op("create", paths.targets_root(g)))
        model.target_root = True
    for member in sorted(changed):
        path, data = paths.target(g, member), changed[member].encode()
        ops.append(Op("set", path, data) if member in model.have_target else Op("create", path, data))
        model.have_target.add(member)
    for member in sorted(removed):
        if member in model.have_target:
            ops.append(Op("delete", paths.target(g, member)))
            model.have_target.discard(member)
    return ops


def current_op(model: GroupModel, member: str, current: CurrentAssignment) -> list[Op]:
    g = model.group
    ops = []
    if not model.current_root:
        ops.append(Op("create", paths.currents_root(g)))
        model.current_root = True
    path, data = paths.current(g, member), current.encode()
    ops.append(Op("set", path, data) if member in model.have_current else Op("create", path, data))
    model.have_current.add(member)
    return ops


def drop_current_op(model: GroupModel, member: str) -> list[Op]:
    """A member gone for good: its current record and its assignment znode deleted (its acknowledgement znode is
    its own: it deletes it when it closes, and the next coordinator ignores one that names no assignment)."""
    ops = []
    if member in model.have_assignment:
        model.have_assignment.discard(member)
        model.ack_watched.discard(member)
        ops.append(Op("delete", paths.assignment(model.group, member)))
    if member in model.have_current:
        model.have_current.discard(member)
        ops.append(Op("delete", paths.current(model.group, member)))
    return ops


def assignment_ops(model: GroupModel, member: str, command: Command) -> list[Op]:
    """Write ``command`` into ``member``'s assignment znode (created the first time): the channel of this protocol,
    one znode per member rewritten in place (``docs/protocol.md``, "The assignment channel")."""
    g, ops = model.group, []
    if not model.assignment_root:
        ops.append(Op("create", paths.assignments_root(g)))
        model.assignment_root = True
    path, data = paths.assignment(g, member), command.encode()
    ops.append(Op("set", path, data) if member in model.have_assignment else Op("create", path, data))
    model.have_assignment.add(member)
    return ops


def grant_ops(model: GroupModel, step: MemberStep) -> list[Op]:
    """The owner znodes of what ``step`` grants, naming the thread that fetches each."""
    granted = step.granted
    if not granted:
        return []
    g, ops = model.group, []
    threads = ownership(model, step.member, step.after.assigned)
    if not model.owner_topics and not model.registry:
        ops.append(Op("create", paths.owners_root(g)))
        model.owner_topics.add("")
    for topic, parts in sorted(granted.items()):
        if topic not in model.owner_topics:
            ops.append(Op("create", paths.owners(g, topic)))
            model.owner_topics.add(topic)
        held = model.registry.setdefault(topic, {})
        for p in sorted(parts):
            data = encode_owner(threads[topic][p])
            if p not in held:
                # Created, then set once: a claim's version check must not take a znode created again by hand for
                # the one it read (as the classic path does).
                ops.append(Op("create", paths.owner(g, topic, p), data))
            ops.append(Op("set", paths.owner(g, topic, p), data))
            held[p] = threads[topic][p]
    return ops


def carry_versions(model: GroupModel, ops: list[Op], starts: list[tuple[MemberStep, Command, int]]) -> None:
    """Give each start of ``starts`` (its step, its command, and the index in ``ops`` of the write of its assignment
    znode) the version the transaction of ``ops`` leaves the owner znode of each partition it grants at, where that is
    known: created in it (then set: 1), or set from a version the model knows (its last write's result, plus one per
    set).  The member claims those partitions by checking that version instead of reading each owner znode
    (``zkcoord.consumer.carried``); a version mispredicted (an owner znode rewritten by hand since) fails the check
    and sends it back to reading.  With each such partition the start also carries the committed offset and offset
    znode version its previous holder's acknowledged stop reported (``model.released``, spent here), which the
    member checks the same way instead of reading the offset.  Rewrites the assignment ops in place."""
    after: dict[str, int | None] = {}
    for op in ops:
        if op.kind == "create":
            after[op.path] = 0
        elif op.kind == "set":
            base = after[op.path] if op.path in after else model.owner_versions.get(op.path)
            after[op.path] = None if base is None else base + 1
        elif op.kind == "delete":
            after[op.path] = None
    for step, start, at in starts:
        versions: dict[str, dict[int, int]] = {}
        offsets: dict[str, dict[int, tuple[int, int]]] = {}
        for topic, parts in sorted(step.granted.items()):
            for p in sorted(parts):
                version = after.get(paths.owner(model.group, topic, p))
                released = model.released.pop((topic, p), None)
                if version is not None:
                    versions.setdefault(topic, {})[p] = version
                    if released is not None:
                        offsets.setdefault(topic, {})[p] = released
        if versions:
            carried = dataclasses.replace(start, versions=versions, offsets=offsets or None)
            ops[at] = Op(ops[at].kind, ops[at].path, carried.encode())


def cleanup_ops(model: GroupModel) -> list[Op]:
    """Owner znodes of partitions nobody holds any more (their member left, their topic shrank): deleted."""
    held = {tp for c in model.currents.values() for tp in (c.assigned | c.pending_revocation).pairs()}
    ops = []
    for topic in sorted(model.registry):
        for p in sorted(model.registry[topic]):
            if (topic, p) not in held:
                ops.append(Op("delete", paths.owner(model.group, topic, p)))
                del model.registry[topic][p]
    return ops


def command(model: GroupModel, step: MemberStep, epoch: int, now_ms: int) -> Command:
    """The command that tells ``step``'s member its step: a stop naming what it revokes (all, for a stop of
    everything), or an incremental start with its whole new assignment."""
    stop = step.option is CommandOption.STOP_FETCHER
    revoke = None
    if stop and not step.full_stop:
        revoke = {t: tuple(sorted(ps)) for t, ps in step.after.pending_revocation.items()}
    return Command(
        CommandOption.STOP_FETCHER if stop else CommandOption.START_FETCHER,
        epoch,
        model.epochs.group_epoch,
        model.group,
        {} if stop else ownership(model, step.member, step.after.assigned),
        now_ms,
        revoke=revoke,
        incremental=not stop,
        incarnation=model.members[step.member],
    )


def rename_target_ops(model: GroupModel, old: str, new: str, target: MemberTarget | None) -> list[Op]:
    """A static member's replacement takes its predecessor's target record (same epoch: nothing was recomputed)."""
    ops: list[Op] = []
    if old in model.have_target:
        ops.append(Op("delete", paths.target(model.group, old)))
        model.have_target.discard(old)
    if target is not None:
        model.targets[new] = target
        ops += epoch_ops_target(model, new, target)
    return ops


def epoch_ops_target(model: GroupModel, member: str, target: MemberTarget) -> list[Op]:
    path, data = paths.target(model.group, member), target.encode()
    ops = []
    if not model.target_root:
        ops.append(Op("create", paths.targets_root(model.group)))
        model.target_root = True
    ops.append(Op("set", path, data) if member in model.have_target else Op("create", path, data))
    model.have_target.add(member)
    return ops


def rename_owner_ops(
    model: GroupModel, old: str, new: str, assigned: PartitionSet, threads: Mapping[str, int]
) -> list[Op]:
    """The owner znodes of what a static member's replacement takes over name its threads: the same thread number
    where it has that many threads for the topic, else its first."""
    ops = []
    for topic, parts in sorted(assigned.items()):
        count = max(threads.get(topic, 1), 1)
        for p in sorted(parts):
            held = model.registry.get(topic, {}).get(p, "")
            number = int(held.rsplit("-", 1)[1]) if held.rsplit("-", 1)[0] == old else 0
            thread = thread_id(new, number if number < count else 0)
            model.registry.setdefault(topic, {})[p] = thread
            ops.append(Op("set", paths.owner(model.group, topic, p), encode_owner(thread)))
    return ops


def touch_owner_ops(model: GroupModel, held: PartitionSet) -> list[Op]:
    """Rewrite the owner znodes of ``held`` as they are: their versions move, so a claim read before (a fenced
    member's) no longer matches and its commits are refused."""
    ops = []
    for topic, parts in sorted(held.items()):
        for p in sorted(parts):
            thread = model.registry.get(topic, {}).get(p)
            if thread is not None:
                ops.append(Op("set", paths.owner(model.group, topic, p), encode_owner(thread)))
    return ops
