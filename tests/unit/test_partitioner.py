from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.data.topics import place_replicas
from zkcoord.errors import ConfigurationError, NoBrokersError
from zkcoord.protocol.hashing import java_string_hash, partition_for_key


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("[t,0]", 87540032),  # reference/legacy-kafka-zk.md §2.5
        ("[u,0]", 87569823),
        ("polygenelubricants", -2147483648),  # a classic: hashes to Integer.MIN_VALUE
        ("\U0001f600", 1772899),  # a surrogate pair: two UTF-16 units, checked with a real JVM
    ],
)
def test_java_string_hash_matches_java(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@given(st.text(max_size=50), st.integers(1, 1000))
def test_partition_for_key_is_in_range(key: str, partitions: int) -> None:
    assert 0 <= partition_for_key(key, partitions) < partitions


def test_min_value_hash_maps_to_a_valid_partition() -> None:
    # Kafka's Utils.abs masks the sign bit, so Integer.MIN_VALUE maps to 0, not to a negative partition.
    assert partition_for_key("polygenelubricants", 7) == 0


def test_replica_placement_is_round_robin_over_live_brokers() -> None:
    assert place_replicas([2, 0, 1], 0, 4, 2) == [(0, 1), (1, 2), (2, 0), (0, 1)]
    assert place_replicas([5], 3, 2, 1) == [(5,), (5,)]
    with pytest.raises(NoBrokersError):
        place_replicas([], 0, 1, 1)
    with pytest.raises(ConfigurationError, match="replication factor"):
        place_replicas([1], 0, 1, 2)
