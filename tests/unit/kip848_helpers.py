"""A KIP-848 group in memory, for the reconciliation tests (``test_kip848_*.py``): the coordinator's side of a
heartbeat (the partition-epoch index, then :func:`reconcile`) and each member's client (what it truly owns, which
it changes only by applying the last response it got: dropping what it must revoke, taking what it is granted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from zkcoord.protocol.kip848 import (
    CurrentAssignment,
    MemberState,
    PartitionSet,
    TargetAssignment,
    partition_epochs,
    reconcile,
)


def P(topics: Mapping[str, Iterable[int]] | None = None, **by_name: Iterable[int]) -> PartitionSet:
    """``P({"topic1": [1, 2]})`` or ``P(foo=[0, 1], bar=[0])``."""
    return PartitionSet({**(topics or {}), **by_name})


def member(
    state: MemberState,
    epoch: int,
    previous: int,
    assigned: PartitionSet | None = None,
    pending: PartitionSet | None = None,
) -> CurrentAssignment:
    return CurrentAssignment(epoch, previous, state, assigned or P(), pending or P())


@dataclass
class Step:
    """One heartbeat: who, what it reported owning (None: not reported), and the record before and after."""

    member: str
    owned: PartitionSet | None
    before: CurrentAssignment
    after: CurrentAssignment


@dataclass
class Group:
    """Members' records on the coordinator's side, and what each member's client truly owns."""

    target: TargetAssignment
    current: dict[str, CurrentAssignment]
    owned: dict[str, PartitionSet] = field(default_factory=dict)
    responses: dict[str, CurrentAssignment] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    @classmethod
    def stable(cls, epoch: int, holdings: Mapping[str, PartitionSet], target: TargetAssignment) -> Group:
        """Members STABLE at ``epoch`` holding ``holdings``, their clients owning exactly that."""
        current = {m: CurrentAssignment(epoch, epoch, MemberState.STABLE, ps, P()) for m, ps in holdings.items()}
        return cls(target, current, dict(holdings), dict(current))

    def heartbeat(self, name: str, *, apply: bool = True, report: bool = True) -> CurrentAssignment:
        """``name``'s client first applies the last response it got (if ``apply``), then heartbeats, reporting what
        it owns (or nothing, if not ``report``); the coordinator reconciles it against the group's other members."""
        if apply and name in self.responses:
            # a client keeps only what it is assigned (revoking the rest) and takes everything it is assigned
            self.owned[name] = self.responses[name].assigned
        owned = self.owned.get(name, P()) if report else None
        index = partition_epochs(self.current)
        before = self.current[name]
        after = reconcile(before, self.target.epoch, self.target.of(name), owned, lambda t, p: index.get((t, p), -1))
        self.current[name] = after
        self.responses[name] = after
        self.steps.append(Step(name, owned, before, after))
        return after

    def truly_owned_twice(self) -> list[tuple[str, int]]:
        """Partitions two members' clients own at once (what the protocol must never allow)."""
        seen: dict[tuple[str, int], str] = {}
        twice = []
        for name, ps in self.owned.items():
            for tp in ps.pairs():
                if seen.setdefault(tp, name) != name:
                    twice.append(tp)
        return twice
