"""An application's poll loop for consumers that have no application of their own (benchmarks, tests).

A consumer's stop-fetcher is acknowledged only once the application's ``poll()`` has run its revoke callback
(``docs/consumer.md``), so a consumer nobody polls holds up every rebalance of its group, as in Kafka.  A
:class:`PollLoop` is one thread that calls ``poll(0)`` on each of its consumers in turn, every ``every_s`` seconds:
with the consumers paused (``Consumer.pause()``) it costs almost nothing and keeps the data plane idle; unpaused, it
consumes, and keeps what it got when asked to.

Threads: :meth:`add`, :meth:`remove` and :meth:`close` from any thread but a callback's; the rebalance callbacks of
the consumers run on the loop's thread.  :meth:`remove` waits for the round in progress, so that a consumer removed
is never polled again and may be closed at once.  What a callback raises is logged and kept (:attr:`PollLoop.errors`),
and the loop goes on: one failing consumer must not hold up the others' rebalances.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from zkcoord.consumer import Consumer, ConsumerRecord

log = logging.getLogger(__name__)


class PollLoop:
    def __init__(self, every_s: float = 0.01, *, keep: bool = False, name: str = "poll-loop") -> None:
        self.every_s = every_s
        self.keep = keep
        #: what ``poll()`` returned, in order (only with ``keep``); read it once the loop is closed or under ``lock``
        self.records: list[ConsumerRecord] = []
        self.lock = threading.Lock()
        self._consumers: list[Consumer] = []
        #: what the consumers' callbacks raised, in order
        self.errors: list[Exception] = []
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def add(self, consumer: Consumer) -> Consumer:
        with self.lock:
            self._consumers.append(consumer)
        return consumer

    def remove(self, consumer: Consumer) -> None:
        """Poll ``consumer`` no more (waits for the round in progress)."""
        with self.lock:
            if consumer in self._consumers:
                self._consumers.remove(consumer)

    def close(self) -> None:
        self._ended.set()
        self._thread.join()

    def __enter__(self) -> PollLoop:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _run(self) -> None:
        while not self._ended.wait(self.every_s):
            with self.lock:
                for consumer in self._consumers:
                    try:
                        got = consumer.poll(0)
                    except RuntimeError:  # closed by its owner without being removed first
                        continue
                    except Exception as e:  # a callback's: kept for whoever runs the loop, and the loop goes on
                        log.exception("%s: a rebalance callback of %s failed", self._thread.name, consumer.consumer_id)
                        self.errors.append(e)
                        continue
                    if self.keep:
                        self.records.extend(got)
