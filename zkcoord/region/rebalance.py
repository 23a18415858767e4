"""A region member's side of the group's rebalances (``zkcoord.region.member``; docs/regions.md, "Rebalances
inside a region"): the consumer's callbacks, which run on the event thread inside ``poll()``, and where an assigned
partition is sought.

:class:`RebalanceSide` is mixed into :class:`~zkcoord.region.member.ConsistentRegion`, which owns every field named
below; it exists to keep the member's module readable in one sitting, not as a separate object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from zkcoord.consumer import Consumer, TopicPartition
from zkcoord.errors import ZkCoordError
from zkcoord.region.config import RegionConfig
from zkcoord.region.gate import Gate
from zkcoord.region.metrics import RegionStats
from zkcoord.region.positions import start_offset
from zkcoord.region.shared import SharedData
from zkcoord.region.states import ClientState
from zkcoord.zk import ZkClient

log = logging.getLogger(__name__)


class RebalanceSide:
    consumer: Consumer
    config: RegionConfig
    gate: Gate
    shared: SharedData
    stats: RegionStats
    zk: ZkClient
    group: str
    _state: ClientState
    _fetched: bool
    _merged: dict[TopicPartition, int] | None
    _sought_now: set[TopicPartition]
    _delivered_before: int

    #: ConsistentRegion's method (CR_RESET_PENDING, a reset requested)
    _to_pending: Callable[..., None]

    def _target(self, tp: TopicPartition) -> int:
        """Where an assigned partition is sought: the last reset's merged offset, else its control variable (created
        from the start position when absent)."""
        if self._merged is not None and tp in self._merged:
            return self._merged[tp]
        key = (tp.topic, tp.partition)
        return self.shared.initial_or_create(
            key, lambda: start_offset(self.config, self.consumer.config.data_dir, self.zk, self.group, key)
        )

    # --- the rebalance callbacks (event thread, inside poll) -----------------------------------------------------

    def _on_revoked(self, partitions: list[TopicPartition]) -> None:
        with self.gate.lock:
            for tp in partitions:
                self.gate.positions.pop(tp, None)
        self._count_assignment()
        if not partitions or self._state is ClientState.CR_RESET_PENDING:
            return
        if not self._fetched:  # right after the subscription or a reset: nothing of theirs was processed
            log.info("region %s: revocation of %d partitions ignored", self.config.member, len(partitions))
            return
        self._to_pending(f"{len(partitions)} partitions revoked after fetching")

    def _on_assigned(self, partitions: list[TopicPartition]) -> None:
        self._count_assignment()
        if not partitions or self._state is ClientState.CR_RESET_PENDING:
            return  # sought by the reset
        try:
            targets = {tp: self._target(tp) for tp in partitions}
        except ZkCoordError as e:
            self._to_pending(f"assigned partitions not sought: {e}")
            return
        moved = self.consumer.fetcher.seek(targets, "region-assign")
        with self.gate.lock:
            self.gate.positions.update({tp: targets[tp] for tp in moved})
        if self.consumer.fetcher.stats().records_delivered > self._delivered_before:
            self._sought_now |= set(targets)
        if missed := sorted(str(tp) for tp in set(targets) - set(moved)):
            # Stopped again before this callback ran (the consumer runs it only once the fetcher held them): no
            # position, so nothing of theirs is processed; their next start is announced and sought again.
            log.info("region %s: assigned partitions stopped before the seek: %s", self.config.member, missed)

    def _count_assignment(self) -> None:
        assigned = self.consumer.fetcher.assignment()
        self.stats.assigned(len(assigned), len({tp.topic for tp in assigned}))
