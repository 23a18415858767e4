"""A classic-protocol group's join and sync records as ``zkcoord group describe`` shows them: the generation's
strategy and why, its leader, and what the leader wrote (``docs/classic-protocol.md``).

Read-only and tolerant, like the rest of the group views: a record that cannot be decoded is one problem line and
shown as unreadable, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.classic import JoinRecord, SyncRecord
from zkcoord.zk import ZkClient


@dataclass(frozen=True, slots=True)
class ClassicView:
    """The group's last join record (``None``: unreadable) and its leader's sync record (``None``: not written for
    that generation yet, or unreadable)."""

    join: JoinRecord | None
    sync: SyncRecord | None

    def to_json(self) -> dict[str, Any]:
        j, s = self.join, self.sync
        return {
            "protocol": "classic",
            "generation": j.generation if j else None,
            "strategy": j.strategy if j else None,
            "strategy_reason": j.reason if j else None,
            "leader": j.leader if j else None,
            "members": {cid: list(m.strategies) for cid, m in sorted(j.members.items())} if j else None,
            "sync": None
            if s is None
            else {"generation": s.generation, "leader": s.leader, "compute_ms": s.compute_ms, "error": s.error or None},
        }

    def line(self) -> str:
        """One line for the text view."""
        j, s = self.join, self.sync
        if j is None:
            return "classic protocol: join record unreadable"
        line = f"classic protocol: generation {j.generation}, strategy {j.strategy} ({j.reason}), leader {j.leader}"
        if s is None:
            return line + "; the leader's assignment is awaited"
        if s.error:
            return line + f"; the leader's assignor failed: {s.error}"
        return line + f"; the leader computed it in {s.compute_ms:g} ms"


def read_classic(zk: ZkClient, group: str, problems: list[str]) -> ClassicView | None:
    """The group's records, or ``None`` if it has none (not a classic group).  :raises ZkError: ZooKeeper failed."""
    got = zk.get_many([paths.classic_join(group), paths.classic_sync(group)])
    if got[0] is None or not got[0][0]:
        return None
    join: JoinRecord | None = None
    sync: SyncRecord | None = None
    try:
        join = JoinRecord.decode(got[0][0], paths.classic_join(group))
    except CodecError as e:
        problems.append(f"unreadable classic join record: {e.reason}")
    if got[1] is not None and got[1][0]:
        try:
            sync = SyncRecord.decode(got[1][0], paths.classic_sync(group))
        except CodecError as e:
            problems.append(f"unreadable classic sync record: {e.reason}")
    if sync is not None and (join is None or sync.generation != join.generation):
        sync = None  # a previous generation's: not this join's answer
    return ClassicView(join, sync)
