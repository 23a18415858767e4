"""The classic protocol's pure rules (seed 001, issue 17): which strategy a generation uses, who leads it, the
built-in client-side assignors, and what makes a leader's assignment valid.

* :func:`choose_strategy` is Kafka's vote (``ClassicGroup.selectProtocol``): the candidates are the strategies every
  member supports; each member votes for the first candidate in its own order of preference; the most votes wins.
  Kafka breaks a tie by a hash map's order; here the tie goes to the candidate ranked best over all members (the sum
  of its positions in their lists), then by name, so every coordinator chooses alike.
* :func:`choose_leader`: the previous generation's leader while it is a member and has not failed this rebalance;
  otherwise the member that joined first (the oldest registration: smallest ``czxid``), as Kafka makes the first member
  to join the leader; a leader that failed (timed out, crashed, wrote an invalid assignment) is passed over until the
  rebalance completes.
* :data:`BUILTINS`: ``range``, ``roundrobin`` (Kafka 0.8.2's, :mod:`~zkcoord.protocol.assignors.classic`) and
  ``sticky``/``uniform`` (KIP-848's uniform assignor, sticky to the group's current ownership), behind the
  client-side signature :data:`ClientAssignor`.  The same functions the coordinator runs: nothing is duplicated.
* :func:`as_assignment` checks the shape of what an assignor returned; :func:`assignment_problems` checks the
  coordinator's rules: every partition of the subscribed topics exactly once, only to a thread of a current member
  that subscribes to its topic.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from zkcoord.errors import AssignorError
from zkcoord.protocol.assignors import Assignment, consumer_of, range_assign, roundrobin_assign, uniform_assign

#: a client-side assignor: ``(subscriptions, partitions, current) -> assignment``; ``subscriptions`` is
#: ``member -> {topic: threads}``, ``partitions`` ``topic -> count``, ``current`` the group's ownership now
#: (``topic -> partition -> thread``), what a sticky assignor keeps
ClientAssignor = Callable[[Mapping[str, Mapping[str, int]], Mapping[str, int], Mapping[str, Mapping[int, str]]], object]


def _sticky(
    subscriptions: Mapping[str, Mapping[str, int]],
    partitions: Mapping[str, int],
    current: Mapping[str, Mapping[int, str]],
) -> Assignment:
    return uniform_assign(subscriptions, partitions, previous=current)


#: the built-in strategies by name
BUILTINS: dict[str, ClientAssignor] = {
    "range": lambda subs, parts, _current: range_assign(subs, parts),
    "roundrobin": lambda subs, parts, _current: roundrobin_assign(subs, parts),
    "sticky": _sticky,
    "uniform": _sticky,
}


@dataclass(frozen=True, slots=True)
class Choice:
    """A generation's strategy and why (journalled with the generation)."""

    strategy: str
    reason: str


def choose_strategy(preferences: Mapping[str, Sequence[str]]) -> Choice | None:
    """The strategy every member of ``preferences`` (``member -> strategies in its order``) supports, by Kafka's
    vote; None when no strategy is common to all of them (Kafka's INCONSISTENT_GROUP_PROTOCOL).  Independent of the
    order of ``preferences``."""
    if not preferences:
        return None
    lists = [list(p) for _, p in sorted(preferences.items())]
    candidates = set(lists[0]).intersection(*lists[1:])
    if not candidates:
        return None
    votes = dict.fromkeys(sorted(candidates), 0)
    rank = dict.fromkeys(sorted(candidates), 0)
    for prefs in lists:
        votes[next(s for s in prefs if s in candidates)] += 1
        for s in candidates:
            rank[s] += prefs.index(s)
    best = min(votes, key=lambda s: (-votes[s], rank[s], s))
    tally = ", ".join(f"{s}={votes[s]}" for s in sorted(votes, key=lambda s: (-votes[s], rank[s], s)))
    if len(candidates) == 1:
        others = sorted({s for p in lists for s in p} - candidates)
        why = f"the only strategy every member supports (not everyone supports: {', '.join(others)})" if others else ""
        return Choice(best, why or "the only strategy every member supports")
    return Choice(best, f"voted by the members among those all support: {tally}")


def choose_leader(incarnations: Mapping[str, int], previous: str | None, failed: frozenset[str] = frozenset()) -> str:
    """The generation's leader among ``incarnations`` (``member -> czxid of its registration``; not empty).

    :raises ValueError: no members.
    """
    if not incarnations:
        raise ValueError("a generation without members has no leader")
    if previous is not None and previous in incarnations and previous not in failed:
        return previous
    fresh = [m for m in incarnations if m not in failed] or list(incarnations)
    return min(fresh, key=lambda m: (incarnations[m], m))


def as_assignment(result: object) -> Assignment:
    """What an assignor returned, as an assignment.

    :raises AssignorError: not a mapping ``topic (str) -> partition (int) -> thread (str)``.
    """
    if not isinstance(result, Mapping):
        raise AssignorError(f"the assignor returned {type(result).__name__}, not a mapping topic -> partitions")
    out: Assignment = {}
    for topic, parts in result.items():
        if not isinstance(topic, str) or not isinstance(parts, Mapping):
            raise AssignorError(f"the assignor returned {str(topic)[:40]!r} -> {type(parts).__name__}")
        taken: dict[int, str] = {}
        for p, thread in parts.items():
            if not isinstance(p, int) or isinstance(p, bool) or not isinstance(thread, str) or not thread:
                raise AssignorError(f"the assignor returned {topic}/{str(p)[:20]} -> {str(thread)[:40]!r}")
            taken[p] = thread
        if taken:
            out[topic] = taken
    return out


def assignment_problems(
    assignment: Mapping[str, Mapping[int, str]],
    subscriptions: Mapping[str, Mapping[str, int]],
    partitions: Mapping[str, int],
) -> list[str]:
    """Why ``assignment`` is not a valid assignment of ``partitions`` (every subscribed topic's count) to the members
    of ``subscriptions`` (``member -> {topic: threads}``); empty when valid.  At most a few reasons, each one line."""
    problems: list[str] = []
    subscribed = {t for subs in subscriptions.values() for t in subs}
    for topic in sorted(set(assignment) - subscribed):
        problems.append(f"topic {topic!r} is subscribed by no member")
    for topic in sorted(subscribed):
        count = partitions.get(topic, 0)
        given = assignment.get(topic, {})
        missing = [p for p in range(count) if p not in given]
        extra = sorted(p for p in given if not 0 <= p < count)
        if missing:
            problems.append(f"{topic}: partition(s) {missing[:5]} assigned to nobody")
        if extra:
            problems.append(f"{topic}: partition(s) {extra[:5]} do not exist ({count} partitions)")
        for p, thread in sorted(given.items()):
            member = consumer_of(thread)
            threads = subscriptions.get(member, {}).get(topic, 0) if member is not None else 0
            if member not in subscriptions:
                problems.append(f"{topic}/{p}: thread {thread[:80]!r} is no current member's")
            elif not threads:
                problems.append(f"{topic}/{p}: member {member} does not subscribe to {topic!r}")
            elif int(thread.rpartition("-")[2]) >= threads:
                problems.append(f"{topic}/{p}: {member} has {threads} thread(s) for {topic!r}, not {thread!r}")
            if len(problems) >= 5:
                return problems
    return problems
