"""What a *migrating* consumer adds to the coordinator protocol: Kafka 0.8's registry and owner znodes.

A group moves from the ``zk-client`` protocol to the coordinator by rolling its consumers one at a time, each
restarted with ``migrating=True`` (``docs/migration.md``).  Until the last ``zk-client`` member is gone, the group
has members of both protocols, and the ``zk-client`` members know nothing of the coordinator.  A migrating consumer
therefore also plays by their rules:

* it registers in ``/consumers/<g>/ids`` as well (before its coordinator registration), so the ``zk-client``
  members count it when they compute the assignment -- the same assignment the coordinator computes over the members
  of both protocols, with the same assignor;
* it fetches a partition only while it holds that partition's 0.8 owner znode (``/consumers/<g>/owners/<t>/<p>``,
  ephemeral), which every ``zk-client`` member claims too before it fetches.  Those znodes are the one lock that
  members of both protocols take, so no partition is fetched by two members at once (S2).  A partition the
  coordinator assigned to us whose owner znode is still held (its ``zk-client`` owner has not rebalanced yet) is
  *pending*: a watch on the znode, and the heartbeat as a backstop, make the command thread claim it again;
* it releases its owner znodes only after its fetchers stopped and its offsets were committed to both protocols'
  offset paths, so whoever claims a partition next, of either protocol, starts where it stopped (S3).

Threads: the consumer's command thread, except :meth:`MigrationBridge.commit` (under the command handler's commit
lock, also taken by the command thread around :meth:`MigrationBridge.release`).  The watch callback only calls
``on_claimable``, which enqueues.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from zkcoord.consumer.legacy.registry import LegacyRegistry
from zkcoord.consumer.records import TopicPartition
from zkcoord.layout import legacy_paths
from zkcoord.layout.registrations import MemberRegistration
from zkcoord.zk import ZkClient


class MigrationBridge:
    """One migrating consumer's side of Kafka 0.8's layout.  See the module docstring."""

    def __init__(
        self,
        zk: ZkClient,
        group: str,
        consumer_id: str,
        on_claimable: Callable[[], None],
    ) -> None:
        self.registry = LegacyRegistry(zk, group, consumer_id)
        self.zk = zk
        self.group = group
        self._on_claimable = on_claimable
        # One callable for every owner-znode watch: kazoo keeps a path's watchers in a set, so re-watching the same
        # znode on each retry adds nothing (a fresh lambda each time would pile up until the znode changes).
        self._watcher: Callable[[object], None] = lambda _event: self._on_claimable()
        #: partitions the coordinator gave us whose 0.8 owner znode another member still holds: tp -> our thread
        self.pending: dict[TopicPartition, str] = {}
        #: the session our registrations (and so our owner znodes) belong to; 0 before the first registration
        self.session = 0

    # --- registration ---------------------------------------------------------------------------------------------

    def register(self, registration: MemberRegistration, wait_s: float, stop: threading.Event) -> None:
        """Create ``/consumers/<g>/ids/<consumerId>`` (ephemeral), waiting out a previous session's node.

        :raises NodeExistsError: another session holds it for longer than ``wait_s``.
        :raises ZkError: on other failures.
        """
        self.registry.ensure_paths()
        self.registry.register(registration, wait_s, stop)
        self.session = self.zk.session_id

    def deregister(self) -> None:
        self.registry.deregister()

    def session_lost(self) -> None:
        """The session expired: its ephemerals (registration, owner znodes) are gone.  Forget what was pending and
        the offset checkpoints; :attr:`held` is kept for :meth:`release_leaked`."""
        self.pending = {}
        self.registry.checkpointed.clear()

    def release_leaked(self) -> None:
        """Before registering in a new session: delete the owner znodes a claim may have created in *this* session
        while the loss of the previous one was not handled yet (only this session's: see ``LegacyRegistry.release``)
        and forget the rest, which went with the old session.  :raises ZkError: (the caller retries)."""
        self.registry.release()

    def _current(self) -> bool:
        """Whether the client is still in the session we registered in (else nothing may be claimed or written)."""
        return self.session != 0 and self.zk.session_id == self.session

    # --- owner znodes ---------------------------------------------------------------------------------------------

    @property
    def held(self) -> frozenset[TopicPartition]:
        return frozenset(self.registry.held)

    def claim(self, decided: Mapping[TopicPartition, str]) -> dict[TopicPartition, str]:
        """Claim the 0.8 owner znodes of ``decided`` (partition -> our thread); return those now held.

        The others become :attr:`pending` (replacing what was pending) and are watched.  Nothing is claimed (``{}``)
        when the session is not the one we registered in: the loss of ours is about to be handled.
        :raises ZkError: on failures other than a held znode (what was created stays held, to be released).
        """
        self.pending = {}
        return self._claim(decided)

    def retry(self) -> dict[TopicPartition, str]:
        """Claim the pending partitions again; return those now held.  :raises ZkError: as :meth:`claim`."""
        return self._claim(dict(self.pending)) if self.pending else {}

    def _claim(self, decided: Mapping[TopicPartition, str]) -> dict[TopicPartition, str]:
        if not self._current():
            return {}
        conflicts = self.registry.claim(decided)
        if not self._current():
            # The session changed under the claim: what it created belongs to the new session and stays in
            # ``held`` until release_leaked() deletes it; none of it may be fetched.
            return {}
        self.pending = {tp: decided[tp] for tp in conflicts}
        for tp in sorted(conflicts):
            path = legacy_paths.owner(self.group, tp.topic, tp.partition)
            if self.zk.exists(path, watch=self._watcher) is None:
                self._on_claimable()  # gone between our create and the watch: claim again now
        return {tp: thread for tp, thread in decided.items() if tp not in conflicts}

    def holders(self) -> dict[TopicPartition, str]:
        """Who holds each pending partition's owner znode now (``""``: nobody any more)."""
        out: dict[TopicPartition, str] = {}
        tps = sorted(self.pending)
        owner_paths = [legacy_paths.owner(self.group, tp.topic, tp.partition) for tp in tps]
        for tp, got in zip(tps, self.zk.get_many(owner_paths), strict=True):
            out[tp] = "" if got is None else got[0].decode("utf-8", "replace")
        return out

    def release(self) -> None:
        """Delete every owner znode this session holds; forget what was pending.  :raises ZkError: (retried by
        the caller; the ones deleted are forgotten)."""
        self.pending = {}
        self.registry.release()

    # --- offsets --------------------------------------------------------------------------------------------------

    def committed(self, tps: Iterable[TopicPartition]) -> tuple[dict[TopicPartition, int | None], list[str]]:
        """The 0.8 committed offsets of ``tps`` (read *after* claiming them: the previous owner committed before it
        let go), and a reason per malformed one."""
        return self.registry.read_offsets(tps)

    def commit(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Mirror ``positions`` to ``/consumers/<g>/offsets`` for the partitions whose owner znode we hold.

        Called after the fenced coordinator commit of the same positions succeeded, and only while the client is
        in the session that created those znodes: while it lives nobody else can hold them, so the write cannot
        overtake a successor's.  :raises ZkError: on failure (a later commit writes it again).
        """
        if not self._current():
            return {}
        held = self.registry.held
        return self.registry.commit({tp: off for tp, off in positions.items() if tp in held})


def newer(*offsets: int | None) -> int | None:
    """The furthest of the committed offsets of both protocols (each only ever moves forward), or None."""
    known = [o for o in offsets if o is not None]
    return max(known) if known else None
