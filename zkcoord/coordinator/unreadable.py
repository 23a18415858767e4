"""What the coordinator does with group znodes it cannot decode (S7), beyond leaving them out of a plan.

The rule: a znode that cannot be read stands for something that may still be true.  A member registration that
cannot be decoded still belongs to a live session (the ephemeral exists), whose consumer may be fetching: if the
registry or the state says it holds partitions, it is a member of the rebalance
(:attr:`~zkcoord.coordinator.plan.GroupSnapshot.unreadable`), stopped like any other before anything it holds moves;
it is given nothing while what it subscribes to is unknown.  Its consumer repairs its own
registration (``zkcoord.consumer.client``); the coordinator watches such a registration (a one-shot data watch, only on
the unreadable ones) so that a repair is seen at once and the member gets its share.

Runs on the coordinator's worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from zkcoord.coordinator.plan import Plan, unreadable_holders
from zkcoord.coordinator.snapshot import KnownMembers, ReadResult, read_group
from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.registrations import MemberRegistration
from zkcoord.runtime.journal import Journal
from zkcoord.zk import WatchEvent, ZkClient

log = logging.getLogger(__name__)


def watch_unreadable(
    zk: ZkClient,
    read: ReadResult,
    watch: Callable[[WatchEvent], None] | None,
    members: dict[str, KnownMembers],
) -> ReadResult:
    """Set a one-shot data watch on each registration of ``read`` that could not be decoded (its change -- a repair,
    or the member leaving -- brings the group to be examined again), reading it again as the watch is set.  If one
    of them is readable or gone by now (changed between the two reads, so no watch will tell), the group is read
    again and that read returned; else ``read`` itself.

    :raises ZkError: on I/O failure.
    """
    unreadable = sorted(read.snapshot.unreadable)
    if not unreadable or watch is None:
        return read
    group = read.snapshot.group
    got = zk.get_many([paths.member(group, cid) for cid in unreadable], watch=watch)
    for cid, now in zip(unreadable, got, strict=True):
        if now is None:
            return read_group(zk, group, None, members, watch)
        try:
            MemberRegistration.decode(now[0], paths.member(group, cid))
        except CodecError:
            continue
        return read_group(zk, group, None, members, watch)
    return read


def report_input(
    journal: Journal, read: ReadResult, planned: Plan, excluded: dict[str, tuple[str, ...]] | None = None
) -> None:
    """Journal what was refused or left out of the plan (S7), each member planned without a registration, and the
    members beyond the group's ``max.size`` when they differ from those last journalled (``excluded``, by group:
    updated here).  Each examination of the group reports again, but for the members over ``max.size``."""
    group = planned.group
    known = excluded if excluded is not None else {}
    if planned.excluded != known.get(group, ()):
        known[group] = planned.excluded
        if planned.excluded:
            journal.emit(
                "group.max_size_reached",
                group=group,
                max_size=planned.config.max_size,
                excluded=list(planned.excluded),
                stopped=sorted(set(planned.excluded) & set(planned.members)),
            )
    for path, reason in read.snapshot.rejected:
        journal.emit("input.rejected", what="znode", path=path, reason=reason)
        log.warning("group %s: ignoring %s: %s", group, path, reason)
    for what, reason in planned.notes:
        journal.emit("input.rejected", what=what, path=paths.group(group), reason=reason)
    holders = unreadable_holders(read.snapshot)
    for cid, incarnation in sorted(read.snapshot.unreadable.items()):
        journal.emit("member.unreadable", group=group, consumer=cid, incarnation=incarnation, stopped=cid in holders)
