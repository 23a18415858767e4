"""A group's named checkpoint, ``/consumers/groups/<g>/checkpoints/<name>`` (``docs/zookeeper-layout.md``).

Seed 003's merged checkpoint, kept by an operator rather than by a consistent region: the group's committed offsets
merged across its members (and across both layouts while it migrates), saved under a name by ``zkcoord group
checkpoint`` and restored by ``zkcoord group reset-offsets --to-checkpoint``.  Written once by an operator, never by a
coordinator or a consumer; nothing but those two commands reads it.

Pure: no I/O, no clock (the caller passes ``created_ms``).  May import :mod:`zkcoord.errors`,
:mod:`zkcoord.layout.names` and :mod:`zkcoord.layout.znodes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zkcoord.errors import CodecError, InvalidNameError
from zkcoord.layout.names import MAX_PARTITIONS, validate_name, validate_topic
from zkcoord.layout.znodes import FORMAT_VERSION, INT_TEXT, MAX_LONG, dump_object, get_field, load_object, nonneg_int

_WHAT = "checkpoint"


def validate_checkpoint(name: str) -> str:
    """A checkpoint's name follows the topic and group rules (it is a znode name).  :raises InvalidNameError:"""
    return validate_name("checkpoint", name)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """``offsets``: topic -> partition -> the committed offset the group's next consumer starts from; ``created_ms``
    when it was taken; ``generation`` the group's generation then (``None``: no readable state)."""

    offsets: Mapping[str, Mapping[int, int]]
    created_ms: int
    generation: int | None = None

    @property
    def partitions(self) -> int:
        return sum(len(parts) for parts in self.offsets.values())

    def offset(self, topic: str, partition: int) -> int | None:
        return self.offsets.get(topic, {}).get(partition)

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "created_ms": self.created_ms,
            "offsets": {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(self.offsets.items())},
            "version": FORMAT_VERSION,
        }
        if self.generation is not None:
            obj["generation"] = self.generation
        return dump_object(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Checkpoint:
        """:raises CodecError: not this format (S7: a hand-written or damaged checkpoint is refused, with a reason)."""
        obj = load_object(_WHAT, data, path)
        unknown = set(obj) - {"created_ms", "offsets", "generation", "version"}
        if unknown:
            raise CodecError(_WHAT, f"unknown fields {sorted(unknown)}", path)
        created = nonneg_int(obj, "created_ms", _WHAT, path)
        generation = nonneg_int(obj, "generation", _WHAT, path) if "generation" in obj else None
        raw = get_field(obj, "offsets", dict, _WHAT, path)
        offsets: dict[str, dict[int, int]] = {}
        for topic, parts in raw.items():
            try:
                validate_topic(topic)
            except InvalidNameError as e:
                raise CodecError(_WHAT, str(e), path) from e
            if not isinstance(parts, dict):
                raise CodecError(_WHAT, f"offsets of topic {topic!r} must be an object partition -> offset", path)
            decoded: dict[int, int] = {}
            for p, offset in parts.items():
                if not INT_TEXT.fullmatch(p) or int(p) >= MAX_PARTITIONS:
                    raise CodecError(_WHAT, f"bad partition {p[:20]!r} of topic {topic!r}", path)
                if type(offset) is not int or not 0 <= offset <= MAX_LONG:
                    raise CodecError(_WHAT, f"bad offset {str(offset)[:40]} of {topic}-{p}", path)
                decoded[int(p)] = offset
            offsets[topic] = decoded
        return cls(offsets, created, generation)
