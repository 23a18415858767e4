"""Committed offsets carried through the consumer protocol's assignment channel (issue 16): ``topic -> partition ->
(offset, version)``, the committed offset of a partition and the version of its offset znode that holds it.

A revoking member's acknowledgement (:class:`~zkcoord.layout.kip848.AssignmentAck`) carries them for the partitions
it gives up, as its stop's transaction leaves them; the coordinator hands them on in the start that grants those
partitions (:class:`~zkcoord.layout.commands.Command`), and the new owner checks each version in the transaction that
acknowledges the start instead of reading each offset znode (``zkcoord.consumer.carried``).  Encoded as
``{"t": {"0": [offset, version]}}``.

Pure: no I/O, no clock.  May import :mod:`zkcoord.errors` and :mod:`zkcoord.layout.znodes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zkcoord.errors import CodecError
from zkcoord.layout.znodes import INT_TEXT, MAX_LONG

CarriedOffsets = Mapping[str, Mapping[int, tuple[int, int]]]
"""``topic -> partition -> (committed offset, offset znode version)``."""

#: a znode version is a signed 32-bit integer on the server
MAX_VERSION = 2**31 - 1


def encode_carried(carried: CarriedOffsets) -> dict[str, dict[str, list[int]]]:
    """``{topic: {partition: [offset, version]}}``, sorted; topics with none left out."""
    return {t: {str(p): [off, v] for p, (off, v) in sorted(ps.items())} for t, ps in sorted(carried.items()) if ps}


def decode_carried(
    raw: Any, what: str, path: str | None, within: Mapping[str, Mapping[int, object]] | None = None
) -> dict[str, dict[int, tuple[int, int]]]:
    """The strict inverse of :func:`encode_carried`; ``within``: the partitions it may name (others are refused).

    :raises CodecError: not an object of objects of ``[offset, version]`` pairs of integers in range; a partition
        outside ``within``.
    """
    if not isinstance(raw, dict):
        raise CodecError(what, "'offsets' must be an object topic -> {partition: [offset, version]}", path)
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, parts in raw.items():
        if not isinstance(topic, str) or not isinstance(parts, dict):
            raise CodecError(what, f"offsets of topic {str(topic)[:40]!r} must be an object", path)
        decoded: dict[int, tuple[int, int]] = {}
        for p, pair in parts.items():
            if not isinstance(p, str) or not INT_TEXT.fullmatch(p) or len(p) > 10:
                raise CodecError(what, f"bad partition {str(p)[:40]!r} in offsets of {topic[:40]!r}", path)
            if within is not None and int(p) not in within.get(topic, {}):
                raise CodecError(what, f"offsets name {topic[:40]}/{p}, which this record does not give", path)
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
                or not 0 <= pair[0] <= MAX_LONG
                or not 0 <= pair[1] <= MAX_VERSION
            ):
                raise CodecError(what, f"bad [offset, version] for {topic[:40]}/{p}", path)
            decoded[int(p)] = (pair[0], pair[1])
        out[topic] = decoded
    return out
