from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord import paths
from zkcoord.errors import ConfigurationError, InvalidNameError
from zkcoord.names import validate_partition_count, validate_topic
from zkcoord.zk import ZkAddress, ZkConfig


@pytest.mark.parametrize("name", ["orders", "a", "A.b_c-9", "x" * 249])
def test_legal_topic_names(name: str) -> None:
    assert validate_topic(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        (".", "not allowed"),
        ("..", "not allowed"),
        ("x" * 250, "longer than 249"),
        ("a/b", "illegal characters '/'"),
        ("caf\u00e9", "illegal"),
        ("sp ace", "illegal"),
    ],
)
def test_illegal_topic_names(name: str, reason: str) -> None:
    with pytest.raises(InvalidNameError, match=reason):
        validate_topic(name)


@given(st.text(max_size=300))
def test_validation_accepts_exactly_kafkas_alphabet(name: str) -> None:
    legal = (
        0 < len(name) <= 249
        and name not in (".", "..")
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    )
    try:
        validate_topic(name)
        assert legal
    except InvalidNameError:
        assert not legal


@pytest.mark.parametrize("count", [0, -1, 10_001])
def test_partition_count_bounds(count: int) -> None:
    with pytest.raises(ConfigurationError):
        validate_partition_count(count)


def test_address_parsing() -> None:
    a = ZkAddress.parse("127.0.0.1:2181,zk2:2182/apps/zkcoord")
    assert a.hosts == (("127.0.0.1", 2181), ("zk2", 2182))
    assert a.chroot == "/apps/zkcoord"
    assert str(a) == "127.0.0.1:2181,zk2:2182/apps/zkcoord"
    assert ZkAddress.parse("h:1/").chroot is None


@pytest.mark.parametrize("text", ["", "localhost", "h:0", "h:99999", "h:1/bad path", "h:x", "h:1,,h:2"])
def test_malformed_addresses(text: str) -> None:
    with pytest.raises(ConfigurationError):
        ZkAddress.parse(text)


def test_config_validates_itself() -> None:
    with pytest.raises(ConfigurationError, match="session timeout"):
        ZkConfig.from_string("h:1", session_timeout_s=0)


@given(st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True))
def test_a_groups_ids_path_names_its_group(group: str) -> None:
    assert paths.group_of_ids(paths.group_ids(group)) == group


@pytest.mark.parametrize(
    "path", ["/consumers/groups/g", "/consumers/groups//ids", "/consumers/groups/g/x/ids", "/brokers/ids", "/ids"]
)
def test_other_paths_name_no_group(path: str) -> None:
    assert paths.group_of_ids(path) is None
