"""A member follows its region driver's orders (``/region/control``; ``docs/regions.md``, "Driver").

The control znode's data watch only enqueues (kazoo's thread); the ``region-orders`` thread reads each new order
(``id`` above the last one carried out) naming this member and carries it out on the region: ``checkpoint`` (drain,
then checkpoint with the application's snapshot, taken while processing is held), ``reset`` (to ``seq``, or the
initial state) or ``retire``; then it answers in ``acks/<name>`` (``ok`` false with the reason when it failed: a
reset pending, a failed drain commit, a merge that did not complete).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from zkcoord.errors import CodecError, ZkCoordError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.region import Ack, ControlOrder
from zkcoord.region.member import ConsistentRegion

log = logging.getLogger(__name__)


class OrderFollower:
    """Carries out the driver's orders on ``region``; ``snapshot()`` gives the application's state at a checkpoint
    (called on this follower's thread while processing is held)."""

    def __init__(self, region: ConsistentRegion, snapshot: Callable[[], Any]) -> None:
        self.region = region
        self.snapshot = snapshot
        self._changes: queue.Queue[bytes | None] = queue.Queue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"region-orders-{region.config.member}", daemon=True)

    def start(self) -> OrderFollower:
        self._thread.start()
        self.region.zk.watch_data(paths.region_control(self.region.group), lambda data, _stat: self._changes.put(data))
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._changes.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopping.is_set():
            data = self._changes.get()
            if data is None or self._stopping.is_set():
                continue
            try:
                order = ControlOrder.decode(data, paths.region_control(self.region.group))
            except CodecError as e:  # S7: a malformed order is refused, not fatal
                log.warning("region %s: order refused: %s", self.region.config.member, e)
                continue
            if order.id <= self.region.last_order or self.region.config.member not in order.members:
                continue
            self.carry_out(order)

    def carry_out(self, order: ControlOrder) -> Ack:
        """Carry out one order and answer it.  Returns the answer."""
        region = self.region
        # Before, not after: a reset request the member writes while carrying the order out (or right after, before
        # this thread returns) must name this order, or the driver, which counts the order done, ignores it as older.
        region.last_order = order.id
        try:
            if order.op == "checkpoint" and order.seq is not None:
                region.drain()
                region.checkpoint(order.seq, self.snapshot())
            elif order.op == "reset":
                region.reset(order.seq)
            elif order.op == "retire" and order.seq is not None:
                region.retire(order.seq)
            answer = Ack(order.id, ok=True)
        except ZkCoordError as e:
            log.warning("region %s: order %d (%s) failed: %s", region.config.member, order.id, order.op, e)
            answer = Ack(order.id, ok=False, reason=str(e)[:300])
        try:
            region.shared.ack(answer)
        except ZkError as e:  # the driver times the order out and resets
            log.warning("region %s: answer to order %d not written: %s", region.config.member, order.id, e)
        return answer
