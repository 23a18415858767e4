"""A group's dynamic config (``/config/groups/<g>``): the validated dataclass and its strict codec, on plain values.

Any bytes decode to a config or a :class:`CodecError` (never another exception); any ``key -> text`` mapping (the
CLI's pairs) makes a config or a :class:`ConfigurationError`; what is encoded decodes to itself, in Kafka's config
znode format.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.errors import CodecError, ConfigurationError
from zkcoord.layout import paths
from zkcoord.layout.group_config import (
    ASSIGNOR_NAMES,
    KEYS,
    MAX_GROUP_SIZE,
    MAX_REBALANCE_TIMEOUT_MS,
    MIN_REBALANCE_TIMEOUT_MS,
    GroupConfig,
)
from zkcoord.protocol.assignors import SERVER_ASSIGNORS

configs = st.builds(
    GroupConfig,
    assignor=st.none() | st.sampled_from(ASSIGNOR_NAMES),
    rebalance_timeout_ms=st.none() | st.integers(MIN_REBALANCE_TIMEOUT_MS, MAX_REBALANCE_TIMEOUT_MS),
    max_size=st.none() | st.integers(1, MAX_GROUP_SIZE),
)
texts = st.text(max_size=30) | st.sampled_from(["2", "0", "-1", "01", "1e3", " 7", "uniform", "range", "sticky"])
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts
json_values = scalars | st.lists(scalars, max_size=2) | st.dictionaries(st.sampled_from(KEYS), scalars, max_size=2)


@given(configs)
def test_what_is_encoded_decodes_to_itself(config: GroupConfig) -> None:
    assert GroupConfig.decode(config.encode(), "/config/groups/g") == config
    assert GroupConfig.from_mapping(config.to_mapping()) == config


def test_the_format_is_kafkas_config_znode() -> None:
    config = GroupConfig(assignor="range", rebalance_timeout_ms=30_000, max_size=5)
    assert config.encode() == (
        b'{"config":{"assignor":"range","max.size":"5","rebalance.timeout.ms":"30000"},"version":1}'
    )
    assert GroupConfig().encode() == b'{"config":{},"version":1}'


@given(st.binary(max_size=200))
def test_any_bytes_decode_to_a_config_or_a_codec_error(data: bytes) -> None:
    try:
        GroupConfig.decode(data, "/config/groups/g")
    except CodecError as e:
        assert e.path == "/config/groups/g" and e.reason


@given(
    st.dictionaries(st.sampled_from([*KEYS, "x"]), json_values, max_size=3) | json_values,
    st.dictionaries(st.sampled_from(["version", "x"]), json_values, max_size=1),
)
def test_any_json_object_decodes_to_a_config_or_a_codec_error(config: object, extra: dict[str, object]) -> None:
    data = json.dumps({"version": 1, "config": config, **extra}).encode()
    with contextlib.suppress(CodecError):
        GroupConfig.decode(data)


@given(st.dictionaries(st.sampled_from([*KEYS, "max_size", "x", ""]), texts, max_size=4))
def test_any_pairs_make_a_config_or_a_configuration_error(values: dict[str, str]) -> None:
    try:
        config = GroupConfig.from_mapping(values)
    except ConfigurationError as e:
        assert "\n" not in str(e)
    else:
        assert config.to_mapping() == values  # every value it accepts is canonical


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_size": "2"}, "unknown group config key 'max_size' (known: assignor, rebalance.timeout.ms, max.size)"),
        ({"assignor": "sticky"}, "assignor must be one of uniform, range, got 'sticky'"),
        ({"max.size": "0"}, "max.size must be an integer in 1..2147483647, got '0'"),
        ({"max.size": "2147483648"}, "max.size must be an integer in 1..2147483647"),
        ({"max.size": "02"}, "got '02'"),
        ({"max.size": "-1"}, "got '-1'"),
        ({"max.size": "9" * 5000}, "max.size must be an integer"),
        ({"rebalance.timeout.ms": "49"}, "rebalance.timeout.ms must be an integer in 50..3600000, got '49'"),
        ({"rebalance.timeout.ms": "1.5"}, "got '1.5'"),
    ],
)
def test_each_bad_value_is_refused_in_one_line(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as e:
        GroupConfig.from_mapping(values)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty data"),
        (b"\xff{", "not JSON"),
        (b"[]", "expected a JSON object"),
        (b'{"version":2,"config":{}}', "unsupported version 2"),
        (b'{"version":1}', "missing field 'config'"),
        (b'{"version":1,"config":[]}', "field 'config' must be dict"),
        (b'{"version":1,"config":{"max.size":2}}', "value of 'max.size' must be a string, got int"),
        (b'{"version":1,"config":{"max.size":"two"}}', "max.size must be an integer"),
        (b'{"version":1,"config":{"owner":"x"}}', "unknown group config key 'owner'"),
        (b'{"version":1,"config":{},"note":"hi"}', "unknown field 'note'"),
    ],
)
def test_malformed_znodes_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(CodecError) as e:
        GroupConfig.decode(data, "/config/groups/g")
    assert reason in e.value.reason


def test_the_dataclass_validates_itself() -> None:
    for bad in ({"max_size": 0}, {"max_size": True}, {"max_size": "2"}, {"assignor": "roundrobin"}):
        with pytest.raises(ConfigurationError):
            GroupConfig(**bad)


def test_updated_and_without_change_only_the_keys_named() -> None:
    config = GroupConfig(assignor="range", max_size=3)
    assert config.updated(GroupConfig(rebalance_timeout_ms=500)) == GroupConfig("range", 500, 3)
    assert config.updated(GroupConfig(max_size=4)) == GroupConfig("range", None, 4)
    assert config.without(["assignor"]) == GroupConfig(max_size=3)
    assert config.without(KEYS).empty
    with pytest.raises(ConfigurationError, match="unknown group config key 'x'"):
        config.without(["x"])


def test_the_rebalance_timeout_replaces_the_coordinators_only_when_set() -> None:
    assert GroupConfig().rebalance_timeout_s(10.0) == 10.0
    assert GroupConfig(rebalance_timeout_ms=250).rebalance_timeout_s(10.0) == 0.25


@given(st.dictionaries(st.text(min_size=1, max_size=5), st.integers(0, 10**6)), st.integers(1, 8))
def test_max_size_leaves_out_the_last_registered(incarnations: dict[str, int], size: int) -> None:
    out = GroupConfig(max_size=size).over_max_size(incarnations)
    assert len(out) == max(0, len(incarnations) - size) and out == sorted(out)
    kept = set(incarnations) - set(out)
    assert all((incarnations[k], k) < (incarnations[o], o) for k in kept for o in out)
    assert GroupConfig().over_max_size(incarnations) == []


def test_the_assignor_names_are_the_server_side_assignors() -> None:
    assert tuple(SERVER_ASSIGNORS) == ASSIGNOR_NAMES


def test_config_paths() -> None:
    assert paths.group_config("g.1") == "/config/groups/g.1"
    assert paths.group_of_config("/config/groups/g.1") == "g.1"
    for other in ("/config/groups", "/config/groups/", "/config/groups/g/x", "/consumers/groups/g"):
        assert paths.group_of_config(other) is None
