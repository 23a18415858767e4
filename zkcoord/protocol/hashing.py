"""Java-compatible hashing that Kafka 0.8's partitioner and round-robin assignor depend on (pure functions)."""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (signed 32-bit): ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units."""
    h = 0
    for ch in text:
        code = ord(ch)
        # Java hashes UTF-16 code units: a character beyond the BMP counts as its two surrogates.
        if code < 0x10000:
            h = (31 * h + code) & 0xFFFFFFFF
        else:
            code -= 0x10000
            h = (31 * h + (0xD800 + (code >> 10))) & 0xFFFFFFFF
            h = (31 * h + (0xDC00 + (code & 0x3FF))) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_key(key: str, partitions: int) -> int:
    """Kafka 0.8 ``DefaultPartitioner``: ``Utils.abs(key.hashCode) % numPartitions`` (abs masks the sign bit)."""
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions
