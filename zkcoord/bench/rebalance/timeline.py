"""The run's journals as per-group state: who fetches what, each protocol's progress, and when a group is settled.

:class:`GroupTracker` folds one group's events (read by :class:`~zkcoord.bench.rebalance.events.JournalTail`) into
its ownership state (who fetches which partition, from ``fetch.started`` / ``fetch.stopped``) and its protocol's
progress, and says when the group is *settled*:

* ``coordinator`` and ``zk-client``: every partition is fetched by exactly one thread, the one Kafka's range assignor
  gives it over the group's current members (the assignment both protocols compute,
  ``zkcoord.protocol.assignors.range_assign``);
* ``coordinator``: the newest rebalance the coordinator started has exactly the current members, no request is
  pending, and every member applied that generation's start-fetcher;
* ``incremental`` (the coordinator with every member registered ``rebalance="incremental"``: its uniform assignor
  gives a balanced assignment that is not the range one, and only the members whose partitions move get commands):
  every partition is fetched by exactly one thread of a current member, every member fetches between ``P // N`` and
  ``ceil(P / N)`` partitions (one thread per member), the newest rebalance started has exactly the current members,
  no request is pending, and every member due a start-fetcher of that generation applied one (``command.applied``,
  not ``superseded``):
  those ``rebalance.started`` names as ``gaining`` in an incremental rebalance, every member in an eager one, and
  any sent one (``command.sent``; the sets are kept per generation, since events of several processes may be read
  in either order).  Members the rebalance left alone get no command and are not waited for;
* ``consumer`` (KIP-848: every member registered ``rebalance="consumer"``; the coordinator reconciles member by
  member): every partition is fetched by exactly one thread of a current member, the newest group epoch started
  (``rebalance.started``, ``mode: consumer``, ``generation`` = the group epoch) has exactly the current members, and
  the coordinator journalled ``rebalance.completed`` for that epoch: it does so when it writes the group ``stable``,
  every member at the assignment epoch with nothing in flight, which is when a KIP-848 rebalance is done.  Until
  then members may still be revoking or waiting for partitions to be released.  (No ``rebalance.requested`` is
  waited out: a request that changes nothing journals nothing else in this protocol.)  The tracker also notes when
  every member first fetched its new share (``fetching_at``: shares balanced as for ``incremental``), the moment
  the other protocols end at, so that the coordinator's bookkeeping after it can be told apart;
* ``zk-client``: every member's last ``legacy.*`` event is ``legacy.rebalance.completed`` with a member count equal
  to the group's size (each member saw the whole group and fetches what it claimed).

Once armed for a change, the tracker notes the first event at which the group became settled: its timestamp ends the
change.  :func:`~zkcoord.bench.rebalance.events.outage` and :func:`~zkcoord.bench.rebalance.events.count_events`
measure the change from the events in between (pure functions).

Timestamps are the journals' wall-clock milliseconds (``ts``): every process runs on this machine, so they share one
clock; ``mono`` is per process and is used for nothing here.  Events are ordered by ``(ts, pid, seq)``: exact within a
process, to the millisecond across processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from zkcoord.bench.rebalance.events import Event, JournalTail, Outage, count_events, first_ts, outage, parse_line
from zkcoord.protocol.assignors import range_assign

COORDINATOR = "coordinator"
INCREMENTAL = "incremental"
CONSUMER = "consumer"
LEGACY = "zk-client"
#: seed 001's classic protocol: a leader member computes the assignment (range here: the members' default strategy)
CLASSIC = "classic"
PROTOCOLS = (COORDINATOR, INCREMENTAL, CLASSIC, CONSUMER, LEGACY)
#: The protocols a run measures when none is named (``--protocol classic`` adds the classic one)
DEFAULT_PROTOCOLS = (COORDINATOR, INCREMENTAL, CONSUMER, LEGACY)
#: The protocols whose rebalances the coordinator runs (its ``rebalance.*`` and ``command.*`` events).
COORDINATED = (COORDINATOR, INCREMENTAL, CLASSIC, CONSUMER)
#: The protocols whose members get a uniform, history-dependent assignment (checked by balance, not recomputed).
UNIFORM = (INCREMENTAL, CONSUMER)

#: The events that end a member's part of a rebalance (its fetchers run on its new share).
_LEGACY_DONE = "legacy.rebalance.completed"


def consumer_of_thread(thread: str) -> str:
    """The consumer id of a thread id ``<consumerId>-<n>``."""
    return thread.rpartition("-")[0]


def expected_owners(members: Iterable[str], topic: str, partitions: int) -> list[str | None]:
    """The owning thread of each partition under Kafka's range assignor, one thread per member."""
    assignment = range_assign({m: {topic: 1} for m in members}, {topic: partitions}).get(topic, {})
    return [assignment.get(p) for p in range(partitions)]


@dataclass
class GroupTracker:
    """One group's ownership state and protocol progress, folded from its journal events (see the module doc)."""

    name: str
    protocol: str
    topic: str
    partitions: int
    members: frozenset[str] = frozenset()
    events: list[Event] = field(default_factory=list)
    #: partition -> the (consumer, thread) pairs fetching it now
    owners: list[set[tuple[str, str]]] = field(default_factory=list)
    #: the first event at which the group was settled since :meth:`arm`; None while it is not yet
    settled_at: Event | None = None
    #: how often the group left the settled state again after ``settled_at`` (a late extra rebalance)
    reopened: int = 0
    #: coordinator, incremental: the generation the group settled on (the newest started then); -1 before
    settled_generation: int = -1
    #: consumer: the first event since :meth:`arm` at which every member fetched its new share (balanced shares of
    #: the newest epoch's members), before the coordinator wrote the group stable; None while not yet
    fetching_at: Event | None = None
    armed: bool = False
    _expected: list[str | None] = field(default_factory=list)
    _mismatched: set[int] = field(default_factory=set)
    _last_legacy: dict[str, Event] = field(default_factory=dict)
    _unfinished: set[str] = field(default_factory=set)
    _start_gen: dict[str, int] = field(default_factory=dict)
    _gen_members: dict[int, frozenset[str]] = field(default_factory=dict)
    _latest_started: int = -1
    _latest_completed: int = -1
    _pending_request: bool = False
    _lagging: set[str] = field(default_factory=set)
    _was_settled: bool = False
    # incremental: partitions fetched per consumer; members fetching outside [P // N, ceil(P / N)]; per generation,
    # the members due a start-fetcher (rebalance.started's gainers, or every member of an eager one, and any sent
    # one) and those that applied one; the newest generation's due but not applied
    _fetching: dict[str, int] = field(default_factory=dict)
    _unbalanced: set[str] = field(default_factory=set)
    _starts_sent: dict[int, set[str]] = field(default_factory=dict)
    _starts_applied: dict[int, set[str]] = field(default_factory=dict)
    _unapplied: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}")
        self.owners = [set() for _ in range(self.partitions)]
        self.set_members(self.members)

    # --- membership (the driver knows it: it adds and removes the consumers) ------------------------------------

    def set_members(self, members: Iterable[str]) -> None:
        self.members = frozenset(members)
        if self.protocol not in UNIFORM:
            self._expected = expected_owners(sorted(self.members), self.topic, self.partitions)
        self._mismatched = {p for p in range(self.partitions) if not self._matches(p)}
        self._unbalanced = {m for m in self.members if not self._balanced(m)}
        self._unfinished = {m for m in self.members if not self._legacy_done(m)}
        self._lagging = {m for m in self.members if self._start_gen.get(m) != self._latest_started}

    def arm(self) -> None:
        """Start looking for the first settled moment of a change (membership already set)."""
        self.armed = True
        self.settled_at = None
        self.fetching_at = None
        self.reopened = 0
        self._was_settled = False

    def disarm(self) -> None:
        self.armed = False

    # --- events -------------------------------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Fold one event of this group (the caller routes by ``event.group``) into the state."""
        self.events.append(event)
        if event.ev in ("fetch.started", "fetch.stopped"):
            self._apply_fetch(event)
        elif event.ev.startswith("legacy."):
            self._apply_legacy(event)
        else:
            self._apply_coordinator(event)
        if self.armed:
            settled = self.settled()
            if settled and self.settled_at is None:
                self.settled_at = event
                self.settled_generation = self._latest_started
            elif not settled and self._was_settled:
                self.reopened += 1
            self._was_settled = settled
            if self.fetching_at is None and self.protocol == CONSUMER and self._fetching_new_shares():
                self.fetching_at = event

    def _apply_fetch(self, event: Event) -> None:
        f = event.fields
        if f.get("topic") != self.topic:
            return
        p = int(f["partition"])
        if not 0 <= p < self.partitions:
            return
        holder = (str(f["consumer"]), str(f["thread"]))
        holders = self.owners[p]
        had = holder in holders
        if event.ev == "fetch.started":
            holders.add(holder)
        else:
            holders.discard(holder)
        if had != (holder in holders):
            consumer = holder[0]
            self._fetching[consumer] = self._fetching.get(consumer, 0) + (-1 if had else 1)
            if consumer in self.members:
                if self._balanced(consumer):
                    self._unbalanced.discard(consumer)
                else:
                    self._unbalanced.add(consumer)
        if self._matches(p):
            self._mismatched.discard(p)
        else:
            self._mismatched.add(p)

    def _apply_legacy(self, event: Event) -> None:
        consumer = str(event.fields.get("consumer"))
        self._last_legacy[consumer] = event
        if consumer in self.members:
            if self._legacy_done(consumer):
                self._unfinished.discard(consumer)
            else:
                self._unfinished.add(consumer)

    def _apply_coordinator(self, event: Event) -> None:
        f = event.fields
        if event.ev == "rebalance.requested":
            self._pending_request = True
        elif event.ev == "rebalance.skipped":
            self._pending_request = False
        elif event.ev == "rebalance.started":
            generation = int(f["generation"])
            self._gen_members[generation] = frozenset(str(m) for m in f.get("members", []))
            self._pending_request = False
            # Who must apply a start-fetcher of this generation: an incremental rebalance names its gainers, an
            # eager one starts every member.  Known from here on, so the group cannot look settled in the moment
            # between this event and the start-fetchers being sent.
            gaining = f.get("gaining") if f.get("mode") == "incremental" else None
            expected = {str(m) for m in gaining} if isinstance(gaining, list) else set(self._gen_members[generation])
            self._starts_sent.setdefault(generation, set()).update(expected)
            if generation >= self._latest_started:  # >=: a retry whose first write never landed reuses it
                self._latest_started = generation
                self._lagging = {m for m in self.members if self._start_gen.get(m) != generation}
                self._unapplied = self._starts_sent[generation] - self._starts_applied.get(generation, set())
        elif event.ev == "rebalance.completed":
            self._latest_completed = max(self._latest_completed, int(f["generation"]))
        elif event.ev == "command.sent" and f.get("option") == "start-fetcher":
            consumer, generation = str(f.get("consumer")), int(f["generation"])
            self._starts_sent.setdefault(generation, set()).add(consumer)
            if generation == self._latest_started and consumer not in self._starts_applied.get(generation, ()):
                self._unapplied.add(consumer)
        elif event.ev == "command.applied" and f.get("option") == "start-fetcher" and not f.get("superseded"):
            # (A start superseded while it awaited hand-overs was not applied as planned: a newer attempt follows.)
            consumer, generation = str(f.get("consumer")), int(f["generation"])
            self._starts_applied.setdefault(generation, set()).add(consumer)
            self._start_gen[consumer] = generation
            if generation == self._latest_started:
                self._lagging.discard(consumer)
                self._unapplied.discard(consumer)

    def settled(self) -> bool:
        if self._mismatched or not self.members:
            return False
        if self.protocol == LEGACY:
            return not self._unfinished
        # incremental: balanced shares, and every member sent a start applied it; coordinator: every member did
        if self.protocol == CONSUMER:
            completed = self._latest_completed >= self._latest_started >= 0
            return completed and self._gen_members.get(self._latest_started) == self.members
        commanded = not (self._unbalanced or self._unapplied) if self.protocol == INCREMENTAL else not self._lagging
        return commanded and not self._pending_request and self._gen_members.get(self._latest_started) == self.members

    def fetched_once(self) -> bool:
        """Every partition fetched by exactly one thread of a current member (``incremental``, ``consumer``), or by
        the thread the range assignor names (``coordinator``, ``zk-client``)."""
        return bool(self.members) and not self._mismatched

    def _fetching_new_shares(self) -> bool:
        """consumer: every partition fetched by exactly one current member, shares balanced, the newest epoch's
        members the current ones (whatever the coordinator has written since)."""
        return (
            bool(self.members)
            and not self._mismatched
            and not self._unbalanced
            and self._gen_members.get(self._latest_started) == self.members
        )

    def progress(self) -> str:
        """What the group still waits for, in a few words (for a timeout message)."""
        fetched = sum(1 for s in self.owners if s)
        parts = [f"{len(self.members)} members, {fetched}/{self.partitions} partitions fetched"]
        if self.protocol in UNIFORM:
            parts.append(f"{len(self._mismatched)} not fetched by exactly one member")
            parts.append(f"{len(self._unbalanced)} members with an unbalanced share")
        else:
            parts.append(f"{len(self._mismatched)} not as assigned")
        if self.protocol == LEGACY:
            parts.append(f"{len(self._unfinished)} members not done rebalancing")
        elif self.protocol == CONSUMER:
            parts.append(f"group epoch started {self._latest_started}, completed (stable) {self._latest_completed}")
        else:
            waiting = self._unapplied if self.protocol == INCREMENTAL else self._lagging
            parts.append(
                f"generation started {self._latest_started}, completed {self._latest_completed}, "
                f"{len(waiting)} members without its start"
            )
        return ", ".join(parts)

    def snapshot(self) -> tuple[int, list[set[tuple[str, str]]]]:
        """Where a change begins: the index of the next event, and a copy of the ownership state."""
        return len(self.events), [set(s) for s in self.owners]

    # --- internals ----------------------------------------------------------------------------------------------

    def _matches(self, p: int) -> bool:
        holders = self.owners[p]
        if self.protocol in UNIFORM:
            return len(holders) == 1 and next(iter(holders))[0] in self.members
        want = self._expected[p] if p < len(self._expected) else None
        if want is None:
            return not holders
        return len(holders) == 1 and next(iter(holders))[1] == want

    def _balanced(self, consumer: str) -> bool:
        """incremental, consumer: the member fetches between ``P // N`` and ``ceil(P / N)`` partitions."""
        n = len(self.members)
        return n > 0 and self.partitions // n <= self._fetching.get(consumer, 0) <= -(-self.partitions // n)

    def _legacy_done(self, consumer: str) -> bool:
        last = self._last_legacy.get(consumer)
        return last is not None and last.ev == _LEGACY_DONE and last.fields.get("members") == len(self.members)


__all__ = [
    "CLASSIC",
    "CONSUMER",
    "COORDINATED",
    "COORDINATOR",
    "DEFAULT_PROTOCOLS",
    "INCREMENTAL",
    "LEGACY",
    "PROTOCOLS",
    "UNIFORM",
    "Event",
    "GroupTracker",
    "JournalTail",
    "Outage",
    "consumer_of_thread",
    "count_events",
    "expected_owners",
    "first_ts",
    "outage",
    "parse_line",
]
