"""What a region member's event thread and process thread share (``zkcoord.region.member``): the offset manager, the
epoch that invalidates queued records, and the hold a drain or a reset puts on processing; and the process thread's
loop.

Thread: :meth:`Gate.process_loop` runs on the process thread; every other method on the event thread.  ``lock``
guards every field; the process thread is inside ``app.process`` only while ``busy``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from zkcoord.consumer import ConsumerRecord, TopicPartition

log = logging.getLogger(__name__)


class Application(Protocol):
    def process(self, record: ConsumerRecord) -> None: ...
    def restore(self, state: Any) -> None: ...  # None: the initial (empty) state


class Reply:
    """The answer to one event put on the event thread's queue: ``done`` set once ``value`` or ``error`` is."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class Gate:
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.positions: dict[TopicPartition, int] = {}  # the offset manager: next offset to process
        self.epoch = 0  # bumped by a reset or a revocation: queued records of an older epoch are dropped
        self.held = False  # drained: the process thread takes nothing until the checkpoint (or a reset) ends it
        self.busy = False  # the process thread is inside app.process

    def snapshot(self) -> dict[TopicPartition, int]:
        with self.lock:
            return dict(self.positions)

    def hold(self) -> None:
        """Stop processing between two records: returns once the process thread is outside ``app.process``."""
        with self.lock:
            self.held = True
            while self.busy:
                self.lock.wait()

    def release(self) -> None:
        with self.lock:
            self.held = False
            self.lock.notify_all()

    def wake(self) -> None:
        with self.lock:
            self.lock.notify_all()

    def invalidate(self, messages: queue.Queue[tuple[int, ConsumerRecord]]) -> None:
        """Drop every queued record, and any taken but not yet handed out (a new epoch); returns once the process
        thread is outside ``app.process`` (a revocation acknowledged after this processes nothing more of its
        partitions).  Never called from inside ``app.process``."""
        with self.lock:
            while self.busy:
                self.lock.wait()
            self.epoch += 1
            while True:
                try:
                    messages.get_nowait()
                except queue.Empty:
                    break

    def process_loop(
        self,
        messages: queue.Queue[tuple[int, ConsumerRecord]],
        app: Application,
        stopping: threading.Event,
        on_failure: Callable[[str], None],
        name: str,
    ) -> None:
        """Hand each queued record to ``app.process`` unless it is of an older epoch, of a partition no longer
        assigned, or precedes its partition's position; then move the position past it.  A failing ``process`` calls
        ``on_failure`` (the region resets: the application's state is in doubt)."""
        while not stopping.is_set():
            try:
                epoch, record = messages.get(timeout=0.1)
            except queue.Empty:
                continue
            tp = record.topic_partition
            with self.lock:
                while self.held and not stopping.is_set():
                    self.lock.wait()
                position = self.positions.get(tp)
                if epoch != self.epoch or position is None or record.offset < position:
                    continue  # of an older epoch, a partition no longer ours, or processed already
                gap = record.offset > position
                if not gap:
                    self.busy = True
            if gap:
                # The log's offsets are dense: a record past the position means the records in between were never
                # handed to the application, while the position would claim them: the state is in doubt.
                self.invalidate(messages)
                log.warning("region %s: %s@%d arrived at position %d", name, tp, record.offset, position)
                on_failure(f"a gap in {tp}: record {record.offset} at position {position}")
                continue
            try:
                app.process(record)
            except Exception as e:  # noqa: BLE001 -- the application's code: its state is in doubt, the region resets
                log.warning("region %s: processing %s@%d failed: %r", name, tp, record.offset, e)
                on_failure(f"processing failed: {e!r}"[:200])
            else:
                with self.lock:  # not if revoked or reset meanwhile: a stale position must not come back
                    if epoch == self.epoch and tp in self.positions:
                        self.positions[tp] = record.offset + 1
            finally:
                with self.lock:
                    self.busy = False
                    self.lock.notify_all()
