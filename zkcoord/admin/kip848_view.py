"""A consumer-protocol group's KIP-848 records as ``zkcoord group describe`` shows them: the group and assignment
epochs, and per member its epoch, previous epoch, state, assigned and pending partitions, and target.

Read-only and tolerant, like the rest of the group views (:mod:`zkcoord.admin.group_reads`): a record that cannot be
decoded is one problem line and shown as unreadable, never an error.  The records' meaning is
``docs/protocol.md``'s ("KIP-848: the consumer protocol").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.kip848 import CurrentAssignment, GroupEpochs, MemberTarget, encode_partitions
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.zk import ZkClient


@dataclass(frozen=True, slots=True)
class MemberRecords:
    """One member's records (``None``: absent, or unreadable -- ``problems`` says which)."""

    current: CurrentAssignment | None = None
    target: MemberTarget | None = None


@dataclass(frozen=True, slots=True)
class Kip848View:
    """The group's records; ``epochs`` ``None`` when its ``kip848`` znode cannot be decoded."""

    epochs: GroupEpochs | None
    members: dict[str, MemberRecords] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        def parts(p: PartitionSet | None) -> dict[str, list[int]] | None:
            return None if p is None else encode_partitions(p)

        return {
            "group_epoch": self.epochs.group_epoch if self.epochs else None,
            "assignment_epoch": self.epochs.assignment_epoch if self.epochs else None,
            "members": {
                m: {
                    "member_epoch": r.current.member_epoch if r.current else None,
                    "previous_member_epoch": r.current.previous_member_epoch if r.current else None,
                    "state": r.current.state.name if r.current else None,
                    "assigned": parts(r.current.assigned if r.current else None),
                    "pending_revocation": parts(r.current.pending_revocation if r.current else None),
                    "target": parts(r.target.partitions if r.target else None),
                    "target_epoch": r.target.epoch if r.target else None,
                }
                for m, r in sorted(self.members.items())
            },
        }

    def reconciled(self, member: str) -> bool:
        records = self.members.get(member)
        return (
            self.epochs is not None
            and records is not None
            and records.current is not None
            and records.current.is_reconciled_to(self.epochs.assignment_epoch)
        )


def read_kip848(zk: ZkClient, group: str, problems: list[str]) -> Kip848View | None:
    """The group's records, or ``None`` if it has none (not a consumer-protocol group).  Undecodable records are
    appended to ``problems``.  :raises ZkError: ZooKeeper failed."""
    names = zk.children_many([paths.targets_root(group), paths.currents_root(group)])
    targets, currents = names[0] or [], names[1] or []
    got = zk.get_many(
        [paths.kip848(group)] + [paths.target(group, m) for m in targets] + [paths.current(group, m) for m in currents]
    )
    if got[0] is None:
        return None
    epochs = _decoded(GroupEpochs.decode, got[0][0], paths.kip848(group), problems)
    records: dict[str, dict[str, Any]] = {}
    for m, r in zip(targets, got[1 : 1 + len(targets)], strict=True):
        if r is not None:
            records.setdefault(m, {})["target"] = _decoded(MemberTarget.decode, r[0], paths.target(group, m), problems)
    for m, r in zip(currents, got[1 + len(targets) :], strict=True):
        if r is not None:
            path = paths.current(group, m)
            records.setdefault(m, {})["current"] = _decoded(CurrentAssignment.decode, r[0], path, problems)
    return Kip848View(epochs, {m: MemberRecords(**r) for m, r in records.items()})


def _decoded(decode: Any, data: bytes, path: str, problems: list[str]) -> Any:
    try:
        return decode(data, path)
    except CodecError as e:
        problems.append(f"unreadable consumer-protocol record {path}: {e.reason}")
        return None


def member_rows(view: Kip848View, extra: Mapping[str, tuple[str | None, str | None]]) -> list[list[str]]:
    """One row per member with records: consumer id, instance id, rack, member epoch, state, assigned, pending
    revocation, target (``extra``: a member's instance id and rack from its registration)."""

    def count(p: PartitionSet | None) -> str:
        return "?" if p is None else str(p.count())

    rows = []
    for member, r in sorted(view.members.items()):
        instance, rack = extra.get(member, (None, None))
        current = r.current
        rows.append(
            [
                member,
                instance or "-",
                rack or "-",
                "?" if current is None else str(current.member_epoch),
                "(unreadable)" if current is None else current.state.name,
                count(current.assigned if current else None),
                count(current.pending_revocation if current else None),
                count(r.target.partitions if r.target else None),
            ]
        )
    return rows
