"""Where a partition's files live, and how they are named.

``<data_dir>/<topic>-<partition>/`` holds, per segment, ``<base offset, 20 digits>.log`` and ``.index``, plus one
``.lock`` file that writers ``flock`` (Kafka's directory and file naming, so ``ls`` sorts segments by offset).
Topic names cannot contain a path separator (:func:`zkcoord.layout.names.validate_topic`), and the partition is the
digits after the *last* ``-``, so ``a-1-2`` is partition 2 of topic ``a-1`` without ambiguity.

Pure functions over paths; only :func:`list_segments` and :func:`list_partitions` read a directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from zkcoord.errors import ConfigurationError
from zkcoord.layout.names import validate_topic

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
LOCK_FILE = ".lock"
_SEGMENT_NAME = re.compile(r"(\d{20})\.log")

PathLike = str | os.PathLike[str]


def partition_dir(data_dir: PathLike, topic: str, partition: int) -> Path:
    """The directory of one partition's log.

    :raises InvalidNameError: ``topic`` is not a legal topic name.
    :raises ConfigurationError: ``partition`` is negative.
    """
    validate_topic(topic)
    if partition < 0:
        raise ConfigurationError(f"partition must be >= 0, got {partition}")
    return Path(data_dir) / f"{topic}-{partition}"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def log_path(directory: Path, base_offset: int) -> Path:
    return directory / (segment_name(base_offset) + LOG_SUFFIX)


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / (segment_name(base_offset) + INDEX_SUFFIX)


def segment_exists(directory: str, base_offset: int) -> bool:
    """Whether segment ``base_offset`` exists in ``directory`` (a str: this runs once per append)."""
    return os.path.exists(f"{directory}/{base_offset:020d}{LOG_SUFFIX}")  # noqa: PTH110 - pathlib costs µs here


def list_segments(directory: Path) -> list[int]:
    """Base offsets of the segments in ``directory``, ascending; empty if the directory does not exist."""
    try:
        names = os.listdir(directory)  # noqa: PTH208 (Path.iterdir() builds a Path per entry; names suffice)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(_SEGMENT_NAME.fullmatch, names) if m)


def list_partitions(data_dir: PathLike, topic: str) -> list[int]:
    """The partitions of ``topic`` that have a directory under ``data_dir``, ascending.

    A directory exists once a writer has opened the partition; it may hold no record yet.

    :raises InvalidNameError: ``topic`` is not a legal topic name.
    """
    validate_topic(topic)
    pattern = re.compile(re.escape(topic) + r"-(\d+)")
    try:
        entries = list(os.scandir(data_dir))
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for e in entries if e.is_dir() and (m := pattern.fullmatch(e.name)))
