"""A group's named checkpoints (seed 003), ``/consumers/groups/<g>/checkpoints/<name>``, for ``zkcoord group
checkpoint|checkpoints`` and ``reset-offsets --to-checkpoint``.

Contract:

- :func:`save_checkpoint` saves the committed offsets that count (merged across the members and both layouts, as
  ``group describe`` shows them: :func:`~zkcoord.admin.groups.committed_offsets`) under a new name.  It may be taken
  while members consume: their commits are read in one pipelined burst, so the checkpoint holds, per partition, an
  offset that was committed (not one instant across partitions, which ZooKeeper offers no read for).  A partition
  whose offset cannot be read, or a group with none committed, is refused: a checkpoint that silently lacks a
  partition would restore it wrongly.  An existing name is refused, or replaced conditionally on its version.
- Reading one that cannot be decoded raises :class:`~zkcoord.errors.CodecError` with its path (S7).

Runs on the caller's thread; every call blocks on ZooKeeper.  :raises ZkError: (typed) when ZooKeeper fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from zkcoord.admin.group_reads import Layout, read_groups
from zkcoord.admin.groups import GroupNotFoundError, committed_offsets
from zkcoord.errors import BadVersionError, CodecError, NodeExistsError, NoNodeError, ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.checkpoints import Checkpoint, validate_checkpoint
from zkcoord.layout.names import validate_group
from zkcoord.zk import ZkClient


class CheckpointError(ZkCoordError):
    """A checkpoint that cannot be taken, found or replaced (nothing was written)."""


@dataclass(frozen=True, slots=True)
class NamedCheckpoint:
    """A checkpoint as listed: ``checkpoint`` ``None`` when it cannot be decoded (``problem`` says why)."""

    name: str
    checkpoint: Checkpoint | None
    problem: str | None = None


def when(ms: int) -> str:
    """``ms`` as an ISO 8601 UTC time, for messages and tables."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def save_checkpoint(zk: ZkClient, group: str, name: str, now_ms: int, *, replace: bool = False) -> Checkpoint:
    """Save ``group``'s committed offsets as checkpoint ``name`` (module docstring).

    :raises GroupNotFoundError: the group exists in neither layout.
    :raises CheckpointError: no committed offset, an unreadable one, or ``name`` taken (without ``replace``).
    """
    validate_group(group)
    validate_checkpoint(name)
    read = read_groups(zk, [group], offsets=True)[group]
    if not read.exists:
        raise GroupNotFoundError(group)
    counted, unreadable = committed_offsets(read)
    if unreadable:
        shown = ", ".join(f"{t}-{p}" for t, p in unreadable[:5])
        raise CheckpointError(
            f"the committed offset of {shown} cannot be read (group describe {group} says why): nothing saved"
        )
    if not counted:
        raise CheckpointError(f"group {group!r} has no committed offsets: nothing to checkpoint")
    state = read.layout(Layout.COORDINATOR).state
    offsets: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in counted.items():
        offsets.setdefault(topic, {})[partition] = offset
    checkpoint = Checkpoint(offsets, now_ms, None if state is None else state.generation)
    path = paths.checkpoint(group, name)
    try:
        zk.create(path, checkpoint.encode(), makepath=True)
    except NodeExistsError as e:
        if not replace:
            raise CheckpointError(
                f"group {group!r} already has a checkpoint {name!r}: choose another name, or --replace it"
            ) from e
    else:
        return checkpoint
    try:
        _data, stat = zk.get(path)
        zk.set(path, checkpoint.encode(), version=stat.version)
    except (NoNodeError, BadVersionError) as e:
        raise CheckpointError(f"checkpoint {name!r} changed while it was replaced: nothing saved; rerun") from e
    return checkpoint


def read_checkpoint(zk: ZkClient, group: str, name: str) -> Checkpoint:
    """:raises CheckpointError: none of that name (the message lists those there are).
    :raises CodecError: it cannot be decoded."""
    validate_group(group)
    path = paths.checkpoint(group, validate_checkpoint(name))
    try:
        data, _stat = zk.get(path)
    except NoNodeError as e:
        names = checkpoint_names(zk, group)
        there = f"its checkpoints: {', '.join(names)}" if names else "it has none"
        raise CheckpointError(f"group {group!r} has no checkpoint {name!r} ({there})") from e
    return Checkpoint.decode(data, path)


def checkpoint_names(zk: ZkClient, group: str) -> list[str]:
    try:
        return sorted(zk.get_children(paths.checkpoints_root(group)))
    except NoNodeError:
        return []


def list_checkpoints(zk: ZkClient, group: str) -> list[NamedCheckpoint]:
    """Every checkpoint of ``group``, by name; one that cannot be decoded is listed with its problem.

    :raises GroupNotFoundError: the group exists in neither layout.
    """
    validate_group(group)
    if not read_groups(zk, [group], offsets=False)[group].exists:
        raise GroupNotFoundError(group)
    names = checkpoint_names(zk, group)
    out = []
    for name, got in zip(names, zk.get_many([paths.checkpoint(group, n) for n in names]), strict=True):
        if got is None:
            continue  # deleted since listed
        try:
            out.append(NamedCheckpoint(name, Checkpoint.decode(got[0], paths.checkpoint(group, name))))
        except CodecError as e:
            out.append(NamedCheckpoint(name, None, str(e)))
    return out
