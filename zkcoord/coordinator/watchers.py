"""What the coordinator watches during a term (seed section C): the topics, the brokers (for their racks), the
groups, each group's members, the ``zk-client`` members of migrating groups, and the groups' dynamic configs
(:mod:`.group_configs`).

:class:`Watchers` is owned by the :class:`~zkcoord.coordinator.core.Coordinator` and holds the term's view of the
cluster (topics, their partition counts and the racks of their partitions, groups, member listings, member
registrations by group).

Threads: the callbacks it registers run on kazoo's watch thread and only put an :class:`Event` on the owner's queue
(:meth:`WatcherHost.post`); a callback of an ended term returns False, which ends its kazoo watch.  Every other
method runs on the coordinator's worker thread, which does every ZooKeeper call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from zkcoord.coordinator.events import Event
from zkcoord.coordinator.group_configs import GroupConfigs
from zkcoord.coordinator.rebalancer import Rebalancer
from zkcoord.coordinator.snapshot import Listing, forget_member, listing
from zkcoord.data.topics import follow_partition_count
from zkcoord.errors import CodecError
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.registrations import BrokerRegistration, MemberRegistration, Pattern
from zkcoord.protocol.subscriptions import matches
from zkcoord.runtime.journal import Journal
from zkcoord.zk import Stat, WatchEvent, WatchKind, ZkClient


class WatcherHost(Protocol):
    """What the watchers need of the coordinator that owns them (:class:`~zkcoord.coordinator.core.Coordinator`)."""

    @property
    def zk(self) -> ZkClient: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def term_no(self) -> int:
        """The current term's number (read on kazoo's threads too: a watch of another term ends)."""

    @property
    def rebalancer(self) -> Rebalancer | None: ...

    def post(self, event: Event) -> None:
        """Put ``event`` on the worker's queue (any thread)."""

    def request(self, group: str, trigger: str) -> None:
        """Queue a rebalance of ``group`` (worker thread)."""


class Watchers:
    """The term's watches and what they tell; :meth:`reset` forgets it all when the term ends."""

    def __init__(self, host: WatcherHost) -> None:
        self._host = host
        #: partition count by topic (0: the topic exists, its count is not known yet)
        self.topics: dict[str, int] = {}
        #: each partition's replica broker ids, by topic, as last taken (a refused version of the data keeps them)
        self.replicas: dict[str, tuple[tuple[int, ...], ...]] = {}
        #: the rack of every registered broker that has one (read when ``/brokers/ids`` changes, not per rebalance)
        self.broker_racks: dict[int, str] = {}
        #: the racks of each partition -- those of the registered brokers holding its replicas -- for the topics
        #: where some partition has one (what the uniform assignor prefers racks by)
        self.partition_racks: dict[str, tuple[frozenset[str], ...]] = {}
        #: member registrations by group, as last examined: routes topic changes to the groups they concern
        self.subs: dict[str, list[MemberRegistration]] = {}
        self.groups: set[str] = set()
        self.groups_listed = False
        self.legacy_watched: set[str] = set()  # migrating groups whose zk-client ids are watched (this term)
        #: each group's member ids as last listed (with the one-shot watch of ``members_watch``)
        self.member_ids: dict[str, Listing] = {}
        #: groups whose members watch fired (a change, or a reset by a connection loss): to list and watch again
        self.relist: set[str] = set()
        #: groups found deleted while their members were listed (not to be taken as new by that listing)
        self.vanished: set[str] = set()
        #: the term's one-shot watch on every group's ``ids`` (None while not coordinating)
        self.members_watch: Callable[[WatchEvent], None] | None = None
        #: the groups' dynamic configs (``/config/groups``)
        self.configs = GroupConfigs(host, self.new_watch, lambda: self.groups)

    def begin_term(self) -> None:
        """A term begins (worker, the term number already advanced): the members watch of this term."""
        self.members_watch = self.new_watch("members")
        self.configs.begin_term()

    def watch_roots(self) -> None:
        """Watch the brokers, the topics and the groups (worker): their first listings come as events, in this
        order, so that the racks and the topics are known before the groups are examined."""
        self._watch_children("brokers", paths.BROKER_IDS)
        self._watch_children("topics", paths.BROKER_TOPICS)
        self._watch_children("groups", paths.GROUPS)

    def reset(self) -> None:
        """The term ended (worker): forget everything it saw; its watches end at their next call."""
        self.topics.clear()
        self.replicas.clear()
        self.broker_racks.clear()
        self.partition_racks.clear()
        self.subs.clear()
        self.groups.clear()
        self.groups_listed = False
        self.legacy_watched.clear()
        self.member_ids.clear()
        self.relist.clear()
        self.members_watch = None
        self.configs.reset()

    # --- callbacks (kazoo threads: enqueue only) ------------------------------------------------------------------

    def on_coordinator_node(self, data: bytes | None, stat: Stat | None) -> None:
        """The coordinator znode's data watch (not scoped to a term: it drives the election)."""
        # Every change, not only a deletion: a node replaced in one transaction is never seen absent (seat.py).
        self._host.post(Event("seat", data=(data, stat)))

    def _watch_children(self, kind: str, path: str, group: str = "", name: str = "") -> None:
        host = self._host
        term = host.term_no

        def callback(children: list[str]) -> bool | None:
            if term != host.term_no:
                return False  # the term ended: stop this kazoo watch
            host.post(Event(kind, term, group, name, list(children)))
            return None

        host.zk.watch_children(path, callback)  # type: ignore[arg-type]

    def new_watch(self, kind: str) -> Callable[[WatchEvent], None]:
        """A one-shot watch callback for this term: on every group's ``ids`` (``members``), on every command written
        (``ack``).  One object per kind, so that kazoo keeps one watcher per path however often it is re-read."""
        host = self._host
        term = host.term_no

        def callback(event: WatchEvent) -> None:
            if term == host.term_no:
                host.post(Event(kind, term, name=event.path, data=event if kind == "ack" else event.kind))

        return callback

    def _watch_topic(self, topic: str) -> None:
        host = self._host
        term = host.term_no

        def callback(data: bytes | None, _stat: Stat | None) -> bool | None:
            if term != host.term_no:
                return False
            host.post(Event("topic", term, name=topic, data=data))
            return None

        host.zk.watch_data(paths.topic(topic), callback)  # type: ignore[arg-type]

    # --- topics (worker) ------------------------------------------------------------------------------------------

    def on_cluster(self, event: Event) -> None:
        """A watch on the topics, a topic or the brokers fired.  :raises ZkError: (the event is handled again)."""
        if event.kind == "topics":
            self.on_topics(event.data)
        elif event.kind == "topic":
            self.on_topic(event.name, event.data)
        else:
            self.on_brokers(event.data)

    def on_topics(self, children: list[str]) -> None:
        # Read the partition counts of new topics now, before any group is planned against them: a count of 0
        # would make the necessity check strip every partition of the topic from its groups (and put them back
        # once the data watch reported the real count).
        new = sorted(set(children) - set(self.topics))
        topic_paths = [paths.topic(t) for t in new]
        for topic, got in zip(new, self._host.zk.get_many(topic_paths), strict=True):
            count = self.topics[topic] = 0 if got is None else self._follow(topic, 0, got[0])[0]
            self._watch_topic(topic)
            if count and self.groups_listed:
                for group in self._interested(topic):
                    self._host.request(group, f"new topic: {topic}")
        for topic in set(self.topics) - set(children):
            self.on_topic(topic, None)

    def _follow(self, topic: str, known: int, data: bytes) -> tuple[int, bool]:
        """The partition count to follow, and whether the partitions' racks changed (their replicas taken)."""
        change = follow_partition_count(known, data, paths.topic(topic))  # never fewer than known
        if change.refused is not None:
            self._host.journal.emit("input.rejected", what="topic", path=paths.topic(topic), reason=change.refused)
        if change.replicas is None:
            return change.count, False
        self.replicas[topic] = change.replicas
        return change.count, self._rerack(topic)

    def on_topic(self, topic: str, data: bytes | None) -> None:
        if data is None:  # deleted: its groups rebalance without it now, not at their next change
            self.replicas.pop(topic, None)
            self.partition_racks.pop(topic, None)
            for group in self._interested(topic) if self.topics.pop(topic, 0) else []:
                self._host.request(group, f"topic deleted: {topic}")
            return
        count, reracked = self._follow(topic, self.topics.get(topic, 0), data)
        if count == self.topics.get(topic):
            if reracked:  # the same partitions on other brokers (a reassignment)
                self._racks_changed(topic)
            return
        trigger = "partitions added" if self.topics.get(topic) else "new topic"
        self.topics[topic] = count
        for group in self._interested(topic):
            self._host.request(group, f"{trigger}: {topic}")

    # --- brokers and racks (worker) ----------------------------------------------------------------------------------

    def on_brokers(self, children: list[str]) -> None:
        """The registered brokers changed: read their registrations (one pipelined burst) for their racks, and queue
        the groups of every topic whose partitions' racks change with them.  A registration that cannot be decoded
        gives its broker no rack (journalled as ``input.rejected``), nor does a persistent one (no broker writes one).

        :raises ZkError: the reads failed (the event is handled again later).
        """
        ids = sorted(int(c) for c in children if c.isascii() and c.isdigit() and str(int(c)) == c)
        racks: dict[int, str] = {}
        for broker, got in zip(ids, self._host.zk.get_many([paths.broker(i) for i in ids]), strict=True):
            if got is None or got[1].ephemeralOwner == 0:
                continue  # gone since listed, or persistent: written by hand, no broker's (as TopicAdmin.live_brokers)
            try:
                rack = BrokerRegistration.decode(got[0], paths.broker(broker)).rack
            except CodecError as e:
                self._host.journal.emit(
                    "input.rejected", what="broker registration", path=paths.broker(broker), reason=e.reason
                )
                continue
            if rack is not None:
                racks[broker] = rack
        if racks == self.broker_racks:
            return
        self.broker_racks = racks
        for topic in sorted(self.replicas):
            if self._rerack(topic):
                self._racks_changed(topic)

    def _rerack(self, topic: str) -> bool:
        """Compute ``topic``'s partition racks again; whether they changed."""
        if not self.broker_racks and topic not in self.partition_racks:
            return False  # no racks before, none now
        racks = self.broker_racks
        now = tuple(frozenset(racks[b] for b in replicas if b in racks) for replicas in self.replicas.get(topic, ()))
        if now == self.partition_racks.get(topic, ()) or (not any(now) and topic not in self.partition_racks):
            return False
        if any(now):
            self.partition_racks[topic] = now
        else:
            del self.partition_racks[topic]
        return True

    def _racks_changed(self, topic: str) -> None:
        """Queue ``topic``'s groups: its partitions' metadata changed (KIP-848 bumps the group epoch)."""
        if self.groups_listed:
            for group in self._interested(topic):
                self._host.request(group, f"partition racks changed: {topic}")

    def _interested(self, topic: str) -> list[str]:
        out = []
        for group, regs in self.subs.items():
            for reg in regs:
                hit = topic in reg.subscription if reg.pattern is Pattern.STATIC else matches(reg, topic)
                if hit:
                    out.append(group)
                    break
        return sorted(out)

    # --- groups and members (worker) ------------------------------------------------------------------------------

    def on_groups(self, children: list[str]) -> None:
        """New groups: list (and watch) their members in one burst, then queue each for examination.  A group gone
        (``zkcoord group delete``) is forgotten: its name used again is a new group."""
        for gone in self.groups - set(children):
            self._forget(gone)
        new = sorted(set(children) - self.groups)
        self.vanished.clear()
        if new:
            self._list_members(new)
        trigger = "new group" if self.groups_listed else "coordinator startup"
        for group in (g for g in new if g not in self.vanished):
            self.groups.add(group)
            self._host.request(group, trigger)
        self.groups_listed = True

    def _list_members(self, groups: list[str]) -> dict[str, Listing]:
        """List ``groups``' members in one pipelined burst, each listing re-arming the one-shot members watch.

        A group without an ``ids`` node gets one (a fenced write) and is listed again, so it is watched too.
        :raises ZkError: the burst failed (the caller's event is handled again later).
        """
        watch = self.members_watch
        if watch is None:  # not coordinating
            return {}
        zk = self._host.zk
        listings = zk.children_stat_many([paths.group_ids(g) for g in groups], watch=watch)
        out: dict[str, Listing] = {}
        missing = []
        for group, got in zip(groups, listings, strict=True):
            if got is None:
                missing.append(group)
            else:
                out[group] = listing(got)
        rebalancer = self._host.rebalancer
        fence = rebalancer.writer.fence if rebalancer else None
        if missing and fence is not None:
            for group in list(missing):
                if zk.exists(paths.group(group)) is None:
                    # Deleted (zkcoord group delete), not to be made again: forgotten until a member creates it.
                    missing.remove(group)
                    self._forget(group)
                    continue
                fence.ensure(paths.group_ids(group))
            again = zk.children_stat_many([paths.group_ids(g) for g in missing], watch=watch)
            out.update((g, listing(c)) for g, c in zip(missing, again, strict=True) if c is not None)
        # Only a listing made under an armed watch stands for the group's members until the watch fires.
        for group in groups:
            if group in out:
                self.member_ids[group] = out[group]
            else:
                self.member_ids.pop(group, None)
        return out

    def _forget(self, group: str) -> None:
        self.groups.discard(group)
        self.member_ids.pop(group, None)
        self.subs.pop(group, None)
        self.relist.discard(group)
        self.vanished.add(group)

    def on_members_watch(self, path: str, kind: WatchKind) -> None:
        """A group's members watch fired: list the group again (with the other groups of this turn)."""
        group = paths.group_of_ids(path) or paths.group_of_member(path)  # a watched registration too
        rebalancer = self._host.rebalancer
        if rebalancer is not None:
            forget_member(rebalancer.members, path)  # changed in place, perhaps: read it again
        if group is None or group not in self.groups:
            return
        self.relist.add(group)

    def refresh_members(self) -> None:
        """List (and watch again) every group whose members watch fired, in one burst; each is handled as a
        membership change (after a reset too: see below).  The caller checks that the term is coordinating."""
        if not self.relist:
            return
        groups = sorted(self.relist)
        listings = self._list_members(groups)
        for group in groups:
            # A watch that was only reset (a connection loss) is handled as a change too: a member may have
            # re-registered under the same id meanwhile (a new incarnation, same names), which the necessity check
            # sees and a comparison of names would not.  The examination is cheap (members and state).
            children = listings.get(group, ([], -1))[0]
            self._on_members(group, children)
            self.relist.discard(group)  # only once handled: a failed step leaves the group to be listed again

    def _on_members(self, group: str, children: list[str]) -> None:
        """Membership changed (seed C): abort an attempt a member of which left, and queue the group.  (Its member
        registrations, which route topic changes, are refreshed when the group is examined.)"""
        rebalancer = self._host.rebalancer
        if rebalancer is not None and rebalancer.on_members(group, children):
            self._host.request(group, "member left mid-rebalance")
            return
        self._host.request(group, "membership change")

    def examined(self, group: str, rebalancer: Rebalancer) -> None:
        """``group`` was just examined: route topic changes by its registrations as read, and watch the zk-client
        members of a migrating group (they change its assignment too: docs/migration.md)."""
        if group in rebalancer.registrations:
            self.subs[group] = rebalancer.registrations[group]
        if group in rebalancer.migrating and group not in self.legacy_watched:
            self.legacy_watched.add(group)
            self._watch_children("legacy-members", legacy_paths.ids(group), group=group)
