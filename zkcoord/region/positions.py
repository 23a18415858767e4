"""Where a partition starts when it has no control variable yet (the seed's ``startPosition``).

Reads the partition's log (and, for ``committed``, the group's committed offset); the caller stores the answer as the
partition's control variable, so every later reset to the initial state starts from the same place.  Thread: the
caller's.  :raises LogError: the log cannot be read.  :raises ZkError: (``committed``) ZooKeeper failed.
"""

from __future__ import annotations

from pathlib import Path

from zkcoord.data.partlog import PartitionReader
from zkcoord.data.partlog.times import offset_for_time
from zkcoord.errors import CodecError, NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.znodes import decode_int
from zkcoord.region.config import RegionConfig
from zkcoord.zk import ZkClient


def start_offset(config: RegionConfig, data_dir: Path, zk: ZkClient, group: str, tp: tuple[str, int]) -> int:
    """The offset ``config.start_position`` gives partition ``tp`` now (see :class:`RegionConfig`)."""
    topic, partition = tp
    with PartitionReader(data_dir, topic, partition) as reader:
        start, high = reader.start_offset, reader.high_water()
        if config.start_position == "beginning":
            return start
        if config.start_position == "end":
            return high
        if config.start_position == "timestamp":
            found = offset_for_time(reader, config.start_timestamp_ms or 0)  # RegionConfig requires it
            return high if found is None else min(max(found, start), high)
    path = paths.offset(group, topic, partition)
    try:
        committed = decode_int("offset", zk.get(path)[0], path)
    except (NoNodeError, CodecError):
        return start
    return min(max(committed, start), high)
