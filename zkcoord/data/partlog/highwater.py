"""The partition's high-water file: the end of the log as writers left it, and the log's rewind epoch.

``<partition dir>/.high-water`` holds one fixed 33-byte record (big-endian), rewritten in place with one ``pwrite``:

=======  ====  ======  ============================================================================================
field    size  type    meaning
=======  ====  ======  ============================================================================================
magic    4     bytes   ``b"ZKHW"``
version  1     uint8   :data:`VERSION`
offset   8     int64   the high-water mark: every offset below it may have been handed out (the log's end after
                       the last append)
epoch    8     int64   bumped by every writer that found the log ending *below* the high-water mark (data lost)
lost     8     int64   where the log ended when the epoch was last bumped (so that a loss is reported once, not
                       again by every writer that opens the log before the next append closes the gap)
crc      4     uint32  CRC-32C of the 29 bytes before it
=======  ====  ======  ============================================================================================

Why it exists.  A writer cuts only bytes that were never acknowledged (a torn tail).  But a damaged disk, a machine
crash without fsync or a person can take complete batches away, and consumers may have read them already.  Before
this file, the next writer then handed those offsets out again to new records, and a group whose committed offset
was past the new end skipped them: silent loss.  With it, a writer that finds the log's end below the mark bumps the
epoch (so readers drop what they knew of positions in the files) and gives the next batch the mark as its base offset,
flagged as following a gap (:data:`~zkcoord.data.partlog.format.ATTR_AFTER_GAP`): an offset is never used twice.

The file is written after each append (under the partition lock), so it can lag the log by one batch, never lead it.
A missing file (an older zkcoord's log, or deleted) reads as "no mark": nothing is known, nothing is skipped.  A
damaged one (CRC mismatch) is the same, with a warning.  Pure functions on an open descriptor; any thread.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

logger = logging.getLogger(__name__)

FILE_NAME = ".high-water"
MAGIC = b"ZKHW"
VERSION = 1
_BODY = struct.Struct(">4sBqqq")
_CRC = struct.Struct(">I")
SIZE = _BODY.size + _CRC.size  # 33


class HighWater(NamedTuple):
    """``offset``: no offset below it may be given to a new record; ``epoch``: how many times the log lost data;
    ``lost``: the log's end when that was last found (-1: never)."""

    offset: int
    epoch: int
    lost: int = -1


NONE = HighWater(0, 0)


def encode(mark: HighWater) -> bytes:
    body = _BODY.pack(MAGIC, VERSION, mark.offset, mark.epoch, mark.lost)
    return body + _CRC.pack(crc32c(body))


def decode(data: bytes, where: Path | str = "") -> HighWater | None:
    """The mark in ``data``, or None if it is empty, short, of another version or damaged (logged)."""
    if not data:
        return None
    if len(data) < SIZE:
        logger.warning("%s: %d bytes, not a high-water record; ignored", where, len(data))
        return None
    magic, version, offset, epoch, lost = _BODY.unpack_from(data)
    (crc,) = _CRC.unpack_from(data, _BODY.size)
    if magic != MAGIC or version != VERSION or crc != crc32c(data[: _BODY.size]) or offset < 0 or epoch < 0:
        logger.warning("%s: damaged high-water record (magic %r, version %d); ignored", where, magic, version)
        return None
    return HighWater(offset, epoch, lost)


def read(fd: int, where: Path | str = "") -> HighWater | None:
    """Read the mark from an open high-water file (None: see :func:`decode`)."""
    return decode(os.pread(fd, SIZE, 0), where)


def write(fd: int, mark: HighWater) -> None:
    """Write the mark in place (one ``pwrite``; a torn write fails the CRC and reads as no mark).

    :raises OSError: the write failed.
    """
    os.pwrite(fd, encode(mark), 0)


def path(directory: Path) -> Path:
    return directory / FILE_NAME


def open_for_reading(directory: Path) -> int | None:
    """An open descriptor of the partition's high-water file, or None if it does not exist (yet)."""
    try:
        return os.open(path(directory), os.O_RDONLY)
    except FileNotFoundError:
        return None
