"""The demo's member application: a count and a sum per key of the records it processes, kept under the region.

A record's number is :func:`value_of` its value (the producer writes ``<role>:<n>:xxx``: n, the field before the
last colon; a value without it counts its length), so the analysis computes the exact aggregate of every produced
record with the same function.  Threads: :meth:`process` on the region's process thread; :meth:`snapshot` and
:meth:`restore` while processing is held (``zkcoord.region.member``); the lock only guards against a scrape.
"""

from __future__ import annotations

import threading
from typing import Any

from zkcoord.consumer import ConsumerRecord


def value_of(value: bytes) -> int:
    """The number a record adds to its key's sum."""
    parts = value.split(b":")
    if len(parts) >= 2 and parts[-2].isdigit():
        return int(parts[-2])
    return len(value)


def key_of(key: bytes | None) -> str:
    return "-" if key is None else key.decode("utf-8", "replace")


class AggregateApp:
    """``state``: key -> [count, sum]."""

    def __init__(self) -> None:
        self.state: dict[str, list[int]] = {}
        self.processed = 0
        self._lock = threading.Lock()

    def process(self, record: ConsumerRecord) -> None:
        with self._lock:
            entry = self.state.setdefault(key_of(record.key), [0, 0])
            entry[0] += 1
            entry[1] += value_of(record.value)
            self.processed += 1

    def snapshot(self) -> dict[str, list[int]]:
        with self._lock:
            return {k: list(v) for k, v in sorted(self.state.items())}

    def restore(self, state: Any) -> None:
        """``None``: the initial (empty) state; else a snapshot as :meth:`snapshot` gave it."""
        with self._lock:
            self.state = {} if state is None else {str(k): [int(v[0]), int(v[1])] for k, v in dict(state).items()}


class RegionlessApp(AggregateApp):
    """The demo's contrast (``zkcoord region member --unsafe``): the same aggregate, but a reset does not give it
    the checkpoint's state back.  It keeps whatever it had counted (nothing after a restart), while the region still
    rewinds its positions: every record consumed again after a reset is counted again, as an application that
    keeps its state apart from the group's positions does.  S8 catches it."""

    def restore(self, state: Any) -> None:
        """Keep the live state (the checkpoint's ``state`` is ignored)."""
