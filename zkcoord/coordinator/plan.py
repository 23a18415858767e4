"""Planning a rebalance: pure functions from what ZooKeeper holds to the target assignment and whether it is needed.

Nothing here does I/O, so the necessity check (seed section D, steps 3.1–3.5) and subscription resolution are tested
on plain values.  :func:`plan` is called by the coordinator's worker with a :class:`GroupSnapshot` it has just read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from zkcoord.assignors import Assignment, get_assignor, range_assign
from zkcoord.errors import ConfigurationError
from zkcoord.znodes import GroupPhase, GroupState, MemberRegistration, Pattern


@dataclass(frozen=True, slots=True)
class Member:
    consumer_id: str
    registration: MemberRegistration
    #: czxid of the registration znode: a re-registered consumer (new session) is a new incarnation.
    incarnation: int


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """What the coordinator read of one group just before planning."""

    group: str
    members: Mapping[str, Member]
    state: GroupState | None
    #: the ownership registry: topic -> partition -> owning thread
    owners: Assignment
    #: (path, reason) of znodes that could not be decoded: reported, then left out (S7)
    rejected: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    group: str
    members: dict[str, int]
    subscriptions: dict[str, dict[str, int]]
    target: Assignment
    necessary: bool
    reason: str
    assignor: str
    #: (what, reason) pairs worth a journal event: subscriptions to missing topics, assignor fallbacks
    notes: list[tuple[str, str]] = field(default_factory=list)


def matches(registration: MemberRegistration, topic: str) -> bool:
    """Whether a wildcard registration covers ``topic`` (Java ``String.matches``: the whole name)."""
    regex = next(iter(registration.subscription))
    hit = re.fullmatch(regex, topic) is not None
    return hit if registration.pattern is Pattern.WHITE_LIST else not hit


def resolve(registration: MemberRegistration, topics: Mapping[str, int]) -> tuple[dict[str, int], list[str]]:
    """``(topic -> threads, missing static topics)`` for one member against the topics that exist."""
    if registration.pattern is Pattern.STATIC:
        present = {t: n for t, n in registration.subscription.items() if t in topics}
        missing = sorted(t for t in registration.subscription if t not in topics)
        return present, missing
    threads = next(iter(registration.subscription.values()))
    return {t: threads for t in sorted(topics) if matches(registration, t)}, []


def necessity(snapshot: GroupSnapshot, members: Mapping[str, int], target: Assignment) -> str | None:
    """Why a rebalance is needed, or None (seed D 3.1–3.5, plus what a persisted state adds)."""
    state = snapshot.state
    if state is None:
        return "no persisted state"
    if state.phase is not GroupPhase.STABLE:
        return f"previous rebalance left the group {state.phase.value}"
    if dict(state.members) != dict(members):
        return "membership changed"
    owners = snapshot.owners
    if not owners and target:
        return "no ownership registered"  # 3.1
    for topic, parts in target.items():
        held = owners.get(topic, {})
        if any(p not in held for p in parts):
            return "unowned partitions"  # 3.2
    for topic, parts in owners.items():
        if any(p not in target.get(topic, {}) for p in parts):
            return "owned partitions no longer assigned"  # 3.3
    if owners != target:
        return "ownership differs from the new assignment"  # 3.4
    return None  # 3.5


def plan(snapshot: GroupSnapshot, topics: Mapping[str, int], assignor: str) -> Plan:
    """Compute the target assignment for ``snapshot`` and decide whether a rebalance is necessary."""
    notes: list[tuple[str, str]] = []
    subscriptions: dict[str, dict[str, int]] = {}
    for cid, member in sorted(snapshot.members.items()):
        resolved, missing = resolve(member.registration, topics)
        for topic in missing:
            notes.append((f"subscription of {cid}", f"topic {topic!r} does not exist; left out until it does"))
        subscriptions[cid] = resolved
    partitions = {t: topics[t] for subs in subscriptions.values() for t in subs}
    used = assignor
    try:
        target = get_assignor(assignor)(subscriptions, partitions)
    except ConfigurationError as e:
        # Kafka fails the whole rebalance here; a coordinator serving many groups falls back and says why.
        notes.append(("assignor", f"{e}; falling back to range"))
        used = "range"
        target = range_assign(subscriptions, partitions)
    members = {cid: m.incarnation for cid, m in snapshot.members.items()}
    reason = necessity(snapshot, members, target)
    return Plan(
        group=snapshot.group,
        members=members,
        subscriptions=subscriptions,
        target=target,
        necessary=reason is not None,
        reason=reason or "assignment unchanged",
        assignor=used,
        notes=notes,
    )
