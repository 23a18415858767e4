from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.errors import ConfigurationError, InvalidNameError
from zkcoord.layout import paths
from zkcoord.layout.names import validate_partition_count, validate_topic
from zkcoord.zk import ZkAddress, ZkConfig
from zkcoord.zk.config import znode_path_problem


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


@pytest.mark.parametrize(
    ("chroot", "reason"),
    [
        ("/a/../b", "relative segment '..'"),
        ("/a/./b", "relative segment '.'"),
        ("/..", "relative segment '..'"),
        ("/a/.", "relative segment '.'"),
        ("/a//b", "empty segment"),
        ("//", "must not end with '/'"),
        ("/a/", "must not end with '/'"),
        ("/a\x00b", "not allowed"),
        ("/a\x1fb", "not allowed"),
        ("/caf\u00e9", "illegal characters"),
        ("/a\udcff", "not allowed"),  # a byte of a non-UTF-8 argv, as Python's surrogateescape decodes it
        ("/zookeeper", "reserved"),
        ("/zookeeper/x", "reserved"),
    ],
)
def test_chroots_follow_zookeepers_path_rules(chroot: str, reason: str) -> None:
    with pytest.raises(ConfigurationError, match=reason):
        ZkAddress.parse(f"h:1{chroot}")


@pytest.mark.parametrize("chroot", ["/..a", "/a..", "/.a/b.", "/...", "/a-b_c.d/E9", "/zookeeper2", "/a/zookeeper"])
def test_dots_inside_a_segment_are_legal(chroot: str) -> None:
    assert ZkAddress.parse(f"h:1{chroot}").chroot == chroot


def _kazoo_accepts(connect: str) -> bool:
    """Whether kazoo's own parser takes the connect string (it raises ValueError for paths ZooKeeper refuses)."""
    from kazoo.client import KazooClient

    try:
        KazooClient(hosts=connect)
    except ValueError:
        return False
    return True


_CONNECT_CHARS = st.sampled_from(
    ["/", ".", "..", "a", "Z", "9", "-", "_", ":", ",", " ", "\x00", "\x7f", "\u00e9", "\ud800"]
)


@given(
    st.one_of(
        st.text(max_size=40),
        st.builds(lambda parts: "h:1" + "".join(parts), st.lists(_CONNECT_CHARS, max_size=12)),
        st.builds(lambda parts: "h:1/" + "".join(parts), st.lists(_CONNECT_CHARS, max_size=12)),
    )
)
def test_any_string_parses_to_a_valid_address_or_a_configuration_error(text: str) -> None:
    try:
        address = ZkAddress.parse(text)
    except ConfigurationError:
        return  # the typed error; anything else (ValueError, IndexError...) fails the test
    if address.chroot is not None:
        assert znode_path_problem(address.chroot) is None
    assert _kazoo_accepts(str(address))


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
