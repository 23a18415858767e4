"""Reporting positions found out of range (``auto.offset.reset``): a log line, a journal event, and the group's
``resets/<t>/<p>`` record that ``zkcoord group describe`` shows.

Threads: :meth:`ResetReporter.report` is called on fetcher threads (``FetchManager``'s ``on_reset``); it journals
at once and hands the ZooKeeper write to the reporter's own worker thread (started on the first report), so a fetcher
never waits on ZooKeeper.  The record is informational: it is not fenced, and a write that fails (ZooKeeper away, the
consumer closing) is logged and dropped; the journal event is the evidence.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from zkcoord.consumer.fetch_thread import OutOfRange
from zkcoord.errors import NodeExistsError, NoNodeError, ZkError
from zkcoord.layout import paths
from zkcoord.protocol.offset_reset import ResetRecord
from zkcoord.runtime.journal import Journal
from zkcoord.zk import ZkClient

log = logging.getLogger(__name__)


class ResetReporter:
    """Journals every out-of-range position as ``offsets.reset`` and records the last one per partition.

    :param zk: where to write ``/consumers/groups/<group>/resets/<t>/<p>``; None for a ``zk-client`` group, whose
        tree (``/consumers/<group>``) has no such node (the journal event and the log line remain).
    """

    def __init__(
        self,
        journal: Journal,
        group: str,
        consumer_id: str,
        zk: ZkClient | None,
        wall_ms: Callable[[], int],
    ) -> None:
        self.journal = journal
        self.group = group
        self.consumer_id = consumer_id
        self.zk = zk
        self.wall_ms = wall_ms
        self._queue: queue.Queue[tuple[str, bytes] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def report(self, event: OutOfRange) -> None:
        """Fetcher thread: journal ``event`` and queue its record for ZooKeeper.  Never blocks on ZooKeeper."""
        tp = event.tp
        self.journal.emit(
            "offsets.reset",
            group=self.group,
            consumer=self.consumer_id,
            thread=event.thread_id,
            topic=tp.topic,
            partition=tp.partition,
            **{"from": event.position},
            to=event.to,
            policy=event.policy,
            reason=event.reason,
            log_start=event.log_start,
            high_water=event.high_water,
        )
        if self.zk is None:
            return
        record = ResetRecord(
            event.position,
            event.to,
            event.policy,
            event.reason,
            event.log_start,
            event.high_water,
            self.consumer_id,
            self.wall_ms(),
        )
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"consumer-resets-{self.consumer_id[-8:]}", daemon=True
                )
                self._thread.start()
        self._queue.put((paths.reset(self.group, tp.topic, tp.partition), record.encode()))

    def close(self) -> None:
        """Let the worker finish what is queued and end (without waiting for it)."""
        self._queue.put(None)

    def _run(self) -> None:
        """The worker: write each record (create, or overwrite the previous one)."""
        while (item := self._queue.get()) is not None:
            path, data = item
            if self.zk is None:
                continue
            try:
                try:
                    self.zk.set(path, data)
                except NoNodeError:
                    try:
                        self.zk.create(path, data, makepath=True)
                    except NodeExistsError:
                        self.zk.set(path, data)
            except ZkError as e:
                log.warning("consumer %s: could not record the offset reset at %s: %s", self.consumer_id, path, e)
