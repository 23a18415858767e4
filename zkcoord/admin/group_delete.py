"""``zkcoord group delete``: remove an empty group, as ``kafka-consumer-groups.sh --delete`` does.

What goes: the group's whole tree in every layout it lives in (the coordinator's ``/consumers/groups/<g>``: offsets,
state, owners, channels, reset records, KIP-848 records, checkpoints; Kafka 0.8's ``/consumers/<g>``), and its
dynamic config ``/config/groups/<g>`` unless kept (``keep_config``: seed 000 lets a config outlive its group).

Contract:

- **Only an empty group**: a member registered in either ``ids/`` refuses the delete (:class:`GroupNotEmptyError`)
  before anything is written.
- **One transaction, versioned**: every znode read is deleted, children first, each at the version read; so a commit,
  a member registering (its ``ids`` parent is then not empty) or any znode created in the tree meanwhile fails the
  whole transaction, and nothing is deleted (:class:`GroupChangedError`).  A tree too large for one request
  (ZooKeeper's 1 MiB limit: some ten thousand znodes) is deleted in several transactions, leaves first, the
  registries and the roots last; the message then says how far it got if one fails.

Runs on the caller's thread; blocks on ZooKeeper.  :raises ZkError: (typed) when ZooKeeper fails.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from zkcoord.admin.group_reads import Layout, layouts_of, tree
from zkcoord.admin.groups import GroupNotFoundError
from zkcoord.admin.offset_reset import MAX_TRANSACTION_BYTES, GroupNotEmptyError
from zkcoord.errors import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.names import validate_group
from zkcoord.zk import ReadKind, ZkClient

_OP_OVERHEAD = 32
_WINDOW = 512


class GroupChangedError(ZkCoordError):
    """The group's tree changed while it was deleted."""

    retriable = True


@dataclass(slots=True)
class DeleteReport:
    """What :func:`delete_group` removed: znodes per kind (``offsets``, ``checkpoints``, ``state``, ``owners``,
    ``other``) and per layout root, and whether the config went."""

    group: str
    roots: list[str] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)
    config: bool = False
    transactions: int = 0

    @property
    def znodes(self) -> int:
        return sum(self.kinds.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "roots": self.roots,
            "removed": dict(sorted(self.kinds.items())),
            "znodes": self.znodes,
            "config": self.config,
            "transactions": self.transactions,
        }


def _kind(group: str, layout: Layout, path: str) -> str:
    """What a znode of the group's tree is, for the report: the leaves that matter by name, the rest ``other``."""
    root = tree(layout).root(group)
    parts = path[len(root) + 1 :].split("/") if path != root else []
    if len(parts) == 3 and parts[0] == "offsets":
        return "offsets"
    if len(parts) == 2 and parts[0] == "checkpoints":
        return "checkpoints"
    if parts == ["state"]:
        return "state"
    if len(parts) == 3 and parts[0] == "owners":
        return "owners"
    return "other"


def _walk(zk: ZkClient, roots: list[str]) -> list[tuple[str, int, list[str]]]:
    """``(path, version, children)`` of every znode under (and including) ``roots``, parents before children,
    level by level in pipelined bursts.  A znode gone between two levels is left out (the delete then fails on its
    parent's version or emptiness only if something else changed)."""
    found: list[tuple[str, int, list[str]]] = []
    level = roots
    while level:
        nxt: list[str] = []
        for begin in range(0, len(level), _WINDOW):
            chunk = level[begin : begin + _WINDOW]
            reads: list[tuple[ReadKind, str]] = [(kind, p) for p in chunk for kind in ("get", "children")]
            results = zk.read_many(reads, 30.0)
            for i, path in enumerate(chunk):
                got, children = results[2 * i], results[2 * i + 1]
                if got is None or children is None:
                    continue
                found.append((path, got[1].version, sorted(children)))
                nxt.extend(f"{path}/{c}" for c in sorted(children))
        level = nxt
    return found


def delete_group(zk: ZkClient, group: str, *, keep_config: bool = False) -> DeleteReport:
    """Delete the empty ``group`` (module docstring).

    :raises GroupNotFoundError: the group exists in neither layout.
    :raises GroupNotEmptyError: members are registered.
    :raises GroupChangedError: the tree changed while it was deleted (the message says whether anything went).
    """
    validate_group(group)
    report = DeleteReport(group)
    layouts = {tree(layout).root(group): layout for layout in layouts_of(group)}
    nodes = _walk(zk, list(layouts))
    if not nodes:
        raise GroupNotFoundError(group)
    members = sorted(
        c for path, _v, children in nodes for layout in layouts.values() if path == tree(layout).ids(group)
        for c in children
    )  # fmt: skip
    if members:
        raise GroupNotEmptyError(group, members, "deleting it")
    report.roots = [path for path, _v, _c in nodes if path in layouts]
    ops: list[tuple[str, int]] = []
    for path, version, _children in reversed(nodes):  # the reverse of a level order: children before parents
        ops.append((path, version))
        layout = next(lay for root, lay in layouts.items() if path == root or path.startswith(root + "/"))
        report.kinds[_kind(group, layout, path)] += 1
    if not keep_config:
        config = zk.exists(paths.group_config(group))
        if config is not None:
            ops.append((paths.group_config(group), config.version))
            report.config = True
    _commit(zk, group, ops, report)
    return report


def _commit(zk: ZkClient, group: str, ops: list[tuple[str, int]], report: DeleteReport) -> None:
    """Delete ``ops`` (children first) in as few transactions as fit; the last one holds the roots and registries."""
    registries = {tree(lay).ids(group) for lay in layouts_of(group)} | {
        tree(lay).root(group) for lay in layouts_of(group)
    }
    head = [op for op in ops if op[0] not in registries]
    tail = [op for op in ops if op[0] in registries]
    chunks: list[list[tuple[str, int]]] = [[]]
    size = 0
    for op in head:
        if size + len(op[0]) + _OP_OVERHEAD > MAX_TRANSACTION_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(op)
        size += len(op[0]) + _OP_OVERHEAD
    chunks[-1].extend(tail)  # the registries and roots are few: the last chunk holds them
    done = 0
    for chunk in chunks:
        txn = zk.transaction()
        for path, version in chunk:
            txn.delete(path, version)
        try:
            txn.commit()
        except (BadVersionError, NotEmptyError, NoNodeError, NodeExistsError) as e:
            gone = "nothing was deleted" if not done else f"{done} znodes were deleted before it, the rest is there"
            raise GroupChangedError(
                f"{e.path or 'the group'} changed while group {group!r} was deleted (a member joined, an offset was "
                f"committed or a znode was created): {gone}; look at the group again and rerun"
            ) from e
        done += len(chunk)
        report.transactions += 1
