"""One fetcher thread's loop and its error policy: do the reads :class:`zkcoord.consumer.fetch_state.FetchCore`
grants, publish what they got, and decide what a failed read means.

Part of :class:`zkcoord.consumer.fetcher.FetchManager` (see its module docstring for the rules and the threads): the
manager starts one thread per consumer thread id with :meth:`FetchThreads.start`; each runs its loop until
:meth:`~zkcoord.consumer.fetch_state.FetchCore.next_grant` says stop.  A read takes no lock (the log is read while
``poll()`` and the other fetchers go on).

Errors
    * A read that fails (:class:`~zkcoord.errors.LogError`, or anything unexpected, logged with its traceback) stalls
      its partition until ``resume()`` or the next ``assign()``, and is reported through ``on_error`` (the default
      logs one line).  Its reader is closed: the next attempt starts from a fresh listing.
    * A position out of range (a read below the log's start, or a read that found nothing beyond its high water) is
      handled by the ``offset_reset`` policy (:func:`zkcoord.protocol.offset_reset.decide`): moved (``earliest``,
      ``latest``) or held as a failed read (``none``); ``on_reset`` is told of both (:class:`OutOfRange`).
    * A bug in the loop itself (or a gate that raised) stalls every partition of that thread, loudly; ``resume()``
      starts the thread again.

Callbacks run on the fetcher thread through :func:`call`: what one raises is logged, never propagated.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from zkcoord.consumer.fetch_state import FetchCore, Fetcher, Grant, LogReader, ReaderFactory
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.data.partlog.layout import PathLike
from zkcoord.errors import LogError, OffsetOutOfRangeError
from zkcoord.protocol.offset_reset import OffsetReset, decide

logger = logging.getLogger(__name__)

#: ``on_error(tp, exc)``: a read of ``tp`` failed; the partition is not read again until resumed or reassigned.
ErrorCallback = Callable[[TopicPartition, BaseException], None]
#: ``on_fetched(tp, first_offset, count)``: records were read into the buffer.
FetchedCallback = Callable[[TopicPartition, int, int], None]


@dataclass(frozen=True, slots=True)
class OutOfRange:
    """What ``on_reset`` is told: ``tp``'s position ``position`` was outside ``[log_start, high_water]``
    (``reason``); the ``policy`` moved it to ``to``, or held the partition (``to`` None, policy ``none``)."""

    tp: TopicPartition
    thread_id: str
    position: int
    to: int | None
    policy: OffsetReset
    reason: str
    log_start: int
    high_water: int


#: ``on_reset(out_of_range)``: a position was found out of range and handled by the reset policy.
ResetCallback = Callable[[OutOfRange], None]


def _describe(report: OutOfRange) -> tuple[object, ...]:
    return report.tp, report.position, report.reason, report.log_start, report.high_water


def call(callback: Callable[..., None], *args: object) -> None:
    """Call a fetch callback; what it raises is logged, never propagated (a failing callback -- a journal that
    cannot write, say -- must not leave a revoke half done, nor kill a fetcher thread)."""
    try:
        callback(*args)
    except Exception:
        logger.exception("fetch callback %r failed", callback)


def log_error(tp: TopicPartition, exc: BaseException) -> None:
    """The default ``on_error``: one log line."""
    logger.error("fetching %s stopped: %s", tp, exc)


def _check_range(reader: LogReader, offset: int) -> None:
    """A read from ``offset`` found nothing: fine up to the high water (records come from there), out of range
    beyond it."""
    high_water = reader.high_water()
    if offset > high_water:
        raise OffsetOutOfRangeError(offset, reader.start_offset, high_water)


class FetchThreads:
    """Starts and runs the fetcher threads of one :class:`zkcoord.consumer.fetcher.FetchManager`, which owns it.

    :meth:`start` on the manager's control thread (its control lock held); the rest on each fetcher thread.
    ``in_fetcher``: the manager's thread-local flag, set on each fetcher thread so its control methods refuse a call
    from a callback.
    """

    def __init__(
        self,
        core: FetchCore,
        *,
        data_dir: PathLike,
        fetch_max_bytes: int,
        reader_factory: ReaderFactory,
        offset_reset: OffsetReset,
        on_error: ErrorCallback,
        on_fetched: FetchedCallback | None,
        on_reset: ResetCallback | None,
        in_fetcher: threading.local,
    ) -> None:
        self._core = core
        self._data_dir = data_dir
        self._fetch_max_bytes = fetch_max_bytes
        self._reader_factory = reader_factory
        self._offset_reset = offset_reset
        self._on_error = on_error
        self._on_fetched = on_fetched
        self._on_reset = on_reset
        self._in_fetcher = in_fetcher

    def start(self, fetcher: Fetcher) -> None:
        """Start ``fetcher``'s thread (again, after it died of a bug)."""
        fetcher.dead = False
        fetcher.thread = threading.Thread(
            target=self._run, args=(fetcher,), name=f"fetcher-{fetcher.thread_id}", daemon=True
        )
        fetcher.thread.start()

    def _run(self, fetcher: Fetcher) -> None:
        """A fetcher thread: do the reads it is granted until told to stop."""
        self._in_fetcher.active = True  # a callback calling a control method fails instead of deadlocking
        readers: dict[TopicPartition, LogReader] = {}
        try:
            while (grant := self._core.next_grant(fetcher)) is not None:
                self._fetch(grant, readers)
        except Exception as exc:
            # A bug, or a gate that raised: stall this thread's partitions, loudly, rather than lose track of them.
            logger.exception("fetcher thread %s failed", fetcher.thread_id)
            for state in self._core.fail_fetcher(fetcher, exc):
                call(self._on_error, state.tp, exc)
        finally:
            for reader in readers.values():
                reader.close()

    def _reset(self, grant: Grant, reader: LogReader, exc: OffsetOutOfRangeError) -> LogError | None:
        """Apply the reset policy to a read that found its position out of range, and publish the read's outcome:
        moved (``earliest``, ``latest``: one log line), held as a failed read (``none``: reported through
        ``on_error`` as any failed read), or nothing (in range after all); ``on_reset`` is told of the first two.

        :returns: None, or (nothing published) the error that kept it from reading the log's bounds, for the
            caller to publish as a failed read.
        """
        try:
            start, high_water = reader.start_offset, reader.high_water()
        except LogError as error:
            return error
        decision = decide(grant.offset, start, high_water, self._offset_reset)
        if decision is None:  # the log moved between the read and this look: in range now
            self._core.publish(grant, [], None)
            return None
        report = OutOfRange(
            grant.state.tp,
            grant.state.thread_id,
            grant.offset,
            decision.to,
            self._offset_reset,
            decision.reason,
            start,
            high_water,
        )
        if decision.to is None:  # held: a failed read, reported as one (on_error logs its one line by default)
            if self._core.publish(grant, [], exc):
                call(self._on_error, grant.state.tp, exc)
                if self._on_reset is not None:
                    call(self._on_reset, report)
            return None
        logger.warning(
            "%s: position %d is %s [%d, %d]: reset to %d (%s)", *_describe(report), decision.to, report.policy
        )
        if self._core.publish_reset(grant, decision.to) and self._on_reset is not None:
            call(self._on_reset, report)
        return None

    def _fetch(self, grant: Grant, readers: dict[TopicPartition, LogReader]) -> None:
        """Do one granted read (no lock held: the log is read while poll() and the other fetchers go on)."""
        tp = grant.state.tp
        records: list[ConsumerRecord] = []
        error: BaseException | None = None
        try:
            reader = readers.get(tp)
            if reader is None:
                reader = readers[tp] = self._reader_factory(self._data_dir, tp.topic, tp.partition)
            got = reader.read(grant.offset, grant.room, self._fetch_max_bytes)
            if got:
                topic, partition = tp
                # Built here, off the application's thread: poll() only slices lists of finished records.
                records = [ConsumerRecord(topic, partition, *record) for record in got]
            elif grant.check_range:
                _check_range(reader, grant.offset)
        except LogError as exc:  # OffsetOutOfRangeError among them: the reset policy's, below
            error = exc
        except Exception as exc:
            logger.exception("unexpected error reading %s", tp)
            error = exc
        if isinstance(error, OffsetOutOfRangeError):
            error = self._reset(grant, readers[tp], error)
            if error is None:
                return  # settled and published
        if error is not None:
            failed_reader = readers.pop(tp, None)
            if failed_reader is not None:
                failed_reader.close()  # the next attempt (after resume) starts from a fresh listing
        if not self._core.publish(grant, records, error):
            return  # revoked or paused meanwhile: nothing to report
        if error is not None:
            call(self._on_error, tp, error)
        elif records and self._on_fetched is not None:
            call(self._on_fetched, tp, records[0].offset, len(records))
