"""A writer's side of the high-water file: the mark as it last knew it, and the rewinds it found.

The high-water file (:mod:`zkcoord.data.partlog.highwater`) records the log's end after every append.  A writer that
finds the log ending below it (complete batches lost: a damaged disk, a machine crash, a person) bumps the file's
epoch, reports a :class:`LogRewound` (``on_rewind``), and gives its next batch the mark as base offset, flagged as
following a gap: an offset is never handed out twice.  :class:`WriterMark` holds that state for one
:class:`~zkcoord.data.partlog.writer.PartitionWriter`; the writer decides when to read, check and write it.

Threads: a :class:`WriterMark` belongs to one writer, and every method runs holding that writer's mutex and (unless
exclusive) the partition lock, as the writer's internals do.  May import :mod:`zkcoord.data.partlog.highwater` and
the standard library.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zkcoord.data.partlog import highwater as hw

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogRewound:
    """A writer found the log ending at ``end_offset``, below the high-water mark ``high_water`` that earlier appends
    recorded: offsets ``[end_offset, high_water)`` were handed out and their records are gone.  The next record gets
    ``high_water`` (never one of those offsets again); ``epoch`` is the log's new rewind epoch."""

    directory: Path
    end_offset: int
    high_water: int
    epoch: int


class WriterMark:
    """The high-water file of one partition as its writer sees it.

    :attr:`mark` is the high-water mark and epoch as the writer last knew them (:data:`~highwater.NONE` until
    :meth:`open`); :attr:`rewinds` every rewind found, oldest first.

    :param on_rewind: called (holding the partition lock; keep it short) when :meth:`check` finds the log shorter
        than its mark; an exception it raises is logged, never propagated.
    """

    def __init__(self, directory: Path, on_rewind: Callable[[LogRewound], None] | None) -> None:
        self.directory = directory
        self._on_rewind = on_rewind
        self.rewinds: list[LogRewound] = []
        self._fd: int | None = None
        self.mark = hw.NONE  # the high-water mark and epoch as this writer last knew them

    def open(self) -> None:
        """Open (creating it if missing) the high-water file and read the mark.  :raises OSError: as ``os.open``."""
        self._fd = os.open(hw.path(self.directory), os.O_RDWR | os.O_CREAT, 0o644)
        self.mark = hw.read(self._fd, hw.path(self.directory)) or hw.NONE

    def read(self) -> hw.HighWater | None:
        """The mark as the file holds it now (another writer may have moved it); None if unreadable or not open."""
        return hw.read(self._fd, hw.path(self.directory)) if self._fd is not None else None

    def check(self, end_offset: int) -> None:
        """If the log ends (at ``end_offset``) below the high-water mark, records that were handed out are gone: bump
        the epoch (so readers drop what they knew of positions) and report it.  The next append skips to the mark."""
        if end_offset >= self.mark.offset or end_offset == self.mark.lost:
            return  # nothing lost, or this very loss was found (and the epoch bumped) already
        rewound = LogRewound(self.directory, end_offset, self.mark.offset, self.mark.epoch + 1)
        self.set(hw.HighWater(self.mark.offset, rewound.epoch, end_offset))
        logger.warning(
            "%s ends at offset %d, below its high-water mark %d: records %d..%d were lost; the next record gets "
            "offset %d (epoch %d)",
            self.directory,
            rewound.end_offset,
            rewound.high_water,
            rewound.end_offset,
            rewound.high_water - 1,
            rewound.high_water,
            rewound.epoch,
        )
        self.rewinds.append(rewound)
        if self._on_rewind is not None:
            try:
                self._on_rewind(rewound)
            except Exception:
                logger.exception("on_rewind callback failed for %s", rewound)

    def set(self, mark: hw.HighWater) -> None:
        """Make ``mark`` the writer's mark and write it to the file (a failed write is logged, not raised)."""
        self.mark = mark
        if self._fd is None:
            return
        try:
            hw.write(self._fd, mark)
        except OSError:
            # The batch is in the log; failing the append would make the producer send it twice.  A stale mark
            # only weakens the rewind check until the next append writes it again.
            logger.warning("could not write the high-water mark of %s", self.directory, exc_info=True)

    def close(self) -> None:
        """Close the file.  Idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
