"""Topic administration against a real ZooKeeper, through the library and the command line."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.cli import run_cli
from zkcoord import errors
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        for broker_id in (0, 1, 2):
            client.create(paths.broker(broker_id), b"{}", ephemeral=True)
        yield client


def test_create_writes_kafkas_format(zk: ZkClient) -> None:
    info = TopicAdmin(zk).create("orders", 4, replication_factor=2)
    assert info.partitions == 4
    raw = json.loads(zk.get("/brokers/topics/orders")[0])
    assert raw == {"version": 1, "partitions": {"0": [0, 1], "1": [1, 2], "2": [2, 0], "3": [0, 1]}}


def test_alter_grows_and_never_shrinks(zk: ZkClient) -> None:
    admin = TopicAdmin(zk)
    admin.create("t", 2)
    assert admin.alter("t", 5).partitions == 5
    assert admin.describe("t").version == 1
    with pytest.raises(errors.ConfigurationError, match="can be added, not removed"):
        admin.alter("t", 3)
    with pytest.raises(errors.ConfigurationError, match="already has 5"):
        admin.alter("t", 5)
    with pytest.raises(errors.TopicNotFoundError):
        admin.alter("nope", 9)


def test_refusals(zk: ZkClient) -> None:
    admin = TopicAdmin(zk)
    admin.create("t", 1)
    with pytest.raises(errors.TopicExistsError):
        admin.create("t", 1)
    with pytest.raises(errors.InvalidNameError):
        admin.create("bad/name", 1)
    with pytest.raises(errors.ConfigurationError):
        admin.create("zero", 0)
    assert admin.names() == ["t"]


def test_no_live_broker_is_refused(zk_hosts: str) -> None:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client, pytest.raises(errors.NoBrokersError, match="broker"):
        TopicAdmin(client).create("t", 1)


def test_a_malformed_topic_znode_is_reported_not_fatal(zk: ZkClient) -> None:
    admin = TopicAdmin(zk)
    admin.create("good", 2)
    zk.create("/brokers/topics/broken", b"{garbage")
    infos, bad = admin.describe_all()
    assert [i.name for i in infos] == ["good"]
    assert len(bad) == 1 and bad[0].path == "/brokers/topics/broken"


def test_cli_round_trip(zk: ZkClient, zk_hosts: str) -> None:
    ok = run_cli("topic", "create", "clicks", "--partitions", "3", "--zk", zk_hosts)
    assert ok.returncode == 0, ok.stderr
    assert "created topic clicks with 3 partitions" in ok.stdout
    assert run_cli("topic", "alter", "clicks", "-p", "6", "--zk", zk_hosts).returncode == 0
    listed = json.loads(run_cli("topic", "list", "--json", "--zk", zk_hosts).stdout)
    assert listed["topics"] == [{"topic": "clicks", "partitions": 6}]
    described = json.loads(run_cli("topic", "describe", "clicks", "--json", "--zk", zk_hosts).stdout)
    assert [p["partition"] for p in described["partitions"]] == list(range(6))
    assert described["partitions"][0]["log_end"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("topic", "create", "a b", "-p", "1"), "invalid topic name"),
        (("topic", "create", "x" * 250, "-p", "1"), "longer than 249"),
        (("topic", "create", "t", "-p", "0"), "between 1 and 10000"),
        (("topic", "alter", "ghost", "-p", "2"), "does not exist"),
        (("topic", "describe", "ghost"), "does not exist"),
    ],
)
def test_cli_bad_input_is_one_line_and_nonzero(
    zk: ZkClient, zk_hosts: str, args: tuple[str, ...], message: str
) -> None:
    result = run_cli(*args, "--zk", zk_hosts)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_cli_bad_zk_address(zk_hosts: str) -> None:
    result = run_cli("topic", "list", "--zk", "nohostport")
    assert result.returncode == 1
    assert "invalid ZooKeeper address" in result.stderr and "Traceback" not in result.stderr
